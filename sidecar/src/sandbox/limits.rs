//! The plan's `limits` for one attempt: each applied by the attempt's
//! cgroup where its controller is there (`cgroup.rs`), otherwise by an
//! rlimit the trampoline sets before it confines itself, otherwise not at
//! all; the attempt's report names how each is applied or why it is not.
//!
//! The rlimits are weaker, and the report says how: `RLIMIT_AS` bounds each
//! process's address space (not what they use together, and a runtime that
//! reserves much more than it touches may fail under it), `RLIMIT_NPROC`
//! counts every process of the workers' user and does not bind root at
//! all. With a worker user (`--worker-user`) that user is the workers' own,
//! not the sidecar's, so a root sidecar's pids limit binds again, and the
//! count is only its workers' (all of them, across the sidecars that share
//! the user: give each sidecar a user of its own for a bound per attempt).
//! CPU has no rlimit of its kind.

use nix::sys::resource::{Resource, setrlimit};
use serde::{Deserialize, Serialize};
use swarm_core::plan::Limits;
use swarm_core::plan::limits::{cpu_text, size_text};

use super::cgroup::Enforced;

/// What the trampoline sets (soft and hard alike, so the worker cannot
/// raise it again) for the limits no cgroup enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_space: Option<u64>,
}

impl Rlimits {
    pub fn is_empty(&self) -> bool {
        *self == Rlimits::default()
    }

    /// Sets them on the calling process (inherited by what it execs).
    pub fn apply(&self) -> Result<(), String> {
        for (resource, value) in
            [(Resource::RLIMIT_NPROC, self.nproc), (Resource::RLIMIT_AS, self.address_space)]
        {
            if let Some(v) = value {
                setrlimit(resource, v, v).map_err(|e| format!("setting {resource:?} to {v}: {e}"))?;
            }
        }
        Ok(())
    }
}

/// How one attempt's limits are applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// For the trampoline.
    pub rlimits: Rlimits,
    /// For the report: each limit applied, and how.
    pub enforced: Vec<String>,
    /// For the report: each limit not applied, and why.
    pub missing: Vec<String>,
}

/// Where the attempt's cgroup stands, for [`apply`].
pub enum Cgroup<'a> {
    /// It enforces these.
    Enforces(Enforced),
    /// There is none, for this reason.
    None(&'a str),
}

/// Splits `limits` between the cgroup and the rlimits, and words the report;
/// `worker_user` is the user workers run as, when not the sidecar's.
pub fn apply(limits: &Limits, cgroup: Cgroup<'_>, worker_user: Option<&str>) -> Applied {
    let (by_cgroup, no_controller) = match cgroup {
        Cgroup::Enforces(e) => (e, None),
        Cgroup::None(why) => (Enforced::default(), Some(why)),
    };
    let mut a = Applied::default();
    // Why the cgroup does not enforce the limit of this controller.
    let lacking = |controller: &str| match no_controller {
        Some(why) => format!("no cgroup ({why})"),
        None => format!("the attempt's cgroup has no {controller} controller"),
    };
    if let Some(pids) = limits.pids {
        let what = format!("pids limit {pids}");
        if by_cgroup.limits.pids.is_some() {
            a.enforced.push(format!("{what} (cgroup)"));
        } else if let Some(user) = worker_user {
            a.rlimits.nproc = Some(u64::from(pids));
            a.enforced
                .push(format!("{what} (RLIMIT_NPROC, counting every process of the worker user {user})"));
        } else if nproc_binds() {
            a.rlimits.nproc = Some(u64::from(pids));
            a.enforced.push(format!("{what} (RLIMIT_NPROC, counting every process of the sidecar's user)"));
        } else {
            a.missing.push(format!(
                "{what}: {}, and RLIMIT_NPROC does not bind root (run workers as another user with --worker-user)",
                lacking("pids")
            ));
        }
    }
    if let Some(memory) = limits.memory {
        let what = format!("memory limit {}", size_text(memory));
        if by_cgroup.limits.memory.is_some() {
            let swap = if by_cgroup.no_swap { ", no swap" } else { "" };
            a.enforced.push(format!("{what} (cgroup{swap})"));
        } else {
            a.rlimits.address_space = Some(memory);
            a.enforced.push(format!("{what} (RLIMIT_AS, the address space of each process)"));
        }
    }
    if let Some(millis) = limits.cpu_millis {
        let what = format!("cpu limit {}", cpu_text(millis));
        if by_cgroup.limits.cpu_millis.is_some() {
            a.enforced.push(format!("{what} (cgroup)"));
        } else {
            a.missing.push(format!("{what}: {}", lacking("cpu")));
        }
    }
    a
}

/// Whether `RLIMIT_NPROC` binds this sidecar's workers: the kernel exempts
/// the initial user namespace's root, whatever its capabilities.
fn nproc_binds() -> bool {
    if !nix::unistd::getuid().is_root() {
        return true;
    }
    // Root of a user namespace (a rootless container) is someone else outside.
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    !map.lines().any(|l| l.split_whitespace().take(2).eq(["0", "0"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Limits = Limits { pids: Some(64), memory: Some(64 << 20), cpu_millis: Some(500) };

    #[test]
    fn a_cgroup_with_every_controller_enforces_every_limit() {
        let e = Enforced { limits: ALL, no_swap: true };
        let a = apply(&ALL, Cgroup::Enforces(e), None);
        assert!(a.rlimits.is_empty() && a.missing.is_empty(), "{a:?}");
        assert_eq!(
            a.enforced,
            ["pids limit 64 (cgroup)", "memory limit 64 MiB (cgroup, no swap)", "cpu limit 0.5 (cgroup)"]
        );
    }

    #[test]
    fn without_a_cgroup_memory_falls_back_to_rlimit_as_and_cpu_is_named_missing() {
        let a = apply(&ALL, Cgroup::None("read-only file system"), None);
        assert_eq!(a.rlimits.address_space, Some(64 << 20));
        assert!(a.enforced.iter().any(|e| e.starts_with("memory limit 64 MiB (RLIMIT_AS")), "{a:?}");
        assert!(a.missing.iter().any(|m| m == "cpu limit 0.5: no cgroup (read-only file system)"), "{a:?}");
        // pids: an rlimit for an ordinary user, missing for root.
        match nproc_binds() {
            true => assert_eq!(a.rlimits.nproc, Some(64)),
            false => assert!(
                a.missing.iter().any(|m| m.starts_with("pids limit 64: no cgroup") && m.contains("root")),
                "{a:?}"
            ),
        }
    }

    #[test]
    fn with_a_worker_user_the_pids_limit_falls_back_to_its_rlimit_nproc_even_for_root() {
        let a = apply(&ALL, Cgroup::None("read-only file system"), Some("nobody"));
        assert_eq!(a.rlimits.nproc, Some(64));
        assert!(
            a.enforced.iter().any(
                |e| e == "pids limit 64 (RLIMIT_NPROC, counting every process of the worker user nobody)"
            ),
            "{a:?}"
        );
    }

    #[test]
    fn a_cgroup_lacking_a_controller_says_which() {
        let e = Enforced { limits: Limits { memory: ALL.memory, ..Limits::default() }, no_swap: false };
        let a = apply(&ALL, Cgroup::Enforces(e), None);
        assert!(a.enforced.contains(&"memory limit 64 MiB (cgroup)".to_string()), "{a:?}");
        assert!(a.missing.contains(&"cpu limit 0.5: the attempt's cgroup has no cpu controller".to_string()));
        assert_eq!(a.rlimits.address_space, None);
        assert!(apply(&Limits::default(), Cgroup::None("x"), None) == Applied::default());
    }

    #[test]
    fn rlimits_travel_in_the_policy_only_when_set() {
        let r = Rlimits { nproc: None, address_space: Some(1 << 40) };
        let json = serde_json::to_string(&r).expect("json");
        assert_eq!(json, r#"{"address_space":1099511627776}"#);
        assert_eq!(serde_json::from_str::<Rlimits>("{}").expect("empty"), Rlimits::default());
    }
}
