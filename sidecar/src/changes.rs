//! Which paths of the worktree changed, without walking it.
//!
//! Moving the worktree to a task and committing what the worker left both
//! used to walk the whole tree (a `stat` of every file, three times per
//! attempt), so an attempt's cost grew with the repository. A [`Tracker`]
//! holds an inotify watch on every directory of the worktree (made once,
//! by one walk, after a full checkout) and collects the paths anything
//! created, wrote, deleted, moved or chmodded since it was last asked. The
//! attempt then stages only those paths and moves to the next base by
//! checking out only the paths that differ between the two commits.
//!
//! Whenever the tracker cannot vouch for its answer — the kernel's queue
//! overflowed, a watch could not be added, a nested `.git` appeared, a
//! `.gitignore` changed, the worktree itself moved — [`Tracker::take`] returns `None` and the caller
//! does the full walk, as before. `.swarm/` is the sidecar's and is never
//! reported. (A file changed through a shared writable `mmap` raises no
//! inotify event; workers write files with `write`.)
//! All functions here block; call them from a blocking thread.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

use git2::Repository;
use git2::build::CheckoutBuilder;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use swarm_core::names::{check_branch, check_commit};

use crate::tracked_index::{self, IndexMemo};
use crate::tree_diff::{BLOB, BLOB_EXECUTABLE, FileDelta, LINK, diff_trees};
use crate::worktree::{self, SWARM_DIR, WorktreeError};

/// The file whose rules decide which untracked files a commit takes.
const IGNORE_FILE: &str = ".gitignore";

/// Most directories watched; a larger tree is walked instead.
const MAX_WATCHES: usize = 100_000;

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_DONT_FOLLOW
        | AddWatchFlags::IN_ONLYDIR
}

/// The sidecar's tracker of its worktree, kept across attempts; `None`
/// until a full checkout starts one (and again once it is lost).
pub type SharedTracker = std::sync::Arc<std::sync::Mutex<Option<Tracker>>>;

pub struct Tracker {
    inotify: Inotify,
    root: PathBuf,
    /// Watched directories, relative to the root ("" is the root).
    dirs: HashMap<WatchDescriptor, PathBuf>,
    dirty: BTreeSet<PathBuf>,
    /// Set once the tracker can no longer vouch for its answer.
    lost: bool,
    /// The worktree's repository, kept open between attempts so that its
    /// index stays parsed in memory: libgit2 re-reads the index file only
    /// when it changed on disk (a worker's own `git add`), and reading
    /// 10,000 entries twice per attempt was a cost that grew with the tree.
    repo: Option<Repository>,
    /// What the sidecar knows of that index's file.
    memo: IndexMemo,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("root", &self.root)
            .field("dirs", &self.dirs.len())
            .field("dirty", &self.dirty.len())
            .field("lost", &self.lost)
            .finish()
    }
}

/// Whether a relative path is the sidecar's own (`.swarm/...`).
fn is_swarm_dir(rel: &Path) -> bool {
    rel.components().next().is_some_and(|c| c.as_os_str() == OsStr::new(SWARM_DIR))
}

fn has_git_component(rel: &Path) -> bool {
    rel.components().any(|c| matches!(c, Component::Normal(n) if n == OsStr::new(".git")))
}

impl Tracker {
    /// Watches every directory under `root` except `.swarm/` (one walk).
    pub fn start(root: &Path) -> std::io::Result<Tracker> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let mut t = Tracker {
            inotify,
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            dirty: BTreeSet::new(),
            lost: false,
            repo: Repository::open(root).ok(),
            memo: IndexMemo::default(),
        };
        t.watch_tree(Path::new(""), false)?;
        // Whatever happened while the watches were being added is unknown.
        t.dirty.clear();
        Ok(t)
    }

    /// Watches `rel` and every directory below it; with `mark`, every path
    /// found is dirty (a directory that appeared: its files were written
    /// before its watch existed).
    fn watch_tree(&mut self, rel: &Path, mark: bool) -> std::io::Result<()> {
        let mut stack = vec![rel.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if self.dirs.len() >= MAX_WATCHES {
                return Err(std::io::Error::other("too many directories to watch"));
            }
            let full = self.root.join(&dir);
            let wd = self.inotify.add_watch(&full, mask()).map_err(std::io::Error::from)?;
            self.dirs.insert(wd, dir.clone());
            let entries = match std::fs::read_dir(&full) {
                Ok(e) => e,
                // Gone again before it could be read: its removal is an event.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let child = dir.join(entry.file_name());
                if child.as_os_str() == OsStr::new(".git") || is_swarm_dir(&child) {
                    continue;
                }
                if mark {
                    self.dirty.insert(child.clone());
                }
                if entry.file_type()?.is_dir() {
                    if entry.file_name() == ".git" {
                        // A nested repository: staging it is add_all's business.
                        self.lost = true;
                        continue;
                    }
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    /// The worktree's repository, open since the tracker started.
    pub fn repo(&self) -> Option<&Repository> {
        self.repo.as_ref()
    }

    /// The worktree's repository and what is known of its index file.
    pub fn repo_and_memo(&mut self) -> Option<(&Repository, &mut IndexMemo)> {
        self.repo.as_ref().map(|r| (r, &mut self.memo))
    }

    /// The paths changed since the last call (files and directories,
    /// relative to the root), or `None` when the tracker lost track: walk
    /// the worktree instead. A lost tracker stays lost.
    pub fn take(&mut self) -> Option<BTreeSet<PathBuf>> {
        self.drain();
        if self.lost {
            return None;
        }
        Some(std::mem::take(&mut self.dirty))
    }

    fn drain(&mut self) {
        // Bounded: the queue holds what was written before this call, and a
        // burst that keeps it full makes the tracker lost.
        for _ in 0..10_000 {
            if self.lost {
                return;
            }
            let events = match self.inotify.read_events() {
                Ok(e) if !e.is_empty() => e,
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => return,
                Err(_) => {
                    self.lost = true;
                    return;
                }
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.lost = true;
                    return;
                }
                if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    self.dirs.remove(&ev.wd);
                    continue;
                }
                let Some(dir) = self.dirs.get(&ev.wd).cloned() else { continue };
                let Some(name) = ev.name else {
                    // The watched directory itself was deleted or moved.
                    if dir.as_os_str().is_empty() {
                        self.lost = true;
                    } else if ev.mask.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
                    {
                        self.dirty.insert(dir);
                    }
                    continue;
                };
                let rel = dir.join(&name);
                if is_swarm_dir(&rel) {
                    continue;
                }
                if has_git_component(&rel) {
                    // The worktree's `.git` file, or a nested repository.
                    self.lost = true;
                    return;
                }
                if name == IGNORE_FILE {
                    // New ignore rules change which untouched files count
                    // (one ignored until now must be committed): walk.
                    self.lost = true;
                    return;
                }
                let appeared = ev.mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO);
                if ev.mask.contains(AddWatchFlags::IN_ISDIR)
                    && appeared
                    && self.watch_tree(&rel, true).is_err()
                {
                    self.lost = true;
                    return;
                }
                self.dirty.insert(rel);
            }
        }
        self.lost = true;
    }
}

/// Commits the changed `paths` of the worktree (what [`Tracker::take`]
/// gave): existing files are staged (an untracked one only if it is not
/// ignored; a nested repository makes the tracker lost), missing ones leave
/// the index. The same commit `worktree::commit_all` makes, without
/// its walk of the tree. Returns HEAD afterwards and whether a commit was made.
pub fn commit_paths(
    worktree: &Path,
    message: &str,
    paths: &BTreeSet<PathBuf>,
) -> Result<(git2::Oid, bool), WorktreeError> {
    let repo = Repository::open(worktree)?;
    let made = commit_paths_in(&repo, &mut IndexMemo::default(), message, paths)?;
    repo.index()?.write()?;
    Ok(made)
}

/// [`commit_paths`] in the worktree repository `repo` (a [`Tracker`]'s,
/// whose index is already in memory), leaving the index file as it was:
/// writing 10,000 entries cost more than the rest of the commit, and the
/// next [`move_clean_in`] writes the index anyway. Until then the file
/// says the base; `worktree::prepare` repairs such an index should the
/// sidecar stop in between.
pub fn commit_paths_in(
    repo: &Repository,
    memo: &mut IndexMemo,
    message: &str,
    paths: &BTreeSet<PathBuf>,
) -> Result<(git2::Oid, bool), WorktreeError> {
    let worktree = repo.workdir().ok_or_else(|| WorktreeError::Invalid {
        what: "worktree",
        rule: "the repository has no working directory".into(),
    })?;
    let mut index = repo.index()?;
    // Only when the file changed since it was last read or written here.
    tracked_index::read(&mut index, memo)?;
    // What left first, so that a file that became a directory (or the
    // other way round) never meets its old self in the index.
    let mut present = Vec::new();
    for p in paths {
        memo.changed(p);
        match std::fs::symlink_metadata(worktree.join(p)) {
            // A directory's files are listed one by one; a file it replaced goes.
            Ok(m) if m.is_dir() => {
                if index.get_path(p, 0).is_some() {
                    index.remove_path(p)?;
                }
            }
            Ok(_) => {
                // The files of a directory it replaced go.
                index.remove_dir(p, 0)?;
                present.push(p);
            }
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) =>
            {
                if index.get_path(p, 0).is_some() {
                    index.remove_path(p)?;
                }
                index.remove_dir(p, 0)?;
            }
            Err(source) => return Err(WorktreeError::Io { path: worktree.join(p), source }),
        }
    }
    for p in present {
        // Untracked and ignored stays out, as with `add -A`.
        if index.get_path(p, 0).is_some() || !repo.is_path_ignored(p)? {
            index.add_path(p)?;
        }
    }
    let head = repo.head()?.peel_to_commit()?;
    if paths.is_empty() {
        worktree::publish(repo, head.id())?;
        return Ok((head.id(), false));
    }
    // Only the directories along the changed paths are hashed again.
    let tree_id = tracked_index::write_tree(repo, &mut index, memo)?;
    if head.tree_id() == tree_id {
        worktree::publish(repo, head.id())?;
        return Ok((head.id(), false));
    }
    let tree = repo.find_tree(tree_id)?;
    let sig = worktree::signature(repo)?;
    let oid = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&head])?;
    worktree::publish(repo, oid)?;
    Ok((oid, true))
}

/// Moves a clean worktree (nothing changed since its last checkout or
/// commit, as its [`Tracker`] vouches) to `branch` at `base` by checking
/// out only the paths that differ between its HEAD and `base`; the same
/// end state as `worktree::prepare`, without its walk of the tree.
pub fn move_clean(
    ws: &worktree::Workspaces,
    worker_id: &str,
    branch: &str,
    base: &str,
) -> Result<worktree::Prepared, WorktreeError> {
    let path = ws.worktree(worker_id)?;
    move_clean_in(&Repository::open(&path)?, &mut IndexMemo::default(), ws, worker_id, branch, base)
}

/// [`move_clean`] with the worktree's repository `wt` (a [`Tracker`]'s:
/// its index is already in memory; refs and objects are the common ones).
pub fn move_clean_in(
    wt: &Repository,
    memo: &mut IndexMemo,
    ws: &worktree::Workspaces,
    worker_id: &str,
    branch: &str,
    base: &str,
) -> Result<worktree::Prepared, WorktreeError> {
    check_branch(branch).map_err(|rule| WorktreeError::Invalid { what: "branch", rule })?;
    check_commit(base).map_err(|rule| WorktreeError::Invalid { what: "base commit", rule })?;
    let path = ws.worktree(worker_id)?;
    if wt.workdir().and_then(|w| w.canonicalize().ok()).as_deref() != Some(path.as_path()) {
        return Err(WorktreeError::Escapes(path));
    }
    let oid = git2::Oid::from_str(base)?;
    let Ok(target) = wt.find_commit(oid) else {
        return Err(WorktreeError::MissingBase(base.to_string()));
    };
    let cleared_locks = crate::locks::clear_stale(wt.commondir(), worker_id, Some(branch))?;
    let head = wt.head()?.peel_to_commit()?;
    if head.id() != oid {
        let deltas = diff_trees(wt, Some(&head.tree()?), Some(&target.tree()?))?;
        if deltas.is_empty() {
        } else if plain_files(wt, &deltas)? {
            write_files(wt, memo, &path, &deltas)?;
        } else {
            // Filters, submodules or attributes that change: libgit2's
            // checkout, which re-reads the index file first.
            wt.index()?.write()?;
            let mut co = CheckoutBuilder::new();
            co.force().remove_untracked(true).remove_ignored(false).disable_pathspec_match(true);
            for d in &deltas {
                co.path(&d.path);
            }
            wt.checkout_tree(target.as_object(), Some(&mut co))?;
            memo.forget();
        }
    }
    // Before the worker runs: it may read the index (`git status`), and
    // the last commit left it to this write.
    tracked_index::write(wt, memo, &target.tree()?)?;
    wt.set_head_detached(oid)?;
    worktree::point_at_branch(wt, wt, branch, oid)?;
    Ok(worktree::Prepared { path, created: false, cleared_locks })
}

/// Whether the files of `deltas` can be written as their blobs are: no
/// attribute that converts content (filters, line endings, `ident`), no
/// `.gitattributes` among them, no submodule, no `core.autocrlf`, links
/// only where the repository has them. Anything else goes to libgit2.
fn plain_files(repo: &Repository, deltas: &[FileDelta]) -> Result<bool, git2::Error> {
    let cfg = repo.config()?.snapshot()?;
    if let Ok(v) = cfg.get_str("core.autocrlf")
        && !matches!(v.to_ascii_lowercase().as_str(), "false" | "no" | "off" | "0" | "")
    {
        return Ok(false);
    }
    let links = cfg.get_bool("core.symlinks").unwrap_or(true);
    for d in deltas {
        let mode_ok = |e: Option<(git2::Oid, i32)>| match e {
            None => true,
            Some((_, m)) => m == BLOB || m == BLOB_EXECUTABLE || (m == LINK && links),
        };
        if !mode_ok(d.old) || !mode_ok(d.new) || d.path.file_name() == Some(OsStr::new(".gitattributes")) {
            return Ok(false);
        }
        for attr in ["filter", "text", "eol", "crlf", "ident", "working-tree-encoding"] {
            if repo.get_attr_bytes(&d.path, attr, git2::AttrCheckFlags::FILE_THEN_INDEX)?.is_some() {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Makes the files of `deltas` what their new side says (writes, links,
/// removals, with directories made and emptied ones removed, as a checkout
/// does) and updates their index entries in memory; the rest of the index
/// is kept.
fn write_files(
    repo: &Repository,
    memo: &mut IndexMemo,
    root: &Path,
    deltas: &[FileDelta],
) -> Result<(), WorktreeError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let fail = |p: &Path| {
        let full = root.join(p);
        move |source| WorktreeError::Io { path: full, source }
    };
    let mut index = repo.index()?;
    tracked_index::read(&mut index, memo)?;
    for d in deltas.iter().filter(|d| d.new.is_none()) {
        match std::fs::remove_file(root.join(&d.path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(&d.path)(e)),
            _ => {}
        }
        index.remove_path(&d.path)?;
        memo.changed(&d.path);
        // Directories left empty go (ones that still hold ignored files stay).
        let mut dir = d.path.parent();
        while let Some(p) = dir.filter(|p| !p.as_os_str().is_empty()) {
            if std::fs::remove_dir(root.join(p)).is_err() {
                break;
            }
            dir = p.parent();
        }
    }
    for d in deltas {
        let Some((oid, mode)) = d.new else { continue };
        let full = root.join(&d.path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(fail(&d.path))?;
        }
        match std::fs::symlink_metadata(&full) {
            // An empty directory (one a worker emptied; git keeps no
            // directories) goes, as a checkout removes it.
            Ok(m) if m.is_dir() && std::fs::remove_dir(&full).is_ok() => {}
            Ok(m) if m.is_dir() => {
                return Err(WorktreeError::Io {
                    path: full,
                    source: std::io::Error::other("a directory is where a file goes"),
                });
            }
            Ok(_) => std::fs::remove_file(&full).map_err(fail(&d.path))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(&d.path)(e)),
        }
        let blob = repo.find_blob(oid)?;
        if mode == LINK {
            std::os::unix::fs::symlink(OsStr::from_bytes(blob.content()), &full).map_err(fail(&d.path))?;
        } else {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(if mode == BLOB_EXECUTABLE { 0o777 } else { 0o666 })
                .open(&full)
                .map_err(fail(&d.path))?;
            f.write_all(blob.content()).map_err(fail(&d.path))?;
        }
        // The entry is the blob's (no filters), with the stat of the file.
        index.add(&index_entry(&full, &d.path, oid, mode)?)?;
        memo.changed(&d.path);
    }
    Ok(())
}

/// An index entry for the file just written at `full`.
pub(crate) fn index_entry(
    full: &Path,
    rel: &Path,
    oid: git2::Oid,
    mode: i32,
) -> Result<git2::IndexEntry, WorktreeError> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::symlink_metadata(full)
        .map_err(|source| WorktreeError::Io { path: full.to_path_buf(), source })?;
    // Index stat fields are 32 bits wide; git truncates them the same way.
    let time = |s: i64, ns: i64| git2::IndexTime::new(s as i32, ns as u32);
    Ok(git2::IndexEntry {
        ctime: time(m.ctime(), m.ctime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        dev: m.dev() as u32,
        ino: m.ino() as u32,
        mode: mode as u32,
        uid: m.uid(),
        gid: m.gid(),
        file_size: m.size() as u32,
        id: oid,
        flags: 0,
        flags_extended: 0,
        path: rel.as_os_str().as_bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&str]) -> BTreeSet<PathBuf> {
        paths.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn reports_what_changed_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/a")).expect("mkdir");
        std::fs::write(root.join("src/a/x.txt"), "x").expect("write");
        std::fs::write(root.join("keep.txt"), "k").expect("write");
        std::fs::write(root.join("gone.txt"), "g").expect("write");
        let mut t = Tracker::start(root).expect("start");
        assert_eq!(t.take(), Some(BTreeSet::new()));
        std::fs::write(root.join("src/a/x.txt"), "changed").expect("modify");
        std::fs::remove_file(root.join("gone.txt")).expect("delete");
        std::fs::create_dir_all(root.join("new/deep")).expect("mkdir");
        std::fs::write(root.join("new/deep/n.txt"), "n").expect("write");
        std::fs::create_dir_all(root.join(".swarm")).expect("mkdir");
        std::fs::write(root.join(".swarm/status.json"), "{}").expect("write");
        let got = t.take().expect("tracked");
        for p in ["src/a/x.txt", "gone.txt", "new"] {
            assert!(got.contains(Path::new(p)), "{p} missing from {got:?}");
        }
        assert!(!got.iter().any(|p| p.starts_with(".swarm")), "{got:?}");
        assert!(!got.contains(Path::new("keep.txt")));
        // Written after its directory's watch: seen by the watch or the scan.
        std::fs::write(root.join("new/deep/m.txt"), "m").expect("write");
        assert_eq!(t.take(), Some(set(&["new/deep/m.txt"])));
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .expect("git")
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn tracked_commit_and_move_match_the_full_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("src")).expect("mkdir");
        std::fs::write(repo.join("src/a.txt"), "a").expect("write");
        std::fs::write(repo.join("b.txt"), "b").expect("write");
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let base = git2::Repository::open(&repo).expect("open").head().expect("head").target().expect("oid");
        let ws = worktree::Workspaces::in_repo(&repo).expect("workspaces");
        let p = worktree::prepare(&ws, "w1", "swarm/s/t1", &base.to_string()).expect("prepare");
        let mut t = Tracker::start(&p.path).expect("tracker");
        std::fs::write(p.path.join("src/a.txt"), "a2").expect("modify");
        std::fs::remove_file(p.path.join("b.txt")).expect("delete");
        std::fs::create_dir_all(p.path.join("new")).expect("mkdir");
        std::fs::write(p.path.join("new/c.txt"), "c").expect("add");
        let changed = t.take().expect("tracked");
        let (oid, made) = commit_paths(&p.path, "t1", &changed).expect("commit");
        assert!(made);
        let wt = git2::Repository::open(&p.path).expect("wt");
        let files = worktree::files_changed(&p.path, &base.to_string(), oid).expect("diff");
        let mut files: Vec<&str> = files.iter().map(String::as_str).collect();
        files.sort();
        assert_eq!(files, ["b.txt", "new/c.txt", "src/a.txt"]);
        assert!(wt.statuses(None).expect("status").is_empty(), "index and worktree match the commit");
        assert_eq!(t.take(), Some(BTreeSet::new()), "committing changes no file");
        // Back to the base by the changed paths only: the same tree as a checkout.
        let moved = move_clean(&ws, "w1", "swarm/s/t2", &base.to_string()).expect("move");
        assert_eq!(moved.path, p.path);
        assert!(!p.path.join("new/c.txt").exists());
        assert_eq!(std::fs::read_to_string(p.path.join("src/a.txt")).expect("read"), "a");
        assert_eq!(std::fs::read_to_string(p.path.join("b.txt")).expect("read"), "b");
        let wt = git2::Repository::open(&p.path).expect("wt");
        assert_eq!(wt.head().expect("head").peel_to_commit().expect("commit").id(), base);
        assert!(wt.statuses(None).expect("status").is_empty(), "clean after the move");
    }

    #[test]
    fn a_nested_repository_means_walk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut t = Tracker::start(dir.path()).expect("start");
        std::fs::create_dir_all(dir.path().join("vendor/.git")).expect("mkdir");
        assert_eq!(t.take(), None);
        assert_eq!(t.take(), None, "stays lost");
    }
}
