//! Taking a completed sub-swarm's work into the worktree of the agent
//! that spawned it. Blocks; call it from a blocking thread.

use std::path::PathBuf;

use git2::build::CheckoutBuilder;
use git2::{Oid, Repository};

use crate::changes::SharedTracker;
use crate::worktree::{self, WorktreeError};

/// Why the child's work could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(
        "the children's work conflicts with yours in {}; your work is committed as {own}. Put those \
         files back as they were at the task's start (git checkout <base commit> -- <file>) and call \
         wait_children again",
        .paths.join(", ")
    )]
    Conflict { own: Oid, paths: Vec<String> },
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

/// Where to merge what.
#[derive(Debug, Clone)]
pub struct Into {
    pub worktree: PathBuf,
    pub child: String,
    pub head: String,
    /// For the merge commit's trailer.
    pub attempt: String,
    pub tracker: SharedTracker,
}

/// Commits the agent's own work, merges the child's head onto it and moves
/// the worktree there; returns the merge (or the commit that already held
/// the child's head).
pub fn take(into: &Into) -> Result<Oid, MergeError> {
    let wt = &into.worktree;
    let _span =
        tracing::info_span!("children.merge", child = %into.child, head = %into.head, attempt = %into.attempt)
            .entered();
    // The agent's own commits first, as at the attempt's end; then what it
    // left uncommitted. The tracker's view of what changed ends here: the
    // checkout below changes files it did not see change.
    if let Err(e) = crate::worker_git::import(wt) {
        tracing::warn!(error = %e, "left the worker's own commits out; its files are committed");
    }
    *into.tracker.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let message = format!("Work before merging sub-swarm {}\n\nSwarm-Attempt: {}", into.child, into.attempt);
    let (own, _) = worktree::commit_all(wt, &message)?;
    let repo = Repository::open(wt)?;
    let child = Oid::from_str(&into.head)?;
    let merged = if own == child || repo.graph_descendant_of(own, child)? {
        own
    } else {
        merge_commit(&repo, own, child, into)?
    };
    let commit = repo.find_commit(merged)?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force();
    repo.checkout_tree(commit.as_object(), Some(&mut checkout))?;
    // The agent's own git starts again from here, so its `git status` shows
    // only what it changes next.
    crate::worker_git::prepare(wt)?;
    Ok(merged)
}

fn merge_commit(repo: &Repository, own: Oid, child: Oid, into: &Into) -> Result<Oid, MergeError> {
    let (ours, theirs) = (repo.find_commit(own)?, repo.find_commit(child)?);
    let mut index = repo.merge_commits(&ours, &theirs, None)?;
    if index.has_conflicts() {
        let mut paths: Vec<String> = index
            .conflicts()?
            .filter_map(|c| c.ok())
            .filter_map(|c| c.our.or(c.their).or(c.ancestor))
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        paths.sort();
        paths.dedup();
        return Err(MergeError::Conflict { own, paths });
    }
    let tree = repo.find_tree(index.write_tree_to(repo)?)?;
    let sig = worktree::signature(repo)?;
    let message = format!("Merge sub-swarm {}\n\nSwarm-Attempt: {}", into.child, into.attempt);
    // HEAD (or, detached, the branch it publishes to) moves to the merge;
    // the worktree was clean at `own`, so a forced checkout loses nothing.
    let merged = repo.commit(Some("HEAD"), &sig, &sig, &message, &tree, &[&ours, &theirs])?;
    worktree::publish(repo, merged)?;
    Ok(merged)
}
