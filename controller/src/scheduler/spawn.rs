//! Sub-swarms an agent spawns while its attempt runs (its `spawn` and
//! `wait_children` tools, through the sidecar).
//!
//! The child is an ordinary sub-swarm `<swarm>/<task>` (see `subswarm`):
//! its stored plan is composed by `swarm_core::plan::spawn`, its branch is
//! the calling task's branch, created at the attempt's base, and its tasks
//! run on the same fleet. What differs from a declared sub-plan is who
//! waits for it: the calling agent, whose attempt stays RUNNING on its own
//! sidecar. So the child's end does not decide the task (the agent does,
//! after `wait_children` has merged the child into its worktree), and the
//! child's tasks are not held off by the files their parent owns.
//!
//! Only the sidecar holding the live attempt may spawn or ask, as for its
//! other calls about the attempt (`sessions::authorize_pack`).

use std::sync::Arc;

use swarm_core::plan::{Plan, PlanError, spawn};
use swarm_core::{SwarmId, TaskKey};

use super::command::SpawnPlan;
use super::core::Core;
use super::model::{Model, SwarmState};
use super::views::ChildrenView;
use super::{PackClaim, sessions, subswarm};
use crate::error::SchedError;

/// Validates a spawn and composes the child's plan; a child that
/// exists with the same tasks has its failed tasks retried.
pub(super) fn plan_spawn(
    core: &mut Core,
    claim: &PackClaim,
    fragment: &str,
) -> Result<SpawnPlan, SchedError> {
    let key = authorized(core.model, claim)?;
    let model = &*core.model;
    let parent = model.swarms().get(&key.swarm).ok_or_else(|| SchedError::NotFound(key.swarm.to_string()))?;
    let spawned_plan = spawn::spawned(&parent.plan_text, &key.swarm, &key.task, fragment).map_err(invalid)?;
    let child = key.swarm.child(&key.task);
    let Some(existing) = model.swarms().get(&child) else {
        let spawned = spawned_under(model, key.swarm.root());
        if spawned + spawned_plan_tasks(&spawned_plan) > MAX_SPAWNED_PER_ROOT {
            return Err(SchedError::FailedPrecondition(format!(
                "tasks: the agents of swarm {} have spawned {spawned} tasks; at most {MAX_SPAWNED_PER_ROOT} \
                 in all, so that agents splitting their work cannot grow a swarm without end",
                key.swarm.root()
            )));
        }
        let base = model
            .attempts()
            .get(&(key.clone(), claim.attempt.as_ref().map_or(0, |a| a.number)))
            .map(|a| a.base_commit.clone())
            .unwrap_or_default();
        return Ok(SpawnPlan::New { text: spawned_plan.text.into(), plan: spawned_plan.plan, base });
    };
    if *existing.plan_text != *spawned_plan.text {
        return Err(SchedError::FailedPrecondition(format!(
            "task {key} already spawned {child} with other tasks ({} of them, {}); wait for it with \
             wait_children, or retry its tasks",
            existing.tasks.len(),
            existing.state.as_str()
        )));
    }
    if matches!(existing.state, SwarmState::Failed | SwarmState::Cancelled) {
        let _span =
            tracing::info_span!("subswarm.resume", swarm = %key.swarm, task = %key, child = %child).entered();
        subswarm::resume_child(core, &child);
    }
    Ok(SpawnPlan::Exists(ChildrenView::of(core.model, &child)))
}

/// Creates the child on its branch at `head` (or, when a repeated call
/// got here first, answers with the child as it is).
pub(super) fn spawn_children(
    core: &mut Core,
    claim: &PackClaim,
    text: Arc<str>,
    plan: Arc<Plan>,
    head: &str,
) -> Result<ChildrenView, SchedError> {
    let key = authorized(core.model, claim)?;
    let child = key.swarm.child(&key.task);
    if plan.swarm != child {
        return Err(SchedError::InvalidArgument { field: "plan".into(), rule: format!("must be {child}'s") });
    }
    if !core.model.swarms().contains_key(&child) {
        let number = claim.attempt.as_ref().map_or(0, |a| a.number);
        let _span = tracing::info_span!("subswarm.spawn", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), child = %child).entered();
        core.fx.task_event(
            &key,
            number,
            "",
            "task.spawned",
            format!("the agent spawned child swarm {child} with {} tasks at {head}", plan.tasks.len()),
            serde_json::json!({ "child": child.as_str(), "head": head, "tasks": plan.tasks.len() }),
        );
        core.insert_swarm(text, plan, head);
    }
    Ok(ChildrenView::of(core.model, &child))
}

/// The attempt's spawned child as it is now.
pub(super) fn children(model: &Model, claim: &PackClaim) -> Result<ChildrenView, SchedError> {
    let key = authorized(model, claim)?;
    Ok(ChildrenView::of(model, &key.swarm.child(&key.task)))
}

/// The most tasks the agents of one root swarm may spawn in all, through
/// every level: each agent may spawn up to a hundred, and each of those
/// again, so without a cap a few levels reach millions.
pub const MAX_SPAWNED_PER_ROOT: usize = 1_000;

/// Tasks below root swarm `root` that agents spawned: those of every
/// swarm whose stored plan is not the root's own (a spawn composes a new
/// text, and every swarm below it keeps that one).
fn spawned_under(model: &Model, root: &str) -> usize {
    let Some(root_text) =
        SwarmId::new(root).ok().and_then(|r| model.swarms().get(&r)).map(|s| s.plan_text.clone())
    else {
        return 0;
    };
    model
        .swarms()
        .values()
        .filter(|s| s.id.root() == root && *s.plan_text != *root_text)
        .map(|s| s.tasks.len())
        .sum()
}

/// Tasks of a spawn, its children's declared sub-plans counted too.
fn spawned_plan_tasks(spawned: &spawn::Spawned) -> usize {
    fn count(plan: &Plan) -> usize {
        plan.tasks.iter().map(|t| 1 + t.subplan.as_deref().map_or(0, count)).sum()
    }
    count(&spawned.plan)
}

/// The task whose live attempt the claim holds.
fn authorized(model: &Model, claim: &PackClaim) -> Result<TaskKey, SchedError> {
    let Some(attempt) = &claim.attempt else {
        return Err(SchedError::InvalidArgument { field: "attempt".into(), rule: "required".into() });
    };
    sessions::authorize_pack(model, claim)?;
    Ok(attempt.task.clone())
}

fn invalid(e: PlanError) -> SchedError {
    SchedError::InvalidArgument { field: e.path, rule: e.rule }
}
