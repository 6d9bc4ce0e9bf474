//! What the scheduler sends to sidecars, in domain terms; the Sidecar API
//! turns these into `swarm.v1.ControllerMessage`s. A worker's session
//! queues them, so they sit beside the rows. And what sidecars report, as
//! the API edge validated and converted it.

use std::collections::BTreeMap;

use swarm_core::plan::{AgentSpec, VerifyTier};
use swarm_core::{Outcome, TaskKey, Usage};

use super::TierOutcome;

/// A sidecar session's queue of messages to send. flume, not tokio's
/// mpsc: tokio allocates a block of 32 slots when a channel is made, 3 KiB
/// of `Outbound` for every connected sidecar even while it is idle; flume
/// allocates as messages come.
pub type OutboundTx = flume::Sender<Outbound>;
pub type OutboundRx = flume::Receiver<Outbound>;

#[derive(Debug, Clone, PartialEq)]
pub struct AttemptHandle {
    pub task: TaskKey,
    pub number: u32,
    pub token: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AssignSpec {
    pub attempt: AttemptHandle,
    pub base_commit: String,
    pub branch: String,
    pub title: String,
    pub task_text: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub owned_globs: Vec<String>,
    pub verify: Vec<VerifyTier>,
    pub idle_timeout_secs: u32,
    pub max_restarts: u32,
    pub setup: Vec<String>,
    pub setup_every_attempt: bool,
    pub traceparent: String,
    pub agent: Option<AgentAssign>,
    /// Set: a reviewer attempt, with the reviewed task's own base (for the
    /// diff the sidecar adds to its task text).
    pub review_diff_base: Option<String>,
    /// How the sidecar confines the worker.
    pub sandbox: std::sync::Arc<swarm_core::plan::SandboxSpec>,
    /// Where the sidecar reads each secret (never a value).
    pub secrets: BTreeMap<String, swarm_core::plan::SecretSource>,
    /// The child swarm the task's agent spawned before; empty when none.
    pub spawned_child: String,
}

/// The agent an attempt runs, and the session it may continue.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentAssign {
    pub spec: AgentSpec,
    /// Empty: a new session.
    pub resume_session: String,
    /// The swarm's prices, for the sidecar's estimate of each API call.
    pub prices: std::sync::Arc<swarm_core::plan::PriceTable>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    Welcome {
        session_id: String,
        heartbeat_interval_ms: u32,
        heartbeat_jitter_ms: u32,
        lease_ttl_ms: u32,
        last_applied_seq: u64,
        attempt_resumed: bool,
        resume_secret: String,
    },
    Assign(Box<AssignSpec>),
    Cancel {
        attempt: AttemptHandle,
        grace_ms: u32,
        reason: String,
        /// Keep the work (WIP commit, agent session) and report CHECKPOINT.
        checkpoint: bool,
    },
    Answer {
        attempt: AttemptHandle,
        question_id: String,
        text: String,
    },
    Message {
        attempt: AttemptHandle,
        message_id: String,
        text: String,
    },
    Ack {
        seq: u64,
    },
    Drain {
        reason: String,
    },
    /// Verify a merge queue's speculative merge.
    VerifyMerge(Box<VerifyMergeSpec>),
    /// Ends the session's stream with an error status; nothing follows it.
    Close {
        code: CloseCode,
        message: String,
    },
}

/// A merge queue's merged commit for a sidecar to verify.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyMergeSpec {
    pub job: u64,
    pub swarm: String,
    pub commit: String,
    pub tiers: Vec<VerifyTier>,
    /// `<swarm>/<task>#<n>` of every task merged in it.
    pub attempts: Vec<String>,
    /// Set as it leaves for the sidecar (see `api::sidecar`), like an
    /// Assign's.
    pub traceparent: String,
    /// The plan's `[merge_queue] sandbox`.
    pub sandbox: swarm_core::plan::SandboxSpec,
}

/// Why the scheduler ends a session, as the gRPC status the sidecar sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCode {
    /// Another sidecar holds the worker id.
    AlreadyExists,
    /// The report does not fit the protocol's state (a sequence gap).
    FailedPrecondition,
}

/// An attempt as a sidecar names it in a report.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReportedAttempt {
    pub task: TaskKey,
    pub number: u32,
    pub token: u64,
}

/// How a sidecar says it confined an attempt's worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxReported {
    pub mode: String,
    pub enforced: Vec<String>,
    pub missing: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct HelloInfo {
    pub worker_id: String,
    pub labels: BTreeMap<String, String>,
    pub host: String,
    pub last_acked_seq: u64,
    pub attempt_in_hand: Option<ReportedAttempt>,
    /// The secret the sidecar's last Welcome gave it; empty if it has none.
    pub resume_secret: String,
    /// The credential the stream was authenticated with, when there is one.
    pub principal: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ResultReport {
    pub attempt: ReportedAttempt,
    pub outcome: Outcome,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub commit: Option<String>,
    pub files_changed: Vec<String>,
    pub tiers: Vec<TierOutcome>,
    pub summary: String,
    pub error: String,
    pub log_tail: Vec<String>,
    pub category: String,
    /// Agent attempts: what was spent, and the session to resume.
    pub usage: Usage,
    pub session_id: String,
    /// RATE_LIMITED: when the limit resets (unix ms; 0 unknown) and its kind.
    pub rate_limit_reset_ms: u64,
    pub rate_limit_kind: String,
    /// A reviewer attempt's decision, as its reviewer left it.
    pub review: Option<ReviewVerdict>,
}

/// What a reviewer attempt decided (validated by the scheduler, which
/// knows the reviewed commit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReviewVerdict {
    pub decision: String,
    pub message: String,
    /// Why the sidecar could not read the decision; empty when it could.
    pub error: String,
}

/// Who a pack transfer says it is for.
#[derive(Debug, Clone)]
pub struct PackClaim {
    pub worker: String,
    pub resume_secret: String,
    pub principal: Option<String>,
    /// The attempt an upload belongs to; none for a download.
    pub attempt: Option<ReportedAttempt>,
}

/// What the forge said of a swarm's pull request, for the task that owns
/// it (`task: None`: no task could be named; the operator decides).
#[derive(Debug, Clone, PartialEq)]
pub struct ForgeFeedback {
    /// The forge's own id of it, so it is taken once (`check:<id>@<sha>`).
    pub key: String,
    pub task: Option<String>,
    /// One line: which check failed, or who commented on what.
    pub title: String,
    /// The log's end or the comment, clipped and with secrets redacted.
    pub text: String,
    /// A failed check (counted against `ci_retries`) rather than a review.
    pub is_check: bool,
}

/// What the scheduler made of a [`ForgeFeedback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedbackTaken {
    /// The task has a new attempt with it.
    Reopened,
    /// Taken before (the same forge id).
    Seen,
    /// Added to a task already going again; its next attempt reads it.
    Queued,
    /// Left to the operator: no task to give it to, or `ci_retries` spent.
    Asked,
}
