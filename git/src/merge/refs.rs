//! Keeping the controller's integration refs movable: stale locks left by a
//! killed writer, and refs a power loss put back behind the store's head.
//!
//! The controller is the only writer of its integration refs and moves them
//! from one thread, one at a time; so when that thread has no update of its
//! own in flight, a lock on one of them that is old and open by no process
//! was left by a killed writer. Refs the controller does not own (`main`, a
//! Land target) never come here.

use std::time::Duration;

use super::{LockRemoved, MergeService, OwnedRef, RecordedRef, RefRepaired, Report};
use crate::{GitError, MergeError, RefLock, RefRepair};

/// A lock file on an integration ref must be at least this old before it
/// is removed: a live `git` holds a ref lock for milliseconds, so an older
/// one (also open by no process) was left by a killed writer.
pub const STALE_LOCK_AGE: Duration = Duration::from_secs(2);

impl MergeService {
    /// Runs `op`, which moves an integration ref of `swarm`, once more after
    /// removing the ref's stale lock if the first try found it locked.
    pub(super) fn unlocking<T>(
        &self,
        swarm: &str,
        lock_removed: &mut Option<LockRemoved>,
        op: impl Fn() -> Result<T, MergeError>,
    ) -> Result<T, MergeError> {
        match op() {
            Err(MergeError::RefLocked { branch, lock }) => {
                let owned = OwnedRef { swarm: swarm.to_string(), branch: branch.clone() };
                match self.clear_stale_lock(&owned, true) {
                    Ok(Some(removed)) => {
                        *lock_removed = Some(removed);
                        op()
                    }
                    Ok(None) | Err(_) => Err(MergeError::RefLocked { branch, lock }),
                }
            }
            other => other,
        }
    }

    /// At start: clears `recorded`'s stale lock, then repairs the ref if a
    /// power loss undid its last moves. False once `report` stops listening.
    pub(super) fn restore_ref(
        &self,
        recorded: &RecordedRef,
        report: &mut impl FnMut(Report) -> bool,
    ) -> bool {
        let RecordedRef { owned, head } = recorded;
        let removed = self.clear_stale_lock(owned, false).unwrap_or_else(|error| {
            tracing::warn!(swarm = %owned.swarm, branch = %owned.branch, reason = %error, "stale lock check");
            None
        });
        if let Some(removed) = removed
            && !report(Report::LockRemoved(removed))
        {
            return false;
        }
        let span = tracing::info_span!("integration.repair", swarm = %owned.swarm, branch = %owned.branch, head = %head);
        let _entered = span.enter();
        match self.integrator.repair_ref(&owned.branch, head) {
            Ok(RefRepair::Intact) => true,
            Ok(RefRepair::Repaired { found }) => report(Report::RefRepaired(RefRepaired {
                swarm: owned.swarm.clone(),
                branch: owned.branch.clone(),
                found,
                head: head.clone(),
            })),
            // The merges on this ref then fail with git's own reason, which names the ref.
            Err(e) => {
                tracing::error!(error = %e, "integration ref could not be checked against (or put back at) the store's head");
                true
            }
        }
    }

    /// Removes `owned`'s lock if stale. A lock younger than [`STALE_LOCK_AGE`]
    /// is waited out once when `wait_young` (a merge is blocked on it; the
    /// wait is bounded by the age) and left alone otherwise; a lock some
    /// process has open is never removed.
    fn clear_stale_lock(&self, owned: &OwnedRef, wait_young: bool) -> Result<Option<LockRemoved>, GitError> {
        let span = tracing::info_span!("integration.lock", swarm = %owned.swarm, branch = %owned.branch);
        let _entered = span.enter();
        let mut found = self.integrator.remove_stale_ref_lock(&owned.branch, STALE_LOCK_AGE)?;
        if let RefLock::Young { wait, .. } = &found
            && wait_young
        {
            std::thread::sleep((*wait).min(STALE_LOCK_AGE));
            found = self.integrator.remove_stale_ref_lock(&owned.branch, STALE_LOCK_AGE)?;
        }
        match found {
            RefLock::Removed { path, age } => {
                tracing::warn!(lock = %path.display(), age_ms = age.as_millis() as u64,
                    "removed a stale lock on the integration ref (left by a killed writer)");
                Ok(Some(LockRemoved {
                    swarm: owned.swarm.clone(),
                    branch: owned.branch.clone(),
                    path: path.display().to_string(),
                    age_ms: age.as_millis() as u64,
                }))
            }
            RefLock::Absent => Ok(None),
            RefLock::Young { path, age, .. } => {
                tracing::info!(lock = %path.display(), age_ms = age.as_millis() as u64, "integration ref lock is recent; left alone");
                Ok(None)
            }
            RefLock::Open { path, pid } => {
                tracing::warn!(lock = %path.display(), pid, "integration ref lock is held open by a live process; left alone");
                Ok(None)
            }
        }
    }
}
