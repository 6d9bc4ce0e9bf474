//! How an attempt ended, as the sidecar knows it: a plain value that the
//! pipeline's steps build and the session turns into the wire's result
//! (see [`crate::wire`]) only when it sends it.
//!
//! A step that cannot go on says whose fault that is where it fails: a
//! [`TaskFailure`] counts against the task's retries, an [`InfraFailure`]
//! hands the attempt back without spending one.

use std::path::PathBuf;

use swarm_core::{Outcome, Usage};
use swarm_proto::convert::AttemptRef;

use crate::verify::TierOutcome;

/// The end of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptOutcome {
    pub attempt: AttemptRef,
    pub outcome: Outcome,
    /// The worker's exit code; -1 when no worker exit is claimed.
    pub exit_code: i32,
    /// Set when the worker died by a signal.
    pub signal: Option<i32>,
    /// Idle restarts (a command worker) or extra processes (an agent).
    pub restarts: u32,
    pub log_tail: Vec<String>,
    /// The result or WIP commit (a reviewer's: the reviewed HEAD).
    pub commit: String,
    pub files_changed: Vec<String>,
    pub tiers: Vec<TierOutcome>,
    pub summary: String,
    pub error: String,
    /// The escalation's category.
    pub category: String,
    /// What an agent spent.
    pub usage: Option<Usage>,
    /// The agent session a later attempt may resume.
    pub session_id: String,
    pub usage_limit: Option<UsageLimit>,
    pub review: Option<ReviewVerdict>,
}

/// An agent's usage limit, for a RATE_LIMITED outcome.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageLimit {
    /// When it resets, unix ms; 0 when unknown.
    pub reset_unix_ms: u64,
    /// e.g. "five_hour"; empty when unknown.
    pub kind: String,
}

/// A reviewer's decision as it left it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReviewVerdict {
    /// "approve", "request_changes" or "reject"; empty when none was given.
    pub decision: String,
    pub message: String,
    /// Why the decision file could not be read.
    pub error: String,
}

impl AttemptOutcome {
    /// An outcome with nothing known yet but how it ended.
    pub fn new(attempt: AttemptRef, outcome: Outcome) -> AttemptOutcome {
        AttemptOutcome {
            attempt,
            outcome,
            exit_code: -1,
            signal: None,
            restarts: 0,
            log_tail: Vec::new(),
            commit: String::new(),
            files_changed: Vec::new(),
            tiers: Vec::new(),
            summary: String::new(),
            error: String::new(),
            category: String::new(),
            usage: None,
            session_id: String::new(),
            usage_limit: None,
            review: None,
        }
    }

    /// An ERROR with its reason and no worker exit.
    pub fn error(attempt: AttemptRef, error: impl Into<String>) -> AttemptOutcome {
        AttemptOutcome { error: error.into(), ..AttemptOutcome::new(attempt, Outcome::Error) }
    }

    /// The outcome of an attempt that failed before its worker ended.
    pub(crate) fn failed(attempt: AttemptRef, failure: Failure) -> AttemptOutcome {
        match failure {
            Failure::Task(f) => {
                let log_tail = f.output_tail().to_vec();
                AttemptOutcome { log_tail, ..AttemptOutcome::error(attempt, f.to_string()) }
            }
            Failure::Infra(f) => {
                tracing::error!(error = %f, "infrastructure failure; handing the attempt back");
                AttemptOutcome { error: f.to_string(), ..AttemptOutcome::new(attempt, Outcome::InfraFailed) }
            }
        }
    }

    /// After the worker ended, the sidecar failed to keep its work: what
    /// the worker did stays (its exit, output, usage and the tiers run),
    /// what the lost commit would have carried goes.
    pub(crate) fn infra_failed(self, failure: InfraFailure) -> AttemptOutcome {
        tracing::error!(error = %failure, "infrastructure failure; handing the attempt back");
        AttemptOutcome {
            exit_code: self.exit_code,
            signal: self.signal,
            restarts: self.restarts,
            log_tail: self.log_tail,
            tiers: self.tiers,
            usage: self.usage,
            session_id: self.session_id,
            error: failure.to_string(),
            ..AttemptOutcome::new(self.attempt, Outcome::InfraFailed)
        }
    }
}

/// Why an attempt ended before its worker did.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    #[error(transparent)]
    Task(#[from] TaskFailure),
    #[error(transparent)]
    Infra(#[from] InfraFailure),
}

/// The task's own fault: its setup command or its sandbox settings.
#[derive(Debug, thiserror::Error)]
pub enum TaskFailure {
    /// `denied`: what the sandbox denied it, as its output shows (see
    /// [`crate::sandbox::denials::explain`]), or empty.
    #[error("setup command {command:?} failed with exit code {exit_code}{denied}")]
    Setup { command: String, exit_code: i32, output_tail: Vec<String>, denied: String },
    /// The sandbox the task asks for cannot be built here.
    #[error("the task {0}")]
    Sandbox(String),
}

impl TaskFailure {
    fn output_tail(&self) -> &[String] {
        match self {
            TaskFailure::Setup { output_tail, .. } => output_tail,
            TaskFailure::Sandbox(_) => &[],
        }
    }
}

/// The sidecar's machinery failed, after its repairs where it has any.
#[derive(Debug, thiserror::Error)]
pub enum InfraFailure {
    #[error("{last} (after {tries} tries, the last on a recreated worktree)")]
    Prepare { last: String, tries: u32 },
    /// Not something a repair can fix: the controller sent a base this
    /// repository does not have.
    #[error("preparing worktree: base commit {0} is not in the repository")]
    MissingBase(String),
    /// The worktree of an attempt in hand cannot be found.
    #[error("{0}")]
    OwnWorktree(String),
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("opening {}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    /// The attempt's private TMPDIR.
    #[error("{what}: {source}")]
    Scratch { what: &'static str, source: std::io::Error },
    #[error("{0}")]
    Secrets(String),
    #[error("making {kind}'s state directory under {home}: {source}")]
    AgentState { kind: String, home: String, source: std::io::Error },
    #[error("starting the worker's supervisor: {0}")]
    Supervisor(String),
    #[error("{last} (after {tries} tries)")]
    Commit { last: String, tries: u32 },
    #[error("diff task failed: {0}")]
    DiffTask(String),
    #[error("listing changed files: {0}")]
    ListFiles(String),
    #[error("pushing result: {error} (after {tries} tries)")]
    Push { error: String, tries: u32 },
    #[error("reading the reviewed HEAD: {0}")]
    ReviewedHead(String),
}
