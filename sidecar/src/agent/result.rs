//! An agent attempt's result: maps how the [`driver`](super::driver) run
//! ended to the same AttemptResult any worker produces (success goes
//! through the usual verify-and-commit path), with the agent's usage,
//! session id and, for a usage limit, a WIP commit and the reset time.

use std::path::Path;

use swarm_core::Outcome;
use swarm_core::names::truncate;
use swarm_proto::limits::MAX_TEXT;
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use tokio::sync::mpsc;

use super::driver::{self, Channels, End, Ran, Setup};
use super::session;
use crate::attempt::{self, AgentRun, Answers, Assignment, Context, Failure, Launch, Report, Sink, Stop};
use crate::status::WorkerStatus;
use crate::verify;

fn outcome(o: Outcome) -> i32 {
    v1::Outcome::from(o) as i32
}

/// Runs the agent and fills `result`; Ok(None): stopped silently.
pub(crate) async fn drive(
    run: AgentRun<'_>,
    (stop, answers): (&mut tokio::sync::watch::Receiver<Option<Stop>>, &mut Answers),
    log: &mut tokio::fs::File,
    sink: &Sink,
    result: &mut v1::AttemptResult,
) -> Result<Option<()>, Failure> {
    let AgentRun { ctx, a, cfg, wt, files, launch, idle } = run;
    let setup = Setup {
        cfg,
        owned_globs: &a.owned_globs,
        worktree: wt,
        launch: launch.clone(),
        base_commit: &a.base_commit,
        task_text: &a.task_text,
        attempt: a.wire_ref(),
        idle,
        stop_grace: ctx.stop_grace,
        status_file: files.status.clone(),
    };
    let span = tracing::info_span!("run", agent = %cfg.kind);
    let ran = tracing::Instrument::instrument(
        driver::run(&setup, Channels { stop, answers, tx: &sink.tx, log }),
        span,
    )
    .await;
    use tokio::io::AsyncWriteExt;
    let _ = log.flush().await;
    fill_common(result, &ran);
    let blocked = std::fs::read(&files.status)
        .ok()
        .and_then(|b| crate::status::parse(&b).ok())
        .filter(|s| s.status == WorkerStatus::Blocked)
        .map(|s| s.message);
    map_end(ctx, a, wt, launch, ran.end, blocked, result).await
}

/// The result for how the run ended; `blocked` is the status file's
/// message when the agent declared itself blocked (as exit 3 would).
async fn map_end(
    ctx: &Context,
    a: &Assignment,
    wt: &Path,
    launch: &Launch,
    end: End,
    blocked: Option<String>,
    result: &mut v1::AttemptResult,
) -> Result<Option<()>, Failure> {
    match end {
        End::Finished(t) if t.ok => {
            if let Some(message) = blocked {
                result.outcome = outcome(Outcome::Blocked);
                result.error = if message.is_empty() { "agent is blocked".into() } else { message };
                return Ok(Some(()));
            }
            succeed(ctx, a, wt, launch, result, &t.text).await?;
        }
        End::Finished(t) => {
            result.outcome = outcome(Outcome::Error);
            result.error =
                bounded(if t.text.is_empty() { "the agent's turn ended in an error" } else { &t.text });
        }
        End::RateLimited(r) => {
            let label = format!("usage limit ({})", if r.kind.is_empty() { "unknown kind" } else { &r.kind });
            wip(ctx, a, wt, &label, result).await?;
            result.outcome = outcome(Outcome::RateLimited);
            result.rate_limit_reset_unix_ms = r.reset_unix_ms;
            result.rate_limit_kind = r.kind;
            result.summary = format!("agent hit its {label}; work so far is in the WIP commit");
        }
        End::Crashed(exit) => {
            // A signal is SIGNALED, as for any worker; any exit code is an error.
            result.outcome = outcome(if exit.signal.is_some() { Outcome::Signaled } else { Outcome::Error });
            result.error = match (exit.code, exit.signal) {
                (_, Some(sig)) => format!("agent killed by signal {sig} before its result"),
                (Some(c), None) => format!("agent exited with code {c} before its result"),
                (None, None) => "agent exited before its result".into(),
            };
        }
        End::Stopped(Stop::Silent) => return Ok(None),
        End::Stopped(Stop::Cancel { .. }) => {
            result.outcome = outcome(Outcome::Cancelled);
            result.error = "cancelled by the controller".into();
        }
        End::Stopped(Stop::Checkpoint { .. }) => {
            wip(ctx, a, wt, "stopped by the controller", result).await?;
            result.outcome = outcome(Outcome::Checkpoint);
            result.summary =
                "stopped by the controller; the agent's work is checkpointed and its session can be resumed"
                    .into();
        }
        End::Stopped(Stop::Shutdown) => {
            wip(ctx, a, wt, "sidecar shutdown", result).await?;
            result.outcome = outcome(Outcome::Checkpoint);
            result.summary =
                "the sidecar shut down; the agent's work is checkpointed and its session can be resumed"
                    .into();
        }
        End::Idle(d) => {
            result.outcome = outcome(Outcome::Stalled);
            result.error =
                format!("the agent printed nothing for {} s while not waiting on the operator", d.as_secs());
        }
        End::Failed(e) => {
            result.exit_code = -1;
            result.outcome = outcome(Outcome::Error);
            result.error = e;
        }
    }
    Ok(Some(()))
}

fn fill_common(result: &mut v1::AttemptResult, ran: &Ran) {
    if let Some(exit) = ran.exit {
        result.exit_code = exit.wire_code();
        result.signal = exit.signal;
    }
    result.usage = Some(v1::Usage::from(&ran.usage));
    result.session_id = ran.session_id.clone();
    result.log_tail = ran.tail.clone();
    result.restarts = ran.processes.saturating_sub(1);
}

fn bounded(s: &str) -> String {
    truncate(s.trim(), MAX_TEXT).to_string()
}

/// The exit-0 path of any worker: verify tiers, commit, report.
async fn succeed(
    ctx: &Context,
    a: &Assignment,
    wt: &Path,
    launch: &Launch,
    result: &mut v1::AttemptResult,
    text: &str,
) -> Result<(), Failure> {
    result.outcome = outcome(Outcome::Success);
    if a.review.is_some() {
        // A reviewer's verdict is about the commit it was shown: no commit.
        return crate::review::conclude(wt, text, result).map_err(Failure::Infra);
    }
    let (tiers, ok) = verify::run_tiers(&a.verify, wt, &launch.env, launch.confinement.as_ref()).await;
    result.tiers = tiers;
    if !ok {
        result.outcome = outcome(Outcome::VerifyFailed);
        result.error = "a blocking verify tier failed".into();
    }
    let message = format!("{}\n\nSwarm-Attempt: {}", a.title.trim(), a.label());
    let (commit, subject) = attempt::commit(ctx, wt, message).await?;
    attempt::fill_commit(ctx, a, wt, result, &commit).await?;
    note_commit(wt, &commit);
    result.summary = if text.trim().is_empty() { subject } else { bounded(text) };
    Ok(())
}

/// Commits whatever the agent left, so that the session's work survives
/// and a later attempt can resume it from that commit.
async fn wip(
    ctx: &Context,
    a: &Assignment,
    wt: &Path,
    why: &str,
    result: &mut v1::AttemptResult,
) -> Result<(), Failure> {
    let label = a.label();
    let mut message = format!("WIP: {why}, {label}\n\n");
    if !result.session_id.is_empty() {
        message.push_str(&format!("Agent-Session: {}\n", result.session_id));
    }
    message.push_str(&format!("Swarm-Attempt: {label}\n"));
    let (commit, _) = attempt::commit(ctx, wt, message).await?;
    attempt::fill_commit(ctx, a, wt, result, &commit).await?;
    note_commit(wt, &commit);
    Ok(())
}

fn note_commit(wt: &Path, commit: &str) {
    if let Err(e) = session::set_commit(wt, commit) {
        tracing::warn!(error = %e, "cannot update agent-session.json");
    }
}

/// For a restarted sidecar holding an agent attempt whose agent died with
/// the old process (agents are not supervised, see `agent::process`): keep
/// the work as a WIP commit and report CHECKPOINT with the session id, so
/// that the next attempt resumes the conversation instead of losing it.
pub async fn checkpoint_lost(ctx: Context, a: Assignment, tx: mpsc::UnboundedSender<Report>) {
    let sink = Sink { tx };
    let mut result = v1::AttemptResult { attempt: Some(a.wire_ref()), exit_code: -1, ..Default::default() };
    if let Err(Failure::Task(e) | Failure::Infra(e)) = checkpoint_inner(&ctx, &a, &mut result).await {
        tracing::error!(error = %e, "checkpointing the lost agent's work failed");
        result.outcome = outcome(Outcome::InfraFailed);
        result.error = e;
    }
    sink.tx.send(Report::Journaled(Body::Result(result))).ok();
}

async fn checkpoint_inner(
    ctx: &Context,
    a: &Assignment,
    result: &mut v1::AttemptResult,
) -> Result<(), Failure> {
    let wt = attempt::own_worktree(ctx).await.map_err(Failure::Infra)?;
    let kind = a.agent.as_ref().map(|c| c.kind.as_str()).unwrap_or_default();
    if let Some(r) = session::read(&wt).filter(|r| r.kind == kind) {
        result.session_id = r.session_id;
    }
    wip(ctx, a, &wt, "sidecar restarted", result).await?;
    result.outcome = outcome(Outcome::Checkpoint);
    result.summary =
        "the sidecar restarted and its agent process was lost with it; the work is checkpointed \
                      and the agent session can be resumed"
            .into();
    tracing::info!(session = %result.session_id, commit = %result.commit, "checkpointed the lost agent's work");
    Ok(())
}
