//! What the scheduler sends to sidecars, in domain terms; the Sidecar API
//! turns these into `swarm.v1.ControllerMessage`s.

use std::collections::BTreeMap;

use swarm_core::TaskKey;
use swarm_core::plan::VerifyTier;

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
    },
    Answer {
        attempt: AttemptHandle,
        question_id: String,
        text: String,
    },
    Ack {
        seq: u64,
    },
    Drain {
        reason: String,
    },
    /// Ends the session's stream with an error status; nothing follows it.
    Close {
        code: CloseCode,
        message: String,
    },
}

/// Why the scheduler ends a session, as the gRPC status the sidecar sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCode {
    /// Another sidecar holds the worker id.
    AlreadyExists,
    /// The report does not fit the protocol's state (a sequence gap).
    FailedPrecondition,
}
