//! Error types: [`GitError`] for repository access and validation, [`MergeError`] for integration.

use std::path::PathBuf;

/// Failures of repository access, validation of ids and names, ownership globs and pack transfer.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot open repository {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("invalid commit id: {reason}")]
    InvalidCommitId { id: String, reason: String },
    #[error("invalid branch name {branch:?}: {reason}")]
    InvalidBranch { branch: String, reason: String },
    #[error("invalid attempt label {label:?}: {reason}")]
    InvalidLabel { label: String, reason: String },
    #[error("commit {id} does not exist in the repository")]
    MissingCommit { id: String },
    #[error("object {id} is a {kind}, not a commit")]
    NotACommit { id: String, kind: String },
    #[error("branch {branch} does not exist")]
    MissingBranch { branch: String },
    #[error("commits {ours} and {theirs} have no common ancestor")]
    UnrelatedHistories { ours: String, theirs: String },
    #[error("invalid ownership glob {glob:?}: {message}")]
    InvalidGlob { glob: String, message: String },
    #[error("pack of {size} bytes exceeds the limit of {max} bytes")]
    PackTooLarge { size: usize, max: usize },
    #[error("received pack does not provide commit {tip} (or its tree/parents)")]
    PackMissingTip { tip: String },
    /// The pack is malformed or incomplete (objects it refers to are neither in it nor in the repository).
    #[error("received pack for {tip} rejected: {message}")]
    PackRejected { tip: String, message: String },
    #[error("{op}: {source}")]
    Git2 {
        op: &'static str,
        #[source]
        source: git2::Error,
    },
    /// gix errors are carried as text: their concrete types differ per operation and are not stable API.
    #[error("{op}: {message}")]
    Gix { op: &'static str, message: String },
    #[error("{op}: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl GitError {
    pub(crate) fn gix(op: &'static str) -> impl FnOnce(gix::Error) -> GitError {
        move |e| GitError::Gix { op, message: e.to_string() }
    }

    pub(crate) fn gix_any<E: std::fmt::Display>(op: &'static str) -> impl FnOnce(E) -> GitError {
        move |e| GitError::Gix { op, message: e.to_string() }
    }

    pub(crate) fn git2(op: &'static str) -> impl FnOnce(git2::Error) -> GitError {
        move |source| GitError::Git2 { op, source }
    }

    pub(crate) fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> GitError {
        move |source| GitError::Io { op, source }
    }
}

/// What the integration branch (our side) did to a conflicting path since the merge base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SideChange {
    /// The path did not exist at the merge base and exists on the integration branch.
    Added,
    /// The path exists on both with different content or mode.
    Modified,
    /// The path existed at the merge base and is gone on the integration branch.
    Deleted,
    /// The integration branch left the path alone (the conflict comes from the task side alone,
    /// e.g. a rename/rename or a directory/file clash).
    Unchanged,
}

impl std::fmt::Display for SideChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SideChange::Added => "added",
            SideChange::Modified => "modified",
            SideChange::Deleted => "deleted",
            SideChange::Unchanged => "unchanged",
        })
    }
}

/// One conflicting path with what the integration branch did to it since the merge base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictPath {
    pub path: String,
    pub ours: SideChange,
}

/// Failures of [`crate::Integrator::integrate`] and [`crate::Integrator::fast_forward`].
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The merge (or the replay of `replaying` for rebase) has unresolved conflicts; nothing was written to refs.
    #[error(
        "merging {task_commit} into {branch} at {head} conflicts in {} path(s): {}",
        paths.len(),
        paths.iter().map(|p| format!("{} (integration branch: {})", p.path, p.ours)).collect::<Vec<_>>().join(", ")
    )]
    Conflict {
        branch: String,
        head: String,
        task_commit: String,
        /// For the rebase strategy: the task commit whose replay conflicted.
        replaying: Option<String>,
        /// Sorted, deduplicated; the same set `git merge-tree --write-tree --name-only` reports.
        paths: Vec<ConflictPath>,
    },
    /// The integration ref kept moving under us (`found: None`: it was deleted).
    #[error(
        "branch {branch} moved from {expected} to {}; gave up after {retries} retries",
        found.as_deref().unwrap_or("nothing (deleted)")
    )]
    CasFailed { branch: String, expected: String, found: Option<String>, retries: u32 },
    /// The ref's lock file exists: another process is updating it, or one died while updating it.
    /// Nothing was written. See [`crate::Integrator::remove_stale_ref_lock`].
    #[error("branch {branch} is locked by {}: another git process is updating it or died while doing so", lock.display())]
    RefLocked { branch: String, lock: std::path::PathBuf },
    /// The integration ref moved to a commit that does not contain the head we were asked to build on.
    #[error("branch {branch} was rewound: {found} does not contain the expected head {expected}")]
    HeadRewound { branch: String, expected: String, found: String },
    /// `target`'s head is not an ancestor of `new`; nothing was changed.
    #[error("cannot fast-forward {target} from {current} to {new}: {current} is not an ancestor of {new}")]
    NotFastForward { target: String, current: String, new: String },
    /// The task commit changes paths under `.swarm/`, which must never reach the integration branch.
    #[error("task commit {task_commit} changes paths under .swarm/: {}", paths.join(", "))]
    ForbiddenPath { task_commit: String, paths: Vec<String> },
    /// The task commit is already contained in the integration branch; there is nothing to integrate.
    #[error("task commit {task_commit} is already contained in {branch} at {head}")]
    AlreadyContained { branch: String, head: String, task_commit: String },
    /// Another merger landed this attempt since the request's head was read
    /// (a deposed leader's, finishing its last merge): it is not landed twice.
    #[error("attempt {attempt} already landed on {branch} as {merge_commit}")]
    AlreadyLanded { branch: String, attempt: String, merge_commit: String, head: String },
    #[error(transparent)]
    Git(#[from] GitError),
}

impl MergeError {
    /// The conflicting paths, if this is a conflict.
    pub fn conflict_paths(&self) -> Option<Vec<&str>> {
        match self {
            MergeError::Conflict { paths, .. } => Some(paths.iter().map(|p| p.path.as_str()).collect()),
            _ => None,
        }
    }
}
