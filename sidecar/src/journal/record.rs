//! A journaled report as it is written to disk: a versioned JSON record of
//! the sidecar's own [`Event`], kept apart from the in-memory types so
//! that they can change without changing what an older journal says.
//! Version 1 is the first; a sidecar refuses a record of a later version
//! rather than guess at it.

use serde::{Deserialize, Serialize};
use swarm_core::ids::{SwarmId, TaskId, TaskKey};
use swarm_core::{Outcome, Usage};
use swarm_proto::convert::AttemptRef;

use crate::outcome::{AttemptOutcome, ReviewVerdict, UsageLimit};
use crate::report::{Event, StatusKind};
use crate::sandbox::SandboxReport;
use crate::status::WorkerStatus;
use crate::verify::TierOutcome;

/// The record version this sidecar writes and the newest it reads.
pub(super) const VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum EventRecord {
    Started {
        attempt: AttemptRecord,
        pid: u32,
        restarts: u32,
        sandbox_mode: String,
        sandbox_enforced: Vec<String>,
        sandbox_missing: Vec<String>,
    },
    Status {
        attempt: AttemptRecord,
        /// working, blocked, question, done, invalid or note.
        status: String,
        message: String,
    },
    Question {
        attempt: AttemptRecord,
        id: String,
        text: String,
        category: String,
        options: Vec<String>,
    },
    Result(Box<OutcomeRecord>),
    ForgeReply {
        attempt: AttemptRecord,
        thread: String,
        text: String,
    },
    Orphans {
        worktrees: Vec<String>,
        removed: bool,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct AttemptRecord {
    swarm: String,
    task: String,
    number: u32,
    fencing_token: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct OutcomeRecord {
    attempt: AttemptRecord,
    /// [`Outcome::as_str`].
    outcome: String,
    exit_code: i32,
    signal: Option<i32>,
    restarts: u32,
    log_tail: Vec<String>,
    commit: String,
    files_changed: Vec<String>,
    tiers: Vec<TierOutcome>,
    summary: String,
    error: String,
    category: String,
    usage: Option<Usage>,
    session_id: String,
    /// (reset time in unix ms, kind).
    usage_limit: Option<(u64, String)>,
    /// (decision, message, error).
    review: Option<(String, String, String)>,
}

impl From<&Event> for EventRecord {
    fn from(e: &Event) -> Self {
        match e {
            Event::Started { attempt, pid, restarts, sandbox } => EventRecord::Started {
                attempt: attempt.into(),
                pid: *pid,
                restarts: *restarts,
                sandbox_mode: sandbox.mode.clone(),
                sandbox_enforced: sandbox.enforced.clone(),
                sandbox_missing: sandbox.missing.clone(),
            },
            Event::Status { attempt, status, message } => EventRecord::Status {
                attempt: attempt.into(),
                status: status_name(*status).to_string(),
                message: message.clone(),
            },
            Event::Question { attempt, id, text, category, options } => EventRecord::Question {
                attempt: attempt.into(),
                id: id.clone(),
                text: text.clone(),
                category: category.clone(),
                options: options.clone(),
            },
            Event::Result(o) => EventRecord::Result(Box::new(o.into())),
            Event::ForgeReply { attempt, thread, text } => EventRecord::ForgeReply {
                attempt: attempt.into(),
                thread: thread.clone(),
                text: text.clone(),
            },
            Event::Orphans { worktrees, removed } => {
                EventRecord::Orphans { worktrees: worktrees.clone(), removed: *removed }
            }
        }
    }
}

impl TryFrom<EventRecord> for Event {
    type Error = String;

    fn try_from(r: EventRecord) -> Result<Self, String> {
        Ok(match r {
            EventRecord::Started {
                attempt,
                pid,
                restarts,
                sandbox_mode,
                sandbox_enforced,
                sandbox_missing,
            } => Event::Started {
                attempt: attempt.try_into()?,
                pid,
                restarts,
                sandbox: SandboxReport {
                    mode: sandbox_mode,
                    enforced: sandbox_enforced,
                    missing: sandbox_missing,
                },
            },
            EventRecord::Status { attempt, status, message } => Event::Status {
                attempt: attempt.try_into()?,
                status: status_of(&status).ok_or_else(|| format!("unknown status {status:?}"))?,
                message,
            },
            EventRecord::Question { attempt, id, text, category, options } => {
                Event::Question { attempt: attempt.try_into()?, id, text, category, options }
            }
            EventRecord::Result(o) => Event::Result((*o).try_into()?),
            EventRecord::ForgeReply { attempt, thread, text } => {
                Event::ForgeReply { attempt: attempt.try_into()?, thread, text }
            }
            EventRecord::Orphans { worktrees, removed } => Event::Orphans { worktrees, removed },
        })
    }
}

impl From<&AttemptRef> for AttemptRecord {
    fn from(r: &AttemptRef) -> Self {
        AttemptRecord {
            swarm: r.task.swarm.to_string(),
            task: r.task.task.to_string(),
            number: r.number,
            fencing_token: r.fencing_token,
        }
    }
}

impl TryFrom<AttemptRecord> for AttemptRef {
    type Error = String;

    fn try_from(r: AttemptRecord) -> Result<Self, String> {
        let swarm = SwarmId::new(r.swarm).map_err(|e| format!("attempt swarm: {e}"))?;
        let task = TaskId::new(r.task).map_err(|e| format!("attempt task: {e}"))?;
        Ok(AttemptRef { task: TaskKey::new(swarm, task), number: r.number, fencing_token: r.fencing_token })
    }
}

impl From<&AttemptOutcome> for OutcomeRecord {
    fn from(o: &AttemptOutcome) -> Self {
        OutcomeRecord {
            attempt: (&o.attempt).into(),
            outcome: o.outcome.as_str().to_string(),
            exit_code: o.exit_code,
            signal: o.signal,
            restarts: o.restarts,
            log_tail: o.log_tail.clone(),
            commit: o.commit.clone(),
            files_changed: o.files_changed.clone(),
            tiers: o.tiers.clone(),
            summary: o.summary.clone(),
            error: o.error.clone(),
            category: o.category.clone(),
            usage: o.usage,
            session_id: o.session_id.clone(),
            usage_limit: o.usage_limit.as_ref().map(|l| (l.reset_unix_ms, l.kind.clone())),
            review: o.review.as_ref().map(|v| (v.decision.clone(), v.message.clone(), v.error.clone())),
        }
    }
}

impl TryFrom<OutcomeRecord> for AttemptOutcome {
    type Error = String;

    fn try_from(r: OutcomeRecord) -> Result<Self, String> {
        let outcome = Outcome::parse(&r.outcome).ok_or_else(|| format!("unknown outcome {:?}", r.outcome))?;
        Ok(AttemptOutcome {
            attempt: r.attempt.try_into()?,
            outcome,
            exit_code: r.exit_code,
            signal: r.signal,
            restarts: r.restarts,
            log_tail: r.log_tail,
            commit: r.commit,
            files_changed: r.files_changed,
            tiers: r.tiers,
            summary: r.summary,
            error: r.error,
            category: r.category,
            usage: r.usage,
            session_id: r.session_id,
            usage_limit: r.usage_limit.map(|(reset_unix_ms, kind)| UsageLimit { reset_unix_ms, kind }),
            review: r.review.map(|(decision, message, error)| ReviewVerdict { decision, message, error }),
        })
    }
}

fn status_name(s: StatusKind) -> &'static str {
    match s {
        StatusKind::Worker(WorkerStatus::Working) => "working",
        StatusKind::Worker(WorkerStatus::Blocked) => "blocked",
        StatusKind::Worker(WorkerStatus::Question) => "question",
        StatusKind::Worker(WorkerStatus::Done) => "done",
        StatusKind::Invalid => "invalid",
        StatusKind::Note => "note",
    }
}

fn status_of(name: &str) -> Option<StatusKind> {
    Some(match name {
        "working" => StatusKind::Worker(WorkerStatus::Working),
        "blocked" => StatusKind::Worker(WorkerStatus::Blocked),
        "question" => StatusKind::Worker(WorkerStatus::Question),
        "done" => StatusKind::Worker(WorkerStatus::Done),
        "invalid" => StatusKind::Invalid,
        "note" => StatusKind::Note,
        _ => return None,
    })
}
