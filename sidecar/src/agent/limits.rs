//! Usage limits in an agent's own words: which messages mean a limit was
//! hit, and when it resets.

use super::RateLimit;

/// Recognises a usage-limit message in agent text (Claude's
/// "Claude AI usage limit reached|<unix seconds>", "You've hit your 5-hour
/// limit · resets 9:56am (UTC)", Codex's "You've hit your usage limit ...
/// try again in 2 hours", HTTP 429 errors). The reset comes from a
/// `|<unix>` suffix, a clock time ("resets 3pm (Europe/Berlin)", "resets
/// Dec 3, 9am (UTC)") or a relative "in N hours/minutes"; otherwise 0
/// (unknown).
pub fn usage_limit_in_text(text: &str, now_ms: u64) -> Option<RateLimit> {
    let lower = text.to_ascii_lowercase();
    // "You've hit your limit", "... your 5-hour limit", "... your weekly limit".
    let hit_your_limit = lower
        .find("hit your ")
        .is_some_and(|at| lower[at..].split('·').next().is_some_and(|s| s.contains("limit")));
    const MARKERS: &[&str] = &[
        "usage limit reached",
        "reached your usage limit",
        "usage limit exceeded",
        "rate limit exceeded",
        "rate_limit_exceeded",
        "too many requests",
        "status 429",
        "429 too many",
        "exceeded your current quota",
        "exceed your account's rate limit",
    ];
    if !hit_your_limit && !MARKERS.iter().any(|m| lower.contains(m)) {
        return None;
    }
    let reset_unix_ms = pipe_reset(text)
        .or_else(|| clock_reset(text, now_ms))
        .or_else(|| relative_reset(&lower, now_ms))
        .unwrap_or(0);
    Some(RateLimit { reset_unix_ms, kind: String::new() })
}

/// "resets 9:56am (UTC)", "resets 3pm (Europe/Berlin)", "resets Dec 3,
/// 9am (UTC)", "resets Jan 2, 2027, 10:30pm (America/New_York)": the CLI
/// names the time zone it formatted in (without one, the machine's own,
/// which the agent shares). A time without a date is its next occurrence
/// (the CLI writes the date only beyond 24 hours); a date without a year
/// is the next one.
fn clock_reset(text: &str, now_ms: u64) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find("resets ")? + "resets ".len();
    let rest = &text[at..];
    let end = rest.find(['·', '\n', '.']).unwrap_or(rest.len());
    let (when, zone) = match rest[..end].find('(') {
        Some(open) => {
            let close = open + rest[open..end].find(')')?;
            (&rest[..open], Some(rest[open + 1..close].trim()))
        }
        None => (&rest[..end], None),
    };
    let tz = match zone {
        Some(name) => jiff::tz::TimeZone::get(name).ok()?,
        None => jiff::tz::TimeZone::system(),
    };
    let now = jiff::Timestamp::from_millisecond(i64::try_from(now_ms).ok()?).ok()?.to_zoned(tz.clone());
    let parts: Vec<&str> = when.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    let (date, year, time) = match parts.as_slice() {
        [time] => (None, None, *time),
        [date, time] => (Some(*date), None, *time),
        [date, year, time] => (Some(*date), Some(year.parse::<i16>().ok()?), *time),
        _ => return None,
    };
    let (hour, minute) = clock_time(time)?;
    let at = |d: jiff::civil::Date| d.at(hour, minute, 0, 0).to_zoned(tz.clone()).ok();
    let reset = match date {
        None => {
            let today = at(now.date())?;
            if today > now { today } else { at(now.date().tomorrow().ok()?)? }
        }
        Some(date) => {
            let (month, day) = month_day(date)?;
            let this_year = at(jiff::civil::Date::new(year.unwrap_or(now.year()), month, day).ok()?)?;
            if this_year > now || year.is_some() {
                this_year
            } else {
                at(jiff::civil::Date::new(now.year().checked_add(1)?, month, day).ok()?)?
            }
        }
    };
    u64::try_from(reset.timestamp().as_millisecond()).ok()
}

/// "9:56am", "3pm", "12am" as a 24-hour (hour, minute).
fn clock_time(text: &str) -> Option<(i8, i8)> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, pm) = match (t.strip_suffix("am"), t.strip_suffix("pm")) {
        (Some(d), _) => (d.trim(), false),
        (_, Some(d)) => (d.trim(), true),
        _ => (t.as_str(), false),
    };
    let (h, m) = digits.split_once(':').unwrap_or((digits, "0"));
    let (h, m): (i8, i8) = (h.parse().ok()?, m.parse().ok()?);
    if !(0..60).contains(&m) || !(0..24).contains(&h) {
        return None;
    }
    let has_meridiem = t.ends_with('m');
    if has_meridiem && !(1..=12).contains(&h) {
        return None;
    }
    let hour = match (has_meridiem, pm) {
        (true, false) => h % 12,
        (true, true) => h % 12 + 12,
        (false, _) => h,
    };
    Some((hour, m))
}

/// "Dec 3" as (12, 3).
fn month_day(text: &str) -> Option<(i8, i8)> {
    const MONTHS: [&str; 12] =
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let (month, day) = text.trim().split_once(' ')?;
    let month = month.to_ascii_lowercase();
    let m = MONTHS.iter().position(|n| month.starts_with(n))?;
    Some((i8::try_from(m + 1).ok()?, day.trim().parse().ok()?))
}

/// `...|1700000000` (seconds, or ms when it is that large).
fn pipe_reset(text: &str) -> Option<u64> {
    let (_, tail) = text.rsplit_once('|')?;
    let digits: String = tail.trim().chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().ok()?;
    unix_to_ms(n)
}

/// Seconds or milliseconds since the epoch to milliseconds; None when implausible.
pub(crate) fn unix_to_ms(n: u64) -> Option<u64> {
    match n {
        1_000_000_000..=99_999_999_999 => Some(n * 1000),
        1_000_000_000_000..=99_999_999_999_999 => Some(n),
        _ => None,
    }
}

/// "try again in 2 hours 5 minutes" / "resets in 30 minutes", rounded up
/// to a whole second (never earlier than the agent's own reset).
fn relative_reset(lower: &str, now_ms: u64) -> Option<u64> {
    let secs = lower.match_indices(" in ").find_map(|(at, _)| duration_words(&lower[at + 4..]))?;
    let at = now_ms.saturating_add(secs.saturating_mul(1000));
    Some(at.div_ceil(1000).saturating_mul(1000))
}

/// Seconds in "2 hours 5 minutes", "30 seconds", "1 day and 3 hours".
fn duration_words(text: &str) -> Option<u64> {
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == ',').collect();
    let mut total_secs = 0u64;
    let mut i = 0;
    while i + 1 < words.len() {
        let Ok(n) = words[i].parse::<u64>() else { break };
        let unit = words[i + 1].trim_end_matches(['.', ';', ')']);
        let secs = match unit {
            u if u.starts_with("day") => 86_400,
            u if u.starts_with("hour") || u == "h" => 3_600,
            u if u.starts_with("min") || u == "m" => 60,
            u if u.starts_with("sec") || u == "s" => 1,
            _ => break,
        };
        total_secs = total_secs.saturating_add(n.saturating_mul(secs));
        i += 2;
        if words.get(i) == Some(&"and") {
            i += 1;
        }
    }
    (total_secs > 0).then_some(total_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn usage_limit_messages_and_their_reset_times() {
        let r = usage_limit_in_text("Claude AI usage limit reached|1750000000", NOW).expect("limit");
        assert_eq!(r.reset_unix_ms, 1_750_000_000_000);
        let r = usage_limit_in_text(
            "You've hit your usage limit. Upgrade to Pro or try again in 2 hours 5 minutes.",
            NOW,
        )
        .expect("limit");
        assert_eq!(r.reset_unix_ms, NOW + (2 * 3600 + 5 * 60) * 1000);
        let r = usage_limit_in_text("usage limit reached in your plan; try again in 3 seconds", NOW + 1)
            .expect("limit");
        assert_eq!(r.reset_unix_ms, NOW + 4000, "the first duration, rounded up to a second");
        assert!(
            usage_limit_in_text("exceeded retry limit, last status: 429 Too Many Requests", NOW).is_some()
        );
        assert!(
            usage_limit_in_text(
                "API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.",
                NOW
            )
            .is_some_and(|r| r.reset_unix_ms == 0),
            "an API key's limit, as Claude Code 2.1 words it, names no reset"
        );
        assert!(usage_limit_in_text("all tests pass; no limits here", NOW).is_none());
        assert!(
            usage_limit_in_text("usage limit reached|garbage", NOW).is_some_and(|r| r.reset_unix_ms == 0)
        );
        assert!(usage_limit_in_text("usage limit reached|99", NOW).is_some_and(|r| r.reset_unix_ms == 0));
    }

    /// 2027-01-15 09:00:00 UTC.
    const JAN_15_9AM_UTC: u64 = 1_800_003_600_000;

    fn utc_ms(y: i16, mo: i8, d: i8, h: i8, mi: i8) -> u64 {
        let z = jiff::civil::date(y, mo, d).at(h, mi, 0, 0).to_zoned(jiff::tz::TimeZone::UTC).expect("date");
        u64::try_from(z.timestamp().as_millisecond()).expect("after 1970")
    }

    #[test]
    fn clock_times_in_limit_texts_reset_at_their_next_occurrence_in_their_zone() {
        let now = JAN_15_9AM_UTC;
        assert_eq!(now, utc_ms(2027, 1, 15, 9, 0));
        let reset = |t: &str| usage_limit_in_text(t, now).map(|r| r.reset_unix_ms);
        assert_eq!(
            reset("You've hit your 5-hour limit · resets 9:56am (UTC)"),
            Some(utc_ms(2027, 1, 15, 9, 56))
        );
        assert_eq!(
            reset("You've hit your limit · resets 8am (UTC)"),
            Some(utc_ms(2027, 1, 16, 8, 0)),
            "a time already past today is tomorrow's"
        );
        assert_eq!(
            reset("You've hit your weekly limit · resets 3pm (Europe/Berlin)"),
            Some(utc_ms(2027, 1, 15, 14, 0)),
            "Berlin is UTC+1 in January"
        );
        assert_eq!(reset("You've hit your limit · resets 12am (UTC)"), Some(utc_ms(2027, 1, 16, 0, 0)));
        assert_eq!(
            reset("You've hit your weekly limit · resets Jan 20, 10:30pm (America/New_York)"),
            Some(utc_ms(2027, 1, 21, 3, 30))
        );
        assert_eq!(reset("You've hit your limit · resets Jan 2, 9am (UTC)"), Some(utc_ms(2028, 1, 2, 9, 0)));
        assert_eq!(
            reset("You've hit your limit · resets Feb 1, 2027, 9am (UTC)"),
            Some(utc_ms(2027, 2, 1, 9, 0))
        );
        for unknown in [
            "You've hit your limit · resets 13pm (UTC)",
            "You've hit your limit · resets 9:61am (UTC)",
            "You've hit your limit · resets 9am (Mars/Olympus)",
            "You've hit your limit · resets Smarch 3, 9am (UTC)",
            "You've hit your limit · resets soon (UTC)",
        ] {
            assert_eq!(reset(unknown), Some(0), "{unknown}");
        }
        assert_eq!(reset("You've hit your stride today"), None);
    }
}
