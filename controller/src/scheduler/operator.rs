//! Operator requests: creating swarms, reads, cancel, retry, answer, drain.

use std::sync::Arc;

use swarm_core::plan::Plan;
use swarm_core::{SwarmId, TaskKey, TaskState};

use super::command::{OperatorOp, Reply};
use super::core::{find_swarm, find_task};
use super::model::{QuestionAnswer, Swarm, SwarmState, Task};
use super::outbound::{AttemptHandle, Outbound};
use super::pause;
use super::reads::reply_read;
use super::refs;
use super::review;
use super::views::{self, SwarmView, TaskView, WorkerView};
use super::{Effects, Scheduler, now_ms};
use crate::error::SchedError;

/// The question category of an agent's permission request.
pub const PERMISSION_CATEGORY: &str = "permission";

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

/// Replies after the batch commits, so a caller never sees a change the
/// store does not hold.
pub(super) fn later<T: Send + 'static>(fx: &mut Effects, reply: Reply<T>, value: Result<T, SchedError>) {
    fx.replies.push(Box::new(move || {
        let _ = reply.send(value);
    }));
}

impl Scheduler {
    /// Long: one short arm per operator request, each a call and its reply.
    pub(super) fn on_operator(&mut self, op: OperatorOp, fx: &mut Effects) {
        match op {
            OperatorOp::CreateSwarm { plan_text, plan, integration_head, origin, reply } => {
                let r = self.create_swarm(plan_text, plan, &integration_head, origin, fx);
                later(fx, reply, r);
            }
            OperatorOp::GetSwarm { swarm, reply } => {
                let r = self.swarm_view(&swarm);
                reply_read(fx, reply, r);
            }
            OperatorOp::ListSwarms { page, reply } => {
                let r = self.list_swarms(&page);
                reply_read(fx, reply, Ok(r));
            }
            OperatorOp::ListTasks { swarm, states, page, reply } => {
                let r = self.list_tasks(&swarm, &states, &page);
                reply_read(fx, reply, r);
            }
            OperatorOp::GetTask { task, reply } => {
                let r = self.task_detail(&task);
                reply_read(fx, reply, r);
            }
            OperatorOp::ListWorkers { page, reply } => {
                let r = self.list_workers(&page);
                reply_read(fx, reply, Ok(r));
            }
            OperatorOp::CancelTask { task, reason, reply } => {
                let r = self.cancel_task(&task, &reason, fx).and_then(|_| self.task_view(&task));
                later(fx, reply, r);
            }
            OperatorOp::CancelSwarm { swarm, reason, reply } => {
                let r = self.cancel_swarm(&swarm, &reason, fx);
                later(fx, reply, r);
            }
            OperatorOp::RetryTask { task, reply } => {
                let r = self.core(fx).retry(&task);
                let r = r.and_then(|_| self.task_view(&task));
                later(fx, reply, r);
            }
            OperatorOp::ReviewTask { task, decision, message, reply } => {
                let r =
                    self.operator_review(&task, &decision, &message, fx).and_then(|_| self.task_view(&task));
                later(fx, reply, r);
            }
            OperatorOp::Answer { task, question_id, text, reply } => {
                let r = self.answer(&task, &question_id, &text, fx).and_then(|_| self.task_view(&task));
                later(fx, reply, r);
            }
            OperatorOp::SendMessage { task, text, reply } => {
                let r = self.send_message(&task, &text, fx).and_then(|id| Ok((self.task_view(&task)?, id)));
                later(fx, reply, r);
            }
            OperatorOp::DrainWorker { worker, reply } => {
                let r = self.drain(&worker, fx);
                later(fx, reply, r);
            }
            OperatorOp::CheckPlanRefs { plan, reply } => {
                let r = refs::check_plan_refs(&self.shared.model, &plan);
                later(fx, reply, r);
            }
            OperatorOp::Land { swarm, target, reply } => {
                let r = refs::land_target(&self.shared.model, &swarm, target);
                later(fx, reply, r);
            }
            OperatorOp::SetBudget { target, change, reply } => {
                let r = self.set_budget(target, change, fx);
                later(fx, reply, r);
            }
            OperatorOp::PauseSwarm { swarm, stop, reason, reply } => {
                let reason = if reason.is_empty() { "paused by the operator".to_string() } else { reason };
                let p = pause::Pause { reason, by: pause::BY_OPERATOR.into(), stop, question: None };
                let r = pause::pause(&mut self.core(fx), &swarm, p);
                let r = r.and_then(|_| self.swarm_view(swarm.as_str()));
                later(fx, reply, r);
            }
            OperatorOp::ResumeSwarm { swarm, reply } => {
                let r = self.resume_swarm(&swarm, pause::BY_OPERATOR, fx);
                let r = r.and_then(|_| self.swarm_view(swarm.as_str()));
                later(fx, reply, r);
            }
            OperatorOp::Landed { swarm, target, outcome, reply } => {
                let _span = tracing::info_span!("swarm.land", swarm = %swarm, target = %target).entered();
                let r = refs::record_land(&self.shared.model, &swarm, &target, outcome, fx);
                later(fx, reply, r);
            }
        }
    }

    /// Resumes a paused swarm; the breaker's window starts afresh.
    pub(super) fn resume_swarm(
        &mut self,
        id: &SwarmId,
        by: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        if pause::resume(&mut self.core(fx), id, by)? {
            self.budgets.forget_burn(id);
        }
        Ok(())
    }

    /// The operator's answer to the breaker's question on `key`.
    fn answer_budget_question(
        &mut self,
        key: &TaskKey,
        qid: &str,
        question: &str,
        text: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let resume = pause::check_budget_answer(text)?;
        self.record_answer(key, qid, question, text, fx);
        if resume {
            self.resume_swarm(&key.swarm, pause::BY_OPERATOR, fx)?;
        }
        Ok(())
    }

    /// The operator's decision on a task in REVIEW; nothing changes when
    /// the decision or the task's state is wrong.
    fn operator_review(
        &mut self,
        key: &TaskKey,
        word: &str,
        message: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let decision = review::check_operator_review(&self.shared.model, key, word)?;
        let _span = tracing::info_span!("review.operator", swarm = %key.swarm, task = %key, decision = decision.as_str())
            .entered();
        if let Some(reviewed) =
            self.reviews.operator_review(&mut self.shared.core(fx), key, decision, message)
        {
            super::merged::start_merge(
                &mut self.shared.core(fx),
                &mut self.merge_queues,
                key,
                reviewed,
                false,
            );
        }
        Ok(())
    }

    fn set_budget(
        &mut self,
        target: super::command::BudgetTarget,
        change: super::model::BudgetChange,
        fx: &mut Effects,
    ) -> Result<(SwarmView, Option<TaskView>), SchedError> {
        match target {
            super::command::BudgetTarget::Swarm(id) => {
                self.budgets.set_swarm(&mut self.shared.core(fx), &id, change)?;
                Ok((self.swarm_view(id.as_str())?, None))
            }
            super::command::BudgetTarget::Task(key) => {
                if change.max_usd_per_hour.is_some() {
                    return Err(SchedError::InvalidArgument {
                        field: "max_usd_per_hour".into(),
                        rule: "the burn-rate breaker is set on a swarm, not a task".into(),
                    });
                }
                self.budgets.set_task(&mut self.shared.core(fx), &key, change)?;
                Ok((self.swarm_view(key.swarm.as_str())?, Some(self.task_view(&key)?)))
            }
        }
    }

    pub(super) fn swarm(&self, id: &str) -> Result<&Swarm, SchedError> {
        find_swarm(&self.shared.model, id)
    }

    pub(super) fn swarm_view(&self, id: &str) -> Result<SwarmView, SchedError> {
        self.swarm(id).map(|s| views::swarm_view(s, self.budgets.burn_rate(&s.id)))
    }

    pub(super) fn task(&self, key: &TaskKey) -> Result<&Task, SchedError> {
        find_task(&self.shared.model, key)
    }

    pub(super) fn holder(&self, key: &TaskKey) -> Option<&str> {
        let t = self.shared.model.tasks().get(key)?;
        if t.state() != TaskState::Running {
            return None;
        }
        self.shared.model.attempts().get(&(key.clone(), t.attempts)).map(|a| a.worker.as_str())
    }

    pub(super) fn task_view(&self, key: &TaskKey) -> Result<TaskView, SchedError> {
        self.task(key).map(|t| views::task_view(t, self.holder(key), &self.shared.model))
    }

    fn create_swarm(
        &mut self,
        plan_text: String,
        plan: Arc<Plan>,
        head: &str,
        origin: Option<Arc<super::Origin>>,
        fx: &mut Effects,
    ) -> Result<(SwarmView, bool), SchedError> {
        refs::check_plan_refs(&self.shared.model, &plan)?;
        if plan.swarm.parent().is_some() {
            return Err(SchedError::InvalidArgument {
                field: "plan.name".into(),
                rule: "a nested swarm id is only given to a task's child swarm".into(),
            });
        }
        if let Some(existing) = self.shared.model.swarms().get(&plan.swarm) {
            // The same plan again (a resumed `swarmctl run`) keeps the
            // origin it was created with: a second planning run's session
            // and cost did not make this swarm.
            if *existing.plan_text == *plan_text {
                return Ok((views::swarm_view(existing, self.budgets.burn_rate(&existing.id)), false));
            }
            return Err(SchedError::AlreadyExists(format!(
                "swarm {:?} already exists with a different plan",
                plan.swarm.as_str()
            )));
        }
        let id = plan.swarm.clone();
        self.core(fx).insert_swarm_from(plan_text.into(), plan, head, origin);
        let view = self.swarm_view(id.as_str())?;
        Ok((view, true))
    }

    fn cancel_task(&mut self, key: &TaskKey, reason: &str, fx: &mut Effects) -> Result<(), SchedError> {
        let t = self.task(key)?;
        let reason = if reason.is_empty() { "cancelled by the operator" } else { reason };
        match t.state() {
            TaskState::Cancelled => Ok(()),
            TaskState::Succeeded | TaskState::Merging | TaskState::Merged => {
                Err(SchedError::FailedPrecondition(format!(
                    "task {key} is {}; its result is already being integrated",
                    t.state()
                )))
            }
            TaskState::Running => {
                let number = t.attempts;
                self.core(fx).edit_task(key, |t| t.cancel_requested = true);
                fx.task_event(
                    key,
                    number,
                    "",
                    "task.cancel_requested",
                    reason.to_string(),
                    serde_json::json!({}),
                );
                self.core(fx).send_cancel(key, number, reason);
                if let Some(child) = self.subswarms.cancel_child(&mut self.shared.core(fx), key, reason)
                    && let Err(e) = self.cancel_swarm(child.as_str(), reason, fx)
                {
                    tracing::warn!(child = %child, error = %e, "child swarm not cancelled");
                }
                Ok(())
            }
            _ => {
                self.core(fx).edit_task(key, |t| t.cancel_requested = true);
                self.reviews.stop_reviewer(&mut self.shared.core(fx), key, reason);
                self.core(fx).set_state(key, TaskState::Cancelled, reason);
                Ok(())
            }
        }
    }

    pub(super) fn cancel_swarm(
        &mut self,
        id: &str,
        reason: &str,
        fx: &mut Effects,
    ) -> Result<u32, SchedError> {
        let keys = self.swarm(id)?.tasks.clone();
        let mut n = 0;
        for key in keys {
            let state = self.shared.model.tasks().get(&key).map(|t| t.state());
            if matches!(
                state,
                Some(TaskState::Merged | TaskState::Cancelled | TaskState::Merging | TaskState::Succeeded)
            ) {
                continue;
            }
            self.cancel_task(&key, reason, fx)?;
            n += 1;
        }
        if let Ok(id) = SwarmId::new(id) {
            self.core(fx).edit_swarm(&id, |s| s.state = SwarmState::Cancelled);
        }
        fx.event(
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
        &mut self,
        key: &TaskKey,
        question_id: &str,
        text: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let t = self.task(key)?;
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
            return self.answer_budget_question(key, &qid, &question, text, fx);
        }
        match state {
            TaskState::Escalated | TaskState::Blocked => {
                self.record_answer(key, &qid, &question, text, fx);
                self.core(fx).make_ready(key, &format!("answered ({qid})"));
                Ok(())
            }
            TaskState::Running if pending.is_some() => {
                let number = self.shared.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
                self.record_answer(key, &qid, &question, text, fx);
                if let Some(a) = self.shared.model.attempts().get(&(key.clone(), number)) {
                    let message = Outbound::Answer {
                        attempt: AttemptHandle { task: key.clone(), number, token: a.token },
                        question_id: qid.clone(),
                        text: text.to_string(),
                    };
                    let worker = a.worker.clone();
                    self.core(fx).send(&worker, message);
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
    fn send_message(&mut self, key: &TaskKey, text: &str, fx: &mut Effects) -> Result<String, SchedError> {
        let t = self.task(key)?;
        if t.state() != TaskState::Running {
            return Err(SchedError::FailedPrecondition(format!(
                "task {key} is {}; messages go to a RUNNING task's worker",
                t.state()
            )));
        }
        let number = t.attempts;
        let Some(a) = self.shared.model.attempts().get(&(key.clone(), number)) else {
            return Err(SchedError::FailedPrecondition(format!("task {key} has no live attempt")));
        };
        let (worker, token) = (a.worker.clone(), a.token);
        let Some(t) = self.shared.model.tasks().get(key) else {
            return Err(SchedError::NotFound(format!("task {key} not found")));
        };
        let id = format!("m{}", t.notes.messages.len() + 1);
        self.core(fx).edit_task(key, |t| t.notes.messages.push(text.to_string()));
        let message = Outbound::Message {
            attempt: AttemptHandle { task: key.clone(), number, token },
            message_id: id.clone(),
            text: text.to_string(),
        };
        self.core(fx).send(&worker, message);
        fx.task_event(
            key,
            number,
            &worker,
            "task.message",
            format!("message {id} to {worker}: {}", swarm_core::names::truncate(text, 200)),
            serde_json::json!({ "message_id": id, "text": text }),
        );
        Ok(id)
    }

    pub(super) fn record_answer(
        &mut self,
        key: &TaskKey,
        qid: &str,
        question: &str,
        text: &str,
        fx: &mut Effects,
    ) {
        let attempt = self.shared.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
        let running = self.shared.model.tasks().get(key).is_some_and(|t| t.state() == TaskState::Running);
        let answer = QuestionAnswer {
            question_id: qid.to_string(),
            question: question.to_string(),
            answer: text.to_string(),
            during_attempt: if running { attempt } else { 0 },
        };
        self.core(fx).edit_task(key, |t| {
            t.notes.answers.push(answer);
            t.notes.pending_question = None;
        });
        fx.task_event(
            key,
            attempt,
            "",
            "task.answered",
            format!("{qid}: {text}"),
            serde_json::json!({ "question_id": qid, "text": text }),
        );
    }

    fn drain(&mut self, worker: &str, fx: &mut Effects) -> Result<WorkerView, SchedError> {
        let now = self.shared.mono_ms();
        if !self.shared.model.workers().contains_key(worker) {
            return Err(SchedError::NotFound(format!("worker {worker:?} not found")));
        }
        self.core(fx).edit_worker(worker, |w| w.draining = true);
        let Some(w) = self.shared.model.workers().get(worker) else {
            return Err(SchedError::NotFound(worker.to_string()));
        };
        let view = views::worker_view(w, now, self.limits.limited_until(w, now_ms()));
        self.core(fx).send(worker, Outbound::Drain { reason: "drained by the operator".into() });
        fx.event(
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
}
