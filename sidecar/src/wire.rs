//! Where the sidecar's values meet the wire's: an Assign is checked into an
//! [`Assignment`] here, and every report becomes its prost message here,
//! when the session sends it. Nothing else in the attempt sees a prost type.

use std::path::Path;
use std::time::Duration;

use swarm_core::names::{check_branch, check_commit};
use swarm_proto::convert::{FieldError, required_attempt};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;

use crate::agent::AgentConfig;
use crate::assignment::Assignment;
use crate::outcome::{AttemptOutcome, ReviewVerdict, UsageLimit};
use crate::report::{Event, Progress, StatusKind};
use crate::sandbox::SandboxReport;
use crate::status::WorkerStatus;
use crate::verify::{Tier, TierResult};

impl TryFrom<&v1::Assign> for Assignment {
    type Error = FieldError;

    fn try_from(a: &v1::Assign) -> Result<Self, FieldError> {
        let attempt = required_attempt("attempt", a.attempt.as_ref())?;
        check_commit(&a.base_commit).map_err(|r| FieldError::new("base_commit", r))?;
        check_branch(&a.branch).map_err(|r| FieldError::new("branch", r))?;
        let agent = a.agent.as_ref().map(AgentConfig::from_wire).transpose()?;
        if agent.is_none() && (a.command.is_empty() || a.command[0].is_empty()) {
            return Err(FieldError::new("command", "must not be empty"));
        }
        if let Some(cfg) = &agent {
            // Compiled here so that a bad glob or rule fails the Assign, not the run.
            crate::agent::policy::Policy::new(cfg, &a.owned_globs, Path::new("/"))
                .map_err(|e| FieldError::new("agent.permissions", e.to_string()))?;
        }
        let mut env: Vec<(String, String)> = a.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        env.sort();
        if let Some((k, _)) = env.iter().find(|(k, _)| k.is_empty() || k.contains('=') || k.contains('\0')) {
            return Err(FieldError::new("env", format!("bad variable name {k:?}")));
        }
        let review = a.review.as_ref().map(|r| r.diff_base.clone());
        if let Some(base) = review.as_deref().filter(|b| !b.is_empty()) {
            check_commit(base).map_err(|r| FieldError::new("review.diff_base", r))?;
        }
        let sandbox = crate::sandbox::Settings::from_wire(a.sandbox.as_ref())?;
        let secrets = crate::secrets::from_wire(&a.secrets)?;
        Ok(Assignment {
            secrets,
            sandbox,
            review,
            attempt,
            base_commit: a.base_commit.clone(),
            branch: a.branch.clone(),
            title: a.title.clone(),
            task_text: a.task_text.clone(),
            command: a.command.clone(),
            env,
            verify: a.verify.iter().map(tier).collect(),
            idle_timeout: (a.idle_timeout_secs > 0)
                .then(|| Duration::from_secs(u64::from(a.idle_timeout_secs))),
            max_restarts: a.max_restarts,
            traceparent: a.traceparent.clone(),
            setup: a.setup.clone(),
            setup_every_attempt: a.setup_every_attempt,
            agent,
            owned_globs: a.owned_globs.clone(),
        })
    }
}

/// A verify tier; no timeout means ten minutes.
pub fn tier(t: &v1::VerifyTier) -> Tier {
    let secs = if t.timeout_secs == 0 { 600 } else { u64::from(t.timeout_secs) };
    Tier {
        name: t.name.clone(),
        command: t.command.clone(),
        blocking: t.blocking,
        timeout: Duration::from_secs(secs),
    }
}

impl From<&TierResult> for v1::TierResult {
    fn from(t: &TierResult) -> Self {
        v1::TierResult {
            name: t.name.clone(),
            passed: t.passed,
            blocking: t.blocking,
            exit_code: t.exit_code,
            duration_ms: t.duration_ms,
            output_tail: t.output_tail.clone(),
        }
    }
}

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
        tiers: r
            .tiers
            .iter()
            .map(|t| TierResult {
                name: t.name.clone(),
                passed: t.passed,
                blocking: t.blocking,
                exit_code: t.exit_code,
                duration_ms: t.duration_ms,
                output_tail: t.output_tail.clone(),
            })
            .collect(),
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

/// A journaled report as the wire carries it, cut to the controller's
/// limits: a report the controller refused would otherwise be replayed
/// after every reconnect, forever.
pub fn message(seq: u64, event: &Event) -> v1::SidecarMessage {
    let mut msg = v1::SidecarMessage { seq, body: Some(Body::from(event)) };
    let cut = swarm_proto::limits::fit_report(&mut msg);
    if !cut.is_empty() {
        tracing::warn!(seq, cut = ?cut, "report trimmed to the controller's limits");
    }
    msg
}
