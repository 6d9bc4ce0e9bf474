//! What an attempt is given: the validated Assign (see [`crate::wire`] for
//! its checks) and the sidecar's own setting it runs in.

use std::path::PathBuf;
use std::time::Duration;

use swarm_proto::convert::AttemptRef;

use crate::agent::AgentConfig;
use crate::verify::Tier;

/// A validated Assign.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub attempt: AttemptRef,
    pub base_commit: String,
    pub branch: String,
    pub title: String,
    pub task_text: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub verify: Vec<Tier>,
    pub idle_timeout: Option<Duration>,
    pub max_restarts: u32,
    pub traceparent: String,
    pub setup: Vec<String>,
    pub setup_every_attempt: bool,
    /// Set: a coding agent is the worker (and `command` is empty).
    pub agent: Option<AgentConfig>,
    pub owned_globs: Vec<String>,
    /// Set: a reviewer attempt (see [`crate::review`]), with the reviewed
    /// task's own base for the diff in its task text.
    pub review: Option<String>,
    /// How the worker is confined (see [`crate::sandbox`]).
    pub sandbox: crate::sandbox::Settings,
    /// Where to read the worker's secrets (see [`crate::secrets`]).
    pub secrets: Vec<(String, swarm_core::plan::SecretSource)>,
    /// The child swarm an earlier attempt's agent spawned (see
    /// [`crate::children`]): its work goes into this attempt's result.
    pub spawned_child: Option<String>,
}

impl Assignment {
    /// `swarm/task#n`.
    pub fn label(&self) -> String {
        self.attempt.task.attempt(self.attempt.number).to_string()
    }
}

/// What the driver needs besides the assignment.
#[derive(Debug, Clone)]
pub struct Context {
    pub repo: PathBuf,
    /// Where the worker's worktree and its private directories live.
    pub workspaces: crate::worktree::Workspaces,
    pub worker_id: String,
    /// Grace between signals when the sidecar itself stops a worker.
    pub stop_grace: Duration,
    /// Used when the Assign has no idle timeout.
    pub default_idle_timeout: Option<Duration>,
    pub remote: Option<crate::remote::Remote>,
    /// The session's calls to the controller (the agent's `context` tool).
    pub link: crate::link::ControllerLink,
    /// The executable run as `<exe> __supervise ...` to supervise workers
    /// (the sidecar's own binary; see [`crate::supervisor`]).
    pub supervisor: PathBuf,
    /// What changed in the worktree since its last checkout or commit,
    /// kept across attempts (see [`crate::changes`]).
    pub tracker: crate::changes::SharedTracker,
    /// A supervisor started ahead of the next worker, kept across attempts
    /// (see [`crate::supervisor::StandbySlot`]).
    pub standby: crate::supervisor::StandbySlot,
    /// What this sidecar's kernel enforces of the worker sandbox (probed
    /// once at start).
    pub sandbox: crate::sandbox::Capability,
    /// Where this sidecar makes its attempts' cgroups, if anywhere (probed
    /// once at start).
    pub cgroups: crate::sandbox::Cgroups,
    /// The user the attempt's processes run as, when not the sidecar's
    /// (`--worker-user`; see [`crate::sandbox::worker_user`]).
    pub worker_user: Option<crate::sandbox::WorkerUser>,
    /// Set once the attempt's secrets are read: the session redacts their
    /// values from every report of the attempt.
    pub redactor: std::sync::Arc<std::sync::OnceLock<crate::secrets::Redactor>>,
}

/// A worker left running (or finished) by an earlier sidecar process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adopted {
    /// The supervisor's pid, from the journal.
    pub pid: u32,
    pub restarts: u32,
}
