//! The validated shapes of a task: what a plan's `[[tasks]]` become once
//! every check has passed, and the policy enums their fields take.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use super::Plan;
use super::agent::AgentSpec;
use super::budget::{Budget, OnUsageLimit};
use super::fields::VerifyTier;
use super::review::ReviewSpec;
use super::sandbox::SandboxSpec;
use super::secrets::SecretSource;
use crate::ids::TaskId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MergeStrategy {
    /// A no-fast-forward merge commit naming the task and attempt.
    #[default]
    Merge,
    /// One commit carrying the task's summary.
    Squash,
    /// The task's commits replayed onto the integration head.
    Rebase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ConflictPolicy {
    /// Start a new attempt from the current integration head, with the
    /// conflict described in its task text.
    #[default]
    Return,
    /// Wait for the operator's RetryTask.
    Hold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OwnershipPolicy {
    /// Refuse a result that touches files outside the task's globs.
    #[default]
    Enforce,
    /// Merge it, and record a warning event.
    Warn,
}

macro_rules! text_enum {
    ($ty:ident { $($variant:ident = $text:literal),+ }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
text_enum!(MergeStrategy { Merge = "merge", Squash = "squash", Rebase = "rebase" });
text_enum!(ConflictPolicy { Return = "return", Hold = "hold" });
text_enum!(OwnershipPolicy { Enforce = "enforce", Warn = "warn" });

/// When a task's setup commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SetupOn {
    /// When the sidecar makes its worktree (the worktree, and its build
    /// caches, are then reused across tasks).
    #[default]
    Create,
    /// Before every attempt.
    Attempt,
}
text_enum!(SetupOn { Create = "create", Attempt = "attempt" });

/// What a succeeded attempt that changed no file comes to: an agent that
/// claims success without an edit has usually failed quietly (its commands
/// never ran), while a command may rightly have nothing to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnEmpty {
    /// The attempt fails with "no change", retried like any failure (the
    /// default for agent tasks).
    Fail,
    /// It merges, and the task says it changed nothing (the default for
    /// command tasks).
    Merge,
}
text_enum!(OnEmpty { Fail = "fail", Merge = "merge" });

/// Exponential backoff with jitter, in the spirit of Temporal and Nomad.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 2 by default.
    pub max_retries: u32,
    pub initial_backoff_ms: u64,
    pub multiplier: f64,
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 2, initial_backoff_ms: 1_000, multiplier: 2.0, max_backoff_ms: 60_000 }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (1-based), before jitter.
    pub fn backoff_ms(&self, retry: u32) -> u64 {
        let exp = self.multiplier.powi(retry.saturating_sub(1).min(63) as i32);
        let raw = (self.initial_backoff_ms as f64) * exp;
        if raw.is_finite() { (raw as u64).min(self.max_backoff_ms) } else { self.max_backoff_ms }
    }
}

/// One validated task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub id: TaskId,
    pub title: String,
    pub prompt: String,
    pub context: String,
    pub acceptance: Vec<String>,
    pub deps: Vec<TaskId>,
    /// Owned file globs, relative to the repository root.
    pub files: Vec<String>,
    pub verify: Vec<VerifyTier>,
    pub retry: RetryPolicy,
    /// Labels a worker must carry (equal values) to take this task; shared
    /// with the defaults when the task adds none (a one-entry BTreeMap costs
    /// half a kilobyte, times every task of a big plan).
    pub labels: Arc<BTreeMap<String, String>>,
    /// The worker's argv; shared with the defaults' when the task sets no
    /// command of its own (one `sh -c` argv is ~140 bytes, times every task).
    pub command: Arc<[String]>,
    pub env: BTreeMap<String, String>,
    pub idle_timeout_secs: u32,
    pub max_restarts: u32,
    pub strategy: MergeStrategy,
    pub on_conflict: ConflictPolicy,
    pub ownership: OwnershipPolicy,
    pub setup: Vec<String>,
    pub setup_on: SetupOn,
    pub on_empty: OnEmpty,
    /// Set: a coding agent runs the task and `command` is empty. Boxed: most
    /// tasks run a command, and the agent's settings would cost each of
    /// them a few hundred bytes inline.
    pub agent: Option<Box<AgentSpec>>,
    /// Set: the task runs this plan as a child swarm (`<swarm>/<task>`)
    /// instead of a worker, and `command` is empty.
    pub subplan: Option<Arc<Plan>>,
    /// Set: a succeeded result waits in REVIEW for this reviewer (or the
    /// operator) before the merge path; shared with the defaults'.
    pub review: Option<Arc<ReviewSpec>>,
    /// How the worker is confined (shared with the defaults unless the
    /// task sets its own).
    pub sandbox: Arc<SandboxSpec>,
    /// Variables the sidecar reads from its machine for this task's worker
    /// only: the sources, never the values.
    pub secrets: BTreeMap<String, SecretSource>,
    /// What its agent attempts may spend, all together.
    pub budget: Budget,
    pub on_usage_limit: OnUsageLimit,
    /// Higher runs first among READY tasks; the swarm's own `priority` is
    /// added to it when tasks are ranked.
    pub priority: i32,
    /// How long the task is expected to take, in milliseconds: its weight
    /// on the critical path. `None`: what the swarm's tasks took so far.
    pub estimate_ms: Option<u64>,
}
