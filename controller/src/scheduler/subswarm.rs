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
//!
//! `SubSwarms` is a component: it works on the core and imports no other.
//! A succeeded child's result, and a cancel that must reach the child's
//! own tasks, go back to the dispatcher, which owns the review gate and
//! the operator's cancel.

use std::sync::Arc;

use swarm_core::plan::{Plan, PlanError};
use swarm_core::{AttemptState, SwarmId, TaskKey, TaskState};
use tokio::sync::oneshot;

use super::core::Core;
use super::model::{Attempt, HashMap, Model, SwarmState, Transition};
use crate::error::SchedError;
use crate::merger::MergerHandle;

/// The branch of a starting child swarm, on its way from the merger.
type BranchReply = oneshot::Receiver<Result<String, SchedError>>;

/// Sub-swarm tasks between READY and their child swarm's creation.
#[derive(Default)]
pub(super) struct SubSwarms {
    /// READY sub-swarm tasks, started at the next tick.
    to_start: Vec<TaskKey>,
    /// Tasks whose child's branch the merger is making: (attempt, reply).
    branching: HashMap<TaskKey, (u32, BranchReply)>,
}

/// The worker field of a sub-swarm task's attempts: no sidecar holds them.
pub(super) const NO_WORKER: &str = "";

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

impl SubSwarms {
    /// A sub-swarm task became READY: no sidecar runs it (the model keeps
    /// it out of the ready queue); it is started at the next tick.
    pub fn ready(&mut self, key: &TaskKey) {
        if !self.to_start.contains(key) {
            self.to_start.push(key.clone());
        }
    }

    /// After recovery: READY sub-swarm tasks are started at the next tick,
    /// and a RUNNING one whose child was never created asks for it again.
    pub fn recover(&mut self, model: &Model, merger: &MergerHandle) {
        let keys: Vec<(TaskKey, TaskState)> = model
            .tasks()
            .values()
            .filter(|t| t.spec.subplan.is_some())
            .map(|t| (t.key.clone(), t.state()))
            .collect();
        for (key, state) in keys {
            if state == TaskState::Ready {
                self.ready(&key);
            }
            let child = key.swarm.child(&key.task);
            if state == TaskState::Running && !model.swarms().contains_key(&child) {
                let number = model.tasks().get(&key).map(|t| t.attempts).unwrap_or(0);
                self.request_branch(model, merger, &key, number);
            }
        }
    }

    /// Starts the READY sub-swarm tasks and creates the children whose
    /// branches are ready; called every tick.
    pub fn tick(&mut self, core: &mut Core, merger: &MergerHandle) {
        for key in std::mem::take(&mut self.to_start) {
            if core.model.tasks().get(&key).is_some_and(|t| t.state() == TaskState::Ready) {
                self.start(core, merger, &key);
            }
        }
        if self.branching.is_empty() {
            return;
        }
        let mut done = Vec::new();
        for (key, (number, rx)) in &mut self.branching {
            match rx.try_recv() {
                Ok(result) => done.push((key.clone(), *number, result)),
                Err(oneshot::error::TryRecvError::Empty) => {}
                Err(oneshot::error::TryRecvError::Closed) => {
                    done.push((key.clone(), *number, Err(SchedError::Unavailable("merger stopped".into()))))
                }
            }
        }
        for (key, number, result) in done {
            self.branching.remove(&key);
            match result {
                Ok(head) => create_child(core, &key, number, &head),
                Err(e) => {
                    let why = format!("could not create the child swarm's branch: {e}");
                    core.set_attempt_state(&key, number, AttemptState::Failed);
                    core.fail_or_retry(&key, number, &why);
                }
            }
        }
    }

    /// A new attempt for a READY sub-swarm task: a child that already
    /// exists (a retry) has its failed and cancelled tasks retried; a new
    /// one needs its branch first.
    fn start(&mut self, core: &mut Core, merger: &MergerHandle, key: &TaskKey) {
        let child = key.swarm.child(&key.task);
        let base =
            core.model.swarms().get(&key.swarm).map(|s| s.integration_head.clone()).unwrap_or_default();
        if core.model.swarms().get(&child).is_some_and(|s| s.state == SwarmState::Completed) {
            // Its result was refused or conflicted: merging the same head
            // again would meet the same answer, over and over.
            let why = format!(
                "sub-swarm {child} completed, but its result did not merge ({}); a completed child is not \
                 run again",
                core.model.tasks().get(key).map(|t| t.reason.as_str()).unwrap_or_default()
            );
            core.to_failed(key, &why);
            return;
        }
        let Some(task) = core.model.tasks().get(key) else { return };
        let number = task.attempts + 1;
        core.edit_task(key, |task| task.attempts = number);
        let span = tracing::info_span!("subswarm.start", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), child = %child);
        let _span = span.entered();
        let token = core.next_token();
        let attempt = Attempt::begin(
            key.clone(),
            number,
            AttemptState::Running,
            NO_WORKER.to_string(),
            token,
            base,
            Default::default(),
        );
        core.transition(Transition::AttemptAdded(attempt));
        core.to_running(key, &format!("sub-swarm {child} (attempt {number})"));
        if core.model.swarms().contains_key(&child) {
            resume_child(core, &child);
        } else {
            self.request_branch(core.model, merger, key, number);
        }
    }

    fn request_branch(&mut self, model: &Model, merger: &MergerHandle, key: &TaskKey, number: u32) {
        let Some(parent) = model.swarms().get(&key.swarm) else { return };
        let child = key.swarm.child(&key.task);
        let Some(plan) = parent.plan.descendant(&child) else { return };
        match merger.ensure_branch_later(&plan.integration_branch, &parent.plan.integration_branch) {
            Ok(rx) => {
                self.branching.insert(key.clone(), (number, rx));
            }
            Err(e) => tracing::error!(task = %key, error = %e, "child swarm's branch not requested"),
        }
    }

    /// Cancelling a RUNNING sub-swarm task cancels its child swarm; the
    /// task is CANCELLED once the child has stopped. Returns the child
    /// when it is live, for the dispatcher to cancel as the operator would.
    pub fn cancel_child(&mut self, core: &mut Core, key: &TaskKey, reason: &str) -> Option<SwarmId> {
        let child = key.swarm.child(&key.task);
        if self.branching.remove(key).is_some() {
            // Nothing runs yet: the task stops here.
            let number = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
            core.set_attempt_state(key, number, AttemptState::Cancelled);
            core.to_cancelled(key, reason);
            return None;
        }
        core.fx.touched_swarms.insert(child.clone());
        core.model.swarms().get(&child).is_some_and(|s| s.state.is_live()).then_some(child)
    }
}

/// The child swarm of `key`, on its branch at `head`.
fn create_child(core: &mut Core, key: &TaskKey, number: u32, head: &str) {
    let child = key.swarm.child(&key.task);
    let Some(parent) = core.model.swarms().get(&key.swarm) else { return };
    let Some(plan) = parent.plan.descendant(&child) else { return };
    // A child stores its parent's plan text, which holds it (the root's,
    // unless an agent spawned an ancestor: then the text that spawn
    // composed); `stored_plan` finds it again.
    let text = parent.plan_text.clone();
    core.edit_attempt(key, number, |a| a.base_commit = head.to_string());
    let _span = tracing::info_span!("subswarm.create", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), child = %child).entered();
    core.fx.task_event(
        key,
        number,
        "",
        "task.subswarm",
        format!("child swarm {child} created at {head}"),
        serde_json::json!({ "child": child.as_str(), "head": head, "tasks": plan.tasks.len() }),
    );
    core.insert_swarm(text, plan, head);
}

/// A retried parent (or an agent spawning the same child again): its
/// child's failed and cancelled tasks get new attempts.
pub(super) fn resume_child(core: &mut Core, child: &SwarmId) {
    let keys = core.model.swarms().get(child).map(|s| s.tasks.clone()).unwrap_or_default();
    for k in keys {
        let state = core.model.tasks().get(&k).map(|t| t.state());
        if matches!(state, Some(TaskState::Failed | TaskState::Cancelled))
            && let Err(e) = core.retry(&k)
        {
            tracing::warn!(task = %k, error = %e, "child task not retried");
        }
    }
    if core.model.swarms().get(child).is_some_and(|s| s.state != SwarmState::Active) {
        core.edit_swarm(child, |s| s.state = SwarmState::Active);
    }
    core.fx.touched_swarms.insert(child.clone());
}

/// After a swarm's state is refreshed: a child swarm's progress shows on
/// its parent task, and its end decides the parent task's attempt. A
/// succeeded parent attempt is returned with its span: it goes where
/// every succeeded result goes (the review gate, then the merge path),
/// inside that span.
pub(super) fn after_refresh(core: &mut Core, id: &SwarmId) -> Option<(TaskKey, u32, tracing::Span)> {
    let parent = id.parent()?;
    let child = core.model.swarms().get(id)?;
    let total = child.tasks.len() as u32;
    let merged = child.count(TaskState::Merged);
    let state = child.state;
    let head = child.integration_head.clone();
    let task = core.model.tasks().get(&parent)?;
    // A child its parent's agent spawned is waited for by that agent,
    // which merges it and ends the task itself.
    if task.state() != TaskState::Running || task.spec.subplan.is_none() {
        return None;
    }
    let number = task.attempts;
    let cancel_requested = task.cancel_requested;
    // Progress, not stored: the child's counts say it again.
    core.edit_task_unstored(&parent, |task| {
        task.percent = (merged * 100).checked_div(total).unwrap_or(0);
        task.step = format!("sub-swarm {id}: {merged}/{total} merged, {}", state.as_str());
    });
    // A STALLED child waits on the operator, and so does its parent task:
    // the parent swarm is refreshed when that starts or ends.
    core.transition(Transition::ChildStalled { parent: &parent, stalled: state == SwarmState::Stalled });
    let failed = failed_children(core.model, id);
    let span = tracing::info_span!("subswarm.result", swarm = %parent.swarm, task = %parent, attempt = %parent.attempt(number), child = %id);
    let entered = span.enter();
    match state {
        SwarmState::Completed => {
            core.edit_attempt(&parent, number, |a| {
                a.result_commit = head.clone();
                a.summary = format!("sub-swarm {id} completed");
            });
            core.edit_task(&parent, |t| {
                t.result_commit = head.clone();
                t.notes.summary = format!("sub-swarm {id}: {total} tasks merged");
            });
            core.set_attempt_state(&parent, number, AttemptState::Succeeded);
            core.to_succeeded(&parent, &format!("sub-swarm {id} completed"));
            // The way every succeeded result goes: review, if the plan
            // asks for one, then the merge path.
            drop(entered);
            return Some((parent, number, span));
        }
        _ if cancel_requested && matches!(state, SwarmState::Cancelled | SwarmState::Failed) => {
            core.set_attempt_state(&parent, number, AttemptState::Cancelled);
            core.to_cancelled(&parent, &format!("sub-swarm {id} cancelled"));
        }
        SwarmState::Cancelled | SwarmState::Failed | SwarmState::Stalled if !failed.is_empty() => {
            let why = format!("sub-swarm {id} failed: {}", failed.join(", "));
            core.edit_attempt(&parent, number, |a| a.error = why.clone());
            core.set_attempt_state(&parent, number, AttemptState::Failed);
            core.edit_task(&parent, |t| t.notes.failures.push(format!("attempt {number}: {why}")));
            // The child already spent its own tasks' retries.
            core.to_failed(&parent, &why);
        }
        _ => {}
    }
    None
}

/// The child's tasks that ended FAILED or CANCELLED, with their reasons.
fn failed_children(model: &Model, id: &SwarmId) -> Vec<String> {
    let Some(child) = model.swarms().get(id) else { return Vec::new() };
    child
        .tasks
        .iter()
        .filter_map(|k| model.tasks().get(k))
        .filter(|t| matches!(t.state(), TaskState::Failed | TaskState::Cancelled))
        .map(|t| format!("{} {} ({})", t.key, t.state(), t.reason))
        .collect()
}
