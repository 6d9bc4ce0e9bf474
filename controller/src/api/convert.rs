//! Wire ⇄ domain conversions for the controller's own types.

use std::collections::BTreeMap;

use swarm_core::TaskKey;
use swarm_core::names::check_text;
use swarm_core::plan::check_label;
use swarm_proto::FieldError;
use swarm_proto::convert::{
    AttemptRef, optional_commit, outcome_from_wire, required_attempt, required_id, session_id_from_wire,
    usage_from_wire,
};
use swarm_proto::v1;

use crate::scheduler::{
    AssignSpec, AttemptHandle, CloseCode, HelloInfo, Outbound, Report, ReportedAttempt, ResultReport,
    SandboxReported, TierOutcome, VerifiedReport,
};
use crate::store::EventRow;

use swarm_proto::limits::{MAX_CATEGORY, MAX_LINE, MAX_OPTION, MAX_OPTIONS, MAX_STEP, MAX_TIER_NAME};
pub use swarm_proto::limits::{MAX_LINES, MAX_PATHS, MAX_TEXT};

/// A resume secret is 32 hex digits; a little room for a longer one later.
const MAX_SECRET: usize = 128;

fn reported(r: AttemptRef) -> ReportedAttempt {
    ReportedAttempt { task: r.task, number: r.number, token: r.fencing_token }
}

fn text(field: &str, s: &str, max: usize) -> Result<String, FieldError> {
    check_text(s, max).map_err(|rule| FieldError::new(field, rule))?;
    Ok(s.to_string())
}

fn question_options(v: &[String]) -> Result<Vec<String>, FieldError> {
    if v.len() > MAX_OPTIONS {
        return Err(FieldError::new("question.options", format!("at most {MAX_OPTIONS} options")));
    }
    for (i, o) in v.iter().enumerate() {
        let field = format!("question.options[{i}]");
        check_text(o, MAX_OPTION).map_err(|rule| FieldError::new(field.as_str(), rule))?;
        if o.trim().is_empty() || o.contains('\n') {
            return Err(FieldError::new(field, "must be one non-empty line"));
        }
    }
    Ok(v.to_vec())
}

fn lines(field: &str, v: &[String]) -> Result<Vec<String>, FieldError> {
    if v.len() > MAX_LINES {
        return Err(FieldError::new(field, format!("at most {MAX_LINES} lines")));
    }
    for (i, l) in v.iter().enumerate() {
        check_text(l, MAX_LINE).map_err(|rule| FieldError::new(format!("{field}[{i}]"), rule))?;
    }
    Ok(v.to_vec())
}

fn paths(field: &str, v: &[String]) -> Result<Vec<String>, FieldError> {
    if v.len() > MAX_PATHS {
        return Err(FieldError::new(field, format!("at most {MAX_PATHS} paths")));
    }
    for (i, p) in v.iter().enumerate() {
        swarm_core::names::check_path(p).map_err(|rule| FieldError::new(format!("{field}[{i}]"), rule))?;
    }
    Ok(v.to_vec())
}

fn sandbox_report(s: &v1::SandboxReport) -> Result<SandboxReported, FieldError> {
    const MAX_ITEMS: usize = 16;
    let list = |field: &str, v: &[String]| {
        if v.len() > MAX_ITEMS {
            return Err(FieldError::new(field, format!("at most {MAX_ITEMS} entries")));
        }
        lines(field, v)
    };
    Ok(SandboxReported {
        mode: text("started.sandbox.mode", &s.mode, 16)?,
        enforced: list("started.sandbox.enforced", &s.enforced)?,
        missing: list("started.sandbox.missing", &s.missing)?,
    })
}

pub fn hello(h: &v1::Hello) -> Result<HelloInfo, FieldError> {
    let worker_id = required_id("hello.worker_id", &h.worker_id)?;
    if h.labels.len() > 64 {
        return Err(FieldError::new("hello.labels", "at most 64 labels"));
    }
    let mut labels = BTreeMap::new();
    for (k, v) in &h.labels {
        check_label(k, v).map_err(|rule| FieldError::new(format!("hello.labels.{k}"), rule))?;
        labels.insert(k.clone(), v.clone());
    }
    let host = text("hello.host", &h.host, 255)?;
    let attempt_in_hand = match &h.attempt_in_hand {
        None => None,
        Some(r) => Some(reported(AttemptRef::try_from(r).map_err(|e| e.within("hello.attempt_in_hand"))?)),
    };
    if h.resume_secret.len() > MAX_SECRET || !h.resume_secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(FieldError::new(
            "hello.resume_secret",
            format!("must be at most {MAX_SECRET} hex digits, as Welcome gave it"),
        ));
    }
    swarm_proto::compat::accepts(swarm_proto::compat::revision(h.protocol))
        .map_err(|rule| FieldError::new("hello.protocol", rule))?;
    text("hello.version", &h.version, 64)?;
    Ok(HelloInfo {
        worker_id,
        labels,
        host,
        last_acked_seq: h.last_acked_seq,
        attempt_in_hand,
        resume_secret: h.resume_secret.clone(),
        principal: None,
    })
}

/// Converts one report; `None` for messages that change nothing
/// (heartbeats, acks), which the stream reader handles itself.
pub fn report(seq: u64, body: &v1::sidecar_message::Body) -> Result<Option<Report>, FieldError> {
    use v1::sidecar_message::Body;
    let needs_seq = |field: &str| {
        if seq == 0 {
            Err(FieldError::new("seq", format!("a {field} report must carry a sequence number >= 1")))
        } else {
            Ok(())
        }
    };
    Ok(Some(match body {
        Body::Hello(_) => return Err(FieldError::new("hello", "sent twice on one stream")),
        // Log chunks answer an operator's read; the stream reader routes them.
        Body::Heartbeat(_) | Body::Ack(_) | Body::LogChunk(_) => return Ok(None),
        Body::Started(s) => {
            needs_seq("started")?;
            Report::Started {
                attempt: reported(required_attempt("started.attempt", s.attempt.as_ref())?),
                pid: s.pid,
                restarts: s.restarts,
                sandbox: s.sandbox.as_ref().map(sandbox_report).transpose()?,
            }
        }
        Body::Progress(p) => {
            if p.percent > 100 {
                return Err(FieldError::new("progress.percent", "must be between 0 and 100"));
            }
            Report::Progress {
                attempt: reported(required_attempt("progress.attempt", p.attempt.as_ref())?),
                percent: p.percent,
                step: text("progress.step", &p.step, MAX_STEP)?,
                usage: p.usage.as_ref().map(|u| usage_from_wire("progress.usage", Some(u))).transpose()?,
                session_id: session_id_from_wire("progress.session_id", &p.session_id)?,
            }
        }
        Body::Status(s) => {
            needs_seq("status")?;
            status_report(s)?
        }
        Body::Question(q) => {
            needs_seq("question")?;
            if q.text.trim().is_empty() {
                return Err(FieldError::new("question.text", "must not be empty"));
            }
            Report::Question {
                attempt: reported(required_attempt("question.attempt", q.attempt.as_ref())?),
                id: required_id("question.question_id", &q.question_id)?,
                text: text("question.text", &q.text, MAX_TEXT)?,
                category: text("question.category", &q.category, MAX_CATEGORY)?,
                options: question_options(&q.options)?,
            }
        }
        Body::Result(r) => {
            needs_seq("result")?;
            Report::Result(Box::new(result_report(r)?))
        }
        Body::ForgeReply(r) => {
            needs_seq("forge_reply")?;
            swarm_proto::limits::check_reply_thread(&r.thread)
                .map_err(|rule| FieldError::new("forge_reply.thread", rule))?;
            if r.text.trim().is_empty() {
                return Err(FieldError::new("forge_reply.text", "must not be empty"));
            }
            Report::ForgeReply {
                attempt: reported(required_attempt("forge_reply.attempt", r.attempt.as_ref())?),
                thread: r.thread.clone(),
                text: text("forge_reply.text", &r.text, swarm_proto::limits::MAX_REPLY)?,
            }
        }
        Body::MergeVerified(v) => merge_verified(v)?,
        Body::Orphans(o) => {
            needs_seq("orphans")?;
            Report::Orphans { worktrees: lines("orphans.worktrees", &o.worktrees)?, removed: o.removed }
        }
    }))
}

fn status_report(s: &v1::Status) -> Result<Report, FieldError> {
    let status = v1::WorkerStatus::try_from(s.status).map_err(|_| {
        FieldError::new("status.status", "must be UNSPECIFIED, WORKING, BLOCKED, QUESTION, DONE or NOTE")
    })?;
    // UNSPECIFIED is how a sidecar relays a status.json it could not
    // read (the message says why).
    let status = match status {
        v1::WorkerStatus::Unspecified => "invalid",
        v1::WorkerStatus::Working => "working",
        v1::WorkerStatus::Blocked => "blocked",
        v1::WorkerStatus::Question => "question",
        v1::WorkerStatus::Done => "done",
        v1::WorkerStatus::Note => "note",
    };
    Ok(Report::Status {
        attempt: reported(required_attempt("status.attempt", s.attempt.as_ref())?),
        status: status.to_string(),
        message: text("status.message", &s.message, MAX_TEXT)?,
    })
}

fn result_report(r: &v1::AttemptResult) -> Result<ResultReport, FieldError> {
    let outcome = outcome_from_wire("result.outcome", r.outcome)?;
    let commit = optional_commit("result.commit", &r.commit)?;
    if matches!(outcome, swarm_core::Outcome::Success) && commit.is_none() {
        return Err(FieldError::new("result.commit", "is required when outcome is SUCCESS"));
    }
    Ok(ResultReport {
        attempt: reported(required_attempt("result.attempt", r.attempt.as_ref())?),
        outcome,
        exit_code: r.exit_code,
        signal: r.signal,
        commit,
        files_changed: paths("result.files_changed", &r.files_changed)?,
        tiers: tiers("result.tiers", &r.tiers)?,
        summary: text("result.summary", &r.summary, MAX_TEXT)?,
        error: text("result.error", &r.error, MAX_TEXT)?,
        log_tail: lines("result.log_tail", &r.log_tail)?,
        category: text("result.category", &r.category, MAX_CATEGORY)?,
        usage: usage_from_wire("result.usage", r.usage.as_ref())?,
        session_id: session_id_from_wire("result.session_id", &r.session_id)?,
        rate_limit_reset_ms: r.rate_limit_reset_unix_ms,
        rate_limit_kind: text("result.rate_limit_kind", &r.rate_limit_kind, MAX_CATEGORY)?,
        review: review_verdict(r.review.as_ref())?,
    })
}

/// A reviewer attempt's decision, bounded like any text from a sidecar
/// (the scheduler decides what it means).
fn review_verdict(
    v: Option<&v1::ReviewVerdict>,
) -> Result<Option<crate::scheduler::ReviewVerdict>, FieldError> {
    let Some(v) = v else { return Ok(None) };
    Ok(Some(crate::scheduler::ReviewVerdict {
        decision: text("result.review.decision", &v.decision, MAX_CATEGORY)?,
        message: text("result.review.message", &v.message, MAX_TEXT)?,
        error: text("result.review.error", &v.error, MAX_TEXT)?,
    }))
}

/// A merge queue verification's verdict (unsequenced: a lost one is run
/// again rather than replayed).
/// A sidecar's verify tiers, each checked: at most 32, names and output
/// within their bounds.
fn tiers(field: &str, wire: &[v1::TierResult]) -> Result<Vec<TierOutcome>, FieldError> {
    if wire.len() > 32 {
        return Err(FieldError::new(field, "at most 32 tiers"));
    }
    wire.iter()
        .enumerate()
        .map(|(i, t)| {
            Ok(TierOutcome {
                name: text(&format!("{field}[{i}].name"), &t.name, MAX_TIER_NAME)?,
                output_tail: text(&format!("{field}[{i}].output_tail"), &t.output_tail, MAX_TEXT)?,
                ..TierOutcome::from(t)
            })
        })
        .collect()
}

fn merge_verified(v: &v1::MergeVerified) -> Result<Report, FieldError> {
    if v.job_id == 0 {
        return Err(FieldError::new("merge_verified.job_id", "must be at least 1"));
    }
    let tiers = tiers("merge_verified.tiers", &v.tiers)?;
    Ok(Report::MergeVerified(Box::new(VerifiedReport {
        job: v.job_id,
        commit: swarm_proto::convert::required_commit("merge_verified.commit", &v.commit)?,
        passed: v.passed && v.error.is_empty(),
        tiers,
        error: text("merge_verified.error", &v.error, MAX_TEXT)?,
    })))
}

fn verify_tier(t: &swarm_core::plan::VerifyTier) -> v1::VerifyTier {
    v1::VerifyTier {
        name: t.name.clone(),
        command: t.command.clone(),
        blocking: t.blocking,
        timeout_secs: t.timeout_secs,
    }
}

fn handle(h: &AttemptHandle) -> v1::AttemptRef {
    v1::AttemptRef {
        swarm_id: h.task.swarm.to_string(),
        task_id: h.task.task.to_string(),
        attempt: h.number,
        fencing_token: h.token,
    }
}

fn assign(a: &AssignSpec) -> v1::Assign {
    v1::Assign {
        attempt: Some(handle(&a.attempt)),
        base_commit: a.base_commit.clone(),
        branch: a.branch.clone(),
        title: a.title.clone(),
        task_text: a.task_text.clone(),
        command: a.command.clone(),
        env: a.env.clone().into_iter().collect(),
        owned_globs: a.owned_globs.clone(),
        verify: a
            .verify
            .iter()
            .map(|t| v1::VerifyTier {
                name: t.name.clone(),
                command: t.command.clone(),
                blocking: t.blocking,
                timeout_secs: t.timeout_secs,
            })
            .collect(),
        idle_timeout_secs: a.idle_timeout_secs,
        max_restarts: a.max_restarts,
        traceparent: a.traceparent.clone(),
        setup: a.setup.clone(),
        setup_every_attempt: a.setup_every_attempt,
        agent: a.agent.as_ref().map(agent_spec),
        review: a.review_diff_base.as_ref().map(|base| v1::ReviewAssign { diff_base: base.clone() }),
        spawned_child: a.spawned_child.clone(),
        sandbox: Some(sandbox_spec(&a.sandbox)),
        secrets: a
            .secrets
            .iter()
            .map(|(name, source)| {
                use swarm_core::plan::SecretSource;
                use v1::secret_ref::Source;
                v1::SecretRef {
                    name: name.clone(),
                    source: Some(match source {
                        SecretSource::File(p) => Source::File(p.clone()),
                        SecretSource::Env(v) => Source::Env(v.clone()),
                    }),
                }
            })
            .collect(),
    }
}

fn sandbox_spec(s: &swarm_core::plan::SandboxSpec) -> v1::SandboxSpec {
    use swarm_core::plan::SandboxMode;
    v1::SandboxSpec {
        mode: match s.mode {
            SandboxMode::On => v1::SandboxMode::On,
            SandboxMode::Off => v1::SandboxMode::Off,
            SandboxMode::Required => v1::SandboxMode::Required,
        } as i32,
        read: s.read.clone(),
        write: s.write.clone(),
        connect: s.connect.iter().map(|&p| u32::from(p)).collect(),
        limits: (!s.limits.is_empty()).then_some(v1::Limits {
            pids: s.limits.pids.unwrap_or(0),
            memory_bytes: s.limits.memory.unwrap_or(0),
            cpu_millis: s.limits.cpu_millis.unwrap_or(0),
        }),
    }
}

fn agent_spec(a: &crate::scheduler::AgentAssign) -> v1::AgentSpec {
    use swarm_core::plan::{AgentInstructions, Otherwise, PermissionRule};
    let s = &a.spec;
    let rules = |r: &[PermissionRule]| r.iter().map(ToString::to_string).collect();
    v1::AgentSpec {
        kind: s.kind.as_str().to_string(),
        path: s.path.clone().unwrap_or_default(),
        model: s.model.clone().unwrap_or_default(),
        max_turns: s.max_turns.unwrap_or(0),
        max_budget_usd: s.max_budget_usd.unwrap_or(0.0),
        allowed_tools: s.allowed_tools.clone(),
        permission_mode: s.permission_mode.clone().unwrap_or_default(),
        append_system_prompt: s.append_system_prompt.clone().unwrap_or_default(),
        extra_args: s.extra_args.clone(),
        instructions: match &s.instructions {
            AgentInstructions::BuiltIn => None,
            AgentInstructions::Off => Some(String::new()),
            AgentInstructions::Text(t) => Some(t.clone()),
        },
        permissions: Some(v1::PermissionPolicy {
            allow: rules(&s.permissions.allow),
            deny: rules(&s.permissions.deny),
            otherwise: match s.permissions.otherwise {
                Otherwise::Ask => v1::PermissionFallback::Ask,
                Otherwise::Deny => v1::PermissionFallback::Deny,
            } as i32,
        }),
        resume_session: a.resume_session.clone(),
        prices: a
            .prices
            .entries()
            .iter()
            .map(|(model, p)| v1::ModelPrice {
                model: model.clone(),
                input: p.input,
                output: p.output,
                cache_write: p.cache_write,
                cache_read: p.cache_read,
            })
            .collect(),
    }
}

/// A message for the sidecar, or the status that ends its stream.
pub fn outbound(o: Outbound) -> Result<v1::ControllerMessage, tonic::Status> {
    use v1::controller_message::Body;
    let body = match o {
        Outbound::Welcome {
            session_id,
            heartbeat_interval_ms,
            heartbeat_jitter_ms,
            lease_ttl_ms,
            last_applied_seq,
            attempt_resumed,
            resume_secret,
        } => Body::Welcome(v1::Welcome {
            session_id,
            heartbeat_interval_ms,
            heartbeat_jitter_ms,
            lease_ttl_ms,
            last_applied_seq,
            attempt_resumed,
            resume_secret,
            protocol: swarm_proto::compat::PROTOCOL,
        }),
        Outbound::Assign(a) => Body::Assign(assign(&a)),
        Outbound::Cancel { attempt, grace_ms, reason, checkpoint } => {
            Body::Cancel(v1::Cancel { attempt: Some(handle(&attempt)), grace_ms, reason, checkpoint })
        }
        Outbound::Answer { attempt, question_id, text } => {
            Body::Answer(v1::Answer { attempt: Some(handle(&attempt)), question_id, text })
        }
        Outbound::Message { attempt, message_id, text } => {
            Body::Message(v1::OperatorMessage { attempt: Some(handle(&attempt)), message_id, text })
        }
        Outbound::Ack { seq } => Body::Ack(v1::Ack { seq }),
        Outbound::Drain { reason } => Body::Drain(v1::Drain { reason }),
        Outbound::VerifyMerge(v) => Body::VerifyMerge(v1::VerifyMerge {
            job_id: v.job,
            swarm_id: v.swarm,
            commit: v.commit,
            tiers: v.tiers.iter().map(verify_tier).collect(),
            traceparent: v.traceparent,
            attempts: v.attempts,
            sandbox: Some(sandbox_spec(&v.sandbox)),
        }),
        Outbound::Close { code, message } => {
            return Err(match code {
                CloseCode::AlreadyExists => tonic::Status::already_exists(message),
                CloseCode::FailedPrecondition => tonic::Status::failed_precondition(message),
            });
        }
    };
    Ok(v1::ControllerMessage { body: Some(body) })
}

pub fn task_key(field: &str, full: &str) -> Result<TaskKey, FieldError> {
    TaskKey::parse(full).map_err(|rule| FieldError::new(field, rule))
}

/// A store row on the wire: its data goes as stored, byte for byte.
pub fn event(e: EventRow) -> v1::Event {
    v1::Event {
        id: e.id,
        at_unix_ms: e.at,
        swarm_id: e.swarm,
        task_id: e.task,
        attempt: e.attempt,
        worker_id: e.worker,
        kind: e.kind,
        message: e.message,
        data: e.data,
    }
}

#[cfg(test)]
mod merge_verified_tests {
    use super::*;

    fn verified(job_id: u64, commit: &str) -> v1::sidecar_message::Body {
        v1::sidecar_message::Body::MergeVerified(v1::MergeVerified {
            job_id,
            commit: commit.into(),
            passed: true,
            tiers: vec![v1::TierResult { name: "build".into(), passed: true, ..Default::default() }],
            error: String::new(),
        })
    }

    #[test]
    fn a_merge_verdict_needs_no_sequence_and_bad_fields_are_named() {
        let commit = "a".repeat(40);
        match report(0, &verified(3, &commit)) {
            Ok(Some(Report::MergeVerified(r))) => {
                assert_eq!((r.job, r.passed, r.tiers.len()), (3, true, 1));
                assert_eq!(r.commit, commit);
            }
            other => panic!("unexpected {other:?}"),
        }
        let e = report(0, &verified(0, &commit)).expect_err("job 0");
        assert_eq!(e.field, "merge_verified.job_id");
        let e = report(0, &verified(3, "not-a-commit")).expect_err("bad commit");
        assert_eq!(e.field, "merge_verified.commit");
    }

    #[test]
    fn a_verifier_error_never_counts_as_a_pass() {
        let mut body = verified(1, &"b".repeat(40));
        if let v1::sidecar_message::Body::MergeVerified(v) = &mut body {
            v.error = "checkout failed".into();
        }
        match report(0, &body) {
            Ok(Some(Report::MergeVerified(r))) => assert!(!r.passed && r.error == "checkout failed"),
            other => panic!("unexpected {other:?}"),
        }
    }
}
