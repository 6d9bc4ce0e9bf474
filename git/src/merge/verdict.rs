//! What the merge service decides: one [`Verdict`] per job, typed down to
//! its cause, for the scheduler to act on and render where it records it.

use std::time::Duration;

use swarm_core::TaskKey;
use swarm_core::plan::MergeStrategy;

use crate::{ConflictPath, GitError, MergeError, MergeReport};

/// The decision on one job.
#[derive(Debug)]
pub enum Verdict {
    /// On the integration branch, now at `head`; `merge_commit` is the
    /// commit that carries the task (equal to `head` unless a merge queue
    /// landed it under later ones).
    Merged { head: String, merge_commit: String, stats: MergeStats },
    /// The task's result does not merge onto the integration head.
    Conflict(Conflict),
    /// The task's result may never land as it is; the task's fault.
    Refused(Refusal),
    /// The merge could not be carried out; not the task's fault.
    Failed(MergeFailure),
}

/// How a merged job got onto the integration branch, with every figure the
/// audit log keeps of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeStats {
    /// Merged now, alone or in a batch.
    Integrated {
        strategy: MergeStrategy,
        /// The head it was built on and the head it made.
        base: String,
        result: String,
        /// Sorted.
        files_changed: Vec<String>,
        duration: Duration,
        /// How often the ref had moved and the merge was rebuilt.
        cas_retries: u32,
    },
    /// Found by its trailer after a restart: it had landed before the crash.
    Recovered { strategy: MergeStrategy },
    /// The integration branch already contained the task's commit.
    AlreadyContained { strategy: MergeStrategy },
    /// Landed by a merge queue once a verifier passed its batch `job`.
    Verified { result: String, files_changed: usize, job: u64 },
}

impl From<MergeReport> for MergeStats {
    fn from(r: MergeReport) -> Self {
        MergeStats::Integrated {
            strategy: r.strategy,
            base: r.base,
            result: r.result,
            files_changed: r.files_changed,
            duration: r.duration,
            cas_retries: r.cas_retries,
        }
    }
}

/// A job whose result conflicts with the integration branch at `head`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub branch: String,
    pub head: String,
    pub task_commit: String,
    /// Sorted, each with what the integration branch did to it.
    pub paths: Vec<ConflictPath>,
}

impl Conflict {
    pub fn path_names(&self) -> Vec<String> {
        self.paths.iter().map(|p| p.path.clone()).collect()
    }
}

/// Why a result may never land as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `ownership = "enforce"` and the task changed files outside its globs.
    #[error("result touches files outside its owned globs: {}", paths.join(", "))]
    OutsideOwnedGlobs { paths: Vec<String> },
    /// `.swarm/` never reaches the integration branch.
    #[error("task commit {task_commit} changes paths under .swarm/: {}", paths.join(", "))]
    ForbiddenPath { task_commit: String, paths: Vec<String> },
}

/// Why a job (or a merge queue's speculation, or a branch the controller
/// asked for) could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum MergeFailure {
    #[error("integration branch {branch} does not exist")]
    NoIntegrationBranch { branch: String },
    #[error("base branch {branch:?} does not exist in the repository")]
    NoBaseBranch { branch: String },
    /// The engine's own failure: a commit it lacks, unrelated histories,
    /// a locked or moving ref, an invalid glob, an I/O error.
    #[error(transparent)]
    Merge(#[from] MergeError),
}

impl From<GitError> for MergeFailure {
    fn from(e: GitError) -> Self {
        MergeFailure::Merge(MergeError::Git(e))
    }
}

/// One job's decision, with what the scheduler records beside it.
#[derive(Debug)]
pub struct MergeResult {
    pub task: TaskKey,
    pub attempt: u32,
    pub verdict: Verdict,
    /// Paths outside the task's globs under `ownership = "warn"`.
    pub ownership_warning: Vec<String>,
    /// A stale lock on the integration ref that had to be removed first.
    pub lock_removed: Option<LockRemoved>,
}

/// A stale `<ref>.lock` removed from one of the controller's integration
/// refs (for the audit log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRemoved {
    pub swarm: String,
    pub branch: String,
    pub path: String,
    pub age_ms: u64,
}

/// An integration ref that was behind the store's head at start, or held
/// no commit id (what a power loss can leave of a ref moved by exchange),
/// put back at the head the store recorded (for the audit log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRepaired {
    pub swarm: String,
    pub branch: String,
    /// What the ref file held, lossily.
    pub found: String,
    pub head: String,
}
