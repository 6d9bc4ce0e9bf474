//! Stale ref locks: git (and libgit2) update a loose ref by creating `<ref>.lock`, writing the new
//! id and renaming it over the ref. A process killed between the create and the rename leaves the
//! lock file behind, and every later update of that ref fails as "locked" until someone removes it.
//!
//! This module only decides whether a given lock is stale and removes it; *which* refs may be
//! unlocked this way is the caller's policy (the controller: only the integration refs it alone
//! writes, only from the thread that moves them).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::GitError;
use crate::{Integrator, ref_name};

impl Integrator {
    /// The lock file git and libgit2 create while updating `branch` (`<common dir>/refs/heads/<branch>.lock`).
    pub fn ref_lock_path(&self, branch: &str) -> Result<PathBuf, GitError> {
        Ok(self.refs.commondir().join(format!("{}.lock", ref_name(branch)?)))
    }

    /// Removes `branch`'s lock file if it is stale: at least `min_age` old and open by no process
    /// (`/proc/*/fd`, on Linux). Only the caller knows whether nobody else may legitimately be
    /// updating the ref; call this only for refs the caller alone writes, and never while one of
    /// its own updates of that ref is in flight.
    #[tracing::instrument(skip(self))]
    pub fn remove_stale_ref_lock(&self, branch: &str, min_age: Duration) -> Result<RefLock, GitError> {
        let path = self.ref_lock_path(branch)?;
        let found = remove_if_stale(&path, min_age)?;
        if let RefLock::Removed { path, age } = &found {
            tracing::warn!(lock = %path.display(), age_ms = age.as_millis() as u64, "removed a stale ref lock");
        }
        Ok(found)
    }
}

/// What [`crate::Integrator::remove_stale_ref_lock`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefLock {
    /// The ref has no lock file.
    Absent,
    /// The lock was stale and has been removed.
    Removed { path: PathBuf, age: Duration },
    /// The lock file is younger than the minimum age: a live `git` may be in the middle of an
    /// update (they take milliseconds). Asking again after `wait` may find it stale.
    Young { path: PathBuf, age: Duration, wait: Duration },
    /// A process has the lock file open: it is live and was left alone.
    Open { path: PathBuf, pid: u32 },
}

/// Removes `path` if it exists, is at least `min_age` old and no process has it open.
pub(crate) fn remove_if_stale(path: &Path, min_age: Duration) -> Result<RefLock, GitError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RefLock::Absent),
        Err(source) => return Err(GitError::Io { op: "inspect ref lock", source }),
    };
    let modified = meta.modified().map_err(GitError::io("inspect ref lock"))?;
    // A clock step backwards makes the lock look new: it then only waits out `min_age`.
    let age = SystemTime::now().duration_since(modified).unwrap_or_default();
    if age < min_age {
        return Ok(RefLock::Young { path: path.to_path_buf(), age, wait: min_age - age });
    }
    if let Some(pid) = open_by(path) {
        return Ok(RefLock::Open { path: path.to_path_buf(), pid });
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(RefLock::Removed { path: path.to_path_buf(), age }),
        // Its owner finished (renamed it over the ref) between our look and the removal.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RefLock::Absent),
        Err(source) => Err(GitError::Io { op: "remove stale ref lock", source }),
    }
}

/// The id of a process with `path` open, found by scanning `/proc/*/fd` (Linux). Processes whose
/// descriptors cannot be read are skipped; elsewhere, or without `/proc`, nothing is found and
/// the age rule alone applies.
fn open_by(path: &Path) -> Option<u32> {
    let target = std::fs::canonicalize(path).ok()?;
    let procs = std::fs::read_dir("/proc").ok()?;
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|p| p == target) {
                return Some(pid);
            }
        }
    }
    None
}
