//! What an attempt's result does, as one table: each outcome names the
//! attempt's end state, whether the task keeps the attempt's work to
//! resume from, and the task's next move. Deciding is pure (the report
//! and the few facts of the model it needs, gathered by the caller);
//! the dispatcher (`reports.rs`) carries the move out. Keeping the two
//! apart is what lets the table be read, and tested, as a table.

use swarm_core::plan::OnEmpty;
use swarm_core::{AttemptState, Outcome};

use super::model::messages::ResultReport;

/// Pause before a task whose attempt failed for infrastructure reasons is
/// assigned again: long enough that a broken host does not spin.
pub const INFRA_BACKOFF_MS: i64 = 2_000;

/// What the model knows that the table needs, read before deciding.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The question this attempt escalated with was answered while the
    /// attempt ended (its id).
    pub answered: Option<String>,
    /// Why a successful commit counts as no change, if it does.
    pub no_change: Option<String>,
    /// What the plan says to do with a change-less success.
    pub on_empty: OnEmpty,
}

/// What one result does to its attempt and its task.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub attempt: AttemptState,
    /// The attempt's error text, replaced (a success refused as empty).
    pub attempt_error: Option<String>,
    /// The task resumes from the attempt's commit (WIP kept).
    pub keep_work: bool,
    /// A line for the task's failure notes.
    pub note: Option<String>,
    /// "No change": said in the event log whichever way `on_empty` decides.
    pub no_change: Option<String>,
    pub then: Then,
}

/// The task's next move.
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// SUCCEEDED with its commit, then on to review or merge.
    Succeed { commit: String, reason: String },
    /// Retry with back-off while retries last, then FAILED.
    FailOrRetry(String),
    /// READY again with no retry spent, after `delay_ms`.
    Ready { reason: String, delay_ms: i64 },
    /// Held until the agent's usage limit resets, no retry spent.
    WaitForLimit,
    /// BLOCKED until the operator unblocks it.
    Block(String),
    /// ESCALATED with a question for the operator.
    Escalate { question: String, category: String },
}

impl Then {
    /// Whether an operator's pending cancel wins over this move: every
    /// move that would run the task again does; a task that stops for the
    /// operator (blocked, escalated) is left for the operator to see.
    pub fn yields_to_cancel(&self) -> bool {
        matches!(self, Then::FailOrRetry(_) | Then::Ready { .. } | Then::WaitForLimit)
    }
}

/// The table.
pub fn effect_of(r: &ResultReport, facts: Facts) -> Effect {
    let number = r.attempt.number;
    let detail = if r.error.is_empty() { r.summary.as_str() } else { r.error.as_str() };
    let ended = |attempt: AttemptState, then: Then| Effect {
        attempt,
        attempt_error: None,
        keep_work: false,
        note: None,
        no_change: None,
        then,
    };
    match r.outcome {
        Outcome::Success => succeeded(r, facts),
        Outcome::Error | Outcome::VerifyFailed | Outcome::Signaled | Outcome::Stalled => {
            ended(AttemptState::Failed, Then::FailOrRetry(failure_reason(r, detail)))
        }
        Outcome::Checkpoint => Effect {
            keep_work: true,
            note: Some(format!("attempt {number}: checkpointed ({})", first_line(&r.summary))),
            ..ended(
                AttemptState::Checkpointed,
                Then::Ready {
                    reason: format!("attempt {number} checkpointed; resumes from its WIP commit"),
                    delay_ms: 0,
                },
            )
        },
        // The provider's limit, not the task's fault: no retry is spent,
        // the work is kept as a WIP commit, and the task waits for the
        // reset on the worker that holds its session.
        Outcome::RateLimited => Effect {
            keep_work: true,
            note: Some(format!("attempt {number}: paused by the agent's usage limit")),
            ..ended(AttemptState::RateLimited, Then::WaitForLimit)
        },
        // The operator answered the question while the worker was exiting
        // over it (the sidecar had no one to hand the answer to): asking
        // again would lose that answer.
        Outcome::Escalation if facts.answered.is_some() => {
            let qid = facts.answered.unwrap_or_default();
            Effect {
                keep_work: true,
                ..ended(
                    AttemptState::Stopped,
                    Then::Ready {
                        reason: format!("answered ({qid}) while attempt {number} ended"),
                        delay_ms: 0,
                    },
                )
            }
        }
        Outcome::Blocked => {
            ended(AttemptState::Stopped, Then::Block(format!("blocked: {}", first_line(detail))))
        }
        // An agent that escalated through its tool kept its work: the
        // answered task resumes from it, in the same session.
        Outcome::Escalation => Effect {
            keep_work: true,
            ..ended(
                AttemptState::Stopped,
                Then::Escalate {
                    question: if detail.is_empty() {
                        "escalated without a question".into()
                    } else {
                        detail.to_string()
                    },
                    category: if r.category.is_empty() { "escalation".into() } else { r.category.clone() },
                },
            )
        },
        // The sidecar's machinery failed, not the task: no retry is spent.
        Outcome::InfraFailed => ended(
            AttemptState::Failed,
            Then::Ready {
                reason: format!(
                    "attempt {number}: infrastructure failure, no retry spent: {}",
                    first_line(detail)
                ),
                delay_ms: INFRA_BACKOFF_MS,
            },
        ),
        Outcome::Interrupted | Outcome::Cancelled => ended(
            AttemptState::Cancelled,
            Then::Ready { reason: format!("attempt {number} interrupted"), delay_ms: 0 },
        ),
    }
}

/// A reported success: merged on, unless it brought no commit, or no
/// change where the plan says an empty result fails.
fn succeeded(r: &ResultReport, facts: Facts) -> Effect {
    let number = r.attempt.number;
    let failed = |why: String| Effect {
        attempt: AttemptState::Failed,
        attempt_error: None,
        keep_work: false,
        note: None,
        no_change: None,
        then: Then::FailOrRetry(why),
    };
    let Some(commit) = r.commit.clone() else {
        return failed("reported success without a commit".into());
    };
    match facts.no_change {
        Some(why) if facts.on_empty == OnEmpty::Fail => {
            Effect { attempt_error: Some(why.clone()), no_change: Some(why.clone()), ..failed(why) }
        }
        no_change => Effect {
            attempt: AttemptState::Succeeded,
            attempt_error: None,
            keep_work: false,
            note: None,
            then: Then::Succeed {
                commit,
                reason: match &no_change {
                    Some(_) => format!("attempt {number} succeeded with no change"),
                    None => format!("attempt {number} succeeded"),
                },
            },
            no_change,
        },
    }
}

/// Why a failed attempt failed, in one line.
fn failure_reason(r: &ResultReport, detail: &str) -> String {
    let why = match r.outcome {
        Outcome::VerifyFailed => {
            let failed: Vec<&str> =
                r.tiers.iter().filter(|t| t.blocking && !t.passed).map(|t| t.name.as_str()).collect();
            format!("verification failed ({})", failed.join(", "))
        }
        Outcome::Signaled => format!("worker killed by signal {}", r.signal.unwrap_or(0)),
        Outcome::Stalled => "worker stalled past its restarts".to_string(),
        // -1: no worker exit to speak of (it never ran, or the sidecar failed).
        _ if r.exit_code < 0 => "attempt failed".to_string(),
        _ => format!("exit {}", r.exit_code),
    };
    if detail.is_empty() { why } else { format!("{why}: {}", first_line(detail)) }
}

pub fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
