//! GitHub's rate limits read from its answers.
//!
//! Primary limit: a quota per hour, reported on every answer in
//! `x-ratelimit-remaining` and `x-ratelimit-reset` (Unix seconds); at 0,
//! requests get 403 or 429 until the reset. Secondary limits (too many
//! requests at once, too much content created too fast) answer 403 or 429
//! with a message saying so and usually `retry-after` (seconds); GitHub
//! asks clients to wait at least a minute when there is no header.
//! (<https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api>)

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

use crate::error::ForgeError;

/// The primary quota as of the last answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests per window, when the forge said.
    pub limit: Option<u64>,
    pub remaining: u64,
    /// When the window resets and `remaining` goes back to `limit`.
    pub reset: SystemTime,
}

/// The wait when a secondary limit gives no `retry-after`.
pub const SECONDARY_DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// The longest wait believed: a hostile or broken server could name a
/// time centuries away (or one that overflows `SystemTime`).
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    let v = headers.get(name)?.to_str().ok()?.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// `now + wait`, with `wait` capped at a day.
fn after(now: SystemTime, wait: Duration) -> SystemTime {
    now + wait.min(MAX_WAIT)
}

/// The Unix time `secs`, kept within `[now, now + a day]`.
fn at(now: SystemTime, secs: u64) -> SystemTime {
    let t = UNIX_EPOCH.checked_add(Duration::from_secs(secs)).unwrap_or_else(|| after(now, MAX_WAIT));
    t.clamp(now, after(now, MAX_WAIT))
}

/// The quota an answer reports, if it reports the core REST quota (the
/// GraphQL and search quotas are separate and not what REST calls spend).
pub(crate) fn quota(headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
    if let Some(resource) = headers.get("x-ratelimit-resource")
        && resource.as_bytes() != b"core"
    {
        return None;
    }
    Some(Quota {
        limit: header_u64(headers, "x-ratelimit-limit"),
        remaining: header_u64(headers, "x-ratelimit-remaining")?,
        reset: at(now, header_u64(headers, "x-ratelimit-reset")?),
    })
}

/// `retry-after` in seconds (GitHub does not send the HTTP-date form).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<SystemTime> {
    header_u64(headers, "retry-after").map(|s| after(now, Duration::from_secs(s)))
}

/// The rate limit a 403 or 429 answer reports, or `None` when a 403 is a
/// plain refusal. A message naming a secondary limit wins; then an
/// exhausted quota (wait for its reset); then `retry-after`; a 429 with
/// none of these is treated as a secondary limit.
pub(crate) fn limited(
    status: u16,
    headers: &HeaderMap,
    message: &str,
    now: SystemTime,
) -> Option<ForgeError> {
    if status != 403 && status != 429 {
        return None;
    }
    let lower = message.to_ascii_lowercase();
    let secondary_message = lower.contains("secondary rate limit") || lower.contains("abuse detection");
    let wait = retry_after(headers, now);
    let secondary = |until: Option<SystemTime>| ForgeError::RateLimited {
        until: until.unwrap_or_else(|| after(now, SECONDARY_DEFAULT_WAIT)),
        secondary: true,
    };
    if secondary_message {
        return Some(secondary(wait));
    }
    if header_u64(headers, "x-ratelimit-remaining") == Some(0) {
        let until = header_u64(headers, "x-ratelimit-reset")
            .map(|s| at(now, s))
            .or(wait)
            .unwrap_or_else(|| after(now, SECONDARY_DEFAULT_WAIT));
        return Some(ForgeError::RateLimited { until, secondary: false });
    }
    if wait.is_some() || status == 429 {
        return Some(secondary(wait));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    fn secs(n: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(n)
    }

    #[test]
    fn primary_and_secondary_limits_are_told_apart_with_their_until() {
        let now = secs(1_700_000_000);
        let primary = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1700000300")]);
        assert!(matches!(
            limited(403, &primary, "API rate limit exceeded for installation ID 1.", now),
            Some(ForgeError::RateLimited { until, secondary: false }) if until == secs(1_700_000_300)
        ));
        let ra = headers(&[("retry-after", "30"), ("x-ratelimit-remaining", "4000")]);
        assert!(matches!(
            limited(429, &ra, "", now),
            Some(ForgeError::RateLimited { until, secondary: true }) if until == secs(1_700_000_030)
        ));
        let msg = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.";
        assert!(matches!(
            limited(403, &HeaderMap::new(), msg, now),
            Some(ForgeError::RateLimited { until, secondary: true }) if until == secs(1_700_000_060)
        ));
        assert!(
            limited(403, &headers(&[("x-ratelimit-remaining", "12")]), "Resource not accessible", now)
                .is_none()
        );
        assert!(limited(404, &primary, "", now).is_none());
    }

    #[test]
    fn absurd_times_are_clamped_to_a_day_and_never_overflow() {
        let now = secs(1_700_000_000);
        let h = headers(&[("retry-after", "18446744073709551615")]);
        assert_eq!(retry_after(&h, now), Some(now + MAX_WAIT));
        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "18446744073709551615")]);
        assert!(
            matches!(limited(403, &h, "", now), Some(ForgeError::RateLimited { until, .. }) if until == now + MAX_WAIT)
        );
        let past = headers(&[("x-ratelimit-remaining", "5"), ("x-ratelimit-reset", "1")]);
        assert_eq!(quota(&past, now).unwrap(), Quota { limit: None, remaining: 5, reset: now });
        let graphql = headers(&[
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "1"),
            ("x-ratelimit-resource", "graphql"),
        ]);
        assert_eq!(quota(&graphql, now), None);
        assert_eq!(
            quota(&headers(&[("x-ratelimit-remaining", "-1"), ("x-ratelimit-reset", "1")]), now),
            None
        );
    }
}
