//! The worker's own git metadata, so that nothing git shares is writable
//! from the sandbox.
//!
//! A linked worktree's `git commit` writes the shared object store and the
//! shared refs, and reads the shared config (where `core.hooksPath` names
//! code every git process runs). Instead the worker gets a private
//! repository, `<workspaces>/<worker-id>.gitdir/`, through `GIT_DIR` and
//! `GIT_WORK_TREE`: its objects borrow the shared store read-only through
//! `objects/info/alternates`, its HEAD names the task branch at the commit
//! the worktree is on, and its index starts as the worktree's. `git status`,
//! `diff`, `log` and `commit` work as usual; what the worker commits lands
//! in the private store only.
//!
//! After the worker, [`import`] moves its commits into the repository the
//! sidecar owns, as a remote sidecar's arrive at the controller: as a pack,
//! indexed and checked before anything refers to it, and only when they
//! descend from where the worktree stood. The sidecar's own commit of what
//! is left uncommitted then goes on top, so the result holds the worktree
//! exactly as the worker left it.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::worktree::{SWARM_DIR, WorktreeError};

/// Most bytes of commits imported from one attempt's private repository.
const MAX_IMPORT_BYTES: usize = 1 << 30;

/// The private git directory of the worktree at `wt`.
pub fn dir_of(wt: &Path) -> PathBuf {
    let name = wt.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    wt.with_file_name(format!("{name}.gitdir"))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError + '_ {
    move |source| WorktreeError::Io { path: path.to_path_buf(), source }
}

/// Makes the worker's private repository afresh for the worktree at `wt`
/// (whose git metadata is the sidecar's) and returns its path.
pub fn prepare(wt: &Path) -> Result<PathBuf, WorktreeError> {
    let _span = tracing::info_span!("worker_git.prepare", worktree = %wt.display()).entered();
    let repo = Repository::open(wt)?;
    let head = repo.head()?;
    let commit = head.peel_to_commit()?;
    let branch = current_branch(&repo, &head);
    let dir = dir_of(wt);
    if std::fs::symlink_metadata(&dir).is_ok() {
        remove(&dir)?;
    }
    for sub in ["objects/info", "refs/heads", "info"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(io(&dir))?;
    }
    let common_objects = repo.commondir().join("objects");
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(io(&path))
    };
    write("objects/info/alternates", format!("{}\n", common_objects.display()))?;
    write("info/exclude", format!("/{SWARM_DIR}/\n"))?;
    write(
        "config",
        format!("[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n", wt.display()),
    )?;
    match &branch {
        Some(b) => {
            write("HEAD", format!("ref: refs/heads/{b}\n"))?;
            let private = Repository::open_bare(&dir)?;
            private.reference(
                &format!("refs/heads/{b}"),
                commit.id(),
                true,
                "swarm: the worktree's commit",
            )?;
        }
        None => write("HEAD", format!("{}\n", commit.id()))?,
    }
    write_index(&repo, &dir.join("index"), commit.tree_id())?;
    Ok(dir)
}

/// The branch the worktree works on: its HEAD's, or the one its detached
/// HEAD publishes to.
fn current_branch(repo: &Repository, head: &git2::Reference<'_>) -> Option<String> {
    if let Some(name) = head.name().and_then(|n| n.strip_prefix("refs/heads/")) {
        return Some(name.to_string());
    }
    let published = std::fs::read_to_string(repo.path().join("swarm-branch")).ok()?;
    let name = published.trim();
    swarm_core::names::check_branch(name).ok().map(|_| name.to_string())
}

/// The worktree's index when it holds exactly `tree` (so the worker's first
/// `git status` reuses its stat data), else one made from the tree.
fn write_index(repo: &Repository, path: &Path, tree: Oid) -> Result<(), WorktreeError> {
    let own = repo.path().join("index");
    if std::fs::copy(&own, path).is_ok() {
        let mut copy = git2::Index::open(path)?;
        if copy.write_tree_to(repo).ok() == Some(tree) {
            return Ok(());
        }
    }
    let mut index = git2::Index::open(path)?;
    index.clear()?;
    index.read_tree(&repo.find_tree(tree)?)?;
    index.write()?;
    Ok(())
}

fn remove(path: &Path) -> Result<(), WorktreeError> {
    let meta = std::fs::symlink_metadata(path).map_err(io(path))?;
    let r = if meta.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    r.map_err(io(path))
}

/// Removes the private repository once the attempt is over.
pub fn discard(wt: &Path) {
    let dir = dir_of(wt);
    if std::fs::symlink_metadata(&dir).is_ok()
        && let Err(e) = remove(&dir)
    {
        tracing::warn!(dir = %dir.display(), error = %e, "could not remove the worker's git directory");
    }
}

/// Before the unconfined sidecar reads the worker's object store: its
/// alternates name the shared store again (the worker may have pointed them
/// at another repository on this machine, whose objects the pack would
/// otherwise carry into ours), and no entry of the store is a link (which
/// would have the sidecar read a file outside it as an object).
fn confine_objects(dir: &Path, shared: &Path) -> Result<(), ImportError> {
    let refuse = |what: String| ImportError::Unreadable(what);
    let alternates = dir.join("objects/info/alternates");
    crate::worker_files::write(&alternates, format!("{}\n", shared.display()).as_bytes())
        .map_err(|e| refuse(format!("{}: {e}", alternates.display())))?;
    let mut pending = vec![dir.join("objects")];
    let mut seen = 0usize;
    while let Some(d) = pending.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| refuse(format!("{}: {e}", d.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| refuse(format!("{}: {e}", d.display())))?;
            let kind = entry.file_type().map_err(|e| refuse(format!("{}: {e}", entry.path().display())))?;
            seen += 1;
            if kind.is_symlink() || seen > MAX_OBJECT_ENTRIES {
                return Err(refuse(format!(
                    "{} is a link, or the store is too large",
                    entry.path().display()
                )));
            }
            if kind.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Most entries in a worker's object store (loose objects, packs, dirs).
const MAX_OBJECT_ENTRIES: usize = 1_000_000;

/// Why the worker's commits were left out of the result (its worktree's
/// content is committed all the same).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("its git directory cannot be read: {0}")]
    Unreadable(String),
    #[error("its HEAD {head} does not descend from the worktree's commit {start}")]
    Unrelated { head: Oid, start: Oid },
    #[error("its commits could not be moved into the repository: {0}")]
    Pack(String),
}

/// Moves the worker's commits into the sidecar's repository and the
/// worktree's HEAD to the newest: Ok(Some(commit)) when it committed,
/// Ok(None) when it did not.
pub fn import(wt: &Path) -> Result<Option<Oid>, ImportError> {
    let _span = tracing::info_span!("worker_git.import", worktree = %wt.display()).entered();
    let dir = dir_of(wt);
    let unreadable = |e: git2::Error| ImportError::Unreadable(e.message().to_string());
    let repo = Repository::open(wt).map_err(unreadable)?;
    let start = repo.head().and_then(|h| h.peel_to_commit()).map_err(unreadable)?.id();
    if std::fs::symlink_metadata(&dir).is_err() {
        return Ok(None);
    }
    confine_objects(&dir, &repo.commondir().join("objects"))?;
    let private = Repository::open_bare(&dir).map_err(unreadable)?;
    let head = private.head().and_then(|h| h.peel_to_commit()).map_err(unreadable)?.id();
    if head == start {
        return Ok(None);
    }
    if !private.graph_descendant_of(head, start).map_err(unreadable)? {
        return Err(ImportError::Unrelated { head, start });
    }
    let pack_error = |e: swarm_git::GitError| ImportError::Pack(e.to_string());
    let pack = swarm_git::build_pack(&dir, &head.to_string(), &[start.to_string()]).map_err(pack_error)?;
    swarm_git::receive_pack(repo.commondir(), &pack, &head.to_string(), MAX_IMPORT_BYTES)
        .map_err(pack_error)?;
    let moved = match repo.head().map_err(unreadable)?.name() {
        Some(name) if name.starts_with("refs/heads/") => {
            repo.reference(name, head, true, "swarm-sidecar: the worker's commits").map(|_| ())
        }
        _ => repo.set_head_detached(head),
    };
    moved.map_err(unreadable)?;
    Ok(Some(head))
}

#[cfg(test)]
mod tests {
    use swarm_tests::TempRepo;

    use super::*;

    /// A repository with a linked worktree at `.git/workspaces/w1` on the
    /// task branch.
    fn worktree() -> (TempRepo, PathBuf) {
        let repo = TempRepo::with_files(&[("a.txt", "a\n")]);
        let wt = repo.path().join(".git/workspaces/w1");
        repo.git(&["worktree", "add", "-q", "-b", "swarm/s/t", wt.to_str().expect("utf8")]);
        (repo, wt)
    }

    #[test]
    fn the_workers_commits_come_in_and_the_worktree_head_moves_to_them() {
        let (repo, wt) = worktree();
        let private = prepare(&wt).expect("prepared");
        let base = repo.git(&["rev-parse", "swarm/s/t"]);
        let (git_dir, work_tree) = (private.to_str().expect("utf8"), wt.to_str().expect("utf8"));
        let as_worker = |args: &[&str]| {
            let mut all = vec![
                "--git-dir",
                git_dir,
                "--work-tree",
                work_tree,
                "-c",
                "user.name=w",
                "-c",
                "user.email=w@x",
            ];
            all.extend_from_slice(args);
            repo.git(&all)
        };
        assert_eq!(as_worker(&["status", "--porcelain"]), "", "the private index matches the worktree");
        std::fs::write(wt.join("b.txt"), "b\n").expect("write");
        as_worker(&["add", "b.txt"]);
        as_worker(&["commit", "-qm", "worker's own"]);
        let worker_head = as_worker(&["rev-parse", "HEAD"]);
        assert_eq!(repo.git(&["rev-parse", "swarm/s/t"]), base, "nothing shared moved while the worker ran");
        let imported = import(&wt).expect("imported").expect("a commit");
        assert_eq!(imported.to_string(), worker_head);
        assert_eq!(repo.git(&["rev-parse", "swarm/s/t"]), worker_head);
        assert_eq!(repo.git(&["cat-file", "-p", &format!("{worker_head}:b.txt")]), "b");
    }

    #[test]
    fn alternates_pointed_elsewhere_and_linked_objects_are_not_followed() {
        let (_repo, wt) = worktree();
        let private = prepare(&wt).expect("prepared");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        std::fs::write(private.join("objects/info/alternates"), format!("{}\n", elsewhere.path().display()))
            .expect("write");
        assert_eq!(import(&wt).expect("nothing committed"), None);
        let shared = wt.parent().and_then(Path::parent).expect("common").join("objects");
        let alternates = std::fs::read_to_string(private.join("objects/info/alternates")).expect("read");
        assert_eq!(alternates.trim(), shared.display().to_string(), "pointed back at the shared store");
        std::fs::create_dir_all(private.join("objects/ab")).expect("mkdir");
        std::os::unix::fs::symlink("/etc/passwd", private.join("objects/ab/cdef")).expect("link");
        let e = import(&wt).expect_err("a link in the store");
        assert!(e.to_string().contains("is a link"), "{e}");
    }
}
