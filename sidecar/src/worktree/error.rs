//! What a worktree operation can fail with; its own file so that the
//! lower modules the worktree is built from (checkout, the tracked index)
//! can name it without importing the worktree.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("invalid {what}: {rule}")]
    Invalid { what: &'static str, rule: String },
    #[error("worktree path {0} escapes its workspaces directory")]
    Escapes(PathBuf),
    #[error("base commit {0} is not in the repository")]
    MissingBase(String),
    #[error(transparent)]
    Lock(#[from] crate::locks::LockError),
}
