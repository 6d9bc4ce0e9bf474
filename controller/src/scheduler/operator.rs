//! Operator requests: creating swarms, reads, cancel, retry, answer, drain.

use std::sync::Arc;

use swarm_core::plan::Plan;
use swarm_core::{SwarmId, TaskKey, TaskState};

use super::command::OperatorOp;
use super::components::Components;
use super::core::Core;
use super::core::{find_swarm, find_task};
use super::model::{PERMISSION_CATEGORY, QuestionAnswer, SwarmState, now_ms};
use super::outbound::{AttemptHandle, Outbound};
use super::reads;
use super::views::{self, SwarmView, TaskView, WorkerView};
use super::{merged, pause, refs, reply, review};
use crate::error::SchedError;

/// An agent waits on a permission request for `allow` or `deny [reason]`;
/// anything else would leave it guessing.
fn check_permission_answer(text: &str) -> Result<(), SchedError> {
    let t = text.trim();
    let word = t.split_whitespace().next().unwrap_or_default();
    match word {
        "allow" if t == "allow" => Ok(()),
        "deny" => Ok(()),
        _ => Err(SchedError::InvalidArgument {
            field: "text".into(),
            rule: format!("a permission request is answered \"allow\" or \"deny [reason]\", not {t:?}"),
        }),
    }
}

/// Long: one short arm per operator request, each a call and its reply.
pub(super) fn on_operator(core: &mut Core<'_>, parts: &mut Components, op: OperatorOp) {
    match op {
        OperatorOp::CreateSwarm { plan_text, plan, integration_head, origin, reply } => {
            let r = create_swarm(core, parts, plan_text, plan, &integration_head, origin);
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::GetSwarm { swarm, reply } => {
            let r = reads::swarm_view(core.model, &parts.budgets, &swarm);
            reply::read(core.fx, reply, r);
        }
        OperatorOp::ListSwarms { page, reply } => {
            let r = reads::list_swarms(core.model, &parts.budgets, &page);
            reply::read(core.fx, reply, Ok(r));
        }
        OperatorOp::ListTasks { swarm, states, page, reply } => {
            let r = reads::list_tasks(core.model, &swarm, &states, &page);
            reply::read(core.fx, reply, r);
        }
        OperatorOp::GetTask { task, reply } => {
            let r = reads::task_detail(core.model, &task);
            reply::read(core.fx, reply, r);
        }
        OperatorOp::ListWorkers { page, reply } => {
            let r = reads::list_workers(core.model, &parts.limits, core.mono_ms(), &page);
            reply::read(core.fx, reply, Ok(r));
        }
        OperatorOp::CancelTask { task, reason, reply } => {
            let r =
                cancel_task(core, parts, &task, &reason).and_then(|_| reads::task_view(core.model, &task));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::CancelSwarm { swarm, reason, reply } => {
            let r = cancel_swarm(core, parts, &swarm, &reason);
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::RetryTask { task, reply } => {
            let r = core.retry(&task);
            let r = r.and_then(|_| reads::task_view(core.model, &task));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::ReviewTask { task, decision, message, reply } => {
            let r = operator_review(core, parts, &task, &decision, &message)
                .and_then(|_| reads::task_view(core.model, &task));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::Answer { task, question_id, text, reply } => {
            let r = answer(core, parts, &task, &question_id, &text)
                .and_then(|_| reads::task_view(core.model, &task));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::SendMessage { task, text, reply } => {
            let r = send_message(core, &task, &text)
                .and_then(|id| Ok((reads::task_view(core.model, &task)?, id)));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::DrainWorker { worker, reply } => {
            let r = drain(core, parts, &worker);
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::CheckPlanRefs { plan, reply } => {
            let r = refs::check_plan_refs(core.model, &plan);
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::Land { swarm, target, reply } => {
            let r = refs::land_target(core.model, &swarm, target);
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::SetBudget { target, change, reply } => {
            let r = set_budget(core, parts, target, change);
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::PauseSwarm { swarm, stop, reason, reply } => {
            let reason = if reason.is_empty() { "paused by the operator".to_string() } else { reason };
            let p = pause::Pause { reason, by: pause::BY_OPERATOR.into(), stop, question: None };
            let r = pause::pause(core, &swarm, p);
            let r = r.and_then(|_| reads::swarm_view(core.model, &parts.budgets, swarm.as_str()));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::ResumeSwarm { swarm, reply } => {
            let r = resume_swarm(core, parts, &swarm, pause::BY_OPERATOR);
            let r = r.and_then(|_| reads::swarm_view(core.model, &parts.budgets, swarm.as_str()));
            reply::after_commit(core.fx, reply, r);
        }
        OperatorOp::Landed { swarm, target, outcome, reply } => {
            let _span = tracing::info_span!("swarm.land", swarm = %swarm, target = %target).entered();
            let r = refs::record_land(core.model, &swarm, &target, outcome, core.fx);
            reply::after_commit(core.fx, reply, r);
        }
    }
}

/// Resumes a paused swarm; the breaker's window starts afresh.
fn resume_swarm(
    core: &mut Core<'_>,
    parts: &mut Components,
    id: &SwarmId,
    by: &str,
) -> Result<(), SchedError> {
    if pause::resume(core, id, by)? {
        parts.budgets.forget_burn(id);
    }
    Ok(())
}

/// The operator's answer to the breaker's question on `key`.
fn answer_budget_question(
    core: &mut Core<'_>,
    parts: &mut Components,
    key: &TaskKey,
    qid: &str,
    question: &str,
    text: &str,
) -> Result<(), SchedError> {
    let resume = pause::check_budget_answer(text)?;
    record_answer(core, key, qid, question, text);
    if resume {
        resume_swarm(core, parts, &key.swarm, pause::BY_OPERATOR)?;
    }
    Ok(())
}

/// The operator's decision on a task in REVIEW; nothing changes when
/// the decision or the task's state is wrong.
fn operator_review(
    core: &mut Core<'_>,
    parts: &mut Components,
    key: &TaskKey,
    word: &str,
    message: &str,
) -> Result<(), SchedError> {
    let decision = review::check_operator_review(core.model, key, word)?;
    let _span =
        tracing::info_span!("review.operator", swarm = %key.swarm, task = %key, decision = decision.as_str())
            .entered();
    if let Some(reviewed) = parts.reviews.operator_review(core, key, decision, message) {
        merged::start_merge(core, &mut parts.merge_queues, key, reviewed, false);
    }
    Ok(())
}

fn set_budget(
    core: &mut Core<'_>,
    parts: &mut Components,
    target: super::command::BudgetTarget,
    change: super::model::BudgetChange,
) -> Result<(SwarmView, Option<TaskView>), SchedError> {
    match target {
        super::command::BudgetTarget::Swarm(id) => {
            parts.budgets.set_swarm(core, &id, change)?;
            Ok((reads::swarm_view(core.model, &parts.budgets, id.as_str())?, None))
        }
        super::command::BudgetTarget::Task(key) => {
            if change.max_usd_per_hour.is_some() {
                return Err(SchedError::InvalidArgument {
                    field: "max_usd_per_hour".into(),
                    rule: "the burn-rate breaker is set on a swarm, not a task".into(),
                });
            }
            parts.budgets.set_task(core, &key, change)?;
            Ok((
                reads::swarm_view(core.model, &parts.budgets, key.swarm.as_str())?,
                Some(reads::task_view(core.model, &key)?),
            ))
        }
    }
}

fn create_swarm(
    core: &mut Core<'_>,
    parts: &mut Components,
    plan_text: String,
    plan: Arc<Plan>,
    head: &str,
    origin: Option<Arc<super::Origin>>,
) -> Result<(SwarmView, bool), SchedError> {
    refs::check_plan_refs(core.model, &plan)?;
    if plan.swarm.parent().is_some() {
        return Err(SchedError::InvalidArgument {
            field: "plan.name".into(),
            rule: "a nested swarm id is only given to a task's child swarm".into(),
        });
    }
    if let Some(existing) = core.model.swarms().get(&plan.swarm) {
        // The same plan again (a resumed `swarmctl run`) keeps the
        // origin it was created with: a second planning run's session
        // and cost did not make this swarm.
        if *existing.plan_text == *plan_text {
            return Ok((views::swarm_view(existing, parts.budgets.burn_rate(&existing.id)), false));
        }
        return Err(SchedError::AlreadyExists(format!(
            "swarm {:?} already exists with a different plan",
            plan.swarm.as_str()
        )));
    }
    let id = plan.swarm.clone();
    core.insert_swarm_from(plan_text.into(), plan, head, origin);
    let view = reads::swarm_view(core.model, &parts.budgets, id.as_str())?;
    Ok((view, true))
}

fn cancel_task(
    core: &mut Core<'_>,
    parts: &mut Components,
    key: &TaskKey,
    reason: &str,
) -> Result<(), SchedError> {
    let t = find_task(core.model, key)?;
    let reason = if reason.is_empty() { "cancelled by the operator" } else { reason };
    match t.state() {
        TaskState::Cancelled => Ok(()),
        TaskState::Succeeded | TaskState::Merging | TaskState::Merged => Err(SchedError::FailedPrecondition(
            format!("task {key} is {}; its result is already being integrated", t.state()),
        )),
        TaskState::Running => {
            let number = t.attempts;
            core.edit_task(key, |t| t.cancel_requested = true);
            core.fx.task_event(
                key,
                number,
                "",
                "task.cancel_requested",
                reason.to_string(),
                serde_json::json!({}),
            );
            core.send_cancel(key, number, reason);
            if let Some(child) = parts.subswarms.cancel_child(core, key, reason)
                && let Err(e) = cancel_swarm(core, parts, child.as_str(), reason)
            {
                tracing::warn!(child = %child, error = %e, "child swarm not cancelled");
            }
            Ok(())
        }
        _ => {
            core.edit_task(key, |t| t.cancel_requested = true);
            parts.reviews.stop_reviewer(core, key, reason);
            core.to_cancelled(key, reason);
            Ok(())
        }
    }
}

pub(super) fn cancel_swarm(
    core: &mut Core<'_>,
    parts: &mut Components,
    id: &str,
    reason: &str,
) -> Result<u32, SchedError> {
    let keys = find_swarm(core.model, id)?.tasks.clone();
    let mut n = 0;
    for key in keys {
        let state = core.model.tasks().get(&key).map(|t| t.state());
        if matches!(
            state,
            Some(TaskState::Merged | TaskState::Cancelled | TaskState::Merging | TaskState::Succeeded)
        ) {
            continue;
        }
        cancel_task(core, parts, &key, reason)?;
        n += 1;
    }
    if let Ok(id) = SwarmId::new(id) {
        core.edit_swarm(&id, |s| s.state = SwarmState::Cancelled);
    }
    core.fx.event(
        id,
        "",
        0,
        "",
        "swarm.state",
        format!("swarm {id} CANCELLED"),
        serde_json::json!({ "state": "CANCELLED" }),
    );
    Ok(n)
}

fn answer(
    core: &mut Core<'_>,
    parts: &mut Components,
    key: &TaskKey,
    question_id: &str,
    text: &str,
) -> Result<(), SchedError> {
    let t = find_task(core.model, key)?;
    let state = t.state();
    let pending = t.notes.pending_question.clone();
    if let Some(p) = &pending
        && !question_id.is_empty()
        && p.id != question_id
    {
        return Err(SchedError::FailedPrecondition(format!(
            "task {key}'s open question is {:?}, not {question_id:?}",
            p.id
        )));
    }
    if let Some(p) = &pending
        && p.category == PERMISSION_CATEGORY
    {
        check_permission_answer(text)?;
    }
    let qid = pending.as_ref().map(|p| p.id.clone()).unwrap_or_else(|| question_id.to_string());
    let question = pending.as_ref().map(|p| p.text.clone()).unwrap_or_default();
    // The breaker asks about the swarm, not the task's worker.
    if pending.as_ref().is_some_and(|p| p.category == pause::BUDGET_CATEGORY) {
        return answer_budget_question(core, parts, key, &qid, &question, text);
    }
    match state {
        TaskState::Escalated | TaskState::Blocked => {
            record_answer(core, key, &qid, &question, text);
            core.make_ready(key, &format!("answered ({qid})"));
            Ok(())
        }
        TaskState::Running if pending.is_some() => {
            let number = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
            record_answer(core, key, &qid, &question, text);
            if let Some(a) = core.model.attempts().get(&(key.clone(), number)) {
                let message = Outbound::Answer {
                    attempt: AttemptHandle { task: key.clone(), number, token: a.token },
                    question_id: qid.clone(),
                    text: text.to_string(),
                };
                let worker = a.worker.clone();
                core.send(&worker, message);
            }
            Ok(())
        }
        other => {
            Err(SchedError::FailedPrecondition(format!("task {key} is {other} and has no open question")))
        }
    }
}

/// Sends the operator's message to the worker of a RUNNING task and
/// keeps it in the task's notes, so later attempts read it too.
fn send_message(core: &mut Core<'_>, key: &TaskKey, text: &str) -> Result<String, SchedError> {
    let t = find_task(core.model, key)?;
    if t.state() != TaskState::Running {
        return Err(SchedError::FailedPrecondition(format!(
            "task {key} is {}; messages go to a RUNNING task's worker",
            t.state()
        )));
    }
    let number = t.attempts;
    let Some(a) = core.model.attempts().get(&(key.clone(), number)) else {
        return Err(SchedError::FailedPrecondition(format!("task {key} has no live attempt")));
    };
    let (worker, token) = (a.worker.clone(), a.token);
    let Some(t) = core.model.tasks().get(key) else {
        return Err(SchedError::NotFound(format!("task {key} not found")));
    };
    let id = format!("m{}", t.notes.messages.len() + 1);
    core.edit_task(key, |t| t.notes.messages.push(text.to_string()));
    let message = Outbound::Message {
        attempt: AttemptHandle { task: key.clone(), number, token },
        message_id: id.clone(),
        text: text.to_string(),
    };
    core.send(&worker, message);
    core.fx.task_event(
        key,
        number,
        &worker,
        "task.message",
        format!("message {id} to {worker}: {}", swarm_core::names::truncate(text, 200)),
        serde_json::json!({ "message_id": id, "text": text }),
    );
    Ok(id)
}

fn record_answer(core: &mut Core<'_>, key: &TaskKey, qid: &str, question: &str, text: &str) {
    let attempt = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
    let running = core.model.tasks().get(key).is_some_and(|t| t.state() == TaskState::Running);
    let answer = QuestionAnswer {
        question_id: qid.to_string(),
        question: question.to_string(),
        answer: text.to_string(),
        during_attempt: if running { attempt } else { 0 },
    };
    core.edit_task(key, |t| {
        t.notes.answers.push(answer);
        t.notes.pending_question = None;
    });
    core.fx.task_event(
        key,
        attempt,
        "",
        "task.answered",
        format!("{qid}: {text}"),
        serde_json::json!({ "question_id": qid, "text": text }),
    );
}

fn drain(core: &mut Core<'_>, parts: &mut Components, worker: &str) -> Result<WorkerView, SchedError> {
    let now = core.mono_ms();
    if !core.model.workers().contains_key(worker) {
        return Err(SchedError::NotFound(format!("worker {worker:?} not found")));
    }
    core.edit_worker(worker, |w| w.draining = true);
    let Some(w) = core.model.workers().get(worker) else {
        return Err(SchedError::NotFound(worker.to_string()));
    };
    let view = views::worker_view(w, now, parts.limits.limited_until(w, now_ms()));
    core.send(worker, Outbound::Drain { reason: "drained by the operator".into() });
    core.fx.event(
        "",
        "",
        0,
        worker,
        "worker.draining",
        format!("worker {worker} draining"),
        serde_json::json!({}),
    );
    Ok(view)
}
