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

use std::collections::BTreeSet;

use swarm_core::plan::{ReviewSpec, task_branch};
use swarm_core::{AttemptState, Outcome, TaskKey, TaskState};

use super::command::ResultReport;
use super::model::{AgentRecord, Attempt, Task, Transition};
pub use super::model::{Decision, ReviewRecord};
use super::outbound::{AgentAssign, AssignSpec, AttemptHandle, Outbound};
use super::{Effects, Scheduler, now_ms};
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

impl Scheduler {
    /// A task's attempt succeeded: the merge path, or REVIEW when its plan
    /// asks for one. This is where a succeeded result is ready to merge.
    pub(super) fn after_success(&mut self, key: &TaskKey, number: u32, fx: &mut Effects) {
        let Some(t) = self.shared.model.tasks().get(key) else { return };
        let Some(spec) = t.spec.review.clone() else {
            self.start_merge(key, number, false, fx);
            return;
        };
        self.core(fx).edit_task(key, |t| {
            let review = t.notes.review.get_or_insert_with(Box::default);
            review.commit = t.result_commit.clone();
            review.attempt = number;
            review.reviewer = 0;
            review.reviewer_failures = 0;
            review.requested.clear();
        });
        let who =
            if spec.has_reviewer() { format!("a {} reviewer", spec.kind()) } else { "the operator".into() };
        self.core(fx).set_state(
            key,
            TaskState::Review,
            &format!("attempt {number} waits for review by {who}"),
        );
        if spec.has_reviewer() {
            self.reviews.waiting.insert(key.clone());
        }
        self.report_branch(key, fx);
    }

    /// Records the branch report as an event (the Watch and the audit log
    /// see each recommendation change).
    fn report_branch(&mut self, key: &TaskKey, fx: &mut Effects) {
        let Some(t) = self.shared.model.tasks().get(key) else { return };
        let r = branch_report(t, self.shared.model.attempts());
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
        fx.task_event(
            key,
            number,
            "",
            "task.branch_report",
            format!("{}: {} ({})", r.branch, r.recommendation, r.reason),
            data,
        );
    }

    /// Gives tasks waiting for a reviewer to idle sidecars (any: a review
    /// needs no labels of the task's).
    pub(super) fn schedule_reviews(&mut self, fx: &mut Effects) {
        if self.reviews.waiting.is_empty() {
            return;
        }
        let now = now_ms();
        let waiting: Vec<TaskKey> = self.reviews.waiting.iter().cloned().collect();
        for key in waiting {
            let Some(t) = self.shared.model.tasks().get(&key) else {
                self.reviews.waiting.remove(&key);
                continue;
            };
            let live = t.notes.review.as_deref().is_some_and(|r| r.reviewer != 0);
            if t.state() != TaskState::Review
                || live
                || !t.spec.review.as_deref().is_some_and(ReviewSpec::has_reviewer)
            {
                self.reviews.waiting.remove(&key);
                continue;
            }
            // A paused swarm starts no attempt, a reviewer's included.
            if t.not_before > now || self.shared.model.is_paused(&key.swarm) {
                continue;
            }
            let agent = matches!(t.spec.review.as_deref(), Some(ReviewSpec::Agent { .. }));
            let mut idle: Vec<&str> = self
                .shared
                .model
                .workers()
                .values()
                .filter(|w| w.is_idle() && !(agent && self.limits.limited_until(w, now).is_some()))
                .map(|w| w.id.as_str())
                .collect();
            idle.sort_unstable();
            let Some(worker) = idle.first().map(|w| w.to_string()) else { return };
            self.reviews.waiting.remove(&key);
            self.assign_reviewer(&worker, &key, fx);
        }
    }

    fn assign_reviewer(&mut self, worker_id: &str, key: &TaskKey, fx: &mut Effects) {
        let token = self.shared.next_token;
        self.shared.next_token += 1;
        let Some(task) = self.shared.model.tasks().get(key) else { return };
        let Some(review) = task.notes.review.as_deref() else { return };
        let number = task.attempts + 1;
        let commit = review.commit.clone();
        let kind = match task.spec.review.as_deref() {
            Some(ReviewSpec::Agent { spec, .. }) => spec.kind.as_str().to_string(),
            _ => String::new(),
        };
        self.core(fx).edit_task(key, |task| {
            task.attempts = number;
            if let Some(review) = task.notes.review.as_deref_mut() {
                review.reviewer = number;
            }
        });
        let _span = tracing::info_span!("review.assign", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), worker = worker_id)
            .entered();
        let attempt = Attempt::begin(
            key.clone(),
            number,
            AttemptState::Assigned,
            worker_id.to_string(),
            token,
            commit.clone(),
            AgentRecord { kind, ..Default::default() },
        );
        self.core(fx).transition(Transition::AttemptAdded(attempt));
        self.core(fx).edit_worker(worker_id, |w| w.updated_at = now_ms());
        self.shared.lease_seen.insert(worker_id.to_string(), self.shared.mono_ms());
        fx.task_event(
            key,
            number,
            worker_id,
            "review.assigned",
            format!("reviewer attempt {} of {} on {worker_id}", key.attempt(number), short(&commit)),
            serde_json::json!({ "commit": commit }),
        );
        if let Some(spec) = self.review_assign_spec(key, number) {
            self.core(fx).send(worker_id, Outbound::Assign(Box::new(spec)));
        }
    }

    /// The Assign of a reviewer attempt; `None` when `number` is not one.
    pub(super) fn review_assign_spec(&self, key: &TaskKey, number: u32) -> Option<AssignSpec> {
        if !self.shared.model.is_reviewer(key, number) {
            return None;
        }
        let task = self.shared.model.tasks().get(key)?;
        let review = task.notes.review.as_deref()?;
        let spec = task.spec.review.as_deref()?;
        let attempt = self.shared.model.attempts().get(&(key.clone(), number))?;
        let diff_base =
            self.shared.model.attempts().get(&(key.clone(), review.attempt)).map(|a| a.base_commit.clone());
        let (command, agent) = match spec {
            ReviewSpec::Command(argv) => (argv.clone(), None),
            ReviewSpec::Agent { spec, .. } => {
                (Vec::new(), Some(AgentAssign { spec: (**spec).clone(), resume_session: String::new() }))
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
        })
    }

    /// A reviewer attempt's result. Only a success that names the reviewed
    /// commit and carries a readable decision decides; a crash, a timeout
    /// or a missing decision is retried like any failed attempt.
    pub(super) fn on_review_result(
        &mut self,
        key: &TaskKey,
        number: u32,
        r: &ResultReport,
        fx: &mut Effects,
    ) {
        let _span = tracing::info_span!("review.result", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), outcome = %r.outcome)
            .entered();
        let Some(t) = self.shared.model.tasks().get(key) else { return };
        let cancel = t.cancel_requested;
        let Some(review) = t.notes.review.as_deref() else { return };
        let reviewed = review.commit.clone();
        self.core(fx).edit_task(key, |t| {
            if let Some(review) = t.notes.review.as_deref_mut() {
                review.reviewer = 0;
            }
        });
        if cancel {
            self.core(fx).set_attempt_state(key, number, AttemptState::Cancelled);
            self.core(fx).set_state(key, TaskState::Cancelled, "cancelled by the operator");
            return;
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
                        self.core(fx).set_attempt_state(key, number, AttemptState::Succeeded);
                        let by = key.attempt(number).to_string();
                        self.decide(key, decision, &verdict.message, &by, fx);
                    }
                    (why, _) => {
                        self.core(fx).set_attempt_state(key, number, AttemptState::Failed);
                        let why = why.unwrap_or_else(|| "no decision".into());
                        self.reviewer_failed(key, number, &format!("reviewer {why}"), fx);
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
                self.core(fx).set_attempt_state(key, number, state);
                self.core(fx).edit_task(key, |t| t.not_before = now_ms() + INFRA_BACKOFF_MS);
                self.requeue_review(
                    key,
                    &format!("reviewer attempt {number} stopped ({}); again", r.outcome),
                    fx,
                );
            }
            _ => {
                self.core(fx).set_attempt_state(key, number, AttemptState::Failed);
                let why = match r.outcome {
                    Outcome::Signaled => format!("reviewer killed by signal {}", r.signal.unwrap_or(0)),
                    Outcome::Stalled => "reviewer stalled past its restarts".to_string(),
                    _ => format!("reviewer exit {}", r.exit_code),
                };
                let why = if detail.is_empty() { why } else { format!("{why}: {}", first_line(&detail)) };
                self.reviewer_failed(key, number, &why, fx);
            }
        }
    }

    fn requeue_review(&mut self, key: &TaskKey, why: &str, fx: &mut Effects) {
        self.reviews.waiting.insert(key.clone());
        let number = self.shared.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
        fx.task_event(key, number, "", "review.requeued", why.to_string(), serde_json::json!({}));
    }

    /// A reviewer attempt failed: again after the backoff while the task's
    /// retries last, then FAILED.
    fn reviewer_failed(&mut self, key: &TaskKey, number: u32, why: &str, fx: &mut Effects) {
        let Some(t) = self.shared.model.tasks().get(key) else { return };
        let failure = format!("attempt {number}: {why}");
        let Some(review) = t.notes.review.as_deref() else {
            self.core(fx).edit_task(key, |t| t.notes.failures.push(failure));
            return;
        };
        let n = review.reviewer_failures + 1;
        let max = t.spec.retry.max_retries;
        let backoff = t.spec.retry.backoff_ms(n) as i64;
        self.core(fx).edit_task(key, |t| {
            t.notes.failures.push(failure);
            if let Some(review) = t.notes.review.as_deref_mut() {
                review.reviewer_failures = n;
            }
            if n <= max {
                t.not_before = now_ms() + backoff;
            }
        });
        if n <= max {
            self.requeue_review(key, &format!("reviewer retry {n}/{max} after {why}"), fx);
        } else {
            self.core(fx).set_state(
                key,
                TaskState::Failed,
                &format!("{why} (reviewer retries exhausted: {max})"),
            );
            self.report_branch(key, fx);
        }
    }

    /// A reviewer attempt's lease expired: its worker is gone; the review
    /// is assigned again after the grace. True when `number` was one.
    pub(super) fn lose_reviewer(
        &mut self,
        worker: &str,
        key: &TaskKey,
        number: u32,
        fx: &mut Effects,
    ) -> bool {
        if !self.shared.model.is_reviewer(key, number) {
            return false;
        }
        self.core(fx).set_attempt_state(key, number, AttemptState::Lost);
        self.core(fx).free_worker_of(key, number);
        let grace = self.shared.timing.lost_grace.as_millis() as i64;
        self.core(fx).edit_task(key, |t| {
            t.not_before = now_ms() + grace;
            if let Some(r) = t.notes.review.as_deref_mut() {
                r.reviewer = 0;
            }
        });
        self.requeue_review(
            key,
            &format!("reviewer attempt {number} lost: worker {worker} lease expired"),
            fx,
        );
        true
    }

    /// After a restart: tasks in REVIEW whose reviewer is not running wait
    /// for one again (a live reviewer attempt goes back to its worker).
    pub(super) fn requeue_reviews(&mut self) {
        for t in self.shared.model.tasks().values() {
            let waits = t.state() == TaskState::Review
                && t.spec.review.as_deref().is_some_and(ReviewSpec::has_reviewer)
                && t.notes.review.as_deref().is_none_or(|r| {
                    r.reviewer == 0
                        || !self
                            .shared
                            .model
                            .attempts()
                            .get(&(t.key.clone(), r.reviewer))
                            .is_some_and(|a| a.state.is_live())
                });
            if waits {
                self.reviews.waiting.insert(t.key.clone());
            }
        }
        // A reviewer recorded as running whose attempt is no longer live
        // (the store holds its end) is not running.
        let stale: Vec<TaskKey> = self.reviews.waiting.iter().cloned().collect();
        for key in stale {
            // In memory only: the store's row is what it was.
            let edit = |t: &mut Task| {
                if let Some(r) = t.notes.review.as_deref_mut() {
                    r.reviewer = 0;
                }
            };
            self.shared.model.apply(Transition::Task { key: &key, edit: Box::new(edit) });
        }
    }

    /// The operator's decision on a task in REVIEW. Checked before anything
    /// changes: a bad word or a task not in REVIEW changes nothing.
    pub(super) fn operator_review(
        &mut self,
        key: &TaskKey,
        word: &str,
        message: &str,
        fx: &mut Effects,
    ) -> Result<(), SchedError> {
        let decision = Decision::parse(word).ok_or_else(|| SchedError::InvalidArgument {
            field: "decision".into(),
            rule: format!("must be approve, request-changes or reject, not {word:?}"),
        })?;
        let t = self.task(key)?;
        if t.state() != TaskState::Review {
            return Err(SchedError::FailedPrecondition(format!(
                "task {key} is {}; only a task in REVIEW can be reviewed",
                t.state()
            )));
        }
        let _span = tracing::info_span!("review.operator", swarm = %key.swarm, task = %key, decision = decision.as_str())
            .entered();
        // The operator's word settles it: a reviewer still at work is stopped.
        self.stop_reviewer(key, "the operator reviewed the task", fx);
        self.decide(key, decision, message, "operator", fx);
        Ok(())
    }

    /// Stops a task's reviewer attempt, if one runs or waits: the operator
    /// decided, or cancelled the task. Its late result is fenced.
    pub(super) fn stop_reviewer(&mut self, key: &TaskKey, reason: &str, fx: &mut Effects) {
        self.reviews.waiting.remove(key);
        let live =
            self.shared.model.tasks().get(key).and_then(|t| t.notes.review.as_deref()).map(|r| r.reviewer);
        let Some(number) = live.filter(|n| *n > 0) else { return };
        self.core(fx).send_cancel(key, number, reason);
        self.core(fx).set_attempt_state(key, number, AttemptState::Cancelled);
        self.core(fx).free_worker_of(key, number);
        self.core(fx).edit_task(key, |t| {
            if let Some(r) = t.notes.review.as_deref_mut() {
                r.reviewer = 0;
            }
        });
    }

    /// Applies a decision on the reviewed commit.
    fn decide(&mut self, key: &TaskKey, decision: Decision, message: &str, by: &str, fx: &mut Effects) {
        let Some(t) = self.shared.model.tasks().get(key) else { return };
        let Some(review) = t.notes.review.as_deref() else { return };
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
        self.core(fx).edit_task(key, |t| {
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
        fx.task_event(
            key,
            number,
            "",
            "task.reviewed",
            format!("{} by {by} of {}: {}", decision.as_str(), short(&commit), first_line(message)),
            serde_json::json!({ "decision": decision.as_str(), "message": message, "by": by, "commit": commit }),
        );
        match decision {
            Decision::Approve => {
                self.core(fx).set_state(key, TaskState::Succeeded, &format!("approved by {by}"));
                self.report_branch(key, fx);
                self.start_merge(key, reviewed_attempt, false, fx);
            }
            Decision::RequestChanges => {
                // Like a conflict returned to its owner: a new attempt from
                // the integration head (so the merge sees one base), which
                // spends no retry; its task text names the reviewed commit.
                self.core(fx).edit_task(key, |t| {
                    t.resume_commit.clear();
                    t.not_before = 0;
                });
                self.core(fx).make_ready(key, &format!("changes requested by {by}"));
            }
            Decision::Reject => {
                let why = if message.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", first_line(message))
                };
                self.core(fx).set_state(key, TaskState::Rejected, &format!("rejected by {by}{why}"));
                self.report_branch(key, fx);
            }
        }
    }
}
