//! Reports as sidecars before versioned journal records journaled them:
//! the wire's messages, turned back into the events they were made from,
//! so that a sidecar upgraded in place replays its predecessor's journal.

use swarm_proto::convert::{FieldError, required_attempt};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;

use crate::outcome::{AttemptOutcome, ReviewVerdict, UsageLimit};
use crate::report::{Event, StatusKind};
use crate::sandbox::SandboxReport;
use crate::status::WorkerStatus;
use crate::verify::TierOutcome;

/// A report as an earlier sidecar journaled it (the wire's message), back
/// as the event it was made from.
pub fn event_from_wire(body: &Body) -> Result<Event, FieldError> {
    let attempt = |r: Option<&v1::AttemptRef>| required_attempt("attempt", r);
    Ok(match body {
        Body::Started(s) => Event::Started {
            attempt: attempt(s.attempt.as_ref())?,
            pid: s.pid,
            restarts: s.restarts,
            sandbox: s
                .sandbox
                .as_ref()
                .map(|r| SandboxReport {
                    mode: r.mode.clone(),
                    enforced: r.enforced.clone(),
                    missing: r.missing.clone(),
                })
                .unwrap_or_default(),
        },
        Body::Status(s) => Event::Status {
            attempt: attempt(s.attempt.as_ref())?,
            status: status_kind(s.status)?,
            message: s.message.clone(),
        },
        Body::Question(q) => Event::Question {
            attempt: attempt(q.attempt.as_ref())?,
            id: q.question_id.clone(),
            text: q.text.clone(),
            category: q.category.clone(),
            options: q.options.clone(),
        },
        Body::Result(r) => Event::Result(outcome_from_wire(r)?),
        Body::ForgeReply(r) => Event::ForgeReply {
            attempt: attempt(r.attempt.as_ref())?,
            thread: r.thread.clone(),
            text: r.text.clone(),
        },
        Body::Orphans(o) => Event::Orphans { worktrees: o.worktrees.clone(), removed: o.removed },
        _ => return Err(FieldError::new("body", "not a journaled report")),
    })
}

fn outcome_from_wire(r: &v1::AttemptResult) -> Result<AttemptOutcome, FieldError> {
    let outcome = v1::Outcome::try_from(r.outcome)
        .map_err(|_| FieldError::new("outcome", format!("unknown outcome {}", r.outcome)))
        .and_then(swarm_core::Outcome::try_from)?;
    let usage =
        r.usage.as_ref().map(|u| swarm_proto::convert::usage_from_wire("usage", Some(u))).transpose()?;
    let limited = r.rate_limit_reset_unix_ms != 0 || !r.rate_limit_kind.is_empty();
    Ok(AttemptOutcome {
        attempt: required_attempt("attempt", r.attempt.as_ref())?,
        outcome,
        exit_code: r.exit_code,
        signal: r.signal,
        restarts: r.restarts,
        log_tail: r.log_tail.clone(),
        commit: r.commit.clone(),
        files_changed: r.files_changed.clone(),
        tiers: r.tiers.iter().map(TierOutcome::from).collect(),
        summary: r.summary.clone(),
        error: r.error.clone(),
        category: r.category.clone(),
        usage,
        session_id: r.session_id.clone(),
        usage_limit: (limited || outcome == swarm_core::Outcome::RateLimited).then(|| UsageLimit {
            reset_unix_ms: r.rate_limit_reset_unix_ms,
            kind: r.rate_limit_kind.clone(),
        }),
        review: r.review.as_ref().map(|v| ReviewVerdict {
            decision: v.decision.clone(),
            message: v.message.clone(),
            error: v.error.clone(),
        }),
    })
}

fn status_kind(status: i32) -> Result<StatusKind, FieldError> {
    Ok(match v1::WorkerStatus::try_from(status) {
        Ok(v1::WorkerStatus::Working) => StatusKind::Worker(WorkerStatus::Working),
        Ok(v1::WorkerStatus::Blocked) => StatusKind::Worker(WorkerStatus::Blocked),
        Ok(v1::WorkerStatus::Question) => StatusKind::Worker(WorkerStatus::Question),
        Ok(v1::WorkerStatus::Done) => StatusKind::Worker(WorkerStatus::Done),
        Ok(v1::WorkerStatus::Unspecified) => StatusKind::Invalid,
        Ok(v1::WorkerStatus::Note) => StatusKind::Note,
        Err(_) => return Err(FieldError::new("status", format!("unknown status {status}"))),
    })
}
