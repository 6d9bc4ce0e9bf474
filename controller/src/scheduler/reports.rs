//! What sidecars tell the scheduler: hellos, reports, fencing and the
//! exit-code transitions. Sessions and claims are in `sessions`, merge
//! results in `merged`.

use swarm_core::plan::OnEmpty;
use swarm_core::{AttemptState, TaskKey, Usage};

use super::command::{HelloInfo, Report, ReportedAttempt, ResultReport};
use super::components::Components;
use super::core::Core;
use super::model::{Model, PERMISSION_CATEGORY, PendingQuestion, Session, now_ms};
use super::outbound::Outbound;
use super::outcome::{self, Facts, Then};
use super::{assign, forge, merged, pause, sandbox, sessions};

/// Whose result it was: a reviewer's decides a review, not the task's run.
#[derive(PartialEq)]
enum Recorded {
    ByReviewer,
    ForTask,
}

pub(super) fn on_hello(core: &mut Core<'_>, parts: &mut Components, hello: HelloInfo, session: Session) {
    let _span =
        tracing::info_span!("sidecar.hello", worker = %hello.worker_id, session = session.id).entered();
    let Some(welcomed) = parts.sessions.hello(core, &hello, session) else { return };
    if let Some((key, number)) = &welcomed.current {
        if !welcomed.resumed {
            // It does not hold its attempt (restarted without it, or the
            // Assign was lost with the stream): the same attempt, same
            // token, is sent again.
            if let Some(spec) = assign::assign_spec(core.model, key, *number) {
                core.send(&hello.worker_id, Outbound::Assign(Box::new(spec)));
            }
        }
        if core.model.tasks().get(key).is_some_and(|t| t.cancel_requested) {
            core.send_cancel(key, *number, "cancelled by the operator");
        }
        stop_again_on_reconnect(core, parts, key, *number);
    }
    sessions::connected(core, &hello, &welcomed);
}

/// A worker reconnected holding `key#number`: a stop it was sent may
/// have been lost with its old stream (or never sent, while it had
/// none), so a checkpointing pause or a budget stops it again.
fn stop_again_on_reconnect(core: &mut Core<'_>, parts: &mut Components, key: &TaskKey, number: u32) {
    if core.model.is_reviewer(key, number) {
        return;
    }
    if pause::stop_again_on_reconnect(core, key, number) {
        return;
    }
    parts.budgets.forget_stop(key, number);
    parts.budgets.enforce(core, key);
}

pub(super) fn on_report(
    core: &mut Core<'_>,
    parts: &mut Components,
    worker_id: &str,
    session: u64,
    seq: u64,
    report: Report,
) {
    let Some(worker) = core.model.workers().get(worker_id) else { return };
    if worker.session.as_ref().map(|s| s.id) != Some(session) {
        return; // a stream that has been replaced says nothing
    }
    if seq > 0 && !parts.sessions.admit_seq(core, worker_id, session, seq) {
        return;
    }
    let current = match report.attempt() {
        None => true,
        Some(a) => is_current(core.model, worker_id, a),
    };
    if current {
        apply(core, parts, worker_id, report);
    } else if let Some(a) = report.attempt() {
        let _span =
            tracing::warn_span!("report.fenced", task = %a.task, attempt = a.number, worker = worker_id)
                .entered();
        core.metrics.fenced_reports.inc();
        let current_token = core.model.tasks().get(&a.task).and_then(|t| {
            core.model.attempts().get(&(a.task.clone(), t.attempts)).map(|x| (t.attempts, x.token))
        });
        // A peer can send fenced reports as fast as it likes; the audit
        // log records the first of each window and a count of the rest.
        parts.sessions.audited(
            core,
            worker_id,
            "report.fenced",
            Some((&a.task.clone(), a.number)),
            format!(
                "stale report for {} (token {}) ignored; current attempt is {:?}",
                a.task.attempt(a.number),
                a.token,
                current_token.map(|(n, t)| format!("#{n} token {t}"))
            ),
            serde_json::json!({ "token": a.token, "seq": seq, "kind": report_kind(&report) }),
        );
    }
    if seq > 0 {
        core.edit_worker(worker_id, |w| w.last_applied_seq = seq);
        core.send(worker_id, Outbound::Ack { seq });
    }
}

/// A report is current when it names the live attempt its worker holds,
/// with that attempt's fencing token.
fn is_current(model: &Model, worker_id: &str, a: &ReportedAttempt) -> bool {
    let holds = model
        .workers()
        .get(worker_id)
        .and_then(|w| w.attempt())
        .is_some_and(|(k, n)| k == &a.task && *n == a.number);
    holds
        && model
            .attempts()
            .get(&(a.task.clone(), a.number))
            .is_some_and(|x| x.token == a.token && x.state.is_live())
}

fn apply(core: &mut Core<'_>, parts: &mut Components, worker_id: &str, report: Report) {
    match report {
        Report::MergeVerified(r) => parts.merge_queues.on_verified(core, &parts.merger, worker_id, *r),
        Report::Started { attempt, pid, restarts, sandbox } => {
            if core.model.attempts().get(&(attempt.task.clone(), attempt.number)).map(|a| a.state)
                == Some(AttemptState::Assigned)
            {
                core.set_attempt_state(&attempt.task, attempt.number, AttemptState::Running);
            }
            core.fx.task_event(
                &attempt.task,
                attempt.number,
                worker_id,
                "attempt.started",
                format!("worker process {pid} started (restarts: {restarts})"),
                serde_json::json!({ "pid": pid, "restarts": restarts }),
            );
            if let Some(s) = sandbox.filter(|_| restarts == 0) {
                sandbox::sandbox_event(core.fx, &attempt, worker_id, s);
            }
        }
        Report::Progress { attempt, percent, step, usage, session_id } => {
            // Progress stays in memory: it is reported again and again.
            core.edit_task_unstored(&attempt.task, |t| {
                t.percent = percent.min(100);
                t.step = step;
            });
            // An agent's session and spend so far are kept, though: a
            // lost attempt's session may still be resumed.
            record_agent(core, parts, &attempt.task, attempt.number, usage, &session_id, true);
        }
        Report::Status { attempt, status, message } => {
            core.fx.task_event(
                &attempt.task,
                attempt.number,
                worker_id,
                "task.status",
                format!("{status}: {message}"),
                serde_json::json!({ "status": status, "message": message }),
            );
        }
        Report::Question { attempt, id, text, category, options } => {
            let question = PendingQuestion {
                id: id.clone(),
                text: text.clone(),
                category: category.clone(),
                attempt: attempt.number,
                options: options.clone(),
            };
            core.edit_task(&attempt.task, |t| t.notes.pending_question = Some(question));
            core.fx.task_event(
                &attempt.task,
                attempt.number,
                worker_id,
                "task.question",
                format!("question {id}: {text}"),
                serde_json::json!({ "question_id": id, "text": text, "category": category, "options": options }),
            );
        }
        Report::ForgeReply { attempt, thread, text } => {
            forge::reply(core, &attempt.task, attempt.number, thread, text);
        }
        Report::Result(result) => on_result(core, parts, worker_id, *result),
        Report::Orphans { worktrees, removed } => {
            core.fx.event(
                "",
                "",
                0,
                worker_id,
                "worker.orphans",
                format!("{} orphaned worktree(s){}", worktrees.len(), if removed { ", removed" } else { "" }),
                serde_json::json!({ "worktrees": worktrees, "removed": removed }),
            );
        }
    }
}

/// The id of the question `asked` that was answered while attempt
/// `number` ran, when nothing is pending since: an escalation carries
/// its question's text, so an answer to an earlier question of the
/// same attempt does not count.
fn answered_during(model: &Model, key: &TaskKey, number: u32, asked: &str) -> Option<String> {
    let notes = &model.tasks().get(key)?.notes;
    if notes.pending_question.is_some() {
        return None;
    }
    let last = notes.answers.last()?;
    (last.during_attempt == number && last.question == asked).then(|| last.question_id.clone())
}

fn on_result(core: &mut Core<'_>, parts: &mut Components, worker_id: &str, r: ResultReport) {
    let (key, number) = (r.attempt.task.clone(), r.attempt.number);
    apply_result(core, parts, worker_id, r);
    parts.budgets.after_result(core, &key, number);
}

/// A result: recorded on its attempt, then what the outcome table
/// (`outcome.rs`) decides is carried out.
fn apply_result(core: &mut Core<'_>, parts: &mut Components, worker_id: &str, r: ResultReport) {
    let key = r.attempt.task.clone();
    let number = r.attempt.number;
    let _span =
        tracing::info_span!("attempt.result", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), worker = worker_id, outcome = %r.outcome)
            .entered();
    if record_result(core, parts, &r) == Recorded::ByReviewer {
        on_review_result(core, parts, &key, number, &r);
        return;
    }
    let detail = if r.error.is_empty() { &r.summary } else { &r.error };
    let facts = Facts {
        answered: answered_during(core.model, &key, number, detail),
        no_change: no_change(core.model, &key, &r),
        on_empty: on_empty(core.model, &key),
    };
    let effect = outcome::effect_of(&r, facts);
    if let Some(why) = &effect.no_change {
        core.fx.task_event(
            &key,
            number,
            worker_id,
            "task.no_change",
            format!("{}: {why}", key.attempt(number)),
            serde_json::json!({ "commit": r.commit, "on_empty": on_empty(core.model, &key).as_str() }),
        );
    }
    if let Some(error) = effect.attempt_error.clone() {
        core.edit_attempt(&key, number, |a| a.error = error);
    }
    core.set_attempt_state(&key, number, effect.attempt);
    if effect.keep_work || effect.note.is_some() {
        let (commit, note) = (r.commit.clone().filter(|_| effect.keep_work), effect.note.clone());
        core.edit_task(&key, |t| {
            if let Some(c) = commit {
                t.resume_commit = c;
            }
            if let Some(note) = note {
                t.notes.failures.push(note);
            }
        });
    }
    let cancel_requested = core.model.tasks().get(&key).is_some_and(|t| t.cancel_requested);
    if cancel_requested && effect.then.yields_to_cancel() {
        if effect.then == Then::WaitForLimit {
            // The limit still holds the worker for its other tasks.
            hold_for_limit(core, parts, worker_id, &key, &r);
        }
        core.to_cancelled(&key, "cancelled by the operator");
        return;
    }
    carry_out(core, parts, worker_id, &key, number, &r, effect.then);
}

/// What a result leaves on its attempt whatever its outcome; a
/// reviewer's result goes no further than this.
fn record_result(core: &mut Core<'_>, parts: &mut Components, r: &ResultReport) -> Recorded {
    let (key, number) = (&r.attempt.task, r.attempt.number);
    core.edit_attempt(key, number, |a| {
        a.outcome = Some(r.outcome);
        a.exit_code = r.exit_code;
        a.summary = r.summary.clone();
        a.error = r.error.clone();
        a.tiers = r.tiers.clone();
        a.result_commit = r.commit.clone().unwrap_or_default();
    });
    if !r.session_id.is_empty() || !r.usage.is_zero() {
        record_agent(core, parts, key, number, Some(r.usage), &r.session_id, false);
        core.metrics.agent_usage(&r.usage);
    }
    core.free_worker_of(key, number);
    if core.model.is_reviewer(key, number) {
        return Recorded::ByReviewer;
    }
    // A permission request lives and dies with the agent that asked: an
    // answer after its attempt ended would reach nobody.
    if core
        .model
        .tasks()
        .get(key)
        .and_then(|t| t.notes.pending_question.as_ref())
        .is_some_and(|q| q.category == PERMISSION_CATEGORY)
    {
        core.edit_task(key, |t| t.notes.pending_question = None);
    }
    Recorded::ForTask
}

/// The task's next move, as the outcome table decided it.
fn carry_out(
    core: &mut Core<'_>,
    parts: &mut Components,
    worker_id: &str,
    key: &TaskKey,
    number: u32,
    r: &ResultReport,
    then: Then,
) {
    match then {
        Then::Succeed { commit, reason } => {
            core.edit_task(key, |t| {
                t.result_commit = commit;
                // Written only when there is something to keep: notes
                // are allocated on their first write (see `LazyNotes`).
                if !r.summary.is_empty() || !t.notes.summary.is_empty() {
                    t.notes.summary = r.summary.clone();
                }
                if !r.files_changed.is_empty() || !t.notes.files_changed.is_empty() {
                    t.notes.files_changed = r.files_changed.clone();
                }
                if t.notes.conflict.is_some() {
                    t.notes.conflict = None;
                }
            });
            core.to_succeeded(key, &reason);
            merged::after_success(core, &mut parts.reviews, &mut parts.merge_queues, key, number);
        }
        Then::FailOrRetry(why) => core.fail_or_retry(key, number, &why),
        Then::Ready { reason, delay_ms } => {
            if delay_ms > 0 {
                core.edit_task(key, |t| t.not_before = now_ms() + delay_ms);
            }
            core.make_ready(key, &reason);
        }
        Then::WaitForLimit => {
            let until = hold_for_limit(core, parts, worker_id, key, r);
            pause::after_usage_limit(core, key, number, until);
        }
        Then::Block(reason) => core.to_blocked(key, &reason),
        Then::Escalate { question, category } => {
            if core.model.tasks().get(key).is_some_and(|t| t.notes.pending_question.is_none()) {
                let pending = PendingQuestion {
                    id: format!("q{number}"),
                    text: question.clone(),
                    category: r.category.clone(),
                    attempt: number,
                    options: Vec::new(),
                };
                core.edit_task(key, |t| t.notes.pending_question = Some(pending));
            }
            let reason = format!("{category}: {}", outcome::first_line(&question));
            core.to_escalated(key, &reason);
        }
    }
}

/// A usage limit holds its worker's agent tasks until the reset; the
/// task waits for it too. Returns the reset (unix ms).
fn hold_for_limit(
    core: &mut Core<'_>,
    parts: &mut Components,
    worker_id: &str,
    key: &TaskKey,
    r: &ResultReport,
) -> i64 {
    let until = parts.limits.on_rate_limited(
        core.model,
        core.metrics,
        worker_id,
        r.rate_limit_reset_ms,
        &r.rate_limit_kind,
        core.fx,
    );
    core.edit_task(key, |t| t.not_before = until);
    until
}

/// Why a succeeded attempt counts as no change, if it does: its commit
/// changes no file over its base. An attempt that resumed a WIP commit
/// is not judged: its base holds an earlier attempt's work, which the
/// controller cannot see from here.
fn no_change(model: &Model, key: &TaskKey, r: &ResultReport) -> Option<String> {
    let t = model.tasks().get(key)?;
    if !r.files_changed.is_empty() || !t.resume_commit.is_empty() || t.spec.subplan.is_some() {
        return None;
    }
    let who = if t.spec.agent.is_some() { "agent" } else { "worker" };
    Some(format!("no change: the {who} changed no file"))
}

fn on_empty(model: &Model, key: &TaskKey) -> OnEmpty {
    model.tasks().get(key).map_or(OnEmpty::Merge, |t| t.spec.on_empty)
}

/// A reviewer attempt's result: the review gate decides, and an
/// approval starts the reviewed attempt's merge.
fn on_review_result(
    core: &mut Core<'_>,
    parts: &mut Components,
    key: &TaskKey,
    number: u32,
    r: &ResultReport,
) {
    let _span = tracing::info_span!("review.result", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), outcome = %r.outcome)
        .entered();
    if let Some(reviewed) = parts.reviews.on_result(core, key, number, r) {
        merged::start_merge(core, &mut parts.merge_queues, key, reviewed, false);
    }
}

/// Keeps an agent attempt's session id and its running usage total,
/// keeping the swarm's sum in step; a `live` report (progress, not a
/// result) may stop the attempt at its budget.
fn record_agent(
    core: &mut Core<'_>,
    parts: &mut Components,
    key: &TaskKey,
    number: u32,
    usage: Option<Usage>,
    session_id: &str,
    live: bool,
) {
    let Some(a) = core.model.attempts().get(&(key.clone(), number)) else { return };
    let before = a.agent.clone();
    let mut after = before.clone();
    if !session_id.is_empty() {
        after.session_id = session_id.to_string();
    }
    if let Some(u) = usage {
        after.usage = u;
    }
    if after == before {
        return;
    }
    let after = after.usage;
    // The model moves the swarm's sum with the attempt's usage.
    core.edit_attempt(key, number, |a| {
        if !session_id.is_empty() {
            a.agent.session_id = session_id.to_string();
        }
        a.agent.usage = after;
    });
    if after != before.usage {
        if let Some((rate, max)) = parts.budgets.spent(core.model, key, &before.usage, &after) {
            pause::trip_breaker(core, key, rate, max);
        }
        if live {
            parts.budgets.on_live_usage(core, key, number);
        }
    }
}

fn report_kind(r: &Report) -> &'static str {
    match r {
        Report::Started { .. } => "started",
        Report::Progress { .. } => "progress",
        Report::Status { .. } => "status",
        Report::Question { .. } => "question",
        Report::ForgeReply { .. } => "forge_reply",
        Report::Result(_) => "result",
        Report::Orphans { .. } => "orphans",
        Report::MergeVerified(_) => "merge_verified",
    }
}
