//! The run step for an agent: runs the [`driver`](crate::agent::driver) and maps
//! how it ended to the same outcome any worker produces (success goes on to
//! the usual verify and commit), with the agent's usage, session id and,
//! for a usage limit, a WIP commit and the reset time.

use std::path::Path;

use swarm_core::Outcome;
use swarm_core::names::truncate;
use swarm_proto::limits::MAX_TEXT;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, watch};

use super::finish::{self, Next, Ran};
use super::prepare::{Prepared, own_worktree};
use crate::agent::driver::{self, Channels, End, Ending, Ran as Driven, Setup};
use crate::agent::{AgentConfig, session};
use crate::assignment::{Assignment, Context};
use crate::children::{self, Children};
use crate::outcome::{AttemptOutcome, Failure, UsageLimit};
use crate::report::{Answers, Event, Report, Sink, Stop};
use crate::status::WorkerStatus;
use crate::worker_mcp::{self, ToolServer};

/// An agent attempt's setting.
pub(super) struct AgentRun<'a> {
    pub ctx: &'a Context,
    pub a: &'a Assignment,
    pub cfg: &'a AgentConfig,
    pub prepared: &'a mut Prepared,
}

/// Runs the agent to its end; None: stopped silently, report nothing.
pub(super) async fn run(
    run: AgentRun<'_>,
    (stop, answers): (&mut watch::Receiver<Option<Stop>>, &mut Answers),
    sink: &Sink,
) -> Option<Ran> {
    let AgentRun { ctx, a, cfg, prepared: p } = run;
    let mut tools = serve_tools(ctx, a, p, sink);
    let children = tools.as_ref().map(|_| {
        Children::new(
            children::Setting {
                link: ctx.link.clone(),
                attempt: a.attempt.clone(),
                repo: ctx.repo.clone(),
                worktree: p.worktree.clone(),
                remote: ctx.remote.clone(),
                tracker: ctx.tracker.clone(),
            },
            a.spawned_child.clone(),
        )
    });
    let cfg = AgentConfig { mcp: tools.as_ref().map(|t| t.stdio.clone()), ..cfg.clone() };
    let setup = Setup {
        cfg: &cfg,
        owned_globs: &a.owned_globs,
        worktree: &p.worktree,
        launch: p.launch.clone(),
        base_commit: &a.base_commit,
        branch: &a.branch,
        task_text: &a.task_text,
        attempt: a.attempt.clone(),
        idle: a.idle_timeout.or(ctx.default_idle_timeout),
        stop_grace: ctx.stop_grace,
        status_file: p.files.status.clone(),
        link: ctx.link.clone(),
        children: children.clone(),
    };
    let span = tracing::info_span!("run", agent = %cfg.kind);
    let oom_before = p.launch.oom_kills();
    let channels = Channels {
        stop,
        answers,
        tx: &sink.tx,
        log: &mut p.log,
        tools: tools.as_mut().map(|t| &mut t.calls),
    };
    let ran = tracing::Instrument::instrument(driver::run(&setup, channels), span).await;
    p.launch.kill_leftovers();
    drop(tools);
    let _ = p.log.flush().await;
    let blocked = std::fs::read(&p.files.status)
        .ok()
        .and_then(|b| crate::status::parse(&b).ok())
        .filter(|s| s.status == WorkerStatus::Blocked)
        .map(|s| s.message);
    let outcome = common(a, &ran);
    let memory_limit = p.launch.memory_limit_hit(oom_before);
    let mut ran = ended(a, ran.end, blocked, outcome.clone())?;
    // The OOM killer's signal, and it killed in the attempt's cgroup.
    if let (Outcome::Signaled, Some(9), Some(limit)) = (ran.outcome.outcome, ran.outcome.signal, memory_limit)
    {
        ran.outcome.error = super::worker::memory_limit_reason(limit);
    }
    match children {
        Some(children) => with_children(a, &children, ran, outcome, stop).await,
        None => Some(ran),
    }
}

/// How often a delivery waiting on a STALLED child asks again.
const STALLED_CHILD_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// A result delivered while the agent's spawned child has not been merged
/// into the worktree waits for the child and takes its work first: the
/// task's result is the agent's work and its children's together. A child
/// that fails or is cancelled fails the attempt (the agent's work is kept as a
/// WIP commit, and a retry of the task spawning the same tasks picks the
/// child up again).
async fn with_children(
    a: &Assignment,
    children: &Children,
    ran: Ran,
    outcome: AttemptOutcome,
    stop: &mut watch::Receiver<Option<Stop>>,
) -> Option<Ran> {
    let Some(child) = children.unmerged() else { return Some(ran) };
    if !matches!(ran.next, Next::Deliver { .. }) {
        return Some(ran);
    }
    tracing::info!(%child, "the agent ended before taking its children's work; waiting for them");
    loop {
        tokio::select! {
            waited = children.wait(children::MAX_WAIT) => match waited {
                Ok(w) if w.merged => return Some(ran),
                Ok(w) if w.result["done"] == serde_json::json!(false) => continue,
                // Its tasks wait on the operator, who will answer: so does
                // this attempt (it is the operator's wait, not the agent's).
                Ok(w) if w.result["state"] == serde_json::json!("STALLED") => {
                    tokio::time::sleep(STALLED_CHILD_POLL).await;
                    continue;
                }
                Ok(w) => {
                    let why = format!(
                        "the agent finished, but its sub-swarm {child} is {}: {}",
                        w.result["state"].as_str().unwrap_or_default(),
                        w.result["next"].as_str().unwrap_or_default()
                    );
                    return Some(unfinished_children(a, ran.outcome, why));
                }
                Err(e) => {
                    let why = format!("the agent finished, but its sub-swarm {child}'s work was not merged: {e}");
                    return Some(unfinished_children(a, ran.outcome, why));
                }
            },
            changed = stop.changed() => {
                let why = if changed.is_ok() { *stop.borrow_and_update() } else { Some(Stop::Shutdown) };
                if let Some(why) = why {
                    return ended(a, End::Stopped(why), None, outcome);
                }
            }
        }
    }
}

fn unfinished_children(a: &Assignment, mut o: AttemptOutcome, why: String) -> Ran {
    o.outcome = Outcome::Error;
    o.error = bounded(&why);
    Ran {
        next: Next::Checkpoint { message: wip_message(a, "sub-swarm unfinished", &o.session_id) },
        outcome: o,
    }
}

/// swarm's tools for the agent, on a socket in the attempt's private
/// directory. A reviewer has none (it only reads and gives a verdict); an
/// agent whose server cannot start runs without it, and the event log says so.
fn serve_tools(ctx: &Context, a: &Assignment, p: &Prepared, sink: &Sink) -> Option<ToolServer> {
    if a.review.is_some() {
        return None;
    }
    let owner = ctx.worker_user.as_ref().map(|u| &u.ids);
    match worker_mcp::start(&p.scratch.tmp, &ctx.supervisor, owner) {
        Ok(server) => Some(server),
        Err(e) => {
            tracing::warn!(error = %e, "cannot serve swarm's tools to the agent");
            sink.journaled(Event::note(
                &a.attempt,
                format!("swarm's tools are not served to the agent: {e}"),
            ));
            None
        }
    }
}

/// The outcome for how the run ended, and what is left to keep; `blocked`
/// is the status file's message when the agent declared itself blocked
/// (as exit 3 would).
fn ended(a: &Assignment, end: End, blocked: Option<String>, mut o: AttemptOutcome) -> Option<Ran> {
    let next = match end {
        End::Finished(t) if t.ok => match blocked {
            Some(message) => {
                o.outcome = Outcome::Blocked;
                o.error = if message.is_empty() { "agent is blocked".into() } else { message };
                Next::Report
            }
            // A reviewer's verdict is about the commit it was shown: no commit.
            None if a.review.is_some() => {
                o.outcome = Outcome::Success;
                Next::Review { said: t.text }
            }
            None => {
                o.outcome = Outcome::Success;
                Next::Deliver {
                    message: format!("{}\n\nSwarm-Attempt: {}", a.title.trim(), a.label()),
                    summary: (!t.text.trim().is_empty()).then(|| bounded(&t.text)),
                }
            }
        },
        End::Finished(t) => {
            o.outcome = Outcome::Error;
            o.error = bounded(if t.text.is_empty() { "the agent's turn ended in an error" } else { &t.text });
            Next::Report
        }
        End::RateLimited(r) => {
            let label = format!("usage limit ({})", if r.kind.is_empty() { "unknown kind" } else { &r.kind });
            o.outcome = Outcome::RateLimited;
            o.summary = format!("agent hit its {label}; work so far is in the WIP commit");
            o.usage_limit = Some(UsageLimit { reset_unix_ms: r.reset_unix_ms, kind: r.kind });
            Next::Checkpoint { message: wip_message(a, &label, &o.session_id) }
        }
        End::Crashed(exit) => {
            // A signal is SIGNALED, as for any worker; any exit code is an error.
            o.outcome = if exit.signal.is_some() { Outcome::Signaled } else { Outcome::Error };
            o.error = match (exit.code, exit.signal) {
                (_, Some(sig)) => format!("agent killed by signal {sig} before its result"),
                (Some(c), None) => format!("agent exited with code {c} before its result"),
                (None, None) => "agent exited before its result".into(),
            };
            Next::Report
        }
        End::Stopped(Stop::Silent) => return None,
        End::Stopped(Stop::Cancel { .. }) => {
            o.outcome = Outcome::Cancelled;
            o.error = "cancelled by the controller".into();
            Next::Report
        }
        End::Stopped(Stop::Checkpoint { .. }) => {
            o.outcome = Outcome::Checkpoint;
            o.summary =
                "stopped by the controller; the agent's work is checkpointed and its session can be resumed"
                    .into();
            Next::Checkpoint { message: wip_message(a, "stopped by the controller", &o.session_id) }
        }
        End::Stopped(Stop::Shutdown) => {
            o.outcome = Outcome::Checkpoint;
            o.summary =
                "the sidecar shut down; the agent's work is checkpointed and its session can be resumed"
                    .into();
            Next::Checkpoint { message: wip_message(a, "sidecar shutdown", &o.session_id) }
        }
        End::Idle(d) => {
            o.outcome = Outcome::Stalled;
            o.error =
                format!("the agent printed nothing for {} s while not waiting on the operator", d.as_secs());
            Next::Report
        }
        End::Failed(e) => {
            o.exit_code = -1;
            o.outcome = Outcome::Error;
            o.error = e;
            Next::Report
        }
        // The agent's own call: its work is kept as a WIP commit and the
        // session resumes in the next attempt, as for any checkpoint.
        End::ByTool(Ending::Checkpoint { summary, next_action }) => {
            o.outcome = Outcome::Checkpoint;
            o.summary = bounded(&format!("checkpointed by the agent: {summary}\nNext: {next_action}"));
            Next::Checkpoint { message: wip_message(a, "checkpointed by the agent", &o.session_id) }
        }
        End::ByTool(Ending::Escalate { category, detail }) => {
            o.outcome = Outcome::Escalation;
            o.category = category;
            o.error = bounded(&detail);
            Next::Checkpoint { message: wip_message(a, "escalated by the agent", &o.session_id) }
        }
    };
    Some(Ran { outcome: o, next })
}

/// What every agent outcome carries: the last exit, usage, session, output.
fn common(a: &Assignment, ran: &Driven) -> AttemptOutcome {
    let mut o = AttemptOutcome::new(a.attempt.clone(), Outcome::Error);
    if let Some(exit) = ran.exit {
        o.exit_code = exit.wire_code();
        o.signal = exit.signal;
    }
    o.usage = Some(ran.usage);
    o.session_id = ran.session_id.clone();
    o.log_tail = ran.tail.clone();
    o.restarts = ran.processes.saturating_sub(1);
    o
}

fn bounded(s: &str) -> String {
    truncate(s.trim(), MAX_TEXT).to_string()
}

/// The message of the WIP commit that keeps an agent's work, so that the
/// session's work survives and a later attempt can resume it.
fn wip_message(a: &Assignment, why: &str, session_id: &str) -> String {
    let label = a.label();
    let mut message = format!("WIP: {why}, {label}\n\n");
    if !session_id.is_empty() {
        message.push_str(&format!("Agent-Session: {session_id}\n"));
    }
    message.push_str(&format!("Swarm-Attempt: {label}\n"));
    message
}

/// For a restarted sidecar holding an agent attempt whose agent died with
/// the old process (agents are not supervised, see `agent::process`): keep
/// the work as a WIP commit and report CHECKPOINT with the session id, so
/// that the next attempt resumes the conversation instead of losing it.
pub async fn checkpoint_lost(ctx: Context, a: Assignment, tx: mpsc::UnboundedSender<Report>) {
    let sink = Sink::new(tx);
    let outcome = match own_worktree(&ctx).await {
        Ok(wt) => checkpoint(&ctx, &a, &wt).await,
        Err(e) => AttemptOutcome::failed(a.attempt.clone(), Failure::Infra(e)),
    };
    sink.journaled(Event::Result(outcome));
}

async fn checkpoint(ctx: &Context, a: &Assignment, wt: &Path) -> AttemptOutcome {
    let kind = a.agent.as_ref().map(|c| c.kind.as_str()).unwrap_or_default();
    let session_id = session::read(wt).filter(|r| r.kind == kind).map(|r| r.session_id).unwrap_or_default();
    let message = wip_message(a, "sidecar restarted", &session_id);
    let outcome = AttemptOutcome {
        session_id,
        summary: "the sidecar restarted and its agent process was lost with it; the work is checkpointed \
                  and the agent session can be resumed"
            .into(),
        ..AttemptOutcome::new(a.attempt.clone(), Outcome::Checkpoint)
    };
    match finish::commit(ctx, a, wt, message).await {
        Ok(c) => {
            session::note_commit(wt, &c.commit);
            tracing::info!(session = %outcome.session_id, commit = %c.commit, "checkpointed the lost agent's work");
            AttemptOutcome { commit: c.commit, files_changed: c.files_changed, ..outcome }
        }
        Err(e) => outcome.infra_failed(e),
    }
}
