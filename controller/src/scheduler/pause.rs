//! PAUSED swarms: no new attempt of a paused swarm starts; its running
//! attempts finish or, when the pause says `stop`, checkpoint (WIP commit,
//! agent session kept) so that the next attempt after the resume continues
//! them. The operator pauses and resumes (`PauseSwarm`, `ResumeSwarm`); the
//! burn-rate breaker and an agent usage limit under `on_usage_limit =
//! "pause"` pause too. The pause is stored with the swarm's state (its
//! `control`), so it survives a controller restart; a paused swarm still
//! completes or fails when its last tasks end.
//!
//! The pause keeps nothing of its own beyond the swarm's row, so it is a
//! set of functions of the core. What it means for the other components
//! (the breaker's window starts afresh on a resume, a budget stop on a
//! reconnect) the dispatcher decides from what they return.

use swarm_core::plan::OnUsageLimit;
use swarm_core::{SwarmId, TaskKey, TaskState};

use super::core::{Core, find_swarm};
pub use super::model::{BUDGET_CATEGORY, Pause};
use super::model::{PendingQuestion, SwarmState, now_ms};
use crate::error::SchedError;

/// Who paused a swarm.
pub const BY_OPERATOR: &str = "operator";
pub const BY_BREAKER: &str = "breaker";
pub const BY_USAGE_LIMIT: &str = "usage_limit";

/// The breaker's question is answered with one of these: whether to resume.
pub(super) fn check_budget_answer(text: &str) -> Result<bool, SchedError> {
    match text.trim() {
        "resume" => Ok(true),
        "pause" => Ok(false),
        other => Err(SchedError::InvalidArgument {
            field: "text".into(),
            rule: format!("the budget breaker's question is answered \"resume\" or \"pause\", not {other:?}"),
        }),
    }
}

/// Pauses swarm `id` (again: a second pause may add `stop`).
pub(super) fn pause(core: &mut Core, id: &SwarmId, pause: Pause) -> Result<(), SchedError> {
    let swarm = find_swarm(core.model, id.as_str())?;
    let from = swarm.state;
    if !from.is_live() {
        return Err(SchedError::FailedPrecondition(format!(
            "swarm {id} is {}; only a live swarm pauses",
            from.as_str()
        )));
    }
    let _span = tracing::info_span!("swarm.pause", swarm = %id, by = %pause.by, stop = pause.stop).entered();
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
    let Some(s) = core.model.swarms().get(id) else { return Ok(()) };
    // A stop asked once is not taken back by a later pause without it.
    let stop = stop || s.control.paused.as_ref().is_some_and(|p| p.stop);
    // Nor is the breaker's question forgotten: the resume clears it.
    let question =
        pause.question.clone().or_else(|| s.control.paused.as_ref().and_then(|p| p.question.clone()));
    core.edit_swarm(id, |s| {
        s.state = SwarmState::Paused;
        s.control.paused = Some(Pause { stop, question, ..pause });
    });
    tracing::info!("swarm paused");
    core.fx.event(id.as_str(), "", 0, "", kind, message, data);
    if stop {
        checkpoint_running(core, id);
    }
    core.count_stalled();
    Ok(())
}

/// Tells every live attempt of the swarm (reviewers aside) to checkpoint.
fn checkpoint_running(core: &mut Core, id: &SwarmId) {
    let keys = core.model.swarms().get(id).map(|s| s.tasks.clone()).unwrap_or_default();
    for key in keys {
        let Some(t) = core.model.tasks().get(&key) else { continue };
        let number = t.attempts;
        let live = core.model.attempts().get(&(key.clone(), number)).is_some_and(|a| a.state.is_live());
        if t.state() == TaskState::Running && live && !core.model.is_reviewer(&key, number) {
            core.send_stop(&key, number, "swarm paused", true);
        }
    }
}

/// A worker reconnected holding `key#number` (no reviewer): a stop a
/// checkpointing pause sent may have been lost with its old stream (or
/// never sent, while it had none), so it is sent again. Whether it was.
pub(super) fn stop_again_on_reconnect(core: &mut Core, key: &TaskKey, number: u32) -> bool {
    let stopping =
        core.model.swarms().get(&key.swarm).is_some_and(|s| {
            s.state == SwarmState::Paused && s.control.paused.as_ref().is_some_and(|p| p.stop)
        });
    if stopping {
        core.send_stop(key, number, "swarm paused", true);
    }
    stopping
}

/// A forge sync the forge refused (a protected branch, a rejected token)
/// waits for the operator, who fixes the cause and resumes the swarm: the
/// event wakes the forge task, which tries again at once.
fn retry_forge(core: &mut Core, id: &SwarmId, by: &str) {
    let Some(forge) = core.model.swarms().get(id).and_then(|s| s.control.forge.as_deref()) else { return };
    if forge.error.is_empty() || forge.retry_at != 0 {
        return;
    }
    let _span = tracing::info_span!("swarm.forge_retry", swarm = %id, by).entered();
    tracing::info!(error = %forge.error, "the forge's refusal is tried again");
    let message = format!("swarm {id}: the forge sync that waited for you is tried again (by the {by})");
    let data = serde_json::json!({ "forge": true, "by": by, "error": forge.error });
    core.fx.event(id.as_str(), "", 0, "", "swarm.resumed", message, data);
}

/// Resumes swarm `id`: it is ACTIVE (or whatever its tasks make it) and
/// assigns again; a forge sync waiting for the operator is tried again. Whether it was paused (the breaker's window then starts
/// afresh).
pub(super) fn resume(core: &mut Core, id: &SwarmId, by: &str) -> Result<bool, SchedError> {
    let swarm = find_swarm(core.model, id.as_str())?;
    if swarm.state != SwarmState::Paused {
        retry_forge(core, id, by);
        return Ok(false);
    }
    let _span = tracing::info_span!("swarm.resume", swarm = %id, by).entered();
    let question = swarm.control.paused.as_ref().and_then(|p| p.question.clone());
    core.edit_swarm(id, |s| {
        s.state = SwarmState::Active;
        s.control.paused = None;
    });
    core.fx.touched_swarms.insert(id.clone());
    core.scan.changed();
    tracing::info!("swarm resumed");
    core.fx.event(
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
        && core
            .model
            .tasks()
            .get(&key)
            .is_some_and(|t| t.notes.pending_question.as_ref().is_some_and(|q| q.id == qid))
    {
        core.edit_task(&key, |t| t.notes.pending_question = None);
    }
    core.count_stalled();
    Ok(true)
}

/// The breaker: the swarm spent `rate` dollars in the last hour, more
/// than `max`. Pause it and ask the operator on `key`, whose report
/// tipped it.
pub(super) fn trip_breaker(core: &mut Core, key: &TaskKey, rate: f64, max: f64) {
    if !core
        .model
        .swarms()
        .get(&key.swarm)
        .is_some_and(|s| matches!(s.state, SwarmState::Active | SwarmState::Stalled))
    {
        return;
    }
    let reason = format!("burn rate ${rate:.2} in the last hour is over max_usd_per_hour ${max:.2}");
    let number = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
    let qid = format!("budget-{number}");
    let asks = core.model.tasks().get(key).is_some_and(|t| t.notes.pending_question.is_none());
    let by_breaker = Pause {
        reason: reason.clone(),
        by: BY_BREAKER.into(),
        stop: false,
        question: asks.then(|| (key.to_string(), qid.clone())),
    };
    if pause(core, &key.swarm, by_breaker).is_err() || !asks {
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
    core.edit_task(key, |t| t.notes.pending_question = Some(question));
    core.fx.task_event(
        key,
        number,
        "",
        "task.question",
        format!("question {qid}: {text}"),
        serde_json::json!({ "question_id": qid, "text": text, "category": BUDGET_CATEGORY }),
    );
}

/// What a task does after its agent's usage limit: wait for the reset
/// (READY after it), pause the swarm as well, or fail.
pub(super) fn after_usage_limit(core: &mut Core, key: &TaskKey, number: u32, until: i64) {
    let policy = core.model.tasks().get(key).map(|t| t.spec.on_usage_limit).unwrap_or_default();
    let wait_s = (until - now_ms()).max(0) / 1000;
    match policy {
        OnUsageLimit::Fail => {
            let why = format!(
                "attempt {number} hit the agent's usage limit (on_usage_limit = \"fail\"); its work is in the WIP commit"
            );
            core.to_failed(key, &why);
        }
        OnUsageLimit::Wait | OnUsageLimit::Pause => {
            let why = format!(
                "attempt {number} hit the agent's usage limit; resumes in {wait_s} s, no retry spent"
            );
            core.make_ready(key, &why);
            if policy == OnUsageLimit::Pause {
                pause_for_usage_limit(core, key, &format!("agent usage limit, resets in {wait_s} s"));
            }
        }
    }
}

/// An agent of `key` hit its usage limit and the task says
/// `on_usage_limit = "pause"`.
fn pause_for_usage_limit(core: &mut Core, key: &TaskKey, why: &str) {
    let by_limit =
        Pause { reason: format!("{key}: {why}"), by: BY_USAGE_LIMIT.into(), stop: false, question: None };
    if let Err(e) = pause(core, &key.swarm, by_limit) {
        tracing::debug!(error = %e, "no pause for a usage limit");
    }
}
