//! The plan's scheduling fields: a task's `priority` and `estimate`, and a
//! swarm's `priority`, `share` and `max_parallel`.

use super::error::{PlanError, err};

/// Bounds of a `priority`, at the plan and at a task: wide enough for any
/// ranking an operator writes by hand, narrow enough that their sum never
/// overflows.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;
/// Largest `share` of a swarm: a ratio of 10,000 to 1 is already "never".
pub const MAX_SHARE: u32 = 10_000;
/// Longest `estimate`: 30 days. Beyond that an estimate is not one.
pub const MAX_ESTIMATE_MS: u64 = 30 * 24 * 3600 * 1000;

/// How a swarm's tasks share the fleet with other swarms' tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Added to each of its tasks' own `priority`.
    pub priority: i32,
    /// Its weight in the fair share of workers between swarms.
    pub share: u32,
    /// At most this many of its tasks run at once; `None`: no cap.
    pub max_parallel: Option<u32>,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule { priority: 0, share: 1, max_parallel: None }
    }
}

/// The plan-level fields, checked.
pub(super) fn swarm(
    priority: Option<i64>,
    share: Option<u32>,
    max_parallel: Option<u32>,
) -> Result<Schedule, PlanError> {
    let share = share.unwrap_or(1);
    if share == 0 || share > MAX_SHARE {
        return Err(err("share", format!("must be 1..={MAX_SHARE}")));
    }
    if max_parallel == Some(0) {
        return Err(err("max_parallel", "must be at least 1 (leave it out for no cap)"));
    }
    Ok(Schedule { priority: self::priority("priority", priority)?, share, max_parallel })
}

/// A `priority` field at `path`, checked; absent is 0.
pub(super) fn priority(path: &str, value: Option<i64>) -> Result<i32, PlanError> {
    let value = value.unwrap_or(0);
    if !PRIORITY_RANGE.contains(&value) {
        return Err(err(path, format!("must be {}..={}", PRIORITY_RANGE.start(), PRIORITY_RANGE.end())));
    }
    Ok(value as i32)
}

/// An `estimate` field at `path`, in milliseconds.
pub(super) fn estimate(path: &str, value: Option<&str>) -> Result<Option<u64>, PlanError> {
    let Some(text) = value else { return Ok(None) };
    let ms = parse_duration_ms(text).map_err(|rule| err(path, rule))?;
    if ms == 0 || ms > MAX_ESTIMATE_MS {
        return Err(err(path, "must be between 1ms and 30d"));
    }
    Ok(Some(ms))
}

/// A duration written as numbers with units, `"20m"`, `"1h30m"`, `"90s"`,
/// `"250ms"` (units `ms`, `s`, `m`, `h`, `d`), in milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let bad =
        || format!("{text:?} is not a duration like \"20m\", \"1h30m\" or \"90s\" (units ms, s, m, h, d)");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit_len = rest[digits..].bytes().take_while(u8::is_ascii_alphabetic).count();
        if digits == 0 || unit_len == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let scale = match &rest[digits..digits + unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        total = n.checked_mul(scale).and_then(|ms| total.checked_add(ms)).ok_or_else(bad)?;
        rest = &rest[digits + unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::super::Plan;
    use super::*;

    fn plan(top: &str, task: &str) -> Result<Plan, PlanError> {
        Plan::parse(&format!(
            "name = \"s\"\n{top}[defaults]\ncommand = \"true\"\n\
             [[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b\"]\n{task}"
        ))
    }

    #[test]
    fn scheduling_fields_default_to_no_priority_one_share_and_no_cap() {
        let p = plan("", "").expect("plan");
        assert_eq!(p.schedule, Schedule { priority: 0, share: 1, max_parallel: None });
        assert_eq!((p.tasks[1].priority, p.tasks[1].estimate_ms), (0, None));
    }

    #[test]
    fn scheduling_fields_are_read_at_the_plan_and_the_task() {
        let p = plan("priority = -3\nshare = 4\nmax_parallel = 2\n", "priority = 7\nestimate = \"1h30m\"\n")
            .expect("plan");
        assert_eq!(p.schedule, Schedule { priority: -3, share: 4, max_parallel: Some(2) });
        assert_eq!(p.tasks[1].priority, 7);
        assert_eq!(p.tasks[1].estimate_ms, Some(90 * 60_000));
        assert_eq!(p.tasks[0].estimate_ms, None);
    }

    #[test]
    fn bad_scheduling_fields_name_the_field_and_the_rule() {
        let e = |top: &str, task: &str| plan(top, task).expect_err("must fail").to_string();
        assert_eq!(e("priority = 1001\n", ""), "priority: must be -1000..=1000");
        assert_eq!(e("", "priority = -1001\n"), "tasks[1].priority: must be -1000..=1000");
        assert_eq!(e("share = 0\n", ""), "share: must be 1..=10000");
        assert_eq!(e("max_parallel = 0\n", ""), "max_parallel: must be at least 1 (leave it out for no cap)");
        assert!(
            e("", "estimate = \"20 minutes\"\n")
                .starts_with("tasks[1].estimate: \"20 minutes\" is not a duration")
        );
        assert_eq!(e("", "estimate = \"0s\"\n"), "tasks[1].estimate: must be between 1ms and 30d");
        assert_eq!(e("", "estimate = \"31d\"\n"), "tasks[1].estimate: must be between 1ms and 30d");
    }

    #[test]
    fn durations_add_their_parts() {
        assert_eq!(parse_duration_ms("20m"), Ok(20 * 60_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(90 * 60_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("1d2s"), Ok(86_400_000 + 2_000));
        for bad in ["", "20", "m", "1x", "1.5h", "-1s", "99999999999999999999d"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
