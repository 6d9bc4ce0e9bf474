//! What the forge component writes: the outcome of one sync of a swarm's
//! branch and pull request, kept in the swarm's `control` (so it survives
//! a restart with no table of its own) and announced by an event when
//! something the operator would want to hear changed. The component only
//! reports; whether anything changed is decided here.

use swarm_core::plan::forge::Provider;
use swarm_core::{SwarmId, TaskKey, TaskState};

use super::core::{Core, find_swarm};
use super::model::messages::{FeedbackTaken, ForgeFeedback};
use super::model::{FeedbackState, ForgeState, MAX_PENDING_REPLIES, MAX_REPLIES_PER_ATTEMPT, PendingReply};
use super::model::{Swarm, SwarmState};
use crate::error::SchedError;

/// Whether swarm `swarm`, every task merged, still waits on its pull
/// request (LANDING) rather than being done: a forge with pull requests
/// (not a push-only remote) whose pull request has not merged. The
/// merge is what completes it, with its commit recorded.
pub(super) fn waits_on_pull(swarm: &Swarm) -> bool {
    let Some(spec) = swarm.plan.forge.as_deref() else { return false };
    let merged =
        swarm.control.forge.as_deref().and_then(|f| f.pull.as_ref()).is_some_and(|p| p.state == "merged");
    spec.provider == Provider::Github && !merged
}

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
    let merged_now = next.pull.as_ref().is_some_and(|p| p.state == "merged")
        && before.pull.as_ref().is_none_or(|p| p.state != "merged");
    let stored = next.clone();
    core.edit_swarm(id, move |s| s.control.forge = Some(Box::new(stored)));
    if merged_now {
        // A LANDING swarm is COMPLETED by its pull request's merge.
        core.fx.touched_swarms.insert(id.clone());
    }
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
        // A refusal (a protected branch, a non-fast-forward, a rejected
        // token) is not retried by time: it is a question for the operator.
        let waits = next.retry_at == 0;
        let ask = if waits {
            format!("; waits for you: fix it, then `swarmctl resume {id}`")
        } else {
            String::new()
        };
        out.push((
            "swarm.forge_error",
            format!("swarm {id}: forge: {}{ask}", next.error),
            serde_json::json!({ "error": next.error, "waits_for_operator": waits }),
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
    // An answer is claimed once it is posted: it leaves the outbox.
    taken.replies.retain(|r| r.id != key);
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
    let text = feedback_text(&feedback);
    // Work already going again (reopened for an earlier item) reads it on
    // its next attempt.
    if let (Some(key), Some(TaskState::Pending | TaskState::Ready | TaskState::Running)) = (&key, state)
        && !feedback.is_check
    {
        hand_thread(&mut taken, &feedback, key);
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
    hand_thread(&mut taken, &feedback, &key);
    let rounds = taken.ci_rounds;
    core.edit_swarm(id, move |s| {
        s.control.feedback = Some(Box::new(taken));
        if !s.state.is_live() {
            s.state = SwarmState::Active;
        }
    });
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

/// The feedback as its task reads it; a thread its agent may answer
/// (`reply`) is named.
fn feedback_text(feedback: &ForgeFeedback) -> String {
    let mut text = format!("{}\n\n```text\n{}\n```", feedback.title, feedback.text.trim_end());
    if !feedback.is_check && swarm_proto::limits::check_reply_thread(&feedback.key).is_ok() {
        text.push_str(&format!("\n\nAnswer the reviewer with the `reply` tool, thread `{}`.", feedback.key));
    }
    text
}

/// Records that `key`'s agent may answer the thread `feedback` came from.
fn hand_thread(taken: &mut FeedbackState, feedback: &ForgeFeedback, key: &TaskKey) {
    if !feedback.is_check && swarm_proto::limits::check_reply_thread(&feedback.key).is_ok() {
        taken.threads.insert(feedback.key.clone(), key.task.to_string());
    }
}

/// An agent's answer on a pull request thread: queued for the forge when
/// the thread was handed to its task and the attempt has answers left;
/// otherwise refused, with an event saying why, and nothing posted.
pub(super) fn reply(core: &mut Core, key: &TaskKey, number: u32, thread: String, text: String) {
    let _span = tracing::info_span!("task.forge_reply", swarm = %key.swarm, task = %key, attempt = number,
        %thread)
    .entered();
    let Some(swarm) = core.model.swarms().get(&key.swarm) else { return };
    let mut taken = swarm.control.feedback.as_deref().cloned().unwrap_or_default();
    let prefix = format!("reply:{}#{number}.", key.task);
    let made = taken.seen.iter().filter(|id| id.starts_with(&prefix)).count()
        + taken.replies.iter().filter(|r| r.id.starts_with(&prefix)).count();
    let refused = if swarm.plan.forge.is_none() {
        Some("the swarm has no [forge]".to_string())
    } else if taken.threads.get(&thread).is_none_or(|task| task != key.task.as_str()) {
        Some(format!("thread {thread} was not handed to this task"))
    } else if made >= MAX_REPLIES_PER_ATTEMPT {
        Some(format!("an attempt posts at most {MAX_REPLIES_PER_ATTEMPT} answers"))
    } else if taken.replies.len() >= MAX_PENDING_REPLIES {
        Some(format!("{MAX_PENDING_REPLIES} answers already wait for the forge"))
    } else {
        None
    };
    if let Some(why) = refused {
        tracing::warn!(reason = %why, "the agent's answer was refused");
        core.fx.task_event(
            key,
            number,
            "",
            "task.reply_refused",
            format!("{}: answer on {thread} not posted: {why}", key.attempt(number)),
            serde_json::json!({ "thread": thread, "reason": why }),
        );
        return;
    }
    let id = format!("{prefix}{}", made + 1);
    tracing::info!(%id, "the agent's answer waits for the forge");
    taken.replies.push(PendingReply {
        id: id.clone(),
        task: key.task.to_string(),
        thread: thread.clone(),
        text,
    });
    core.edit_swarm(&key.swarm, move |s| s.control.feedback = Some(Box::new(taken)));
    core.fx.task_event(
        key,
        number,
        "",
        "task.replied",
        format!("{} answers on {thread}", key.attempt(number)),
        serde_json::json!({ "thread": thread, "id": id }),
    );
}
