//! `<exe> __sandbox <policy> -- <command...>`: move this fresh,
//! single-threaded process into the attempt's cgroup (where it has one),
//! set the rlimits of the limits no cgroup enforces, confine it with the
//! policy, drop every capability (becoming the worker user, where the
//! sidecar has one, on the way), then
//! exec the command in place (same pid, same process group, same
//! environment), so the command and everything it starts inherit the
//! Landlock domain and hold no capability.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;

use super::Policy;

/// The hidden first argument that selects the trampoline.
pub const ARG: &str = "__sandbox";
/// Exit codes as a shell gives them: the command could not be run (or
/// confined), or was not found.
const CANNOT_RUN: i32 = 126;
const NOT_FOUND: i32 = 127;

/// Runs the trampoline when `argv[1]` is [`ARG`]; returns only on failure,
/// with the exit code. Call first thing in `main`, before any thread starts.
pub fn main_if_requested() -> Option<i32> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != ARG) {
        return None;
    }
    let (Some(raw), Some(sep), Some(program)) = (args.get(2), args.get(3), args.get(4)) else {
        eprintln!("usage: {ARG} <policy-json> -- <command...>");
        return Some(2);
    };
    if sep != "--" {
        eprintln!("usage: {ARG} <policy-json> -- <command...>");
        return Some(2);
    }
    let policy: Policy = match raw.to_str().map(serde_json::from_str) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("swarm sandbox: invalid policy: {e}");
            return Some(2);
        }
        None => {
            eprintln!("swarm sandbox: invalid policy: not UTF-8");
            return Some(2);
        }
    };
    // Into the attempt's cgroup first: writing its `cgroup.procs` may take
    // the privileges dropped below, and Landlock would deny it.
    if let Some(dir) = &policy.cgroup
        && let Err(e) = super::cgroup::join(dir)
    {
        eprintln!("swarm sandbox: cannot join the attempt's cgroup {}: {e}", dir.display());
        return Some(CANNOT_RUN);
    }
    // The limits no cgroup enforces; lowering them needs no privilege.
    if let Err(e) = policy.rlimits.apply() {
        eprintln!("swarm sandbox: cannot limit the worker: {e}");
        return Some(CANNOT_RUN);
    }
    // Landlock next: its rules open the policy's paths, which may take
    // the privileges about to be dropped. It also sets no_new_privs, which
    // the capability drop relies on (see `privileges`). A plan's
    // `sandbox = "off"` under a worker user comes here only for the rest.
    if !policy.unconfined
        && let Err(e) = super::landlock::restrict_self(&policy)
    {
        eprintln!("swarm sandbox: cannot confine the worker: {e}");
        return Some(CANNOT_RUN);
    }
    // Fail closed: a worker never runs holding a capability, nor as root
    // when the sidecar names a worker user.
    if let Err(e) = super::privileges::drop_all(policy.user.as_ref()) {
        eprintln!("swarm sandbox: cannot drop the worker's capabilities: {e}");
        return Some(CANNOT_RUN);
    }
    let err = std::process::Command::new(program).args(&args[5..]).exec();
    eprintln!("swarm sandbox: cannot run {}: {err}", program.to_string_lossy());
    Some(if err.kind() == std::io::ErrorKind::NotFound { NOT_FOUND } else { CANNOT_RUN })
}
