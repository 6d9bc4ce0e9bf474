//! Git lock files the sidecar may break, and the repository-wide lock that
//! serializes worktree creation.
//!
//! A sidecar killed mid-operation leaves git's `*.lock` files behind, and
//! every later git operation in its worktree then fails. The sidecar holds
//! the exclusive liveness `flock` of its worker id (see [`crate::orphans`]),
//! so nothing of *another sidecar* writes inside its worktree. Rules, applied
//! by [`clear_stale`] before the sidecar starts its own git work for an
//! attempt (so no git operation of its own is in flight):
//!
//! - Only these files are looked at: the top-level `*.lock` files of the
//!   worktree's admin dir `<common>/worktrees/<worker-id>/` (`index.lock`,
//!   `HEAD.lock`, ...), the parking ref's lock
//!   `refs/heads/swarm-workspaces/<worker-id>.lock`, and the lock of the
//!   task branch the sidecar was assigned (`refs/heads/<branch>.lock`).
//!   Shared files (`packed-refs.lock`, the main worktree's `index.lock`,
//!   other refs) are never touched.
//! - A lock that a live process has open (found through `/proc/*/fd`) is
//!   never broken: git keeps a lock file open while it holds it. The sidecar
//!   waits a little for it to go away and otherwise fails with the holder's
//!   pid in the message.
//! - Where `/proc` cannot be read, only a lock older than [`MIN_AGE`] is
//!   broken. Processes of other users whose `fd/` is unreadable are not
//!   seen: the worktree is the sidecar's user's alone.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::{Flock, FlockArg};

/// Without `/proc`, a lock younger than this may belong to a live process.
pub const MIN_AGE: Duration = Duration::from_secs(10);
/// How long to wait for a lock that a live process holds open.
const HELD_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("git lock {path} is held by live process {pid}; not breaking it")]
    Held { path: PathBuf, pid: u32 },
    #[error("git lock {path} is younger than {}s and /proc cannot tell who holds it; not breaking it", MIN_AGE.as_secs())]
    Young { path: PathBuf },
    #[error("removing stale git lock {path}: {source}")]
    Remove { path: PathBuf, source: std::io::Error },
    #[error("worktree creation lock {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("worktree creation lock {path} still held after {}s ({holder}); another sidecar is stuck creating its worktree", CREATION_WAIT.as_secs())]
    CreateBusy { path: PathBuf, holder: String },
}

/// Longest wait for another sidecar's worktree creation (a creation takes
/// well under a second; a fleet starting together queues for a few). A
/// holder stuck longer (stopped, hung on I/O) must not block every other
/// sidecar forever: the attempt fails as an infrastructure failure instead,
/// which spends no retry.
pub const CREATION_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The lock files of `worker_id`'s worktree and refs (see the module rules).
pub fn candidates(common_dir: &Path, worker_id: &str, branch: Option<&str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let admin = common_dir.join("worktrees").join(worker_id);
    if let Ok(dir) = std::fs::read_dir(&admin) {
        for e in dir.flatten() {
            let p = e.path();
            if p.is_file() && p.extension().is_some_and(|x| x == "lock") {
                out.push(p);
            }
        }
    }
    let heads = common_dir.join("refs").join("heads");
    out.push(heads.join("swarm-workspaces").join(format!("{worker_id}.lock")));
    if let Some(b) = branch {
        out.push(heads.join(format!("{b}.lock")));
    }
    out.retain(|p| p.is_file());
    out.sort();
    out
}

/// Removes the stale lock files of `worker_id` (call only while holding its
/// liveness lock, before any git operation of its own). Returns the removed
/// paths; fails on a lock that is not stale.
pub fn clear_stale(
    common_dir: &Path,
    worker_id: &str,
    branch: Option<&str>,
) -> Result<Vec<PathBuf>, LockError> {
    let mut removed = Vec::new();
    for path in candidates(common_dir, worker_id, branch) {
        let deadline = Instant::now() + HELD_WAIT;
        loop {
            if !path.exists() {
                break;
            }
            match holder(&path) {
                Holder::Pid(pid) if Instant::now() >= deadline => return Err(LockError::Held { path, pid }),
                Holder::Pid(_) => std::thread::sleep(Duration::from_millis(50)),
                Holder::Unknown if age(&path).is_some_and(|a| a < MIN_AGE) => {
                    return Err(LockError::Young { path });
                }
                Holder::Unknown | Holder::Nobody => {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {
                            tracing::warn!(path = %path.display(), "removed a stale git lock (left by a crashed process)");
                            removed.push(path.clone());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(source) => return Err(LockError::Remove { path, source }),
                    }
                    break;
                }
            }
        }
    }
    Ok(removed)
}

enum Holder {
    Nobody,
    Pid(u32),
    /// `/proc` could not be read.
    Unknown,
}

fn age(path: &Path) -> Option<Duration> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    SystemTime::now().duration_since(m).ok()
}

/// Which live process, if any, has `path` open.
fn holder(path: &Path) -> Holder {
    let Ok(target) = path.canonicalize() else { return Holder::Nobody };
    let Ok(procs) = std::fs::read_dir("/proc") else { return Holder::Unknown };
    let mut readable = false;
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        readable = true;
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l == target) {
                return Holder::Pid(pid);
            }
        }
    }
    if readable { Holder::Nobody } else { Holder::Unknown }
}

/// The repository-wide lock held while a worktree is created or recreated:
/// libgit2's `worktree add` races on `.git/worktrees/` when sidecars start
/// together. Waits up to [`CREATION_WAIT`] for it; released on drop (or
/// process death).
pub fn creation_lock(workspaces: &Path) -> Result<Flock<File>, LockError> {
    creation_lock_within(workspaces, CREATION_WAIT)
}

fn creation_lock_within(workspaces: &Path, wait: std::time::Duration) -> Result<Flock<File>, LockError> {
    let path = workspaces.join(".create.lock");
    let err = |source| LockError::Create { path: path.clone(), source };
    std::fs::create_dir_all(workspaces).map_err(err)?;
    let deadline = std::time::Instant::now() + wait;
    let mut f = OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(err)?;
    loop {
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < deadline => {
                f = back;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = match holder(&path) {
                    Holder::Pid(pid) => format!("held by pid {pid}"),
                    _ => "holder unknown".to_string(),
                };
                return Err(LockError::CreateBusy { path, holder });
            }
            Err((_, errno)) => return Err(err(std::io::Error::from(errno))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_creation_lock_held_too_long_is_an_error_naming_its_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = creation_lock_within(dir.path(), std::time::Duration::from_millis(10)).expect("free");
        let e = creation_lock_within(dir.path(), std::time::Duration::from_millis(200)).expect_err("busy");
        assert!(matches!(e, LockError::CreateBusy { .. }), "{e}");
        assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        creation_lock_within(dir.path(), std::time::Duration::from_millis(200)).expect("free again");
    }
}
