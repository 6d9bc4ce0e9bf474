//! Sub-swarms: a task with its own plan runs it as a child swarm.
//!
//! When such a task becomes READY it is not offered to a sidecar. Instead
//! the merger creates the task's branch at the parent's integration
//! head (the child's integration branch, so the child's merges land on the
//! task's branch), and the child swarm `<swarm>/<task>` is created on it and
//! scheduled like any other swarm, on the same fleet. The parent task is
//! RUNNING meanwhile, with an attempt of its own (no worker) whose base is
//! that head. When the child completes, its integration head is the
//! attempt's result and goes where every succeeded result goes
//! (`after_success`: review if asked for, then the merge path); when a child
//! task fails for good, or the child is cancelled, the parent task fails
//! (or is cancelled) naming the child's tasks. Cancel and retry of the
//! parent task reach the child. The hierarchy lives in the ids (`app/auth`
//! is the child of task `auth` of swarm `app`), so recovery after a restart
//! needs nothing stored beyond the swarms themselves.

use super::HashMap;
use std::sync::Arc;

use swarm_core::plan::{Plan, PlanError};
use swarm_core::{AttemptState, SwarmId, TaskKey, TaskState};
use tokio::sync::oneshot;

use super::model::{Attempt, SwarmState, Transition};
use super::{Effects, Scheduler};
use crate::error::SchedError;

/// The branch of a starting child swarm, on its way from the merger.
type BranchReply = oneshot::Receiver<Result<String, SchedError>>;

/// Sub-swarm tasks between READY and their child swarm's creation.
#[derive(Default)]
pub struct SubSwarms {
    /// READY sub-swarm tasks, started at the next tick.
    to_start: Vec<TaskKey>,
    /// Tasks whose child's branch the merger is making: (attempt, reply).
    branching: HashMap<TaskKey, (u32, BranchReply)>,
}

/// The worker field of a sub-swarm task's attempts: no sidecar holds them.
const NO_WORKER: &str = "";

/// A stored swarm's plan: a child swarm stores its root's plan text (the
/// only text the operator gave) and takes its own plan out of it.
pub fn stored_plan(id: &str, text: &str) -> Result<Arc<Plan>, PlanError> {
    let root = Arc::new(Plan::parse(text)?);
    let swarm = SwarmId::new(id).map_err(|rule| PlanError { path: "id".into(), rule })?;
    root.descendant(&swarm).ok_or_else(|| PlanError {
        path: "id".into(),
        rule: format!("swarm {id:?} is not its root plan's swarm or one of its sub-plans"),
    })
}

impl Scheduler {
    /// Called by `set_state` when a sub-swarm task becomes READY: no
    /// sidecar runs it (the model keeps it out of the ready queue); it is
    /// started at the next tick.
    pub(super) fn subswarm_ready(&mut self, key: &TaskKey) {
        if !self.subswarms.to_start.contains(key) {
            self.subswarms.to_start.push(key.clone());
        }
    }

    /// After recovery: READY sub-swarm tasks are started at the next tick,
    /// and a RUNNING one whose child was never created asks for it again.
    pub(super) fn recover_subswarms(&mut self) {
        let keys: Vec<(TaskKey, TaskState)> = self
            .shared
            .model
            .tasks()
            .values()
            .filter(|t| t.spec.subplan.is_some())
            .map(|t| (t.key.clone(), t.state()))
            .collect();
        self.shared.lease_seen.remove(NO_WORKER);
        for (key, state) in keys {
            if state == TaskState::Ready {
                self.subswarm_ready(&key);
            }
            let child = key.swarm.child(&key.task);
            if state == TaskState::Running && !self.shared.model.swarms().contains_key(&child) {
                self.request_branch(
                    &key,
                    self.shared.model.tasks().get(&key).map(|t| t.attempts).unwrap_or(0),
                );
            }
        }
    }

    /// Starts the READY sub-swarm tasks and creates the children whose
    /// branches are ready; called every tick.
    pub(super) fn tick_subswarms(&mut self, fx: &mut Effects) {
        for key in std::mem::take(&mut self.subswarms.to_start) {
            if self.shared.model.tasks().get(&key).is_some_and(|t| t.state() == TaskState::Ready) {
                self.start_subswarm(&key, fx);
            }
        }
        if self.subswarms.branching.is_empty() {
            return;
        }
        let mut done = Vec::new();
        for (key, (number, rx)) in &mut self.subswarms.branching {
            match rx.try_recv() {
                Ok(result) => done.push((key.clone(), *number, result)),
                Err(oneshot::error::TryRecvError::Empty) => {}
                Err(oneshot::error::TryRecvError::Closed) => {
                    done.push((key.clone(), *number, Err(SchedError::Unavailable("merger stopped".into()))))
                }
            }
        }
        for (key, number, result) in done {
            self.subswarms.branching.remove(&key);
            match result {
                Ok(head) => self.create_child(&key, number, &head, fx),
                Err(e) => {
                    let why = format!("could not create the child swarm's branch: {e}");
                    self.core(fx).set_attempt_state(&key, number, AttemptState::Failed);
                    self.core(fx).fail_or_retry(&key, number, &why);
                }
            }
        }
    }

    /// A new attempt for a READY sub-swarm task: a child that already
    /// exists (a retry) has its failed and cancelled tasks retried; a new
    /// one needs its branch first.
    fn start_subswarm(&mut self, key: &TaskKey, fx: &mut Effects) {
        let child = key.swarm.child(&key.task);
        let base = self
            .shared
            .model
            .swarms()
            .get(&key.swarm)
            .map(|s| s.integration_head.clone())
            .unwrap_or_default();
        if self.shared.model.swarms().get(&child).is_some_and(|s| s.state == SwarmState::Completed) {
            // Its result was refused or conflicted: merging the same head
            // again would meet the same answer, over and over.
            let why = format!(
                "sub-swarm {child} completed, but its result did not merge ({}); a completed child is not \
                 run again",
                self.shared.model.tasks().get(key).map(|t| t.reason.as_str()).unwrap_or_default()
            );
            self.core(fx).set_state(key, TaskState::Failed, &why);
            return;
        }
        let Some(task) = self.shared.model.tasks().get(key) else { return };
        let number = task.attempts + 1;
        self.core(fx).edit_task(key, |task| task.attempts = number);
        let span = tracing::info_span!("subswarm.start", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), child = %child);
        let _span = span.entered();
        let token = self.shared.next_token;
        self.shared.next_token += 1;
        let attempt = Attempt::begin(
            key.clone(),
            number,
            AttemptState::Running,
            NO_WORKER.to_string(),
            token,
            base,
            Default::default(),
        );
        self.core(fx).transition(Transition::AttemptAdded(attempt));
        self.core(fx).set_state(key, TaskState::Running, &format!("sub-swarm {child} (attempt {number})"));
        if self.shared.model.swarms().contains_key(&child) {
            self.resume_child(&child, fx);
        } else {
            self.request_branch(key, number);
        }
    }

    fn request_branch(&mut self, key: &TaskKey, number: u32) {
        let Some(parent) = self.shared.model.swarms().get(&key.swarm) else { return };
        let child = key.swarm.child(&key.task);
        let Some(plan) = parent.plan.descendant(&child) else { return };
        match self.merger.ensure_branch_later(&plan.integration_branch, &parent.plan.integration_branch) {
            Ok(rx) => {
                self.subswarms.branching.insert(key.clone(), (number, rx));
            }
            Err(e) => tracing::error!(task = %key, error = %e, "child swarm's branch not requested"),
        }
    }

    /// The child swarm of `key`, on its branch at `head`.
    fn create_child(&mut self, key: &TaskKey, number: u32, head: &str, fx: &mut Effects) {
        let child = key.swarm.child(&key.task);
        let Some(parent) = self.shared.model.swarms().get(&key.swarm) else { return };
        let Some(plan) = parent.plan.descendant(&child) else { return };
        // A child stores its root's plan text; `stored_plan` finds it again.
        let root = SwarmId::new(key.swarm.root()).ok();
        let Some(text) = root.and_then(|r| self.shared.model.swarms().get(&r)).map(|s| s.plan_text.clone())
        else {
            return;
        };
        self.core(fx).edit_attempt(key, number, |a| a.base_commit = head.to_string());
        let _span = tracing::info_span!("subswarm.create", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), child = %child).entered();
        fx.task_event(
            key,
            number,
            "",
            "task.subswarm",
            format!("child swarm {child} created at {head}"),
            serde_json::json!({ "child": child.as_str(), "head": head, "tasks": plan.tasks.len() }),
        );
        self.insert_swarm(text, plan, head, fx);
    }

    /// A retried parent: its child's failed and cancelled tasks get new
    /// attempts.
    fn resume_child(&mut self, child: &SwarmId, fx: &mut Effects) {
        let keys = self.shared.model.swarms().get(child).map(|s| s.tasks.clone()).unwrap_or_default();
        for k in keys {
            let state = self.shared.model.tasks().get(&k).map(|t| t.state());
            if matches!(state, Some(TaskState::Failed | TaskState::Cancelled))
                && let Err(e) = self.retry_task(&k, fx)
            {
                tracing::warn!(task = %k, error = %e, "child task not retried");
            }
        }
        if self.shared.model.swarms().get(child).is_some_and(|s| s.state != SwarmState::Active) {
            self.core(fx).edit_swarm(child, |s| s.state = SwarmState::Active);
        }
        fx.touched_swarms.insert(child.clone());
    }

    /// Cancelling a RUNNING sub-swarm task cancels its child swarm; the
    /// task is CANCELLED once the child has stopped.
    pub(super) fn cancel_child(&mut self, key: &TaskKey, reason: &str, fx: &mut Effects) {
        let child = key.swarm.child(&key.task);
        if self.subswarms.branching.remove(key).is_some() {
            // Nothing runs yet: the task stops here.
            let number = self.shared.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
            self.core(fx).set_attempt_state(key, number, AttemptState::Cancelled);
            self.core(fx).set_state(key, TaskState::Cancelled, reason);
            return;
        }
        if self
            .shared
            .model
            .swarms()
            .get(&child)
            .is_some_and(|s| matches!(s.state, SwarmState::Active | SwarmState::Stalled | SwarmState::Paused))
            && let Err(e) = self.cancel_swarm(child.as_str(), reason, fx)
        {
            tracing::warn!(child = %child, error = %e, "child swarm not cancelled");
        }
        fx.touched_swarms.insert(child);
    }

    /// After a swarm's state is refreshed: a child swarm's progress shows on
    /// its parent task, and its end decides the parent task's attempt.
    pub(super) fn after_swarm_refresh(&mut self, id: &SwarmId, fx: &mut Effects) {
        let Some(parent) = id.parent() else { return };
        let Some(child) = self.shared.model.swarms().get(id) else { return };
        let total = child.tasks.len() as u32;
        let merged = child.count(TaskState::Merged);
        let state = child.state;
        let head = child.integration_head.clone();
        let Some(task) = self.shared.model.tasks().get(&parent) else { return };
        if task.state() != TaskState::Running {
            return;
        }
        let number = task.attempts;
        let cancel_requested = task.cancel_requested;
        // Progress, not stored: the child's counts say it again.
        self.core(fx).edit_task_unstored(&parent, |task| {
            task.percent = (merged * 100).checked_div(total).unwrap_or(0);
            task.step = format!("sub-swarm {id}: {merged}/{total} merged, {}", state.as_str());
        });
        // A STALLED child waits on the operator, and so does its parent task:
        // the parent swarm is refreshed when that starts or ends.
        self.core(fx)
            .transition(Transition::ChildStalled { parent: &parent, stalled: state == SwarmState::Stalled });
        let failed = self.failed_children(id);
        let _span = tracing::info_span!("subswarm.result", swarm = %parent.swarm, task = %parent, attempt = %parent.attempt(number), child = %id).entered();
        match state {
            SwarmState::Completed => {
                self.core(fx).edit_attempt(&parent, number, |a| {
                    a.result_commit = head.clone();
                    a.summary = format!("sub-swarm {id} completed");
                });
                self.core(fx).edit_task(&parent, |t| {
                    t.result_commit = head.clone();
                    t.notes.summary = format!("sub-swarm {id}: {total} tasks merged");
                });
                self.core(fx).set_attempt_state(&parent, number, AttemptState::Succeeded);
                self.core(fx).set_state(&parent, TaskState::Succeeded, &format!("sub-swarm {id} completed"));
                // The way every succeeded result goes: review, if the plan
                // asks for one, then the merge path.
                self.after_success(&parent, number, fx);
            }
            _ if cancel_requested && matches!(state, SwarmState::Cancelled | SwarmState::Failed) => {
                self.core(fx).set_attempt_state(&parent, number, AttemptState::Cancelled);
                self.core(fx).set_state(&parent, TaskState::Cancelled, &format!("sub-swarm {id} cancelled"));
            }
            SwarmState::Cancelled | SwarmState::Failed | SwarmState::Stalled if !failed.is_empty() => {
                let why = format!("sub-swarm {id} failed: {}", failed.join(", "));
                self.core(fx).edit_attempt(&parent, number, |a| a.error = why.clone());
                self.core(fx).set_attempt_state(&parent, number, AttemptState::Failed);
                self.core(fx)
                    .edit_task(&parent, |t| t.notes.failures.push(format!("attempt {number}: {why}")));
                // The child already spent its own tasks' retries.
                self.core(fx).set_state(&parent, TaskState::Failed, &why);
            }
            _ => {}
        }
    }

    /// The child's tasks that ended FAILED or CANCELLED, with their reasons.
    fn failed_children(&self, id: &SwarmId) -> Vec<String> {
        let Some(child) = self.shared.model.swarms().get(id) else { return Vec::new() };
        child
            .tasks
            .iter()
            .filter_map(|k| self.shared.model.tasks().get(k))
            .filter(|t| matches!(t.state(), TaskState::Failed | TaskState::Cancelled))
            .map(|t| format!("{} {} ({})", t.key, t.state(), t.reason))
            .collect()
    }
}
