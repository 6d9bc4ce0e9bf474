//! Worktrees in the workspaces directory left by sidecars that are gone.
//!
//! A sidecar holds an exclusive `flock` on `<worker-id>.lock` beside its
//! worktree for as long as it runs. Another worker's worktree is an orphan
//! when that lock is free and its journal holds no attempt (a sidecar that
//! crashed mid-attempt may still come back for it).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::journal::Journal;

/// The liveness lock of a worker id.
pub fn lock_path(workspaces: &Path, worker_id: &str) -> PathBuf {
    workspaces.join(format!("{worker_id}.lock"))
}

/// The journal of a worker id.
pub fn journal_path(workspaces: &Path, worker_id: &str) -> PathBuf {
    workspaces.join(format!("{worker_id}.journal"))
}

/// Takes this worker's liveness lock; fails when another sidecar holds it.
pub fn take_lock(workspaces: &Path, worker_id: &str) -> std::io::Result<Flock<File>> {
    std::fs::create_dir_all(workspaces)?;
    let path = lock_path(workspaces, worker_id);
    let f = OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        std::io::Error::other(format!(
            "{}: another sidecar with worker id {worker_id:?} is running ({errno})",
            path.display()
        ))
    })
}

fn lock_is_free(workspaces: &Path, worker_id: &str) -> bool {
    let Ok(f) =
        OpenOptions::new().create(true).truncate(false).write(true).open(lock_path(workspaces, worker_id))
    else {
        return false;
    };
    Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok()
}

/// Worker ids of orphaned worktrees, sorted.
pub fn scan(workspaces: &Path, my_id: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(workspaces) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        let path = entry.path();
        if name == my_id
            || swarm_core::names::check_id(&name).is_err()
            || !path.is_dir()
            || !path.join(".git").is_file()
        {
            continue;
        }
        if !lock_is_free(workspaces, &name) {
            continue;
        }
        let journal = journal_path(workspaces, &name);
        if journal.exists() && Journal::open(&journal).map(|j| j.in_hand().is_some()).unwrap_or(true) {
            continue;
        }
        out.push(name);
    }
    out.sort();
    out
}

/// Removes orphaned worktrees with their lock and journal files.
pub fn remove(
    ws: &crate::worktree::Workspaces,
    ids: &[String],
) -> Result<(), crate::worktree::WorktreeError> {
    for id in ids {
        crate::worktree::remove(ws, id)?;
        let _ = std::fs::remove_file(journal_path(&ws.dir, id));
        let _ = std::fs::remove_file(lock_path(&ws.dir, id));
    }
    Ok(())
}
