//! The timestamps GitHub writes (`2011-04-14T16:00:49Z`), parsed strictly
//! into `SystemTime` and written back for `since=` queries, through jiff's
//! RFC 3339 reading (the workspace's date-time crate).

use std::time::{SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, the RFC 3339 subset
/// GitHub's REST API and webhooks use. Anything else, and anything before
/// the Unix epoch, is `None`.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    // jiff also takes a space for the `T` and offsets without a colon;
    // GitHub writes neither, and what it does not write is refused.
    let b = s.as_bytes();
    if b.len() < 20 || b.len() > 40 || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let zulu = s.ends_with(['Z', 'z']);
    if !zulu && b.get(b.len() - 3) != Some(&b':') {
        return None;
    }
    let t: Timestamp = s.parse().ok()?;
    let t = SystemTime::from(t);
    t.duration_since(UNIX_EPOCH).ok().map(|_| t)
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (whole seconds, UTC). Times before 1970
/// are written as the epoch.
pub fn format_rfc3339(t: SystemTime) -> String {
    let secs = unix_seconds(t) as i64;
    let t = Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Unix seconds of `t`, for messages ("until 1700000000").
pub fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn github_timestamps_round_trip_and_malformed_ones_are_refused() {
        let t = parse_rfc3339("2011-04-14T16:00:49Z").unwrap();
        assert_eq!(unix_seconds(t), 1_302_796_849);
        assert_eq!(format_rfc3339(t), "2011-04-14T16:00:49Z");
        assert_eq!(parse_rfc3339("2011-04-14T18:00:49+02:00"), Some(t));
        assert_eq!(unix_seconds(parse_rfc3339("2024-02-29T00:00:00.123Z").unwrap()), 1_709_164_800);
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        for bad in [
            "",
            "2011-04-14 16:00:49Z",
            "2011-04-14T16:00:49",
            "2011-13-14T16:00:49Z",
            "2023-02-29T00:00:00Z",
            "2011-04-14T24:00:00Z",
            "2011-04-14T16:00:49.Z",
            "2011-04-14T16:00:49+2:00",
            "2011-04-14T16:00:49+0200",
            "+011-04-14T16:00:49Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
