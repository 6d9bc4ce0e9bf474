//! Budgets: what a task's agent attempts (together) and a swarm's may
//! spend, and the burn-rate breaker.
//!
//! Usage arrives with each agent attempt's Progress (its running total) and
//! Result; `record_agent` keeps the sums, and this module decides what they
//! mean. A task that reaches its budget has its live attempt stopped with a
//! checkpoint (a Cancel with `checkpoint`: WIP commit, session kept); the
//! CHECKPOINT result then leaves the task BLOCKED with a `budget: ...`
//! reason instead of READY. A swarm that reaches its budget stops its live
//! agent attempts the same way and blocks its READY agent tasks; a task
//! that becomes READY later is blocked when the scheduler would assign it.
//! Raising a budget (`SetBudget`) makes the tasks it blocked READY again,
//! and their next attempts resume the stopped sessions, as after any
//! checkpoint.
//!
//! The breaker pauses the swarm (see `pause`) when its agents spent more
//! than `max_usd_per_hour` over the last hour, and asks the operator on the
//! task whose report tipped it. Its window lives in memory: after a restart
//! it counts again from zero.
//!
//! `Budgets` is a component: it works on the core and imports no other
//! component; the breaker's pause is the dispatcher's to make, from what
//! `spent` returns.
//!
//! What the operator set is stored: a task's budget in its notes, a
//! swarm's (and its pause) in the swarm's `control` column.

use std::collections::VecDeque;

use swarm_core::{SwarmId, TaskKey, TaskState, Usage};

use super::core::{Core, find_swarm, find_task};
use super::model::{BUDGET_CATEGORY, HashMap, HashSet, Model, now_ms, task_usage};
use super::model::{BudgetChange, swarm_budget, task_budget};
use crate::error::SchedError;

/// The prefix of a task reason that says a budget blocked it.
pub const BUDGET_REASON: &str = "budget";
/// How far back the breaker looks.
const BURN_WINDOW_MS: i64 = 3_600_000;

/// What a swarm spent over the last hour, from the cost increments of its
/// agents' reports.
#[derive(Debug, Default)]
pub(super) struct BurnWindow {
    spent: VecDeque<(i64, f64)>,
    sum: f64,
}

impl BurnWindow {
    pub fn add(&mut self, now: i64, usd: f64) {
        self.expire(now);
        self.spent.push_back((now, usd));
        self.sum += usd;
    }

    /// Dollars spent in the hour before `now`.
    pub fn last_hour(&mut self, now: i64) -> f64 {
        self.expire(now);
        self.sum.max(0.0)
    }

    /// As [`Self::last_hour`], without forgetting anything.
    pub fn peek(&self, now: i64) -> f64 {
        self.spent.iter().filter(|(at, _)| *at > now - BURN_WINDOW_MS).map(|(_, usd)| usd).sum()
    }

    fn expire(&mut self, now: i64) {
        while let Some(&(at, usd)) = self.spent.front() {
            if at > now - BURN_WINDOW_MS {
                break;
            }
            self.spent.pop_front();
            self.sum -= usd;
        }
        if self.spent.is_empty() {
            self.sum = 0.0;
        }
    }
}

/// The budgets' memory between turns (rebuilt lazily after a restart: a
/// report re-sends a stop, an assignment re-checks a budget).
#[derive(Debug, Default)]
pub(super) struct Budgets {
    /// Live attempts told to stop at a budget, so each is told once.
    stopping: HashSet<(TaskKey, u32)>,
    /// Swarms found over their budget whose attempts were stopped and
    /// READY agent tasks blocked, so the swarm is walked once.
    over: HashSet<SwarmId>,
    burn: HashMap<SwarmId, BurnWindow>,
}

impl Budgets {
    /// Dollars the swarm's agents spent in the last hour, as the breaker
    /// sees it (for reads).
    pub fn burn_rate(&self, id: &SwarmId) -> f64 {
        self.burn.get(id).map(|w| w.peek(now_ms())).unwrap_or(0.0)
    }

    /// The breaker's window starts afresh (the swarm was resumed).
    pub fn forget_burn(&mut self, id: &SwarmId) {
        self.burn.remove(id);
    }

    /// Everything kept of a swarm retention forgot.
    pub fn forget(&mut self, id: &SwarmId) {
        self.over.remove(id);
        self.burn.remove(id);
        self.stopping.retain(|(key, _)| key.swarm != *id);
    }

    /// Lets a budget stop of `key#number` be sent again.
    pub fn forget_stop(&mut self, key: &TaskKey, number: u32) {
        self.stopping.remove(&(key.clone(), number));
    }

    /// An agent attempt's running total moved from `before` to `after`:
    /// feeds the breaker's window, and returns the last hour's spend and
    /// the swarm's `max_usd_per_hour` when it is over it (the dispatcher
    /// trips the breaker).
    pub fn spent(
        &mut self,
        model: &Model,
        key: &TaskKey,
        before: &Usage,
        after: &Usage,
    ) -> Option<(f64, f64)> {
        let delta = after.cost_usd - before.cost_usd;
        if delta <= 0.0 {
            return None;
        }
        let now = now_ms();
        let window = self.burn.entry(key.swarm.clone()).or_default();
        window.add(now, delta);
        let rate = window.last_hour(now);
        let max = model.swarms().get(&key.swarm).and_then(|s| swarm_budget(s).max_usd_per_hour)?;
        (rate > max).then_some((rate, max))
    }

    /// After a live report's usage: a live attempt (no reviewer) over a
    /// budget is stopped.
    pub fn on_live_usage(&mut self, core: &mut Core, key: &TaskKey, number: u32) {
        let live = core.model.attempts().get(&(key.clone(), number)).is_some_and(|a| a.state.is_live());
        if live && !core.model.is_reviewer(key, number) {
            self.enforce(core, key);
        }
    }

    /// Applies the budgets to `key` and its swarm: a live attempt over
    /// budget is stopped, a READY task over budget is BLOCKED, and a swarm
    /// found over its budget has every such task of its own handled too.
    pub fn enforce(&mut self, core: &mut Core, key: &TaskKey) {
        if let Some(why) = swarm_over_budget(core.model, &key.swarm)
            && self.over.insert(key.swarm.clone())
        {
            self.stop_swarm(core, &key.swarm, &why);
        }
        let Some(why) = over_budget(core.model, key) else { return };
        match core.model.tasks().get(key).map(|t| (t.state(), t.attempts)) {
            Some((TaskState::Running, number)) => self.stop(core, key, number, &why),
            Some((TaskState::Ready, _)) => block(core, key, &why),
            _ => {}
        }
    }

    /// The swarm reached its budget: stop its live agent attempts and
    /// block its READY agent tasks (one walk of the swarm).
    fn stop_swarm(&mut self, core: &mut Core, id: &SwarmId, why: &str) {
        let _span = tracing::warn_span!("swarm.budget_reached", swarm = %id).entered();
        tracing::warn!(reason = why, "swarm reached its budget; stopping its agent attempts");
        core.fx.event(
            id.as_str(),
            "",
            0,
            "",
            "swarm.budget_reached",
            format!("swarm {id} {why}; its agent attempts stop and no new one starts"),
            serde_json::json!({ "reason": BUDGET_REASON, "detail": why }),
        );
        let keys = core.model.swarms().get(id).map(|s| s.tasks.clone()).unwrap_or_default();
        for key in keys {
            let Some(t) = core.model.tasks().get(&key) else { continue };
            if t.spec.agent.is_none() {
                continue;
            }
            match t.state() {
                TaskState::Running => {
                    let number = t.attempts;
                    if !core.model.is_reviewer(&key, number) {
                        self.stop(core, &key, number, why);
                    }
                }
                TaskState::Ready => block(core, &key, why),
                _ => {}
            }
        }
    }

    /// Stops a live attempt at a budget, once: its work is kept as a WIP
    /// commit and its result (CHECKPOINT) blocks the task.
    fn stop(&mut self, core: &mut Core, key: &TaskKey, number: u32, why: &str) {
        if !self.stopping.insert((key.clone(), number)) {
            return;
        }
        let _span =
            tracing::info_span!("attempt.budget_stop", swarm = %key.swarm, task = %key, attempt = number)
                .entered();
        tracing::info!(reason = why, "stopping the attempt at its budget");
        core.send_stop(key, number, why, true);
        core.fx.task_event(
            key,
            number,
            "",
            "task.budget_reached",
            format!("{why}; stopping {} with a checkpoint", key.attempt(number)),
            serde_json::json!({ "reason": BUDGET_REASON, "detail": why }),
        );
    }

    /// After an attempt's result: the stop it may have been sent is done
    /// with, and a task that went back to READY while over budget is
    /// BLOCKED instead.
    pub fn after_result(&mut self, core: &mut Core, key: &TaskKey, number: u32) {
        // The agent stopped at its budget took its open question with it:
        // its resumed session goes on without an answer.
        if self.stopping.remove(&(key.clone(), number))
            && core.model.tasks().get(key).is_some_and(|t| {
                t.notes
                    .pending_question
                    .as_ref()
                    .is_some_and(|q| q.attempt == number && q.category != BUDGET_CATEGORY)
            })
        {
            core.edit_task(key, |t| t.notes.pending_question = None);
        }
        if core.model.tasks().get(key).is_some_and(|t| t.state() == TaskState::Ready) {
            self.enforce(core, key);
        }
    }

    /// SetBudget on a swarm: stores the new budget and unblocks what it
    /// allows.
    pub fn set_swarm(
        &mut self,
        core: &mut Core,
        id: &SwarmId,
        change: BudgetChange,
    ) -> Result<(), SchedError> {
        let swarm = find_swarm(core.model, id.as_str())?;
        let _span = tracing::info_span!("budget.set", swarm = %id).entered();
        let budget = change.swarm(swarm_budget(swarm));
        core.edit_swarm(id, |s| s.control.budget = Some(budget));
        match swarm_over_budget(core.model, id) {
            None => {
                self.over.remove(id);
            }
            // Lowered below what it spent: stop now, not at the next report.
            Some(why) => {
                if self.over.insert(id.clone()) {
                    self.stop_swarm(core, id, &why);
                }
            }
        }
        let keys = core.model.swarms().get(id).map(|s| s.tasks.clone()).unwrap_or_default();
        let unblocked = unblock(core, &keys);
        tracing::info!(?budget, unblocked, "swarm budget set");
        core.fx.event(
            id.as_str(),
            "",
            0,
            "",
            "budget.set",
            format!(
                "swarm {id} budget set to {}; {unblocked} task(s) unblocked",
                describe(budget.usd, budget.tokens)
            ),
            serde_json::json!({ "scope": "swarm", "usd": budget.usd, "tokens": budget.tokens,
                "max_usd_per_hour": budget.max_usd_per_hour, "unblocked": unblocked }),
        );
        Ok(())
    }

    /// SetBudget on a task.
    pub fn set_task(
        &mut self,
        core: &mut Core,
        key: &TaskKey,
        change: BudgetChange,
    ) -> Result<(), SchedError> {
        let task = find_task(core.model, key)?;
        let _span = tracing::info_span!("budget.set", swarm = %key.swarm, task = %key).entered();
        let budget = change.task(task_budget(task));
        core.edit_task(key, |t| t.notes.budget = Some(budget));
        let unblocked = unblock(core, std::slice::from_ref(key));
        tracing::info!(?budget, unblocked, "task budget set");
        let attempt = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
        core.fx.task_event(
            key,
            attempt,
            "",
            "budget.set",
            format!("task {key} budget set to {}", describe(budget.usd, budget.tokens)),
            serde_json::json!({ "scope": "task", "usd": budget.usd, "tokens": budget.tokens,
                "unblocked": unblocked }),
        );
        // Lowered below what it spent: stop it now.
        if core.model.tasks().get(key).is_some_and(|t| t.state() == TaskState::Running) {
            self.enforce(core, key);
        }
        Ok(())
    }
}

/// The first budget that says an agent task may spend no more (its own,
/// then its swarm's), as a reason.
pub(super) fn over_budget(model: &Model, key: &TaskKey) -> Option<String> {
    let task = model.tasks().get(key)?;
    task.spec.agent.as_ref()?;
    if let Some(why) = task_budget(task).exceeded_by(&task_usage(task, model.attempts())) {
        return Some(format!("{BUDGET_REASON}: task {why}"));
    }
    swarm_over_budget(model, &key.swarm)
}

fn swarm_over_budget(model: &Model, id: &SwarmId) -> Option<String> {
    let swarm = model.swarms().get(id)?;
    swarm_budget(swarm).limit.exceeded_by(swarm.usage()).map(|why| format!("{BUDGET_REASON}: swarm {why}"))
}

/// READY → BLOCKED with a budget reason.
pub(super) fn block(core: &mut Core, key: &TaskKey, why: &str) {
    if core.model.tasks().get(key).map(|t| t.state()) != Some(TaskState::Ready) {
        return;
    }
    core.to_blocked(key, why);
    let attempt = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
    core.fx.task_event(
        key,
        attempt,
        "",
        "task.blocked",
        format!("{key} blocked: {why}"),
        serde_json::json!({ "reason": BUDGET_REASON, "detail": why }),
    );
}

/// Makes READY again the tasks of `keys` a budget blocked and that no
/// budget holds any more.
fn unblock(core: &mut Core, keys: &[TaskKey]) -> u32 {
    let mut n = 0;
    for key in keys {
        let blocked = core
            .model
            .tasks()
            .get(key)
            .is_some_and(|t| t.state() == TaskState::Blocked && t.reason.starts_with(BUDGET_REASON));
        if blocked && over_budget(core.model, key).is_none() {
            core.make_ready(key, "budget raised; resumes from its checkpoint");
            n += 1;
        }
    }
    n
}

fn describe(usd: Option<f64>, tokens: Option<u64>) -> String {
    let usd = usd.map(|u| format!("${u:.2}")).unwrap_or_else(|| "no dollar cap".into());
    let tokens = tokens.map(|t| format!("{t} tokens")).unwrap_or_else(|| "no token cap".into());
    format!("{usd}, {tokens}")
}

#[cfg(test)]
mod tests {
    use swarm_core::plan::{Budget, SwarmBudget};

    use super::super::model::StoredSwarmBudget;
    use super::*;

    #[test]
    fn the_burn_window_forgets_spend_older_than_an_hour() {
        let mut w = BurnWindow::default();
        w.add(0, 1.0);
        w.add(1_000, 2.0);
        assert_eq!(w.last_hour(2_000), 3.0);
        assert_eq!(w.last_hour(BURN_WINDOW_MS + 500), 2.0);
        assert_eq!(w.last_hour(BURN_WINDOW_MS + 1_000), 0.0);
    }

    #[test]
    fn a_change_keeps_unset_fields_and_zero_removes_a_cap() {
        let current =
            SwarmBudget { limit: Budget { usd: Some(5.0), tokens: Some(10) }, max_usd_per_hour: Some(1.0) };
        let set = BudgetChange { usd: Some(25.0), tokens: Some(0), max_usd_per_hour: None }.swarm(current);
        assert_eq!(set, StoredSwarmBudget { usd: Some(25.0), tokens: None, max_usd_per_hour: Some(1.0) });
    }
}
