//! Where the sidecar's values meet the wire's: an Assign is checked into an
//! [`Assignment`](crate::assignment::Assignment) ([`assign`]), and every
//! report becomes its prost message here, when the session sends it
//! (reports an older sidecar journaled as prost messages are read back in
//! [`journaled`]). Nothing else of the attempt sees a prost type.

mod assign;
mod journaled;

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;

pub use assign::{sandbox, tier};
pub use journaled::event_from_wire;

use crate::outcome::{AttemptOutcome, ReviewVerdict};
use crate::report::{Event, Progress, StatusKind};
use crate::sandbox::SandboxReport;
use crate::status::WorkerStatus;

impl From<&AttemptOutcome> for v1::AttemptResult {
    fn from(o: &AttemptOutcome) -> Self {
        let limit = o.usage_limit.clone().unwrap_or_default();
        v1::AttemptResult {
            attempt: Some(v1::AttemptRef::from(&o.attempt)),
            outcome: v1::Outcome::from(o.outcome) as i32,
            exit_code: o.exit_code,
            signal: o.signal,
            commit: o.commit.clone(),
            files_changed: o.files_changed.clone(),
            tiers: o.tiers.iter().map(v1::TierResult::from).collect(),
            summary: o.summary.clone(),
            error: o.error.clone(),
            log_tail: o.log_tail.clone(),
            category: o.category.clone(),
            restarts: o.restarts,
            usage: o.usage.as_ref().map(v1::Usage::from),
            session_id: o.session_id.clone(),
            rate_limit_reset_unix_ms: limit.reset_unix_ms,
            rate_limit_kind: limit.kind,
            review: o.review.as_ref().map(v1::ReviewVerdict::from),
        }
    }
}

impl From<&ReviewVerdict> for v1::ReviewVerdict {
    fn from(v: &ReviewVerdict) -> Self {
        v1::ReviewVerdict { decision: v.decision.clone(), message: v.message.clone(), error: v.error.clone() }
    }
}

impl From<&SandboxReport> for v1::SandboxReport {
    fn from(r: &SandboxReport) -> Self {
        v1::SandboxReport { mode: r.mode.clone(), enforced: r.enforced.clone(), missing: r.missing.clone() }
    }
}

impl From<&Event> for Body {
    fn from(e: &Event) -> Self {
        match e {
            Event::Started { attempt, pid, restarts, sandbox } => Body::Started(v1::AttemptStarted {
                attempt: Some(attempt.into()),
                pid: *pid,
                restarts: *restarts,
                sandbox: Some(sandbox.into()),
            }),
            Event::Status { attempt, status, message } => Body::Status(v1::Status {
                attempt: Some(attempt.into()),
                status: worker_status(*status) as i32,
                message: message.clone(),
            }),
            Event::Question { attempt, id, text, category, options } => Body::Question(v1::Question {
                attempt: Some(attempt.into()),
                question_id: id.clone(),
                text: text.clone(),
                category: category.clone(),
                options: options.clone(),
            }),
            Event::Result(o) => Body::Result(o.into()),
            Event::ForgeReply { attempt, thread, text } => Body::ForgeReply(v1::ForgeReply {
                attempt: Some(attempt.into()),
                thread: thread.clone(),
                text: text.clone(),
            }),
            Event::Orphans { worktrees, removed } => {
                Body::Orphans(v1::OrphanReport { worktrees: worktrees.clone(), removed: *removed })
            }
        }
    }
}

impl From<&Progress> for v1::Progress {
    fn from(p: &Progress) -> Self {
        v1::Progress {
            attempt: Some((&p.attempt).into()),
            percent: p.percent,
            step: p.step.clone(),
            files_modified: p.files_modified.clone(),
            tests_passing: p.tests_passing,
            tests_total: p.tests_total,
            log_tail: p.log_tail.clone(),
            usage: p.usage.as_ref().map(v1::Usage::from),
            session_id: p.session_id.clone(),
        }
    }
}

fn worker_status(s: StatusKind) -> v1::WorkerStatus {
    match s {
        StatusKind::Worker(WorkerStatus::Working) => v1::WorkerStatus::Working,
        StatusKind::Worker(WorkerStatus::Blocked) => v1::WorkerStatus::Blocked,
        StatusKind::Worker(WorkerStatus::Question) => v1::WorkerStatus::Question,
        StatusKind::Worker(WorkerStatus::Done) => v1::WorkerStatus::Done,
        StatusKind::Invalid => v1::WorkerStatus::Unspecified,
        StatusKind::Note => v1::WorkerStatus::Note,
    }
}

/// The report cut to the controller's limits, as it is to be journaled: a
/// report the controller refused would otherwise be replayed after every
/// reconnect, forever.
pub fn fitted(event: Event) -> Event {
    let mut msg = v1::SidecarMessage { seq: 0, body: Some(Body::from(&event)) };
    let cut = swarm_proto::limits::fit_report(&mut msg);
    if cut.is_empty() {
        return event;
    }
    tracing::warn!(cut = ?cut, "report trimmed to the controller's limits");
    match msg.body.as_ref().map(event_from_wire) {
        Some(Ok(trimmed)) => trimmed,
        // Not reached: the message was made from an event. Sent as it is,
        // it is cut again on the way out.
        _ => event,
    }
}

/// A journaled report as the wire carries it (cut to the controller's
/// limits, should a journal hold one that is not).
pub fn message(seq: u64, event: &Event) -> v1::SidecarMessage {
    let mut msg = v1::SidecarMessage { seq, body: Some(Body::from(event)) };
    let cut = swarm_proto::limits::fit_report(&mut msg);
    if !cut.is_empty() {
        tracing::warn!(seq, cut = ?cut, "report trimmed to the controller's limits");
    }
    msg
}
