//! The review gate. A task whose plan asks for review goes from SUCCEEDED
//! to REVIEW instead of the merge path. A reviewer attempt (a command or
//! an agent, on any idle sidecar, in a worktree at the result) or the
//! operator decides: approve → the merge path, request changes → a new
//! attempt from its result with the review in its task text, reject →
//! REJECTED (terminal, its branch kept; dependents never run).
//!
//! A decision only ever applies to the commit that was reviewed: the
//! commit is recorded when the task enters REVIEW, and a reviewer attempt
//! that reports any other commit decides nothing.
//!
//! `ReviewQueue` is a component: it works on the core and imports no other.
//! Where a review lets a result through to the merge path it returns the
//! attempt to merge, and the dispatcher starts the merge.

use std::collections::BTreeSet;

use swarm_core::plan::{ReviewSpec, task_branch};
use swarm_core::{AttemptState, Outcome, TaskKey, TaskState};

use super::core::{Core, find_task};
use super::model::messages::ResultReport;
pub use super::model::{Decision, ReviewRecord};
use super::model::{Model, Task, Transition, Worker, now_ms};
use super::outbound::{AgentAssign, AssignSpec, AttemptHandle, Outbound};
use crate::error::SchedError;

pub use super::branch_report::{branch_report, render_requested};
use super::branch_report::{first_line, render_review, short};

/// Pause before a reviewer attempt that failed for the sidecar's reasons
/// (not the reviewer's) is tried again.
const INFRA_BACKOFF_MS: i64 = 2_000;

/// Tasks in REVIEW waiting for a reviewer attempt to be assigned.
#[derive(Debug, Default)]
pub struct ReviewQueue {
    waiting: BTreeSet<TaskKey>,
}

impl ReviewQueue {
    /// A task's attempt succeeded: REVIEW when its plan asks for one.
    /// Whether it goes straight to the merge path instead.
    pub fn after_success(&mut self, core: &mut Core, key: &TaskKey, number: u32) -> bool {
        let Some(t) = core.model.tasks().get(key) else { return false };
        let Some(spec) = t.spec.review.clone() else { return true };
        core.edit_task(key, |t| {
            let review = t.notes.review.get_or_insert_with(Box::default);
            review.commit = t.result_commit.clone();
            review.attempt = number;
            review.reviewer = 0;
            review.reviewer_failures = 0;
            review.requested.clear();
        });
        let who =
            if spec.has_reviewer() { format!("a {} reviewer", spec.kind()) } else { "the operator".into() };
        core.to_review(key, &format!("attempt {number} waits for review by {who}"));
        if spec.has_reviewer() {
            self.waiting.insert(key.clone());
        }
        report_branch(core, key);
        false
    }

    /// Gives tasks waiting for a reviewer to idle sidecars (any: a review
    /// needs no labels of the task's).
    pub fn schedule(&mut self, core: &mut Core, limited: impl Fn(&Worker, i64) -> bool) {
        if self.waiting.is_empty() {
            return;
        }
        let now = now_ms();
        let waiting: Vec<TaskKey> = self.waiting.iter().cloned().collect();
        for key in waiting {
            let Some(t) = core.model.tasks().get(&key) else {
                self.waiting.remove(&key);
                continue;
            };
            let live = t.notes.review.as_deref().is_some_and(|r| r.reviewer != 0);
            if t.state() != TaskState::Review
                || live
                || !t.spec.review.as_deref().is_some_and(ReviewSpec::has_reviewer)
            {
                self.waiting.remove(&key);
                continue;
            }
            // A paused swarm starts no attempt, a reviewer's included.
            if t.not_before > now || core.model.is_paused(&key.swarm) {
                continue;
            }
            let agent = matches!(t.spec.review.as_deref(), Some(ReviewSpec::Agent { .. }));
            let mut idle: Vec<&str> = core
                .model
                .workers()
                .values()
                .filter(|w| w.is_idle() && !(agent && limited(w, now)))
                .map(|w| w.id.as_str())
                .collect();
            idle.sort_unstable();
            let Some(worker) = idle.first().map(|w| w.to_string()) else { return };
            self.waiting.remove(&key);
            assign_reviewer(core, &worker, &key);
        }
    }

    /// A reviewer attempt's result. Only a success that names the reviewed
    /// commit and carries a readable decision decides; a crash, a timeout
    /// or a missing decision is retried like any failed attempt.
    /// The caller enters the `review.result` span; an approval returns
    /// the reviewed attempt, to merge inside it. Long: one arm per outcome.
    pub fn on_result(
        &mut self,
        core: &mut Core,
        key: &TaskKey,
        number: u32,
        r: &ResultReport,
    ) -> Option<u32> {
        let t = core.model.tasks().get(key)?;
        let cancel = t.cancel_requested;
        let review = t.notes.review.as_deref()?;
        let reviewed = review.commit.clone();
        core.edit_task(key, |t| {
            if let Some(review) = t.notes.review.as_deref_mut() {
                review.reviewer = 0;
            }
        });
        if cancel {
            core.set_attempt_state(key, number, AttemptState::Cancelled);
            core.to_cancelled(key, "cancelled by the operator");
            return None;
        }
        let detail = if r.error.is_empty() { r.summary.clone() } else { r.error.clone() };
        match r.outcome {
            Outcome::Success => {
                let verdict = r.review.clone().unwrap_or_default();
                let decision = Decision::parse(&verdict.decision);
                let commit = r.commit.clone().unwrap_or_default();
                let why = if commit != reviewed {
                    Some(format!(
                        "reported commit {:?}, not the reviewed {}",
                        short(&commit),
                        short(&reviewed)
                    ))
                } else if !verdict.error.is_empty() {
                    Some(format!("unreadable decision: {}", verdict.error))
                } else if decision.is_none() {
                    Some(format!(
                        "no decision (write .swarm/review.json with approve, request_changes or reject; got {:?})",
                        verdict.decision
                    ))
                } else {
                    None
                };
                match (why, decision) {
                    (None, Some(decision)) => {
                        core.set_attempt_state(key, number, AttemptState::Succeeded);
                        let by = key.attempt(number).to_string();
                        return decide(core, key, decision, &verdict.message, &by);
                    }
                    (why, _) => {
                        core.set_attempt_state(key, number, AttemptState::Failed);
                        let why = why.unwrap_or_else(|| "no decision".into());
                        self.reviewer_failed(core, key, number, &format!("reviewer {why}"));
                    }
                }
            }
            Outcome::Interrupted
            | Outcome::Cancelled
            | Outcome::InfraFailed
            | Outcome::Checkpoint
            | Outcome::RateLimited => {
                // Not the review's fault: again, without spending a retry.
                let state = if r.outcome == Outcome::InfraFailed {
                    AttemptState::Failed
                } else {
                    AttemptState::Cancelled
                };
                core.set_attempt_state(key, number, state);
                core.edit_task(key, |t| t.not_before = now_ms() + INFRA_BACKOFF_MS);
                self.requeue(core, key, &format!("reviewer attempt {number} stopped ({}); again", r.outcome));
            }
            _ => {
                core.set_attempt_state(key, number, AttemptState::Failed);
                let why = match r.outcome {
                    Outcome::Signaled => format!("reviewer killed by signal {}", r.signal.unwrap_or(0)),
                    Outcome::Stalled => "reviewer stalled past its restarts".to_string(),
                    _ => format!("reviewer exit {}", r.exit_code),
                };
                let why = if detail.is_empty() { why } else { format!("{why}: {}", first_line(&detail)) };
                self.reviewer_failed(core, key, number, &why);
            }
        }
        None
    }

    fn requeue(&mut self, core: &mut Core, key: &TaskKey, why: &str) {
        self.waiting.insert(key.clone());
        let number = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
        core.fx.task_event(key, number, "", "review.requeued", why.to_string(), serde_json::json!({}));
    }

    /// A reviewer attempt failed: again after the backoff while the task's
    /// retries last, then FAILED.
    fn reviewer_failed(&mut self, core: &mut Core, key: &TaskKey, number: u32, why: &str) {
        let Some(t) = core.model.tasks().get(key) else { return };
        let failure = format!("attempt {number}: {why}");
        let Some(review) = t.notes.review.as_deref() else {
            core.edit_task(key, |t| t.notes.failures.push(failure));
            return;
        };
        let n = review.reviewer_failures + 1;
        let max = t.spec.retry.max_retries;
        let backoff = t.spec.retry.backoff_ms(n) as i64;
        core.edit_task(key, |t| {
            t.notes.failures.push(failure);
            if let Some(review) = t.notes.review.as_deref_mut() {
                review.reviewer_failures = n;
            }
            if n <= max {
                t.not_before = now_ms() + backoff;
            }
        });
        if n <= max {
            self.requeue(core, key, &format!("reviewer retry {n}/{max} after {why}"));
        } else {
            core.to_failed(key, &format!("{why} (reviewer retries exhausted: {max})"));
            report_branch(core, key);
        }
    }

    /// A reviewer attempt's lease expired: its worker is gone; the review
    /// is assigned again after the grace. True when `number` was one.
    pub fn lose_reviewer(&mut self, core: &mut Core, worker: &str, key: &TaskKey, number: u32) -> bool {
        if !core.model.is_reviewer(key, number) {
            return false;
        }
        core.set_attempt_state(key, number, AttemptState::Lost);
        core.free_worker_of(key, number);
        let grace = core.timing.lost_grace.as_millis() as i64;
        core.edit_task(key, |t| {
            t.not_before = now_ms() + grace;
            if let Some(r) = t.notes.review.as_deref_mut() {
                r.reviewer = 0;
            }
        });
        self.requeue(core, key, &format!("reviewer attempt {number} lost: worker {worker} lease expired"));
        true
    }

    /// After a restart: tasks in REVIEW whose reviewer is not running wait
    /// for one again (a live reviewer attempt goes back to its worker).
    pub fn recover(&mut self, model: &mut Model) {
        for t in model.tasks().values() {
            let waits = t.state() == TaskState::Review
                && t.spec.review.as_deref().is_some_and(ReviewSpec::has_reviewer)
                && t.notes.review.as_deref().is_none_or(|r| {
                    r.reviewer == 0
                        || !model
                            .attempts()
                            .get(&(t.key.clone(), r.reviewer))
                            .is_some_and(|a| a.state.is_live())
                });
            if waits {
                self.waiting.insert(t.key.clone());
            }
        }
        // A reviewer recorded as running whose attempt is no longer live
        // (the store holds its end) is not running.
        let stale: Vec<TaskKey> = self.waiting.iter().cloned().collect();
        for key in stale {
            // In memory only: the store's row is what it was.
            let edit = |t: &mut Task| {
                if let Some(r) = t.notes.review.as_deref_mut() {
                    r.reviewer = 0;
                }
            };
            model.apply(Transition::Task { key: &key, edit: Box::new(edit) });
        }
    }

    /// Applies the operator's checked decision; the caller enters the
    /// `review.operator` span. An approval returns the reviewed attempt,
    /// to merge inside it.
    pub fn operator_review(
        &mut self,
        core: &mut Core,
        key: &TaskKey,
        decision: Decision,
        message: &str,
    ) -> Option<u32> {
        // The operator's word settles it: a reviewer still at work is stopped.
        self.stop_reviewer(core, key, "the operator reviewed the task");
        decide(core, key, decision, message, "operator")
    }

    /// Stops a task's reviewer attempt, if one runs or waits: the operator
    /// decided, or cancelled the task. Its late result is fenced.
    pub fn stop_reviewer(&mut self, core: &mut Core, key: &TaskKey, reason: &str) {
        self.waiting.remove(key);
        let live = core.model.tasks().get(key).and_then(|t| t.notes.review.as_deref()).map(|r| r.reviewer);
        let Some(number) = live.filter(|n| *n > 0) else { return };
        core.send_cancel(key, number, reason);
        core.set_attempt_state(key, number, AttemptState::Cancelled);
        core.free_worker_of(key, number);
        core.edit_task(key, |t| {
            if let Some(r) = t.notes.review.as_deref_mut() {
                r.reviewer = 0;
            }
        });
    }
}

/// The operator's decision on a task in REVIEW, checked before anything
/// changes: a bad word or a task not in REVIEW changes nothing.
pub(super) fn check_operator_review(
    model: &Model,
    key: &TaskKey,
    word: &str,
) -> Result<Decision, SchedError> {
    let decision = Decision::parse(word).ok_or_else(|| SchedError::InvalidArgument {
        field: "decision".into(),
        rule: format!("must be approve, request-changes or reject, not {word:?}"),
    })?;
    let t = find_task(model, key)?;
    if t.state() != TaskState::Review {
        return Err(SchedError::FailedPrecondition(format!(
            "task {key} is {}; only a task in REVIEW can be reviewed",
            t.state()
        )));
    }
    Ok(decision)
}

/// Records the branch report as an event (the Watch and the audit log
/// see each recommendation change).
fn report_branch(core: &mut Core, key: &TaskKey) {
    let Some(t) = core.model.tasks().get(key) else { return };
    let r = branch_report(t, core.model.attempts());
    let data = serde_json::json!({
        "branch": r.branch,
        "recommendation": r.recommendation,
        "reason": r.reason,
        "commit": r.commit,
        "base_commit": r.base_commit,
        "files_changed": r.files_changed,
        "reviewer": r.reviewer,
        "reviews": r.reviews,
    });
    let number = t.attempts;
    core.fx.task_event(
        key,
        number,
        "",
        "task.branch_report",
        format!("{}: {} ({})", r.branch, r.recommendation, r.reason),
        data,
    );
}

fn assign_reviewer(core: &mut Core, worker_id: &str, key: &TaskKey) {
    let Some(task) = core.model.tasks().get(key) else { return };
    let Some(review) = task.notes.review.as_deref() else { return };
    let number = task.attempts + 1;
    let commit = review.commit.clone();
    let kind = match task.spec.review.as_deref() {
        Some(ReviewSpec::Agent { spec, .. }) => spec.kind.as_str().to_string(),
        _ => String::new(),
    };
    core.edit_task(key, |task| {
        task.attempts = number;
        if let Some(review) = task.notes.review.as_deref_mut() {
            review.reviewer = number;
        }
    });
    let _span = tracing::info_span!("review.assign", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), worker = worker_id)
        .entered();
    core.begin_attempt(key, number, worker_id, commit.clone(), kind);
    core.fx.task_event(
        key,
        number,
        worker_id,
        "review.assigned",
        format!("reviewer attempt {} of {} on {worker_id}", key.attempt(number), short(&commit)),
        serde_json::json!({ "commit": commit }),
    );
    if let Some(spec) = assign_spec(core.model, key, number) {
        core.send(worker_id, Outbound::Assign(Box::new(spec)));
    }
}

/// The Assign of a reviewer attempt; `None` when `number` is not one.
pub(super) fn assign_spec(model: &Model, key: &TaskKey, number: u32) -> Option<AssignSpec> {
    if !model.is_reviewer(key, number) {
        return None;
    }
    let task = model.tasks().get(key)?;
    let review = task.notes.review.as_deref()?;
    let spec = task.spec.review.as_deref()?;
    let attempt = model.attempts().get(&(key.clone(), number))?;
    let diff_base = model.attempts().get(&(key.clone(), review.attempt)).map(|a| a.base_commit.clone());
    let (command, agent) = match spec {
        ReviewSpec::Command(argv) => (argv.clone(), None),
        ReviewSpec::Agent { spec, .. } => {
            let prices = model.prices(&key.swarm);
            (Vec::new(), Some(AgentAssign { spec: (**spec).clone(), resume_session: String::new(), prices }))
        }
        ReviewSpec::Operator => return None,
    };
    Some(AssignSpec {
        attempt: AttemptHandle { task: key.clone(), number, token: attempt.token },
        base_commit: review.commit.clone(),
        branch: task_branch(&key.swarm, key.task.as_str()),
        title: format!("Review: {}", task.spec.title),
        task_text: render_review(task, review, spec, number),
        command,
        env: task.spec.env.clone(),
        // An agent reviewer may write its decision and nothing else.
        owned_globs: match spec {
            ReviewSpec::Agent { .. } => vec![swarm_core::plan::review::DECISION_FILE.to_string()],
            _ => task.spec.files.clone(),
        },
        verify: Vec::new(),
        idle_timeout_secs: task.spec.idle_timeout_secs,
        max_restarts: task.spec.max_restarts,
        setup: task.spec.setup.clone(),
        setup_every_attempt: task.spec.setup_on == swarm_core::plan::SetupOn::Attempt,
        traceparent: String::new(),
        agent,
        review_diff_base: Some(diff_base.unwrap_or_default()),
        sandbox: task.spec.sandbox.clone(),
        secrets: task.spec.secrets.clone(),
        spawned_child: String::new(),
    })
}

/// Applies a decision on the reviewed commit.
/// An approval returns the reviewed attempt, for the merge path.
fn decide(core: &mut Core, key: &TaskKey, decision: Decision, message: &str, by: &str) -> Option<u32> {
    let t = core.model.tasks().get(key)?;
    let review = t.notes.review.as_deref()?;
    let commit = review.commit.clone();
    let reviewed_attempt = review.attempt;
    let number = t.attempts;
    let record = ReviewRecord {
        decision,
        message: message.to_string(),
        by: by.to_string(),
        commit: commit.clone(),
        at: now_ms(),
    };
    core.edit_task(key, |t| {
        let Some(review) = t.notes.review.as_deref_mut() else { return };
        review.history.push(record);
        if decision == Decision::RequestChanges {
            review.requested.push(if message.trim().is_empty() {
                "(no message)".into()
            } else {
                message.to_string()
            });
        }
    });
    core.fx.task_event(
        key,
        number,
        "",
        "task.reviewed",
        format!("{} by {by} of {}: {}", decision.as_str(), short(&commit), first_line(message)),
        serde_json::json!({ "decision": decision.as_str(), "message": message, "by": by, "commit": commit }),
    );
    match decision {
        Decision::Approve => {
            core.to_succeeded(key, &format!("approved by {by}"));
            report_branch(core, key);
            return Some(reviewed_attempt);
        }
        Decision::RequestChanges => {
            // Like a conflict returned to its owner: a new attempt from
            // the integration head (so the merge sees one base), which
            // spends no retry; its task text names the reviewed commit.
            core.edit_task(key, |t| {
                t.resume_commit.clear();
                t.not_before = 0;
            });
            core.make_ready(key, &format!("changes requested by {by}"));
        }
        Decision::Reject => {
            let why =
                if message.trim().is_empty() { String::new() } else { format!(": {}", first_line(message)) };
            core.to_rejected(key, &format!("rejected by {by}{why}"));
            report_branch(core, key);
        }
    }
    None
}
