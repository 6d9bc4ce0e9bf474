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

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
        let cgroup = AttemptCgroup { dir };
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
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).map_err(std::io::Error::from)
}

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
}

impl AttemptCgroup {
    pub fn path(&self) -> &Path {
        &self.dir
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

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/sys/fs/cgroup\040x"), "/sys/fs/cgroup x");
        assert_eq!(unescape(r"/a\\b"), r"/a\\b");
        assert_eq!(unescape(r"/a\134b"), r"/a\b");
    }
}
