//! What the forge component writes: the outcome of one sync of a swarm's
//! branch and pull request, kept in the swarm's `control` (so it survives
//! a restart with no table of its own) and announced by an event when
//! something the operator would want to hear changed. The component only
//! reports; whether anything changed is decided here.

use swarm_core::{SwarmId, TaskKey, TaskState};

use super::core::{Core, find_swarm};
use super::model::messages::{FeedbackTaken, ForgeFeedback};
use super::model::{ForgeState, SwarmState};
use crate::error::SchedError;

/// Records `next` as swarm `id`'s forge state.
pub(super) fn synced(core: &mut Core, id: &SwarmId, next: ForgeState) -> Result<(), SchedError> {
    let swarm = find_swarm(core.model, id.as_str())?;
    if swarm.plan.forge.is_none() {
        return Err(SchedError::FailedPrecondition(format!("swarm {id} has no [forge]")));
    }
    let before = swarm.control.forge.as_deref().cloned().unwrap_or_default();
    if before == next {
        return Ok(());
    }
    let _span = tracing::info_span!("swarm.forge", swarm = %id, pushed = %next.pushed).entered();
    let announce = events(id, &before, &next);
    let stored = next.clone();
    core.edit_swarm(id, move |s| s.control.forge = Some(Box::new(stored)));
    for (kind, message, data) in announce {
        tracing::info!(kind, "{message}");
        core.fx.event(id.as_str(), "", 0, "", kind, message, data);
    }
    Ok(())
}

/// The events a change from `before` to `next` is worth.
fn events(
    id: &SwarmId,
    before: &ForgeState,
    next: &ForgeState,
) -> Vec<(&'static str, String, serde_json::Value)> {
    let mut out = Vec::new();
    if !next.pushed.is_empty() && next.pushed != before.pushed {
        out.push((
            "swarm.pushed",
            format!("swarm {id} pushed {}", short(&next.pushed)),
            serde_json::json!({ "commit": next.pushed }),
        ));
    }
    if let Some(pull) = &next.pull
        && before.pull.as_ref().is_none_or(|b| b.number != pull.number || b.state != pull.state)
    {
        let verb = match before.pull.as_ref() {
            Some(b) if b.number == pull.number => "is now",
            _ => "opened as",
        };
        out.push((
            "swarm.pull_request",
            format!("swarm {id} {verb} pull request #{} ({}): {}", pull.number, pull.state, pull.url),
            serde_json::json!({ "number": pull.number, "url": pull.url, "state": pull.state }),
        ));
    }
    for flaky in next.flaky.iter().filter(|f| !before.flaky.contains(f)) {
        out.push((
            "swarm.check_flaky",
            format!("swarm {id}: check {flaky} failed, then passed on a re-run of the same commit"),
            serde_json::json!({ "check": flaky }),
        ));
    }
    if !next.error.is_empty() && next.error != before.error {
        out.push((
            "swarm.forge_error",
            format!("swarm {id}: forge: {}", next.error),
            serde_json::json!({ "error": next.error }),
        ));
    }
    out
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Claims the forge's id `key` for swarm `id` once and for all: whether
/// it was new. What acts on a forge item (a slash command) claims it first,
/// so a restart never acts twice; a crash between the two loses the act.
pub(super) fn claim(core: &mut Core, id: &SwarmId, key: String) -> Result<bool, SchedError> {
    let swarm = find_swarm(core.model, id.as_str())?;
    let mut taken = swarm.control.feedback.as_deref().cloned().unwrap_or_default();
    if !taken.seen.insert(key) {
        return Ok(false);
    }
    core.edit_swarm(id, move |s| s.control.feedback = Some(Box::new(taken)));
    Ok(true)
}

/// Gives `feedback` to its task: a MERGED task of a swarm with a `[forge]`
/// gets a new attempt that reads it, and the swarm is ACTIVE again until
/// that attempt's work merges (and is pushed to the same pull request). A
/// failed check counts against the plan's `ci_retries`; past them, or with
/// no task named, the operator is asked instead. Each forge id once.
pub(super) fn feedback(
    core: &mut Core,
    id: &SwarmId,
    feedback: ForgeFeedback,
) -> Result<FeedbackTaken, SchedError> {
    let swarm = find_swarm(core.model, id.as_str())?;
    let Some(spec) = swarm.plan.forge.clone() else {
        return Err(SchedError::FailedPrecondition(format!("swarm {id} has no [forge]")));
    };
    let mut taken = swarm.control.feedback.as_deref().cloned().unwrap_or_default();
    if taken.seen.contains(&feedback.key) {
        return Ok(FeedbackTaken::Seen);
    }
    let _span = tracing::info_span!("swarm.feedback", swarm = %id, key = %feedback.key,
        task = feedback.task.as_deref().unwrap_or(""))
    .entered();
    taken.seen.insert(feedback.key.clone());
    let key = match &feedback.task {
        Some(task) => Some(
            TaskKey::parse(&format!("{id}/{task}"))
                .map_err(|rule| SchedError::InvalidArgument { field: "task".into(), rule })?,
        ),
        None => None,
    };
    let state = key.as_ref().and_then(|k| core.model.tasks().get(k)).map(|t| t.state());
    // Work already going again (reopened for an earlier item) reads it on
    // its next attempt.
    if let (Some(key), Some(TaskState::Pending | TaskState::Ready | TaskState::Running)) = (&key, state)
        && !feedback.is_check
    {
        let text = format!("{}\n\n```text\n{}\n```", feedback.title, feedback.text.trim_end());
        core.edit_swarm(id, move |s| s.control.feedback = Some(Box::new(taken)));
        core.edit_task(key, move |t| t.notes.feedback.push(text));
        return Ok(FeedbackTaken::Queued);
    }
    let merged = state == Some(TaskState::Merged);
    let spent = feedback.is_check && taken.ci_rounds >= spec.ci_retries;
    let (Some(key), true, false) = (key, merged, spent) else {
        let why = if spent {
            format!("ci_retries ({}) spent", spec.ci_retries)
        } else if feedback.task.is_none() {
            "no task owns what it names".to_string()
        } else {
            format!("its task is {}", state.map_or("gone", |s| s.as_str()))
        };
        core.edit_swarm(id, move |s| s.control.feedback = Some(Box::new(taken)));
        tracing::warn!(title = %feedback.title, reason = %why, "the forge's feedback is left to the operator");
        core.fx.event(
            id.as_str(),
            "",
            0,
            "",
            "swarm.feedback_unrouted",
            format!("swarm {id}: {} — left to you: {why}", feedback.title),
            serde_json::json!({ "key": feedback.key, "title": feedback.title, "reason": why,
                "task": feedback.task, "text": feedback.text }),
        );
        return Ok(FeedbackTaken::Asked);
    };
    if feedback.is_check {
        taken.ci_rounds += 1;
    }
    let rounds = taken.ci_rounds;
    core.edit_swarm(id, move |s| {
        s.control.feedback = Some(Box::new(taken));
        if !matches!(s.state, SwarmState::Active | SwarmState::Stalled | SwarmState::Paused) {
            s.state = SwarmState::Active;
        }
    });
    let text = format!("{}\n\n```text\n{}\n```", feedback.title, feedback.text.trim_end());
    core.edit_task(&key, move |t| {
        t.notes.feedback.push(text);
        t.retries_used = 0;
        t.not_before = 0;
    });
    tracing::info!(rounds, "task reopened with the forge's feedback");
    core.fx.event(
        id.as_str(),
        key.task.as_str(),
        0,
        "",
        "task.reopened",
        format!("{key} reopened: {}", feedback.title),
        serde_json::json!({ "key": feedback.key, "title": feedback.title, "ci_rounds": rounds }),
    );
    core.make_ready(&key, &format!("reopened: {}", feedback.title));
    Ok(FeedbackTaken::Reopened)
}
