//! Capabilities: a worker never holds one. The trampoline calls [`drop_all`]
//! after Landlock (whose rules open the policy's paths, which may need the
//! sidecar's privileges to reach) and just before it execs the command.
//!
//! A sidecar running as root with the full set (a root shell, a privileged
//! container) would otherwise hand root's capabilities to its workers:
//! `CAP_SYS_PTRACE` opens any process's `/proc/<pid>/environ` and `mem`,
//! `CAP_NET_ADMIN` rewrites the host's network, `CAP_DAC_OVERRIDE` reads
//! every file Landlock does not already deny.
//!
//! What is cleared, in order:
//!
//! 1. The bounding set, one capability at a time: this needs
//!    `CAP_SETPCAP` in the effective set. Without it the process is
//!    unprivileged (an ordinary user, or root already stripped of it) and
//!    the bounding set cannot be changed, but it is harmless: the bounding
//!    set only caps what an exec may *gain*, and an exec under
//!    `no_new_privs` (which Landlock has set before this runs, and which
//!    [`drop_all`] sets again where there is no Landlock) never gains a capability: file capabilities and set-uid root
//!    are ignored, and even root's own exec is limited to the permitted
//!    set it had, which step 4 empties.
//!    Then, where the sidecar names a worker user, the switch to it
//!    (`worker_user`), which itself empties the permitted and effective
//!    sets as the last uid 0 goes.
//! 2. The ambient set (kept across exec for unprivileged programs).
//! 3. The inheritable set.
//! 4. The permitted set, and with it the effective set.
//!
//! Lowering the ambient, inheritable and permitted sets needs no privilege,
//! so for an ordinary user every step is a no-op that succeeds. Then the
//! sets are read back: any capability still held, or left in the bounding
//! set while `CAP_SETPCAP` was held, is an error, and the trampoline does
//! not run the command (fail closed).

use caps::{CapSet, Capability};

/// Clears every capability set of the calling thread (see the module's
/// rules), becoming the worker user on the way when there is one: after
/// the bounding set (which takes `CAP_SETPCAP`), before the rest (the
/// switch takes `CAP_SETUID` and `CAP_SETGID`, and itself empties the
/// permitted and effective sets). Call in a single-threaded process right
/// before exec.
pub fn drop_all(user: Option<&super::worker_user::Ids>) -> Result<(), String> {
    // Landlock has set it already; without Landlock (an old kernel) nothing
    // has, and the reasoning above needs it.
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("setting no_new_privs: {e}"))?;
    let read = |set: CapSet| caps::read(None, set).map_err(|e| format!("reading the {set:?} set: {e}"));
    let ambient_supported = caps::runtime::ambient_set_supported().is_ok();
    let may_change_bounding = caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .map_err(|e| format!("reading the effective set: {e}"))?;
    if may_change_bounding {
        for cap in read(CapSet::Bounding)? {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("dropping {cap} from the bounding set: {e}"))?;
        }
    }
    if let Some(ids) = user {
        super::worker_user::become_user(ids)?;
    }
    if ambient_supported {
        caps::clear(None, CapSet::Ambient).map_err(|e| format!("clearing the ambient set: {e}"))?;
    }
    caps::clear(None, CapSet::Inheritable).map_err(|e| format!("clearing the inheritable set: {e}"))?;
    // Clearing the permitted set clears the effective set with it.
    caps::clear(None, CapSet::Permitted).map_err(|e| format!("clearing the permitted set: {e}"))?;

    let mut left: Vec<String> = Vec::new();
    let mut check = |set: CapSet| -> Result<(), String> {
        let still = read(set)?;
        if !still.is_empty() {
            let mut names: Vec<String> = still.iter().map(ToString::to_string).collect();
            names.sort();
            left.push(format!("{set:?}: {}", names.join(", ")));
        }
        Ok(())
    };
    check(CapSet::Permitted)?;
    check(CapSet::Effective)?;
    check(CapSet::Inheritable)?;
    if ambient_supported {
        check(CapSet::Ambient)?;
    }
    if may_change_bounding {
        check(CapSet::Bounding)?;
    }
    if !left.is_empty() {
        return Err(format!("capabilities still held after dropping them: {}", left.join("; ")));
    }
    Ok(())
}

/// How many capabilities this process holds (its permitted set): what a
/// worker would inherit if the trampoline did not drop them.
pub fn held() -> usize {
    caps::read(None, CapSet::Permitted).map(|s| s.len()).unwrap_or(0)
}
