//! What a task's processes may use at most:
//!
//! ```toml
//! [defaults]
//! limits = { pids = 512, memory = "8GiB", cpu = 2.0 }
//! ```
//!
//! A task's table overrides the defaults field by field. `pids` bounds the
//! processes and threads alive at once (a fork bomb stops there),
//! `memory` the memory they use together (units `B`, `KiB`, `MiB`, `GiB`;
//! at least 16 MiB), `cpu` the CPUs' worth of time they get (`0.5` is half
//! of one). The sidecar applies them with the attempt's cgroup where it has
//! one, otherwise with rlimits where one exists (`RLIMIT_NPROC`,
//! `RLIMIT_AS`), and names each limit it cannot enforce on the attempt.
//! They travel with the task's sandbox settings ([`super::SandboxSpec`]).

use serde::Deserialize;

use super::error::{PlanError, err};

/// The most processes a limit may allow.
pub const MAX_PIDS: u32 = 1_000_000;
/// The least memory a limit may allow: below it no toolchain starts.
pub const MIN_MEMORY: u64 = 16 << 20;
/// The most CPUs a limit may allow.
pub const MAX_CPU: u32 = 1024;

/// A task's limits; None: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Processes and threads at once.
    pub pids: Option<u32>,
    /// Bytes of memory.
    pub memory: Option<u64>,
    /// CPUs, in thousandths (`cpu = 2.0` is 2000).
    pub cpu_millis: Option<u32>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// The table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pids: Option<i64>,
    memory: Option<RawSize>,
    cpu: Option<f64>,
}

/// A size as written: a text with its unit (a bare number is refused,
/// naming the rule, rather than guessed to be bytes).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawSize {
    Text(String),
    Number(i64),
}

/// `raw` (at `path`) over `base`: the defaults' limits for a task, none for
/// `[defaults]`.
pub(super) fn resolve(path: &str, raw: Option<&RawLimits>, base: &Limits) -> Result<Limits, PlanError> {
    let Some(raw) = raw else { return Ok(*base) };
    let mut out = *base;
    if let Some(pids) = raw.pids {
        out.pids = Some(check_pids(pids).map_err(|rule| err(format!("{path}.pids"), rule))?);
    }
    if let Some(memory) = &raw.memory {
        let bytes = match memory {
            RawSize::Text(text) => parse_size(text),
            RawSize::Number(n) => Err(format!("{n} needs a unit: a text such as \"{n}MiB\"")),
        };
        out.memory = Some(bytes.and_then(check_memory).map_err(|rule| err(format!("{path}.memory"), rule))?);
    }
    if let Some(cpu) = raw.cpu {
        out.cpu_millis = Some(check_cpu(cpu).map_err(|rule| err(format!("{path}.cpu"), rule))?);
    }
    Ok(out)
}

/// A pids limit: 1 to [`MAX_PIDS`].
pub fn check_pids(pids: i64) -> Result<u32, String> {
    match u32::try_from(pids) {
        Ok(n) if (1..=MAX_PIDS).contains(&n) => Ok(n),
        _ => Err(format!("{pids} must be between 1 and {MAX_PIDS}")),
    }
}

/// A memory limit: at least [`MIN_MEMORY`].
pub fn check_memory(bytes: u64) -> Result<u64, String> {
    if bytes < MIN_MEMORY {
        return Err(format!("{} must be at least {}", size_text(bytes), size_text(MIN_MEMORY)));
    }
    Ok(bytes)
}

/// A CPU limit: more than 0 and at most [`MAX_CPU`], in thousandths.
pub fn check_cpu(cpu: f64) -> Result<u32, String> {
    if !(cpu.is_finite() && cpu > 0.0 && cpu <= f64::from(MAX_CPU)) {
        return Err(format!("{cpu} must be more than 0 and at most {MAX_CPU}"));
    }
    let millis = (cpu * 1000.0).round() as u32;
    if millis == 0 {
        return Err(format!("{cpu} must be at least 0.001"));
    }
    Ok(millis)
}

/// A CPU limit in thousandths, checked as [`check_cpu`] checks CPUs.
pub fn check_cpu_millis(millis: u32) -> Result<u32, String> {
    check_cpu(f64::from(millis) / 1000.0)
}

const UNITS: [(&str, u64); 4] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];

/// `"8GiB"`, `"1.5 GiB"`, `"512MiB"`, `"65536B"` as bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} must be a size such as \"8GiB\" (units B, KiB, MiB, GiB)");
    let t = text.trim();
    let (number, scale) = UNITS
        .iter()
        .find_map(|(unit, scale)| Some((t.strip_suffix(unit)?.trim_end(), *scale)))
        .ok_or_else(bad)?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits(whole)
        || !digits(fraction)
        || (number.contains('.') && fraction.is_empty())
    {
        return Err(bad());
    }
    let too_big = || format!("{text:?} is too large");
    let whole: u64 = whole.parse().map_err(|_| too_big())?;
    let bytes = whole.checked_mul(scale).ok_or_else(too_big)?;
    // The fraction in bytes, rounded down: digits past the ninth are below
    // a byte of any unit here.
    let fraction = &fraction[..fraction.len().min(9)];
    let part = match fraction {
        "" => 0,
        f => u128::from(scale) * f.parse::<u128>().map_err(|_| bad())? / 10u128.pow(f.len() as u32),
    };
    bytes.checked_add(part as u64).ok_or_else(too_big)
}

/// `bytes` in the largest unit that holds it whole: `8 GiB`, `1536 MiB`.
pub fn size_text(bytes: u64) -> String {
    let (unit, scale) =
        UNITS.iter().find(|(_, scale)| bytes.is_multiple_of(*scale) && bytes >= *scale).unwrap_or(&("B", 1));
    format!("{} {unit}", bytes / scale)
}

/// CPUs from thousandths: `2`, `0.5`, `1.25`.
pub fn cpu_text(millis: u32) -> String {
    let text = format!("{}.{:03}", millis / 1000, millis % 1000);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Limits, PlanError> {
        #[derive(Deserialize)]
        struct Doc {
            limits: RawLimits,
        }
        let doc: Doc = toml::from_str(text).expect("toml");
        resolve("defaults.limits", Some(&doc.limits), &Limits::default())
    }

    #[test]
    fn the_three_limits_parse() {
        let l = parse(r#"limits = { pids = 512, memory = "8GiB", cpu = 2.0 }"#).expect("valid");
        assert_eq!(l, Limits { pids: Some(512), memory: Some(8 << 30), cpu_millis: Some(2000) });
        let l = parse(r#"limits = { memory = "1.5 GiB", cpu = 1 }"#).expect("valid");
        assert_eq!((l.pids, l.memory, l.cpu_millis), (None, Some(3 << 29), Some(1000)));
        assert!(parse("limits = {}").expect("empty").is_empty());
    }

    #[test]
    fn a_task_overrides_the_defaults_field_by_field() {
        let base = Limits { pids: Some(64), memory: Some(1 << 30), cpu_millis: None };
        let doc: RawLimits = toml::from_str("pids = 128").expect("toml");
        let l = resolve("tasks[2].limits", Some(&doc), &base).expect("valid");
        assert_eq!(l, Limits { pids: Some(128), ..base });
        assert_eq!(resolve("tasks[2].limits", None, &base), Ok(base));
    }

    #[test]
    fn sizes_parse_in_each_unit_and_bad_ones_name_the_rule() {
        for (text, bytes) in [
            ("65536B", 65536),
            ("64KiB", 64 << 10),
            ("64 MiB", 64 << 20),
            ("8GiB", 8 << 30),
            ("0.5GiB", 512 << 20),
            ("2.25MiB", (2 << 20) + (1 << 18)),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in ["8", "8GB", "8 gib", "GiB", "-1GiB", "1.GiB", ".5GiB", "1e3MiB", "99999999999999GiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("8GB").expect_err("refused").contains("units B, KiB, MiB, GiB"));
        assert!(parse_size("99999999999999GiB").expect_err("refused").contains("too large"));
    }

    #[test]
    fn sizes_and_cpus_read_back_as_people_write_them() {
        assert_eq!(size_text(8 << 30), "8 GiB");
        assert_eq!(size_text(64 << 20), "64 MiB");
        assert_eq!(size_text(3 << 29), "1536 MiB");
        assert_eq!(size_text(1000), "1000 B");
        assert_eq!(size_text(0), "0 B");
        assert_eq!(
            (cpu_text(2000), cpu_text(500), cpu_text(1250), cpu_text(1)),
            ("2".into(), "0.5".into(), "1.25".into(), "0.001".into())
        );
    }

    #[test]
    fn each_bad_field_is_named_with_its_rule() {
        let cases = [
            ("limits = { pids = 0 }", "defaults.limits.pids", "between 1 and 1000000"),
            ("limits = { pids = 1000001 }", "defaults.limits.pids", "between 1 and 1000000"),
            ("limits = { pids = -5 }", "defaults.limits.pids", "between 1 and 1000000"),
            (r#"limits = { memory = "8MiB" }"#, "defaults.limits.memory", "at least 16 MiB"),
            (r#"limits = { memory = "lots" }"#, "defaults.limits.memory", "such as \"8GiB\""),
            ("limits = { memory = 512 }", "defaults.limits.memory", "needs a unit"),
            ("limits = { cpu = 0.0 }", "defaults.limits.cpu", "more than 0 and at most 1024"),
            ("limits = { cpu = -1.0 }", "defaults.limits.cpu", "more than 0 and at most 1024"),
            ("limits = { cpu = 1025 }", "defaults.limits.cpu", "more than 0 and at most 1024"),
            ("limits = { cpu = 0.0001 }", "defaults.limits.cpu", "at least 0.001"),
        ];
        for (text, path, rule) in cases {
            let e = parse(text).expect_err(text);
            assert_eq!(e.path, path, "{text}: {e}");
            assert!(e.rule.contains(rule), "{text}: {e}");
        }
        assert_eq!(parse("limits = { cpu = 1024 }").expect("the most").cpu_millis, Some(1_024_000));
        assert_eq!(parse("limits = { pids = 1000000 }").expect("the most").pids, Some(1_000_000));
        assert_eq!(parse(r#"limits = { memory = "16MiB" }"#).expect("the least").memory, Some(16 << 20));
    }

    const PLAN: &str = r#"
name = "s"
[defaults]
command = "true"
limits = { pids = 512, memory = "8GiB" }
[[tasks]]
id = "a"
files = ["a/**"]
[[tasks]]
id = "b"
files = ["b/**"]
limits = { memory = "64MiB", cpu = 0.5 }
[[tasks]]
id = "c"
files = ["c/**"]
sandbox = { write = ["/srv/cache"] }
"#;

    #[test]
    fn a_plans_limits_reach_each_tasks_sandbox_the_tasks_own_first() {
        let plan = crate::plan::Plan::parse(PLAN).expect("valid");
        let of = |i: usize| plan.tasks[i].sandbox.limits;
        assert_eq!(of(0), Limits { pids: Some(512), memory: Some(8 << 30), cpu_millis: None });
        assert_eq!(of(1), Limits { pids: Some(512), memory: Some(64 << 20), cpu_millis: Some(500) });
        assert_eq!(of(2), of(0), "a task's own sandbox keeps the defaults' limits");
        assert_eq!(plan.tasks[2].sandbox.write, vec!["/srv/cache".to_string()]);
        let none = crate::plan::Plan::parse(
            "name = \"s\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\ncommand = \"true\"",
        )
        .expect("valid");
        assert!(none.tasks[0].sandbox.limits.is_empty(), "no limits unless asked");
    }

    #[test]
    fn an_agents_spawned_children_take_its_limits() {
        let stored = "name = \"app\"\n[defaults]\nagent = \"claude\"\n[[tasks]]\nid = \"auth\"\nfiles = [\"auth/**\"]\nlimits = { pids = 64 }\n";
        let (swarm, task) =
            (crate::SwarmId::new("app").expect("id"), crate::TaskId::new("auth").expect("id"));
        let fragment = "[[tasks]]\nid = \"login\"\nfiles = [\"auth/login.rs\"]\n";
        let s = crate::plan::spawn::spawned(stored, &swarm, &task, fragment).expect("spawned");
        assert_eq!(s.plan.tasks[0].sandbox.limits.pids, Some(64));
    }

    #[test]
    fn a_bad_limit_in_a_plan_names_the_task_and_the_field() {
        let bad = PLAN.replace(r#"memory = "64MiB""#, r#"memory = "8MiB""#);
        let e = crate::plan::Plan::parse(&bad).expect_err("refused");
        assert_eq!(e.path, "tasks[1].limits.memory", "{e}");
        assert!(e.rule.contains("at least 16 MiB"), "{e}");
        let bad = PLAN.replace("pids = 512", "pids = 0");
        assert_eq!(crate::plan::Plan::parse(&bad).expect_err("refused").path, "defaults.limits.pids");
        let bad = PLAN.replace("cpu = 0.5", "threads = 2");
        let e = crate::plan::Plan::parse(&bad).expect_err("refused");
        assert!(e.path.starts_with("tasks[1].limits") || e.path.starts_with("tasks.1.limits"), "{e}");
        assert!(e.rule.contains("threads"), "{e}");
    }
}
