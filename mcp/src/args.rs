//! The tools' arguments. Their doc comments are the descriptions a model
//! reads in each tool's input schema, so they say what to pass and why.

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanArgs {
    /// The whole plan file as TOML: top-level `name` (the swarm's id) and
    /// `base_branch`, then one `[[tasks]]` table per task with `id`,
    /// `prompt` (for an agent) or `command` (argv of a program), `deps` (ids
    /// of tasks that must merge first), `files` (globs of the files it
    /// alone may change), and optionally `title`, `acceptance`, `verify`.
    pub plan_toml: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwarmArgs {
    /// The swarm's id (its plan's `swarm.name`; a child swarm's is
    /// `parent/task`).
    pub swarm: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksArgs {
    /// The swarm whose tasks to list.
    pub swarm: String,
    /// Only tasks in these states (PENDING, READY, RUNNING, SUCCEEDED,
    /// MERGING, MERGED, FAILED, CONFLICT, BLOCKED, ESCALATED, CANCELLED,
    /// REVIEW, REJECTED); empty or absent: all.
    #[serde(default)]
    pub states: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    /// The task as `SWARM/TASK`, e.g. `app/api`.
    pub task: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextArgs {
    /// The task as `SWARM/TASK`.
    pub task: String,
    /// What to say: for `answer` the answer to the task's pending question
    /// (one of its options, its number, or free text); for `message` the
    /// message its worker reads next.
    pub text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewArgs {
    /// The task in REVIEW, as `SWARM/TASK`.
    pub task: String,
    /// `approve` (it goes on to merge), `request-changes` (a new attempt
    /// with `message` in its task text) or `reject` (REJECTED, its branch
    /// kept).
    pub decision: String,
    /// Why; required for `request-changes`, where it is what the worker
    /// is asked to change.
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    /// The task to cancel, as `SWARM/TASK`; give this or `swarm`.
    #[serde(default)]
    pub task: Option<String>,
    /// The swarm to cancel whole (every task not yet ended); give this or
    /// `task`.
    #[serde(default)]
    pub swarm: Option<String>,
    /// Why, kept in the event log.
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LandArgs {
    /// The COMPLETED swarm whose integration branch to land.
    pub swarm: String,
    /// The branch to move; absent: the plan's `target_branch`.
    #[serde(default)]
    pub target_branch: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// Wait on this swarm's state (ACTIVE, STALLED, PAUSED, LANDING, COMPLETED,
    /// FAILED, CANCELLED); give this or `task`.
    #[serde(default)]
    pub swarm: Option<String>,
    /// Wait on this task's state, as `SWARM/TASK`; give this or `swarm`.
    #[serde(default)]
    pub task: Option<String>,
    /// Return when the swarm or task is in one of these states. Absent or
    /// empty: any end state (a swarm's COMPLETED, FAILED, CANCELLED, or
    /// LANDING: every task merged and its pull request open; a task's
    /// MERGED, FAILED, CANCELLED, REJECTED).
    #[serde(default)]
    pub states: Vec<String>,
    /// Give up after this many seconds (default 300, at most 3600) and say
    /// so; call again to keep waiting.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}
