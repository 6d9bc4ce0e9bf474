//! An agent's sub-swarm: its `spawn` and `wait_children` tools.
//!
//! `spawn` asks the controller for the child swarm `<swarm>/<task>` of the
//! given tasks, which runs on other sidecars of the fleet while the agent
//! keeps its worktree and session. The child's merges land on a branch of
//! its own beside the task's (`swarm/app/auth.spawned`), starting at the
//! attempt's base, so the worktree goes on publishing to the task's branch.
//!
//! `wait_children` polls the controller until the child completes, stalls
//! on the operator, fails or is cancelled, or the call's time is up. When
//! it completed, the worktree takes its work ([`merge`]): the agent's own
//! work is committed first, the child's head is merged onto it, and the
//! worktree (and the agent's private git) stands on the merge.
//! If the agent ends its turn without having waited, the attempt waits for
//! it before it delivers (see `attempt::agent`), so a result never leaves
//! the child's work out.
//!
//! Every call is retried while the controller is away (a restart, a
//! failover): both are idempotent there.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use swarm_proto::convert::AttemptRef;
use swarm_proto::v1;
use tokio::time::Instant;

use crate::changes::SharedTracker;
use crate::link::ControllerLink;
use crate::remote::Remote;

pub mod merge;

/// How long a call waits for a controller that is away before it gives
/// up: longer than a restart or a failover takes.
const UNAVAILABLE_PATIENCE: Duration = Duration::from_secs(120);
/// How often `wait_children` asks how the child is doing.
const POLL: Duration = Duration::from_secs(1);
/// The longest one `wait_children` call waits, and its default.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
pub const DEFAULT_WAIT: Duration = Duration::from_secs(600);

/// What a child needs from the attempt that spawns it.
pub struct Setting {
    pub link: ControllerLink,
    pub attempt: AttemptRef,
    pub repo: PathBuf,
    pub worktree: PathBuf,
    pub remote: Option<Remote>,
    pub tracker: SharedTracker,
}

/// The attempt's child swarm, shared by its tool calls and its end.
#[derive(Clone)]
pub struct Children {
    setting: Arc<Setting>,
    state: Arc<Mutex<State>>,
    /// One merge into the worktree at a time.
    merging: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Debug, Default)]
struct State {
    /// The child's id, once spawned.
    spawned: Option<String>,
    /// The child's head last merged into the worktree.
    merged: Option<String>,
    /// `wait_children` calls in progress.
    waits: usize,
}

/// How a wait ended.
#[derive(Debug)]
pub struct Waited {
    /// The tool's result for the agent.
    pub result: serde_json::Value,
    /// The child completed and its work is in the worktree.
    pub merged: bool,
}

impl Children {
    /// The attempt's children; `spawned`, the child an earlier attempt of
    /// the task spawned, whose work this one must take too.
    pub fn new(setting: Setting, spawned: Option<String>) -> Children {
        let state = State { spawned, ..State::default() };
        Children { setting: Arc::new(setting), state: Arc::new(Mutex::new(state)), merging: Arc::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A `wait_children` is in progress: the agent waits on its children,
    /// not idle.
    pub fn waiting(&self) -> bool {
        self.state().waits > 0
    }

    /// The child spawned this attempt whose work is not in the worktree yet.
    pub fn unmerged(&self) -> Option<String> {
        let state = self.state();
        state.spawned.clone().filter(|_| state.merged.is_none())
    }

    /// Starts the child of the tasks in `plan_toml`.
    pub async fn spawn(&self, plan_toml: String) -> Result<serde_json::Value, String> {
        let (link, attempt) = (&self.setting.link, &self.setting.attempt);
        let status = patiently(|| link.spawn_children(attempt, &plan_toml)).await?;
        self.state().spawned = Some(status.swarm.clone());
        let mut result = view(&status);
        result["next"] = json!(
            "The child tasks run now on other workers, each in its own worktree; yours does not change \
             meanwhile. Do not edit the files they own. Call wait_children to wait for them and take \
             their work into this worktree."
        );
        Ok(result)
    }

    /// Waits up to `timeout` for the child to end or need the operator;
    /// merges its work when it completed.
    pub async fn wait(&self, timeout: Duration) -> Result<Waited, String> {
        let _waiting = WaitGuard::new(self);
        let deadline = Instant::now() + timeout.min(MAX_WAIT);
        let (link, attempt) = (&self.setting.link, &self.setting.attempt);
        loop {
            let status = patiently(|| link.children(attempt)).await?;
            if status.swarm.is_empty() {
                return Err("this task has spawned no child swarm: call spawn first".into());
            }
            self.state().spawned.get_or_insert_with(|| status.swarm.clone());
            match status.state.as_str() {
                "COMPLETED" => return self.take_work(&status).await,
                "FAILED" | "CANCELLED" | "STALLED" => return Ok(ended(&status)),
                _ => {}
            }
            if Instant::now() + POLL > deadline {
                let mut result = view(&status);
                result["done"] = json!(false);
                result["next"] = json!("Still running. Call wait_children again to keep waiting.");
                return Ok(Waited { result, merged: false });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Merges the completed child's head into the worktree.
    async fn take_work(&self, status: &v1::ChildrenStatus) -> Result<Waited, String> {
        let _one = self.merging.lock().await;
        let head = status.integration_head.clone();
        let mut result = view(status);
        result["done"] = json!(true);
        if self.state().merged.as_deref() == Some(head.as_str()) {
            result["next"] = json!("Their work is already in your worktree.");
            return Ok(Waited { result, merged: true });
        }
        if let Some(remote) = &self.setting.remote {
            remote.ensure_commit(&self.setting.repo, &head).await.map_err(|e| {
                format!("the children's work (commit {head}) could not be fetched from the controller: {e}")
            })?;
        }
        let into = merge::Into {
            worktree: self.setting.worktree.clone(),
            child: status.swarm.clone(),
            head: head.clone(),
            attempt: self.setting.attempt.task.attempt(self.setting.attempt.number).to_string(),
            tracker: self.setting.tracker.clone(),
        };
        let merged = tokio::task::spawn_blocking(move || merge::take(&into))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        self.state().merged = Some(head);
        result["merge_commit"] = json!(merged.to_string());
        result["next"] = json!(format!(
            "Their work is now in your worktree (commit {merged}, on top of your own work so far). \
             Check it fits together, finish the task, then end your turn."
        ));
        Ok(Waited { result, merged: true })
    }
}

/// Counts a wait in progress for as long as it lasts.
struct WaitGuard<'a>(&'a Children);

impl<'a> WaitGuard<'a> {
    fn new(children: &'a Children) -> WaitGuard<'a> {
        children.state().waits += 1;
        WaitGuard(children)
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.waits = state.waits.saturating_sub(1);
    }
}

/// A call retried while the controller is away; any other refusal is the
/// tool's error, in the controller's words.
async fn patiently<T, F, Fut>(mut call: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + UNAVAILABLE_PATIENCE;
    let mut pause = Duration::from_millis(250);
    // A connection cut mid-call (the controller killed) comes back as
    // Unknown ("transport error"); the controller itself never answers so.
    let away = |s: &tonic::Status| {
        matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
    };
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(s) if away(&s) && Instant::now() + pause < deadline => {
                tracing::info!(error = %s.message(), "the controller is away; asking again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(s) if away(&s) => {
                return Err(format!("the controller did not answer: {}", s.message()));
            }
            Err(s) => return Err(s.message().to_string()),
        }
    }
}

/// The child as the agent reads it.
fn view(status: &v1::ChildrenStatus) -> serde_json::Value {
    let tasks: Vec<serde_json::Value> = status
        .tasks
        .iter()
        .map(|t| {
            let state = v1::TaskState::try_from(t.state).unwrap_or(v1::TaskState::Unspecified);
            json!({
                "id": t.id,
                "state": state.as_str_name().trim_start_matches("TASK_STATE_"),
                "reason": t.reason,
                "summary": t.summary,
                "merge_commit": t.merge_commit,
            })
        })
        .collect();
    json!({ "child": status.swarm, "state": status.state, "tasks": tasks })
}

/// A child that ended without completing, or waits on the operator.
fn ended(status: &v1::ChildrenStatus) -> Waited {
    let mut result = view(status);
    result["done"] = json!(true);
    let next = match status.state.as_str() {
        "STALLED" => format!(
            "The child waits on the operator ({}). Nothing of it is in your worktree yet. Call \
             wait_children again to wait for them, or escalate.",
            status.stalled
        ),
        state => format!(
            "The child is {state}: see each task's state and reason. Nothing of it is in your worktree. \
             You decide: call spawn again with the same tasks to retry the failed ones, do their part \
             yourself, or escalate."
        ),
    };
    result["next"] = json!(next);
    Waited { result, merged: false }
}
