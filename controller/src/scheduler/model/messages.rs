//! What the scheduler sends to sidecars, in domain terms; the Sidecar API
//! turns these into `swarm.v1.ControllerMessage`s. A worker's session
//! queues them, so they sit beside the rows.

use std::collections::BTreeMap;

use swarm_core::TaskKey;
use swarm_core::plan::{AgentSpec, VerifyTier};

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
}

/// The agent an attempt runs, and the session it may continue.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentAssign {
    pub spec: AgentSpec,
    /// Empty: a new session.
    pub resume_session: String,
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
