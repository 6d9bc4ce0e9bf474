//! An attempt's own cgroup (v2): every process of the attempt is in it, and
//! the attempt's end kills them all at once with `cgroup.kill`.
//!
//! Nothing is assumed. At start the sidecar looks for a cgroup v2
//! hierarchy it can write ([`Cgroups::probe`]): the one mounted where
//! `/proc/self/mountinfo` says, at its root a cgroup `swarm` (made if
//! missing), else below the sidecar's own cgroup (`/proc/self/cgroup`, a
//! delegated subtree). In it each worker has one cgroup,
//! `<worker-id>.<hash of the repository>`, used by its attempts one after
//! the other, so that a restarted sidecar finds the cgroup of a worker it
//! re-adopts. The trampoline moves itself into it before it confines
//! itself ([`join`]), so the worker, its setup commands and verify tiers
//! and everything they start are in it. With none of this (no cgroup v2,
//! a read-only `/sys/fs/cgroup` as in an unprivileged container) the
//! supervisor's subreaper walk ends a command worker's processes instead
//! (`crate::reaper`), and the attempt's report says so.
//!
//! The plan's `limits` are written into the worker's cgroup
//! ([`AttemptCgroup::set_limits`]): `pids.max`, `memory.max` (with
//! `memory.swap.max` 0 and `memory.oom.group` 1), `cpu.max`, each where its
//! controller is delegated to the `swarm` cgroup (the sidecar enables
//! `pids`, `memory` and `cpu` in its `cgroup.subtree_control` when its
//! parent offers them). `memory.events` tells an attempt killed by its
//! memory limit ([`AttemptCgroup::oom_kills`]).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use swarm_core::plan::Limits;

/// The cgroup the sidecar makes at the root of the hierarchy for its
/// workers' cgroups.
const SWARM: &str = "swarm";

/// Where this sidecar's attempts get their cgroups, probed once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    /// Where each worker's cgroup is made; None: nowhere here.
    base: Option<PathBuf>,
    /// Why there is no base (empty when there is one).
    why_not: String,
}

impl Cgroups {
    /// No cgroups, for the reason given.
    pub fn none(why: impl Into<String>) -> Cgroups {
        Cgroups { base: None, why_not: why.into() }
    }

    /// Finds (or makes) a cgroup under which this sidecar may make its
    /// attempts' cgroups; [`Cgroups::none`] with the reason otherwise.
    pub fn probe() -> Cgroups {
        let Some((mount, own)) = own_cgroup() else {
            return Cgroups::none("no cgroup v2 hierarchy is mounted");
        };
        let mut candidates = vec![mount.join(SWARM)];
        if !own.as_os_str().is_empty() {
            candidates.push(mount.join(&own).join(SWARM));
        }
        let mut why = Vec::new();
        for dir in candidates {
            match prepare_base(&dir) {
                Ok(()) => return Cgroups { base: Some(dir), why_not: String::new() },
                Err(e) => why.push(format!("{}: {e}", dir.display())),
            }
        }
        Cgroups::none(format!("no writable cgroup v2 ({})", why.join("; ")))
    }

    /// Where workers' cgroups are made, if anywhere.
    pub fn base(&self) -> Option<&Path> {
        self.base.as_deref()
    }

    /// Why there is no cgroup here.
    pub fn why_not(&self) -> &str {
        &self.why_not
    }

    /// The controllers the workers' cgroups have (`pids`, `memory`, `cpu`
    /// among them when the limits can be enforced with the cgroup).
    pub fn controllers(&self) -> Vec<String> {
        let Some(base) = &self.base else { return Vec::new() };
        let enabled = std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        enabled.split_whitespace().map(str::to_string).collect()
    }

    /// The cgroup of worker `worker_id` of `repo` for an attempt: made, or
    /// found; a `fresh` attempt first ends whatever an earlier one left in
    /// it, a re-adopted one keeps its worker there.
    pub fn attempt(
        &self,
        repo: &Path,
        worker_id: &str,
        fresh: bool,
    ) -> Result<Option<AttemptCgroup>, String> {
        let Some(base) = &self.base else { return Ok(None) };
        let dir = base.join(name(repo, worker_id));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("making {}: {e}", dir.display())),
        }
        let cgroup = AttemptCgroup::at(dir);
        if fresh {
            cgroup.kill();
        }
        Ok(Some(cgroup))
    }
}

/// The cgroup v2 mount point and the sidecar's own cgroup relative to it.
fn own_cgroup() -> Option<(PathBuf, PathBuf)> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = left.split_whitespace();
        let root = unescape(f.nth(3)?);
        let point = unescape(f.next()?);
        // Our cgroup must lie below the part of the hierarchy mounted here.
        let rel = Path::new(own).strip_prefix(&root).ok()?;
        Some((PathBuf::from(point), rel.to_path_buf()))
    })
}

/// A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal =
            b.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Makes `dir` (or finds it) and checks that it is a cgroup this process
/// may write.
fn prepare_base(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if !dir.join("cgroup.procs").is_file() {
        return Err(std::io::Error::other("not a cgroup"));
    }
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).map_err(std::io::Error::from)?;
    // The controllers the limits need, for the workers' cgroups below it:
    // those its parent delegates (`cgroup.controllers`); the rest stay
    // unenforced, and the attempts' reports say so.
    let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    for controller in CONTROLLERS.iter().filter(|c| available.split_whitespace().any(|a| a == **c)) {
        let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}"));
    }
    Ok(())
}

/// The controllers the plan's limits use.
const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];

/// `<worker-id>.<16 hex digits>`: readable, and distinct for two
/// repositories with workers of the same id on one machine.
fn name(repo: &Path, worker_id: &str) -> String {
    let id: String = worker_id
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '_' })
        .collect();
    let key = [repo.as_os_str().as_encoded_bytes(), b"\0", worker_id.as_bytes()].concat();
    format!("{id}.{:016x}", fnv1a(&key))
}

/// FNV-1a, 64 bits: stable across builds, so a newer sidecar finds the
/// cgroup an older one made.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// `cpu.max` for a CPU limit in thousandths: the quota per period, both in
/// microseconds (a quota is at least 1 ms, so a limit under 0.01 CPU gets a
/// one-second period).
fn cpu_max(millis: Option<u32>) -> String {
    match millis {
        None => "max 100000".to_string(),
        Some(m) if m < 10 => format!("{} 1000000", u64::from(m) * 1000),
        Some(m) => format!("{} 100000", u64::from(m) * 100),
    }
}

/// Moves the calling process into the cgroup `dir` (the trampoline does,
/// before it confines itself and execs).
pub fn join(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
}

/// One worker's cgroup for the attempt at hand; dropped when the attempt is
/// over, which kills what is left in it and removes it.
#[derive(Debug)]
pub struct AttemptCgroup {
    dir: PathBuf,
    /// What [`AttemptCgroup::set_limits`] wrote and the kernel took.
    enforced: Enforced,
}

/// The limits a cgroup enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Enforced {
    pub limits: Limits,
    /// `memory.swap.max` is 0: the memory limit is not stretched by swap.
    pub no_swap: bool,
}

impl AttemptCgroup {
    /// A cgroup at `dir` (made by the caller; for tests, any directory).
    pub fn at(dir: PathBuf) -> AttemptCgroup {
        AttemptCgroup { dir, enforced: Enforced::default() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `limits` into the controllers' files that exist here (a
    /// controller not delegated to the cgroup has none); a limit not set
    /// is written as `max`, since the cgroup may be one an earlier attempt
    /// left. An OOM kill takes the whole cgroup (`memory.oom.group`), so a
    /// worker over its memory dies by SIGKILL rather than lives on without
    /// the child the kernel chose. Returns what is now enforced.
    pub fn set_limits(&mut self, limits: &Limits) -> Enforced {
        let write = |file: &str, value: &str| -> bool {
            use std::io::Write as _;
            // Never created: a missing file is a controller not enabled here.
            let f = std::fs::OpenOptions::new().write(true).truncate(true).open(self.dir.join(file));
            f.and_then(|mut f| f.write_all(value.as_bytes())).is_ok()
        };
        let or_max = |v: Option<u64>| v.map_or("max".to_string(), |v| v.to_string());
        let mut e = Enforced::default();
        if write("pids.max", &or_max(limits.pids.map(u64::from))) {
            e.limits.pids = limits.pids;
        }
        if write("memory.max", &or_max(limits.memory)) {
            e.limits.memory = limits.memory;
            e.no_swap = write("memory.swap.max", if limits.memory.is_some() { "0" } else { "max" })
                && limits.memory.is_some();
            write("memory.oom.group", "1");
        }
        if write("cpu.max", &cpu_max(limits.cpu_millis)) {
            e.limits.cpu_millis = limits.cpu_millis;
        }
        self.enforced = e;
        e
    }

    /// What the cgroup enforces.
    pub fn enforced(&self) -> Enforced {
        self.enforced
    }

    /// How many processes the OOM killer has killed in the cgroup
    /// (`oom_kill` of `memory.events`); 0 without a memory controller.
    pub fn oom_kills(&self) -> u64 {
        let events = std::fs::read_to_string(self.dir.join("memory.events")).unwrap_or_default();
        events.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok()).unwrap_or(0)
    }

    /// SIGKILLs every process in the cgroup: `cgroup.kill` (Linux 5.14),
    /// else each process listed, again until none is left.
    pub fn kill(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        for _ in 0..100 {
            let pids = self.procs();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
            }
        }
    }

    fn procs(&self) -> Vec<i32> {
        let raw = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        raw.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }

    /// Whether a live process is in the cgroup (`populated` of `cgroup.events`).
    pub fn populated(&self) -> bool {
        let events = std::fs::read_to_string(self.dir.join("cgroup.events")).unwrap_or_default();
        events.lines().any(|l| l == "populated 1")
    }
}

impl Drop for AttemptCgroup {
    fn drop(&mut self) {
        self.kill();
        // The killed go within milliseconds; one in uninterruptible sleep
        // may take longer, and then the next attempt's kill finds it.
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.populated() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Err(e) = std::fs::remove_dir(&self.dir)
            && e.kind() != ErrorKind::NotFound
        {
            tracing::warn!(cgroup = %self.dir.display(), error = %e, "could not remove the attempt's cgroup");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_cgroup_name_is_readable_stable_and_distinct_per_repository() {
        let a = name(Path::new("/r/one"), "local-1");
        assert!(a.starts_with("local-1."), "{a}");
        assert_eq!(a, name(Path::new("/r/one"), "local-1"));
        assert_ne!(a, name(Path::new("/r/two"), "local-1"));
        assert!(name(Path::new("/r"), "a/b\nc").starts_with("a_b_c."));
    }

    /// The controllers' files as a cgroup has them: only those of the
    /// controllers enabled there exist, and only they are written.
    #[test]
    fn limits_are_written_where_a_controller_has_its_file() {
        let dir = tempfile::tempdir().expect("dir");
        let file = |name: &str| dir.path().join(name);
        for name in ["pids.max", "memory.max", "memory.swap.max", "memory.oom.group"] {
            std::fs::write(file(name), "max\n").expect("file");
        }
        let mut cg = AttemptCgroup::at(dir.path().to_path_buf());
        let limits = Limits { pids: Some(64), memory: Some(64 << 20), cpu_millis: Some(2000) };
        let e = cg.set_limits(&limits);
        assert_eq!(e.limits, Limits { cpu_millis: None, ..limits }, "no cpu.max here: not enforced");
        assert!(e.no_swap);
        let read = |name: &str| std::fs::read_to_string(file(name)).expect("read");
        assert_eq!(read("pids.max"), "64");
        assert_eq!(read("memory.max"), (64u64 << 20).to_string());
        assert_eq!((read("memory.swap.max").as_str(), read("memory.oom.group").as_str()), ("0", "1"));
        assert!(!file("cpu.max").exists(), "never created");
        // The next attempt without limits lifts them.
        let e = cg.set_limits(&Limits::default());
        assert_eq!(e, Enforced::default());
        assert_eq!((read("pids.max").as_str(), read("memory.max").as_str()), ("max", "max"));
        assert_eq!(read("memory.swap.max"), "max");
        std::fs::write(file("memory.events"), "low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\noom_group_kill 1\n")
            .expect("events");
        assert_eq!(cg.oom_kills(), 2);
        std::mem::forget(cg); // a plain directory: nothing to kill or remove
    }

    #[test]
    fn a_cpu_limit_is_a_quota_of_at_least_a_millisecond() {
        assert_eq!(cpu_max(None), "max 100000");
        assert_eq!(cpu_max(Some(2000)), "200000 100000");
        assert_eq!(cpu_max(Some(500)), "50000 100000");
        assert_eq!(cpu_max(Some(1)), "1000 1000000");
        assert_eq!(cpu_max(Some(1_024_000)), "102400000 100000");
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/sys/fs/cgroup\040x"), "/sys/fs/cgroup x");
        assert_eq!(unescape(r"/a\\b"), r"/a\\b");
        assert_eq!(unescape(r"/a\134b"), r"/a\b");
    }
}
