//! Moving worktrees, with what lies beside them, from one workspaces
//! directory to another: how local mode brings the worktrees an older
//! swarmctl kept in the checkout's `.git/workspaces/` to its own directory
//! outside the checkout.
//!
//! Per worker id, under its liveness lock in both places (a sidecar still
//! running there is an error, not a race): the journal, the worktree and
//! the attempt's private `<id>.gitdir` and `<id>.tmp` are renamed; git's
//! admin file `worktrees/<id>/gitdir` and the private git dir's
//! `core.worktree` are pointed at the new place. Across file systems a
//! worktree with nothing uncommitted and no attempt in hand is dropped
//! instead (the sidecar makes it afresh at its first task, as for a new
//! worker); one with changes is copied, then removed. Uncommitted work is
//! never deleted.

use std::path::{Path, PathBuf};

use git2::{Repository, StatusOptions, WorktreePruneOptions};
use nix::fcntl::{Flock, FlockArg};

use super::{Workspaces, WorktreeError};
use crate::journal::Journal;
use crate::orphans::{journal_path, lock_path};

/// What became of one worker's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// Renamed into the new directory, as it was.
    Renamed,
    /// Copied across file systems (it held uncommitted work or an
    /// attempt), then removed from the old place.
    Copied,
    /// Clean, on another file system: dropped, made afresh at first use.
    Dropped,
    /// Left where it was, with the reason.
    Kept(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RelocateError {
    #[error("{lock}: a sidecar with worker id {id} still runs there (an older swarmctl?); stop it first")]
    InUse { id: String, lock: PathBuf },
    #[error(
        "worker {id}'s attempt still runs under supervisor pid {pid} in {worktree}; let it finish or kill it first"
    )]
    WorkerRunning { id: String, pid: u32, worktree: PathBuf },
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError + '_ {
    move |source| WorktreeError::Io { path: path.to_path_buf(), source }
}

/// Private files of a worker beside its worktree, by suffix.
const BESIDE: &[&str] = &[".journal", ".lock", ".gitdir", ".tmp"];

/// Moves every worker whose id `owned` accepts from the directory `from`
/// to `to`, then removes `from` when only disposable files are left in it
/// (the creation lock, verifiers' scratch trees). Returns each worker's fate.
pub fn relocate_all(
    from: &Path,
    to: &Workspaces,
    owned: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Moved)>, RelocateError> {
    let Ok(entries) = std::fs::read_dir(from) else { return Ok(Vec::new()) };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .map(|n| BESIDE.iter().find_map(|s| n.strip_suffix(s)).map_or(n.clone(), str::to_string))
        .filter(|id| swarm_core::names::check_id(id).is_ok() && owned(id))
        .collect();
    ids.sort();
    ids.dedup();
    let mut out = Vec::new();
    for id in ids {
        let moved = relocate(from, to, &id)?;
        tracing::info!(worker = %id, from = %from.display(), to = %to.dir.display(), ?moved, "moved a worktree");
        out.push((id, moved));
    }
    remove_if_disposable(from);
    Ok(out)
}

/// The old directory goes once nothing in it is anyone's.
fn remove_if_disposable(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let names: Vec<String> = entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    if names.iter().all(|n| n == ".create.lock" || n.starts_with(".verify-")) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn lock(path: &Path, id: &str) -> Result<Flock<std::fs::File>, RelocateError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let f =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(io(path))?;
    Flock::lock(f, FlockArg::LockExclusiveNonblock)
        .map_err(|_| RelocateError::InUse { id: id.to_string(), lock: path.to_path_buf() })
}

/// Moves worker `id`'s worktree and private files from `from` to `to`.
pub fn relocate(from: &Path, to: &Workspaces, id: &str) -> Result<Moved, RelocateError> {
    let _span = tracing::info_span!("worktree.relocate", worker = id).entered();
    let old_lock = lock_path(from, id);
    let _held_old = lock(&old_lock, id)?;
    let _held_new = lock(&lock_path(&to.dir, id), id)?;
    let old_wt = from.join(id);
    let new_wt = to.worktree(id)?;
    let old_journal = journal_path(from, id);
    // A journal that cannot be read may hold an attempt: keep its work.
    let (busy, pid) = match old_journal.exists().then(|| Journal::open(&old_journal)) {
        None => (false, None),
        Some(Err(_)) => (true, None),
        Some(Ok(j)) => (j.in_hand().is_some(), j.in_hand().and_then(|h| h.pid)),
    };
    if let Some(pid) = pid.filter(|p| supervisor_alive(*p)) {
        return Err(RelocateError::WorkerRunning { id: id.to_string(), pid, worktree: old_wt });
    }
    let new_journal = journal_path(&to.dir, id);
    if new_wt.exists() || new_journal.exists() {
        let why = format!("{} already has worker {id}'s worktree or journal", to.dir.display());
        return Ok(Moved::Kept(why));
    }
    let moved = if std::fs::symlink_metadata(&old_wt).is_ok() {
        move_worktree(to, id, &old_wt, &new_wt, busy)?
    } else {
        Moved::Renamed
    };
    if moved != Moved::Dropped {
        for suffix in [".gitdir", ".tmp"] {
            let (a, b) = (from.join(format!("{id}{suffix}")), to.dir.join(format!("{id}{suffix}")));
            if std::fs::symlink_metadata(&a).is_ok() {
                move_path(&a, &b)?;
            }
        }
        let private = crate::worker_git::dir_of(&new_wt);
        if private.join("config").is_file() {
            let mut config = git2::Config::open(&private.join("config")).map_err(WorktreeError::from)?;
            config.set_str("core.worktree", &new_wt.to_string_lossy()).map_err(WorktreeError::from)?;
        }
    } else {
        for suffix in [".gitdir", ".tmp"] {
            remove_path(&from.join(format!("{id}{suffix}")))?;
        }
    }
    if std::fs::symlink_metadata(&old_journal).is_ok() {
        move_path(&old_journal, &new_journal)?;
    }
    std::fs::remove_file(&old_lock).map_err(io(&old_lock))?;
    Ok(moved)
}

/// Renames the worktree (copies it, or drops a clean one, across file
/// systems) and registers it with git at its new place.
fn move_worktree(
    to: &Workspaces,
    id: &str,
    old_wt: &Path,
    new_wt: &Path,
    busy: bool,
) -> Result<Moved, RelocateError> {
    let moved = match std::fs::rename(old_wt, new_wt) {
        Ok(()) => Moved::Renamed,
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            if !busy && is_clean(old_wt) {
                drop_worktree(to, id, old_wt)?;
                return Ok(Moved::Dropped);
            }
            copy_tree(old_wt, new_wt)?;
            remove_path(old_wt)?;
            Moved::Copied
        }
        Err(e) => return Err(io(old_wt)(e).into()),
    };
    let admin = to.common.join("worktrees").join(id);
    if admin.is_dir() {
        let gitdir = admin.join("gitdir");
        std::fs::write(&gitdir, format!("{}\n", new_wt.join(".git").display())).map_err(io(&gitdir))?;
    }
    super::repair_git_file(&to.common, new_wt)?;
    Ok(moved)
}

/// Nothing uncommitted (ignored files, `.swarm/` among them, aside).
fn is_clean(wt: &Path) -> bool {
    let Ok(repo) = Repository::open(wt) else { return false };
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false);
    repo.statuses(Some(&mut opts)).is_ok_and(|s| s.is_empty())
}

/// Removes a clean worktree and its registration; its branches stay.
fn drop_worktree(to: &Workspaces, id: &str, old_wt: &Path) -> Result<(), RelocateError> {
    let repo = Repository::open(&to.repo).map_err(WorktreeError::from)?;
    if let Ok(wt) = repo.find_worktree(id) {
        let mut opts = WorktreePruneOptions::new();
        opts.valid(true).locked(true).working_tree(true);
        wt.prune(Some(&mut opts)).map_err(WorktreeError::from)?;
    }
    let admin = to.common.join("worktrees").join(id);
    remove_path(&admin)?;
    remove_path(old_wt)?;
    Ok(())
}

/// Whether `pid` is a live worker supervisor (not a reused pid).
fn supervisor_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"__supervise"))
}

/// Renames `a` to `b`, copying across file systems.
fn move_path(a: &Path, b: &Path) -> Result<(), WorktreeError> {
    match std::fs::rename(a, b) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            copy_tree(a, b)?;
            remove_path(a)
        }
        Err(e) => Err(io(a)(e)),
    }
}

fn remove_path(p: &Path) -> Result<(), WorktreeError> {
    let r = match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(_) => Ok(()),
    };
    r.map_err(io(p))
}

/// Copies `a` to `b`: directories with their modes, files with their
/// modes, symbolic links as links (never followed).
fn copy_tree(a: &Path, b: &Path) -> Result<(), WorktreeError> {
    let meta = std::fs::symlink_metadata(a).map_err(io(a))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(a).map_err(io(a))?;
        std::os::unix::fs::symlink(target, b).map_err(io(b))
    } else if meta.is_dir() {
        std::fs::create_dir(b).map_err(io(b))?;
        for entry in std::fs::read_dir(a).map_err(io(a))? {
            let entry = entry.map_err(io(a))?;
            copy_tree(&entry.path(), &b.join(entry.file_name()))?;
        }
        std::fs::set_permissions(b, meta.permissions()).map_err(io(b))
    } else {
        std::fs::copy(a, b).map(|_| ()).map_err(io(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A repository with one commit, and its head.
    fn repo(dir: &Path) -> (PathBuf, String) {
        let repo = dir.join("checkout");
        std::fs::create_dir_all(&repo).expect("mkdir");
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("a.txt"), "a\n").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base"]);
        let head = git(&repo, &["rev-parse", "HEAD"]);
        (repo, head)
    }

    /// An old-style worktree `id` in `.git/workspaces/` with its journal
    /// and private git directory, holding `dirty` uncommitted when given.
    fn old_worktree(repo: &Path, head: &str, id: &str, dirty: Option<&str>) -> Workspaces {
        let old = Workspaces::in_repo(repo).expect("old");
        let p = super::super::prepare(&old, id, &format!("swarm/s/{id}"), head).expect("prepare");
        crate::worker_git::prepare(&p.path).expect("private git");
        std::fs::write(journal_path(&old.dir, id), "").expect("journal");
        if let Some(text) = dirty {
            std::fs::write(p.path.join("wip.txt"), text).expect("dirty");
        }
        old
    }

    #[test]
    fn uncommitted_work_moves_with_its_journal_and_git_finds_the_worktree_at_its_new_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (repo, head) = repo(dir.path());
        let old = old_worktree(&repo, &head, "local-1", Some("not committed\n"));
        old_worktree(&repo, &head, "w9", None);
        let new = Workspaces::new(&repo, Some(&dir.path().join("state/workspaces"))).expect("new");

        let moved = relocate_all(&old.dir, &new, |id| id.starts_with("local-")).expect("relocate");
        assert_eq!(moved, vec![("local-1".to_string(), Moved::Renamed)]);
        let wt = new.dir.join("local-1");
        assert_eq!(std::fs::read_to_string(wt.join("wip.txt")).expect("kept"), "not committed\n");
        assert!(new.dir.join("local-1.journal").is_file() && new.dir.join("local-1.gitdir").is_dir());
        assert!(!old.dir.join("local-1").exists() && !old.dir.join("local-1.lock").exists());
        assert!(old.dir.join("w9").is_dir(), "another sidecar's worktree stays");
        // git itself finds it there, and sees the work as uncommitted.
        let list = git(&repo, &["worktree", "list", "--porcelain"]);
        assert!(list.contains(&format!("worktree {}", wt.display())), "{list}");
        assert_eq!(git(&wt, &["status", "--porcelain"]), "?? wip.txt");
        let private = crate::worker_git::dir_of(&wt);
        let named = git2::Config::open(&private.join("config")).expect("config").get_path("core.worktree");
        assert_eq!(named.expect("core.worktree"), wt);
        // The sidecar reuses it rather than making another.
        let again = super::super::prepare(&new, "local-1", "swarm/s/next", &head).expect("prepare");
        assert!(!again.created && again.path == wt, "{again:?}");
    }

    #[test]
    fn the_old_directory_goes_once_nothing_in_it_is_anyones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (repo, head) = repo(dir.path());
        let old = old_worktree(&repo, &head, "local-1", None);
        old_worktree(&repo, &head, "local-2", None);
        std::fs::create_dir_all(old.dir.join(".verify-local-1-3")).expect("scratch");
        let new = Workspaces::new(&repo, Some(&dir.path().join("state"))).expect("new");
        let moved = relocate_all(&old.dir, &new, |id| id.starts_with("local-")).expect("relocate");
        assert_eq!(moved.len(), 2, "{moved:?}");
        assert!(!old.dir.exists(), "{} is removed", old.dir.display());
        assert!(repo.join(".git").is_dir());
    }

    #[test]
    fn a_sidecar_still_running_in_the_old_place_stops_the_move() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (repo, head) = repo(dir.path());
        let old = old_worktree(&repo, &head, "local-1", Some("wip\n"));
        let _running = crate::orphans::take_lock(&old.dir, "local-1").expect("lock");
        let new = Workspaces::new(&repo, Some(&dir.path().join("state"))).expect("new");
        let e = relocate_all(&old.dir, &new, |_| true).expect_err("in use");
        assert!(e.to_string().contains("local-1.lock") && e.to_string().contains("still runs"), "{e}");
        assert!(old.dir.join("local-1/wip.txt").is_file(), "nothing moved");
    }

    #[test]
    fn a_worktree_already_at_the_new_place_is_not_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (repo, head) = repo(dir.path());
        let old = old_worktree(&repo, &head, "local-1", Some("old\n"));
        let new = Workspaces::new(&repo, Some(&dir.path().join("state"))).expect("new");
        std::fs::write(journal_path(&new.dir, "local-1"), "").expect("journal");
        let moved = relocate_all(&old.dir, &new, |_| true).expect("relocate");
        assert!(matches!(&moved[0].1, Moved::Kept(why) if why.contains("already has")), "{moved:?}");
        assert!(old.dir.join("local-1/wip.txt").is_file());
    }

    /// Across file systems (`/dev/shm` is a tmpfs where there is one): a
    /// clean worktree is dropped, one with uncommitted work copied.
    #[test]
    fn across_file_systems_a_clean_worktree_is_dropped_and_a_dirty_one_copied() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let shm = Path::new("/dev/shm");
        let other =
            shm.metadata().is_ok_and(|m| m.dev() != dir.path().metadata().map(|d| d.dev()).unwrap_or(0));
        let Some(far) = other.then(|| tempfile::tempdir_in(shm).ok()).flatten() else {
            eprintln!(
                "skipped: across_file_systems_a_clean_worktree_is_dropped_and_a_dirty_one_copied (no second file system at /dev/shm)"
            );
            return;
        };
        let (repo, head) = repo(dir.path());
        let old = old_worktree(&repo, &head, "local-1", Some("keep me\n"));
        old_worktree(&repo, &head, "local-2", None);
        std::os::unix::fs::symlink("a.txt", old.dir.join("local-1/link")).expect("symlink");
        let new = Workspaces::new(&repo, Some(far.path())).expect("new");
        let moved = relocate_all(&old.dir, &new, |_| true).expect("relocate");
        assert_eq!(
            moved,
            vec![("local-1".to_string(), Moved::Copied), ("local-2".to_string(), Moved::Dropped)]
        );
        let wt = new.dir.join("local-1");
        assert_eq!(std::fs::read_to_string(wt.join("wip.txt")).expect("copied"), "keep me\n");
        assert_eq!(std::fs::read_link(wt.join("link")).expect("a link"), Path::new("a.txt"));
        assert_eq!(git(&wt, &["status", "--porcelain"]), "?? link\n?? wip.txt");
        assert!(!new.dir.join("local-2").exists() && !old.dir.exists());
        let list = git(&repo, &["worktree", "list", "--porcelain"]);
        assert!(!list.contains("local-2"), "its registration is gone: {list}");
        let made = super::super::prepare(&new, "local-2", "swarm/s/again", &head).expect("made afresh");
        assert!(made.created);
    }
}
