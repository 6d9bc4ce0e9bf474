//! What the merge service is asked to do: a task's result to land, and the
//! integration refs it may repair.

use swarm_core::TaskKey;
use swarm_core::plan::{MergeStrategy, OwnershipPolicy};

use crate::MergeRequest;

/// A succeeded task's result, to be merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeJob {
    pub task: TaskKey,
    pub attempt: u32,
    /// `<swarm>/<task>#<attempt>`: the commits' `Swarm-Attempt` trailer.
    pub attempt_label: String,
    pub integration_branch: String,
    pub task_commit: String,
    /// The commit the attempt started from: ownership is judged on what
    /// the task changed since, not on what the integration branch did.
    pub base_commit: String,
    pub strategy: MergeStrategy,
    pub ownership: OwnershipPolicy,
    pub owned_globs: Vec<String>,
    pub title: String,
    pub summary: String,
    /// Submitted again after a restart: the merge may have landed before
    /// the crash, so look for it first.
    pub recovering: bool,
}

impl MergeJob {
    /// The engine's request to land this job on `head`.
    pub(crate) fn request(&self, branch: &str, head: &str) -> MergeRequest {
        MergeRequest {
            integration_branch: branch.to_string(),
            expected_head: head.to_string(),
            task_commit: self.task_commit.clone(),
            strategy: self.strategy,
            attempt_label: self.attempt_label.clone(),
            title: self.title.clone(),
            summary: self.summary.clone(),
        }
    }
}

/// An integration ref the controller alone writes: `(swarm, branch)`.
/// Only such a ref's stale lock is ever removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRef {
    pub swarm: String,
    pub branch: String,
}

/// An owned ref and the head the store last recorded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRef {
    pub owned: OwnedRef,
    pub head: String,
}
