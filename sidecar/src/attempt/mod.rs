//! One attempt, from Assign to its [`AttemptOutcome`], in four steps:
//! [`prepare`] (the worktree at the task's base, `.swarm/`, the attempt's
//! launch and setup commands), **run** ([`worker`] for a command,
//! [`agent`] for a coding agent), then **verify** and **commit**
//! ([`finish`]) of what the run left to keep. Each step returns a value;
//! [`attempt`] composes them.
//!
//! The driver knows nothing about the connection: it hands every report to
//! a channel; the session journals and sends them.

mod agent;
mod finish;
mod prepare;
mod worker;

use tokio::sync::{mpsc, watch};

pub use crate::assignment::{Adopted, Assignment, Context};
use crate::outcome::{AttemptOutcome, Failure};
pub use crate::report::{Answers, Event, Report, Sink, Stop};
pub use crate::swarm_files::{SwarmFiles, record_answer, record_message};
pub use agent::checkpoint_lost;
pub use prepare::warm_worktree;

/// Runs one attempt to its end. Sends exactly one result unless stopped
/// with [`Stop::Silent`].
pub async fn run(
    ctx: Context,
    a: Assignment,
    stop: watch::Receiver<Option<Stop>>,
    tx: mpsc::UnboundedSender<Report>,
) {
    let (_keep, answers) = mpsc::unbounded_channel();
    run_or_resume(ctx, a, None, stop, answers, tx).await
}

/// Like [`run`], with the operator's answers routed to the worker (an
/// agent takes them as its next message).
pub async fn run_with_answers(
    ctx: Context,
    a: Assignment,
    stop: watch::Receiver<Option<Stop>>,
    answers: Answers,
    tx: mpsc::UnboundedSender<Report>,
) {
    run_or_resume(ctx, a, None, stop, answers, tx).await
}

/// Like [`run`], for an attempt whose worker an earlier sidecar process
/// started: follows that worker to its end instead of starting one.
pub async fn resume(
    ctx: Context,
    a: Assignment,
    adopted: Adopted,
    stop: watch::Receiver<Option<Stop>>,
    tx: mpsc::UnboundedSender<Report>,
) {
    let (_keep, answers) = mpsc::unbounded_channel();
    run_or_resume(ctx, a, Some(adopted), stop, answers, tx).await
}

async fn run_or_resume(
    ctx: Context,
    a: Assignment,
    adopted: Option<Adopted>,
    mut stop: watch::Receiver<Option<Stop>>,
    mut answers: Answers,
    tx: mpsc::UnboundedSender<Report>,
) {
    let sink = Sink::new(tx);
    let outcome = match attempt(&ctx, &a, adopted, (&mut stop, &mut answers), &sink).await {
        Ok(Some(outcome)) => outcome,
        Ok(None) => return, // silent stop
        Err(failure) => AttemptOutcome::failed(a.attempt.clone(), failure),
    };
    sink.journaled(Event::Result(outcome));
    // While the sidecar waits for its next Assign, not on that Assign's path.
    ctx.standby.refill(&ctx.supervisor);
}

/// Prepare, run, then verify and commit; Ok(None): stopped silently,
/// report nothing.
async fn attempt(
    ctx: &Context,
    a: &Assignment,
    adopted: Option<Adopted>,
    (stop, answers): (&mut watch::Receiver<Option<Stop>>, &mut Answers),
    sink: &Sink,
) -> Result<Option<AttemptOutcome>, Failure> {
    let mut prepared = prepare::prepare(ctx, a, adopted, sink).await?;
    let ran = match &a.agent {
        Some(cfg) => {
            let run = agent::AgentRun { ctx, a, cfg, prepared: &mut prepared };
            Ok(agent::run(run, (stop, answers), sink).await)
        }
        None => worker::run(ctx, a, &mut prepared, adopted, stop, sink).await,
    };
    let outcome = match ran {
        // A silent stop may leave the worker running, to be re-adopted.
        Ok(None) => return Ok(None),
        Ok(Some(ran)) => Ok(Some(finish::finish(ctx, a, &prepared, ran).await)),
        Err(e) => Err(e.into()),
    };
    redact_log(ctx, &prepared.log_path).await;
    outcome
}

/// Once the attempt is over its log on this disk holds no secret value:
/// the worktree and its `.swarm/logs/` pass to the next task's worker. A
/// log that cannot be redacted is removed.
async fn redact_log(ctx: &Context, log: &std::path::Path) {
    let Some(redactor) = ctx.redactor.get().filter(|r| !r.is_empty()).cloned() else { return };
    let path = log.to_path_buf();
    let redacted = tokio::task::spawn_blocking(move || redactor.redact_file(&path)).await;
    let error = match redacted {
        Ok(Ok(_)) => return,
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    tracing::warn!(log = %log.display(), %error, "cannot redact the attempt's log; removing it");
    if let Err(e) = std::fs::remove_file(log)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::error!(log = %log.display(), error = %e, "cannot remove the attempt's unredacted log");
    }
}
