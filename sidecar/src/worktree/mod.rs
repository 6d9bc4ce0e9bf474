//! The sidecar's one worktree, `<workspaces>/<worker-id>`, reused across
//! tasks so that ignored build output stays warm. The workspaces directory
//! (see [`Workspaces`]) is the repository's `.git/workspaces/` unless the
//! sidecar is given one; local mode's lies outside the user's checkout.
//!
//! Moving to a task checks out the base commit with `force` and
//! `remove_untracked` (never `remove_ignored`): libgit2 rewrites only files
//! that differ, untracked files go, ignored ones stay. `.swarm/` is listed in
//! the common `info/exclude`, so it is ignored: it survives checkouts and is
//! never committed. All functions here block; call them from a blocking thread.

use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{
    BranchType, IndexAddOption, Oid, Repository, Signature, WorktreeAddOptions, WorktreePruneOptions,
};
use swarm_core::names::{check_branch, check_commit, check_id};

pub mod error;
pub mod relocate;
pub use error::WorktreeError;

/// Name of the directory (under the common git dir) that holds worktrees
/// when the sidecar is given no other.
pub const WORKSPACES: &str = "workspaces";
/// The worker's directory inside its worktree.
pub const SWARM_DIR: &str = ".swarm";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorktreeError + '_ {
    move |source| WorktreeError::Io { path: path.to_path_buf(), source }
}

/// Where a repository's sidecar keeps its worktree and what lies beside
/// it (its attempts' private git and temporary directories, its liveness
/// lock and journal, the verifier's scratch trees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspaces {
    /// The repository the worktrees belong to.
    pub repo: PathBuf,
    /// Its common git directory (refs, objects, `worktrees/` admin dirs).
    pub common: PathBuf,
    /// The directory holding the worktrees, canonical.
    pub dir: PathBuf,
}

impl Workspaces {
    /// The repository's own `<common git dir>/workspaces/`.
    pub fn in_repo(repo: &Path) -> Result<Workspaces, WorktreeError> {
        Workspaces::new(repo, None)
    }

    /// `dir`, made if missing, or the repository's own when None.
    pub fn new(repo: &Path, dir: Option<&Path>) -> Result<Workspaces, WorktreeError> {
        let common = Repository::open(repo)?.commondir().to_path_buf();
        let dir = dir.map_or_else(|| common.join(WORKSPACES), Path::to_path_buf);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let dir = dir.canonicalize().map_err(io(&dir))?;
        let common = common.canonicalize().map_err(io(&common))?;
        Ok(Workspaces { repo: repo.to_path_buf(), common, dir })
    }

    /// The worktree path for `worker_id`, checked to stay a child of [`Workspaces::dir`].
    pub fn worktree(&self, worker_id: &str) -> Result<PathBuf, WorktreeError> {
        check_id(worker_id).map_err(|rule| WorktreeError::Invalid { what: "worker id", rule })?;
        let path = self.dir.join(worker_id);
        if path.parent() != Some(self.dir.as_path()) || !path.starts_with(&self.dir) {
            return Err(WorktreeError::Escapes(path));
        }
        Ok(path)
    }
}

/// Adds `.swarm/` to the common `info/exclude` (shared by all worktrees).
pub fn exclude_swarm_dir(repo: &Repository) -> Result<(), WorktreeError> {
    let info = repo.commondir().join("info");
    std::fs::create_dir_all(&info).map_err(io(&info))?;
    let path = info.join("exclude");
    let current = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(&path)(e)),
    };
    let rule = format!("/{SWARM_DIR}/");
    if current.lines().any(|l| l.trim() == rule) {
        return Ok(());
    }
    let mut next = current;
    if !next.is_empty() && !next.ends_with('\n') {
        next.push('\n');
    }
    next.push_str(&rule);
    next.push('\n');
    // Write and rename: sidecars starting together must never read a
    // half-written file and write back less than was there.
    let tmp = info.join(format!("exclude.swarm-{}", std::process::id()));
    std::fs::write(&tmp, next).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

/// Where the worktree ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub path: PathBuf,
    /// True when the worktree was made now (run the setup commands).
    pub created: bool,
    /// Stale git lock files removed before the work began.
    pub cleared_locks: Vec<PathBuf>,
}

/// Moves (or first makes) the worker's worktree to a new `branch` at `base`.
pub fn prepare(
    ws: &Workspaces,
    worker_id: &str,
    branch: &str,
    base: &str,
) -> Result<Prepared, WorktreeError> {
    check_branch(branch).map_err(|rule| WorktreeError::Invalid { what: "branch", rule })?;
    check_commit(base).map_err(|rule| WorktreeError::Invalid { what: "base commit", rule })?;
    let repo = Repository::open(&ws.repo)?;
    exclude_swarm_dir(&repo)?;
    let path = ws.worktree(worker_id)?;
    let oid = Oid::from_str(base)?;
    if repo.find_commit(oid).is_err() {
        return Err(WorktreeError::MissingBase(base.to_string()));
    }
    // The caller holds this worker id's liveness lock and no git operation
    // of its own is running: lock files left in what it owns are stale.
    let cleared_locks = crate::locks::clear_stale(repo.commondir(), worker_id, Some(branch))?;
    if path.is_dir() {
        repair_git_file(&ws.common, &path)?;
    }
    let valid = path.join(".git").exists() && Repository::open(&path).is_ok();
    if !valid {
        let path = create(&repo, ws, worker_id, &path, oid)?;
        let wt = Repository::open(&path)?;
        point_at_branch(&repo, &wt, branch, oid)?;
        return Ok(Prepared { path, created: true, cleared_locks });
    }
    let wt = Repository::open(&path)?;
    let commit = wt.find_commit(oid)?;
    // Detach first so the branch can be force-moved even if it is checked out here.
    let mut co = CheckoutBuilder::new();
    co.force().remove_untracked(true).remove_ignored(false);
    wt.checkout_tree(commit.as_object(), Some(&mut co))?;
    repair_index(&wt, &commit.tree()?)?;
    wt.set_head_detached(oid)?;
    point_at_branch(&repo, &wt, branch, oid)?;
    Ok(Prepared { path, created: false, cleared_locks })
}

/// Makes the worker's worktree at `base` if it has none, left detached
/// there, so that its first attempt moves it by the paths that differ
/// instead of writing every file while the task waits. Returns the path
/// when it made one, None when a usable worktree was already there (it is
/// left untouched: it may hold an attempt's work).
pub fn warm(ws: &Workspaces, worker_id: &str, base: &str) -> Result<Option<PathBuf>, WorktreeError> {
    check_commit(base).map_err(|rule| WorktreeError::Invalid { what: "base commit", rule })?;
    let repo = Repository::open(&ws.repo)?;
    exclude_swarm_dir(&repo)?;
    let path = ws.worktree(worker_id)?;
    if path.is_dir() {
        repair_git_file(&ws.common, &path)?;
        if path.join(".git").exists() && Repository::open(&path).is_ok() {
            return Ok(None);
        }
    }
    let oid = Oid::from_str(base)?;
    if repo.find_commit(oid).is_err() {
        return Err(WorktreeError::MissingBase(base.to_string()));
    }
    crate::locks::clear_stale(repo.commondir(), worker_id, None)?;
    create(&repo, ws, worker_id, &path, oid).map(Some)
}

/// Points the worktree's `.git` at its admin directory again, whatever a
/// worker left there: the file lies inside the worktree, which the worker
/// may write, and a `.git` naming another repository (the user's checkout,
/// a sibling's worktree) would turn the sidecar's next checkout or commit,
/// which no sandbox confines, against that repository. Returns whether it
/// had to be rewritten. `common` is the repository's common git
/// directory. Call before any git operation on the worktree.
pub fn repair_git_file(common: &Path, wt: &Path) -> Result<bool, WorktreeError> {
    let Some(id) = wt.file_name() else {
        return Err(WorktreeError::Escapes(wt.to_path_buf()));
    };
    let admin = common.join("worktrees").join(id);
    let dot_git = wt.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git);
    if let Ok(m) = &meta
        && m.is_file()
    {
        let text = std::fs::read_to_string(&dot_git).unwrap_or_default();
        let named = text.trim_end().strip_prefix("gitdir: ").map(|p| Path::new(p).canonicalize());
        if let Some(Ok(named)) = named
            && admin.canonicalize().is_ok_and(|a| a == named)
        {
            return Ok(false);
        }
    }
    tracing::warn!(worktree = %wt.display(), "the worktree's .git was changed; pointing it at its admin directory again");
    match meta {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&dot_git).map_err(io(&dot_git))?,
        Ok(_) => std::fs::remove_file(&dot_git).map_err(io(&dot_git))?,
        Err(_) => {}
    }
    std::fs::write(&dot_git, format!("gitdir: {}\n", admin.display())).map_err(io(&dot_git))?;
    Ok(true)
}

/// Makes the index say what a forced checkout of `tree` left in the files.
/// libgit2's checkout keeps the entry of a file that already holds the
/// target's content even when the entry says otherwise: an index the last
/// tracked commit had not written yet when the sidecar stopped (see
/// `changes::commit_paths_in`), or a change the worker staged and left.
fn repair_index(wt: &Repository, tree: &git2::Tree<'_>) -> Result<(), WorktreeError> {
    let mut index = wt.index()?;
    // Cheap when it agrees: the index's cache of tree ids answers.
    if !index.has_conflicts() && index.write_tree().is_ok_and(|id| id == tree.id()) {
        return Ok(());
    }
    let Some(workdir) = wt.workdir().map(Path::to_path_buf) else { return Ok(()) };
    let diff = wt.diff_tree_to_index(Some(tree), Some(&index), None)?;
    let paths: Vec<PathBuf> = diff
        .deltas()
        .filter_map(|d| d.new_file().path().or(d.old_file().path()).map(Path::to_path_buf))
        .collect();
    tracing::info!(entries = paths.len(), "index disagreed with the checkout; repairing its entries");
    for p in paths {
        let in_tree = tree.get_path(&p).is_ok();
        match std::fs::symlink_metadata(workdir.join(&p)) {
            Ok(m) if in_tree && !m.is_dir() => index.add_path(&p)?,
            _ => {
                if index.get_path(&p, 0).is_some() || index.has_conflicts() {
                    index.remove_path(&p)?;
                }
            }
        }
    }
    index.write()?;
    Ok(())
}

/// Makes the worktree from scratch, detached at `oid`: by hand for a plain
/// tree (see [`crate::checkout`]), by libgit2 otherwise. Creation is
/// serialized across sidecars by the repository-wide creation lock, and
/// whatever a crashed or raced creation left (the directory, the admin dir
/// `.git/worktrees/<id>`) is removed first, so a retry always starts clean.
fn create(
    repo: &Repository,
    ws: &Workspaces,
    worker_id: &str,
    path: &Path,
    oid: Oid,
) -> Result<PathBuf, WorktreeError> {
    let _span = tracing::info_span!("worktree.create", worker = worker_id, base = %oid).entered();
    let _creating = crate::locks::creation_lock(&ws.dir)?;
    discard_locked(repo, worker_id, path)?;
    let tree = repo.find_commit(oid)?.tree()?;
    if let Some(entries) = crate::checkout::plain_entries(repo, &tree)? {
        let admin = crate::checkout::register(repo.commondir(), worker_id, path, oid)?;
        crate::checkout::write_tree(repo.commondir(), path, &admin.join("index"), &entries)?;
        return Ok(path.to_path_buf());
    }
    // The worktree starts on a parking ref, never on the task branch:
    // `worktree add` on a branch that another worktree has checked out
    // (a lost sidecar's, after a reassignment) fails and can leave the
    // branch's lock file behind. The parking ref stays (deleting a ref
    // takes the shared packed-refs lock, which sidecars starting together
    // would race for).
    let park = format!("refs/heads/swarm-workspaces/{worker_id}");
    let park_ref = repo.reference(&park, oid, true, "swarm-sidecar: new worktree")?;
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(&park_ref));
    repo.worktree(worker_id, path, Some(&opts))?;
    let wt = Repository::open(path)?;
    wt.set_head_detached(oid)?;
    Ok(path.to_path_buf())
}

/// Removes the worker's own worktree (directory and registration) so the
/// next [`prepare`] makes it afresh: the last repair when it is broken.
pub fn discard(ws: &Workspaces, worker_id: &str) -> Result<(), WorktreeError> {
    let repo = Repository::open(&ws.repo)?;
    let path = ws.worktree(worker_id)?;
    // Never a way around the lock rules: a lock a live process holds stops it.
    crate::locks::clear_stale(repo.commondir(), worker_id, None)?;
    let _creating = crate::locks::creation_lock(&ws.dir)?;
    discard_locked(&repo, worker_id, &path)
}

/// [`discard`] with the creation lock already held.
fn discard_locked(repo: &Repository, worker_id: &str, path: &Path) -> Result<(), WorktreeError> {
    // A stale registration (the directory was deleted) blocks `worktree add`.
    if let Ok(wt) = repo.find_worktree(worker_id)
        && let Err(e) = wt.prune(Some(WorktreePruneOptions::new().valid(true).working_tree(true)))
    {
        tracing::warn!(worker = worker_id, error = %e.message(), "pruning the old worktree failed; removing it by hand");
    }
    // A half-made registration (a creation that crashed or lost a race)
    // may not even be found by libgit2; it is this worker's alone.
    let admin = repo.commondir().join("worktrees").join(worker_id);
    if admin.exists() {
        std::fs::remove_dir_all(&admin).map_err(io(&admin))?;
    }
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(io(path))?;
    }
    Ok(())
}

/// Moves the task branch to `oid` and puts the (detached) worktree on it.
/// When another worktree has the branch checked out (a lost sidecar's),
/// libgit2 refuses `set_head`: the worktree then works detached and
/// `commit_all` publishes its commits to the branch.
pub(crate) fn point_at_branch(
    repo: &Repository,
    wt: &Repository,
    branch: &str,
    oid: Oid,
) -> Result<(), WorktreeError> {
    let full = format!("refs/heads/{branch}");
    // Another process (a lost sidecar that woke up) may hold the ref's lock
    // for a moment.
    let mut tries = 0;
    loop {
        match repo.reference(&full, oid, true, "swarm-sidecar: attempt base") {
            Ok(_) => break,
            Err(e) if e.code() == git2::ErrorCode::Locked && tries < 10 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Err(e) = wt.set_head(&full) {
        tracing::warn!(branch, error = %e.message(), "task branch is checked out elsewhere; working detached");
    }
    // The task branch a worktree works for, kept in its git dir so a
    // detached worktree still knows where its commits belong.
    let file = wt.path().join("swarm-branch");
    std::fs::write(&file, branch).map_err(io(&file))
}

/// Points the remembered task branch at `oid` when HEAD is detached (when
/// HEAD is on the branch, the commit already moved it).
pub(crate) fn publish(repo: &Repository, oid: Oid) -> Result<(), WorktreeError> {
    if !repo.head_detached()? {
        return Ok(());
    }
    let file = repo.path().join("swarm-branch");
    let Ok(branch) = std::fs::read_to_string(&file) else { return Ok(()) };
    check_branch(branch.trim()).map_err(|rule| WorktreeError::Invalid { what: "branch", rule })?;
    repo.reference(&format!("refs/heads/{}", branch.trim()), oid, true, "swarm-sidecar: attempt result")?;
    Ok(())
}

pub(crate) fn signature(repo: &Repository) -> Result<Signature<'static>, git2::Error> {
    repo.signature().or_else(|_| Signature::now("swarm-sidecar", "swarm-sidecar@localhost"))
}

/// Commits everything uncommitted in the worktree (except ignored files, so
/// not `.swarm/`). Returns HEAD afterwards, and whether a commit was made.
pub fn commit_all(worktree: &Path, message: &str) -> Result<(Oid, bool), WorktreeError> {
    let repo = Repository::open(worktree)?;
    let mut index = repo.index()?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    index.update_all(["*"], None)?;
    index.write()?;
    let tree_id = index.write_tree()?;
    let head = repo.head()?.peel_to_commit()?;
    if head.tree_id() == tree_id {
        // The worker may have committed by itself on a detached HEAD.
        publish(&repo, head.id())?;
        return Ok((head.id(), false));
    }
    let tree = repo.find_tree(tree_id)?;
    let sig = signature(&repo)?;
    let oid = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&head])?;
    publish(&repo, oid)?;
    Ok((oid, true))
}

/// The HEAD commit of the worktree and its subject line.
pub fn head(worktree: &Path) -> Result<(Oid, String), WorktreeError> {
    let repo = Repository::open(worktree)?;
    let c = repo.head()?.peel_to_commit()?;
    Ok((c.id(), c.summary().unwrap_or_default().to_string()))
}

/// Paths that differ between two commits.
pub fn files_changed(worktree: &Path, from: &str, to: Oid) -> Result<Vec<String>, WorktreeError> {
    let repo = Repository::open(worktree)?;
    let a = repo.find_commit(Oid::from_str(from)?)?.tree()?;
    let b = repo.find_commit(to)?.tree()?;
    // Only the subtrees that differ are read.
    let deltas = crate::tree_diff::diff_trees(&repo, Some(&a), Some(&b))?;
    Ok(deltas.into_iter().filter_map(|d| d.path.to_str().map(str::to_string)).collect())
}

/// Whether `commit` exists in the repository.
pub fn has_commit(repo_path: &Path, commit: &str) -> Result<bool, WorktreeError> {
    let repo = Repository::open(repo_path)?;
    Ok(repo.find_commit(Oid::from_str(commit)?).is_ok())
}

/// Local branch tips, as `have`s for a fetch.
pub fn local_tips(repo_path: &Path) -> Result<Vec<String>, WorktreeError> {
    let repo = Repository::open(repo_path)?;
    let mut out = Vec::new();
    for b in repo.branches(Some(BranchType::Local))? {
        let (b, _) = b?;
        if let Some(oid) = b.get().target() {
            out.push(oid.to_string());
        }
    }
    Ok(out)
}

/// Removes another worker's worktree: its directory and its registration.
pub fn remove(ws: &Workspaces, worker_id: &str) -> Result<(), WorktreeError> {
    let repo = Repository::open(&ws.repo)?;
    let path = ws.worktree(worker_id)?;
    let _creating = crate::locks::creation_lock(&ws.dir)?;
    if let Ok(wt) = repo.find_worktree(worker_id) {
        wt.prune(Some(WorktreePruneOptions::new().valid(true).locked(true).working_tree(true)))?;
    }
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(io(&path))?;
    }
    Ok(())
}
