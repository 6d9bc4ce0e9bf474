//! Short text forms of times and commits, for tables and event lines.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A coarse age, kubectl style: `5s`, `3m`, `2h`, `4d`.
pub fn age(at_unix_ms: i64) -> String {
    if at_unix_ms <= 0 {
        return "-".into();
    }
    duration_text(now_ms().saturating_sub(at_unix_ms).max(0) as u64)
}

pub fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 if ms < 10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `HH:MM:SS.mmm` in UTC, for event lines.
pub fn clock(at_unix_ms: i64) -> String {
    let ms = at_unix_ms.rem_euclid(86_400_000);
    format!("{:02}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

pub fn short_commit(c: &str) -> String {
    if c.is_empty() { "-".into() } else { c.chars().take(10).collect() }
}

/// `-` for an empty cell.
pub fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_coarse() {
        assert_eq!(duration_text(1500), "1.5s");
        assert_eq!(duration_text(30_000), "30s");
        assert_eq!(duration_text(600_000), "10m");
        assert_eq!(clock(3_723_004), "01:02:03.004");
    }
}
