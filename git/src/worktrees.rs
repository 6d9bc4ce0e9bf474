//! Which worktrees of a repository have a branch checked out.

use std::path::{Path, PathBuf};

use crate::pack::open_git2;
use crate::{GitError, ref_name};

/// The worktree (the main one included) that has `branch` checked out, if
/// any. Moving such a branch's ref under it would leave its files and index
/// describing a commit the branch no longer points at.
#[tracing::instrument]
pub fn checked_out_in(repo: &Path, branch: &str) -> Result<Option<PathBuf>, GitError> {
    let full = ref_name(branch)?;
    let repo = open_git2(repo)?;
    let on_branch = |r: &git2::Repository| -> bool {
        r.find_reference("HEAD").ok().and_then(|h| h.symbolic_target().map(|t| t == full)).unwrap_or(false)
    };
    if !repo.is_bare() && on_branch(&repo) {
        return Ok(Some(repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf()));
    }
    let names = repo.worktrees().map_err(GitError::git2("list worktrees"))?;
    for name in names.iter().flatten() {
        let Ok(wt) = repo.find_worktree(name) else { continue };
        // A worktree whose directory is gone cannot be opened; it has
        // nothing checked out that could be disturbed.
        let Ok(wt_repo) = git2::Repository::open_from_worktree(&wt) else { continue };
        if on_branch(&wt_repo) {
            return Ok(Some(wt.path().to_path_buf()));
        }
    }
    Ok(None)
}
