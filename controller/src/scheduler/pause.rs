//! PAUSED swarms: no new attempt of a paused swarm starts; its running
//! attempts finish or, when the pause says `stop`, checkpoint (WIP commit,
//! agent session kept) so that the next attempt after the resume continues
//! them. The operator pauses and resumes (`PauseSwarm`, `ResumeSwarm`); the
//! burn-rate breaker and an agent usage limit under `on_usage_limit =
//! "pause"` pause too. The pause is stored with the swarm's state (its
//! `control`), so it survives a controller restart; a paused swarm still
//! completes or fails when its last tasks end.

use swarm_core::plan::OnUsageLimit;
use swarm_core::{SwarmId, TaskKey, TaskState};

pub use super::model::Pause;
use super::model::{PendingQuestion, SwarmState};
use super::{Effects, Scheduler, now_ms};
use crate::error::SchedError;

/// The question category of the breaker's question.
pub const BUDGET_CATEGORY: &str = "budget";

/// Who paused a swarm.
pub const BY_OPERATOR: &str = "operator";
pub const BY_BREAKER: &str = "breaker";
pub const BY_USAGE_LIMIT: &str = "usage_limit";

/// The breaker's question is answered with one of these.
fn check_budget_answer(text: &str) -> Result<bool, SchedError> {
    match text.trim() {
        "resume" => Ok(true),
        "pause" => Ok(false),
        other => Err(SchedError::InvalidArgument {
            field: "text".into(),
            rule: format!("the budget breaker's question is answered \"resume\" or \"pause\", not {other:?}"),
        }),
    }
}

impl Scheduler {
    /// Whether no new attempt of `key`'s swarm may start.
    pub(super) fn swarm_paused(&self, key: &TaskKey) -> bool {
        self.shared.model.swarms().get(&key.swarm).is_some_and(|s| s.state == SwarmState::Paused)
    }

    /// Pauses swarm `id` (again: a second pause may add `stop`).
    pub(super) fn pause_swarm(
        &mut self,
        id: &SwarmId,
        pause: Pause,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let swarm = self.swarm(id.as_str())?;
        let from = swarm.state;
        if !matches!(from, SwarmState::Active | SwarmState::Stalled | SwarmState::Paused) {
            return Err(SchedError::FailedPrecondition(format!(
                "swarm {id} is {}; only a live swarm pauses",
                from.as_str()
            )));
        }
        let _span =
            tracing::info_span!("swarm.pause", swarm = %id, by = %pause.by, stop = pause.stop).entered();
        let stop = pause.stop;
        let (kind, message) = (
            "swarm.paused",
            format!(
                "swarm {id} PAUSED by the {}: {}{}",
                pause.by,
                pause.reason,
                if stop { " (running attempts checkpoint)" } else { "" }
            ),
        );
        let data = serde_json::json!({ "state": "PAUSED", "from": from.as_str(), "by": pause.by,
            "reason": pause.reason, "stop": stop });
        let Some(s) = self.shared.model.swarms().get(id) else { return Ok(()) };
        // A stop asked once is not taken back by a later pause without it.
        let stop = stop || s.control.paused.as_ref().is_some_and(|p| p.stop);
        // Nor is the breaker's question forgotten: the resume clears it.
        let question =
            pause.question.clone().or_else(|| s.control.paused.as_ref().and_then(|p| p.question.clone()));
        self.core(fx).edit_swarm(id, |s| {
            s.state = SwarmState::Paused;
            s.control.paused = Some(Pause { stop, question, ..pause });
        });
        tracing::info!("swarm paused");
        fx.event(id.as_str(), "", 0, "", kind, message, data);
        if stop {
            self.checkpoint_running(id, fx);
        }
        self.shared.count_stalled();
        Ok(())
    }

    /// Tells every live attempt of the swarm (reviewers aside) to checkpoint.
    fn checkpoint_running(&mut self, id: &SwarmId, fx: &mut Effects) {
        let keys = self.shared.model.swarms().get(id).map(|s| s.tasks.clone()).unwrap_or_default();
        for key in keys {
            let Some(t) = self.shared.model.tasks().get(&key) else { continue };
            let number = t.attempts;
            let live =
                self.shared.model.attempts().get(&(key.clone(), number)).is_some_and(|a| a.state.is_live());
            if t.state() == TaskState::Running && live && !self.shared.model.is_reviewer(&key, number) {
                self.core(fx).send_stop(&key, number, "swarm paused", true);
            }
        }
    }

    /// A worker reconnected holding `key#number`: a stop it was sent may
    /// have been lost with its old stream (or never sent, while it had
    /// none), so a checkpointing pause or a budget stops it again.
    pub(super) fn stop_again_on_reconnect(&mut self, key: &TaskKey, number: u32, fx: &mut Effects) {
        if self.shared.model.is_reviewer(key, number) {
            return;
        }
        let stopping_pause = self.shared.model.swarms().get(&key.swarm).is_some_and(|s| {
            s.state == SwarmState::Paused && s.control.paused.as_ref().is_some_and(|p| p.stop)
        });
        if stopping_pause {
            self.core(fx).send_stop(key, number, "swarm paused", true);
            return;
        }
        self.forget_budget_stop(key, number);
        self.enforce_budgets(key, fx);
    }

    /// Resumes swarm `id`: it is ACTIVE (or whatever its tasks make it)
    /// and assigns again; the breaker's window starts afresh.
    pub(super) fn resume_swarm(
        &mut self,
        id: &SwarmId,
        by: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let swarm = self.swarm(id.as_str())?;
        if swarm.state != SwarmState::Paused {
            return Ok(());
        }
        let _span = tracing::info_span!("swarm.resume", swarm = %id, by).entered();
        let question = swarm.control.paused.as_ref().and_then(|p| p.question.clone());
        self.core(fx).edit_swarm(id, |s| {
            s.state = SwarmState::Active;
            s.control.paused = None;
        });
        fx.touched_swarms.insert(id.clone());
        self.budgets.burn.remove(id);
        self.shared.scan.changed();
        tracing::info!("swarm resumed");
        fx.event(
            id.as_str(),
            "",
            0,
            "",
            "swarm.resumed",
            format!("swarm {id} resumed by the {by}"),
            serde_json::json!({ "state": "ACTIVE", "from": "PAUSED", "by": by }),
        );
        // The breaker's question is moot once the swarm runs again.
        if let Some((task, qid)) = question
            && let Ok(key) = TaskKey::parse(&task)
            && self
                .shared
                .model
                .tasks()
                .get(&key)
                .is_some_and(|t| t.notes.pending_question.as_ref().is_some_and(|q| q.id == qid))
        {
            self.core(fx).edit_task(&key, |t| t.notes.pending_question = None);
        }
        self.shared.count_stalled();
        Ok(())
    }

    /// The breaker: the swarm spent `rate` dollars in the last hour, more
    /// than `max`. Pause it and ask the operator on `key`, whose report
    /// tipped it.
    pub(super) fn trip_breaker(&mut self, key: &TaskKey, rate: f64, max: f64, fx: &mut Effects) {
        if self.swarm_paused(key)
            || !self
                .shared
                .model
                .swarms()
                .get(&key.swarm)
                .is_some_and(|s| matches!(s.state, SwarmState::Active | SwarmState::Stalled))
        {
            return;
        }
        let reason = format!("burn rate ${rate:.2} in the last hour is over max_usd_per_hour ${max:.2}");
        let number = self.shared.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
        let qid = format!("budget-{number}");
        let asks = self.shared.model.tasks().get(key).is_some_and(|t| t.notes.pending_question.is_none());
        let pause = Pause {
            reason: reason.clone(),
            by: BY_BREAKER.into(),
            stop: false,
            question: asks.then(|| (key.to_string(), qid.clone())),
        };
        if self.pause_swarm(&key.swarm, pause, fx).is_err() || !asks {
            return;
        }
        let text = format!(
            "swarm {} paused: {reason}. Answer \"resume\" to let it assign again, or \"pause\" to keep it paused (then `swarmctl resume`).",
            key.swarm
        );
        let question = PendingQuestion {
            id: qid.clone(),
            text: text.clone(),
            category: BUDGET_CATEGORY.into(),
            attempt: number,
            options: vec!["resume".into(), "pause".into()],
        };
        self.core(fx).edit_task(key, |t| t.notes.pending_question = Some(question));
        fx.task_event(
            key,
            number,
            "",
            "task.question",
            format!("question {qid}: {text}"),
            serde_json::json!({ "question_id": qid, "text": text, "category": BUDGET_CATEGORY }),
        );
    }

    /// The operator's answer to the breaker's question on `key`.
    pub(super) fn answer_budget_question(
        &mut self,
        key: &TaskKey,
        qid: &str,
        question: &str,
        text: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let resume = check_budget_answer(text)?;
        self.record_answer(key, qid, question, text, fx);
        if resume {
            self.resume_swarm(&key.swarm, BY_OPERATOR, fx)?;
        }
        Ok(())
    }

    /// What a task does after its agent's usage limit: wait for the reset
    /// (READY after it), pause the swarm as well, or fail.
    pub(super) fn after_usage_limit(&mut self, key: &TaskKey, number: u32, until: i64, fx: &mut Effects) {
        let policy = self.shared.model.tasks().get(key).map(|t| t.spec.on_usage_limit).unwrap_or_default();
        let wait_s = (until - now_ms()).max(0) / 1000;
        match policy {
            OnUsageLimit::Fail => {
                let why = format!(
                    "attempt {number} hit the agent's usage limit (on_usage_limit = \"fail\"); its work is in the WIP commit"
                );
                self.core(fx).set_state(key, TaskState::Failed, &why);
            }
            OnUsageLimit::Wait | OnUsageLimit::Pause => {
                let why = format!(
                    "attempt {number} hit the agent's usage limit; resumes in {wait_s} s, no retry spent"
                );
                self.core(fx).make_ready(key, &why);
                if policy == OnUsageLimit::Pause {
                    self.pause_for_usage_limit(key, &format!("agent usage limit, resets in {wait_s} s"), fx);
                }
            }
        }
    }

    /// An agent of `key` hit its usage limit and the task says
    /// `on_usage_limit = "pause"`.
    pub(super) fn pause_for_usage_limit(&mut self, key: &TaskKey, why: &str, fx: &mut Effects) {
        let pause =
            Pause { reason: format!("{key}: {why}"), by: BY_USAGE_LIMIT.into(), stop: false, question: None };
        if let Err(e) = self.pause_swarm(&key.swarm, pause, fx) {
            tracing::debug!(error = %e, "no pause for a usage limit");
        }
    }
}
