//! The run step for a command worker: start it under its supervisor (or
//! re-adopt the one an earlier sidecar process started), relay its status
//! file and output, restart it when idle, stop it when asked, and say how
//! it ended and what is left to keep.

use std::collections::VecDeque;
use std::time::Duration;

use swarm_core::Outcome;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::finish::{Next, Ran};
use super::prepare::Prepared;
use crate::assignment::{Adopted, Assignment, Context};
use crate::outcome::{AttemptOutcome, InfraFailure};
use crate::report::{Event, Progress, Sink, StatusKind, Stop};
use crate::runner::{ExitInfo, SpawnSpec};
use crate::status::{StatusEvent, StatusFile, StatusWatcher};
use crate::supervisor::Supervised;

/// Lines of output kept for progress and results.
const LOG_TAIL: usize = 20;
/// Lines of output sent with each progress report.
const PROGRESS_TAIL: usize = 5;
/// At most one progress report per this interval.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How often the status file is looked at.
const STATUS_POLL: Duration = Duration::from_millis(200);

/// How one worker process ended.
enum End {
    Exited(ExitInfo),
    Idle,
    Stopped(Stop),
}

/// What the worker reported while it ran, kept across its restarts.
struct Relay<'a> {
    a: &'a Assignment,
    sink: &'a Sink,
    watcher: StatusWatcher,
    tail: VecDeque<String>,
    last_progress: Option<Progress>,
    progress_dirty: bool,
}

/// Runs the worker to its end; None: stopped silently, report nothing.
pub(super) async fn run(
    ctx: &Context,
    a: &Assignment,
    p: &mut Prepared,
    adopted: Option<Adopted>,
    stop: &mut watch::Receiver<Option<Stop>>,
    sink: &Sink,
) -> Result<Option<Ran>, InfraFailure> {
    let label = a.label();
    let idle = a.idle_timeout.or(ctx.default_idle_timeout);
    let spec = SpawnSpec {
        argv: a.command.clone(),
        cwd: p.worktree.clone(),
        env: p.launch.env.clone(),
        confinement: p.launch.confinement.clone(),
    };
    let mut relay = Relay::new(a, sink, &p.files.status);
    // What the attempt's cgroup counted before: a kill past it is the worker's.
    let oom_before = p.launch.oom_kills();
    let mut restarts = adopted.map(|ad| ad.restarts).unwrap_or(0);
    let mut adopted = adopted.map(|ad| Supervised::adopt(ad.pid, &p.files.exit, &p.log_path));

    // Lives (and is timed) while the worker runs, restarts included.
    let run_span = tracing::info_span!("run", command = ?a.command);
    let (exit, stopped, spawn_error) = loop {
        let mut worker = match adopted.take() {
            Some(w) => {
                tracing::info!(parent: &run_span, attempt = %label, supervisor = w.pid(), restarts, "re-adopted the worker of an earlier sidecar process");
                w
            }
            None => {
                let w = start(ctx, &spec, p).await?;
                tracing::info!(parent: &run_span, attempt = %label, supervisor = w.pid(), restarts, "worker started");
                sink.pid(w.pid(), restarts);
                let sandbox = p.launch.report.clone();
                sink.journaled(Event::Started {
                    attempt: a.attempt.clone(),
                    pid: w.pid(),
                    restarts,
                    sandbox,
                });
                w
            }
        };
        let end = relay.watch(&mut worker, stop, idle).await;
        let (s, grace) = match end {
            End::Exited(exit) => {
                p.launch.kill_leftovers();
                relay.drain(&mut worker).await;
                break (exit, None, worker.spawn_error().map(str::to_string));
            }
            End::Stopped(s @ (Stop::Cancel { grace } | Stop::Checkpoint { grace })) => (s, grace),
            End::Stopped(s) => (s, ctx.stop_grace),
            End::Idle => {
                let idle_secs = idle.map(|d| d.as_secs()).unwrap_or_default();
                tracing::warn!(attempt = %label, restarts, idle_secs, "worker idle; stopping it");
                relay.stop_idle(&mut worker, ctx.stop_grace, &mut p.log, idle_secs).await;
                p.launch.kill_leftovers();
                if restarts >= a.max_restarts {
                    let error = format!(
                        "no output and no status change for {idle_secs} s, {restarts} restart(s) used"
                    );
                    let log_tail = relay.tail.iter().cloned().collect();
                    let stalled = AttemptOutcome::new(a.attempt.clone(), Outcome::Stalled);
                    return Ok(Some(Ran::report(AttemptOutcome { restarts, log_tail, error, ..stalled })));
                }
                restarts += 1;
                relay.watcher.reset_file();
                continue;
            }
        };
        let exit = worker.stop(grace).await;
        p.launch.kill_leftovers();
        relay.drain(&mut worker).await;
        break (exit, Some(s), worker.spawn_error().map(str::to_string));
    };
    let _ = p.log.flush().await;
    // Twice: an invalid file is only reported when a second look sees it unchanged.
    relay.poll_twice();
    tracing::info!(parent: &run_span, exit = exit.wire_code(), signal = ?exit.signal, "worker exited");
    drop(run_span);
    let outcome = AttemptOutcome {
        exit_code: exit.wire_code(),
        signal: exit.signal,
        restarts,
        log_tail: relay.tail.iter().cloned().collect(),
        ..AttemptOutcome::new(a.attempt.clone(), Outcome::Error)
    };
    if let Some(error) = spawn_error {
        return Ok(Some(Ran::report(AttemptOutcome { exit_code: -1, error, ..outcome })));
    }
    let memory_limit = p.launch.memory_limit_hit(oom_before);
    let mut ran = ended(a, Exit { info: exit, memory_limit }, stopped, relay.watcher.current(), outcome);
    if let Some(r) = ran.as_mut().filter(|r| r.outcome.outcome == Outcome::Error) {
        r.outcome.error.push_str(&denied(p, &relay.tail));
    }
    Ok(ran)
}

/// How much of the worker's log is read for what the sandbox denied it.
const DENIALS_SCAN: u64 = 64 * 1024;

/// What the sandbox denied the worker, as its log (or, unreadable, its
/// tail) shows it, for the failure's reason.
fn denied(p: &Prepared, tail: &VecDeque<String>) -> String {
    let lines: Vec<String> = match crate::worker_files::tail(&p.log_path, DENIALS_SCAN) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect(),
        Err(_) => tail.iter().cloned().collect(),
    };
    let launch = &p.launch;
    crate::sandbox::denials::explain(&lines, launch.confinement.as_ref(), &launch.report, &launch.env)
}

/// How the worker ended, as [`ended`] maps it.
#[derive(Debug, Clone, Copy)]
struct Exit {
    info: ExitInfo,
    /// Set: the cgroup's OOM killer killed in the attempt (this limit).
    memory_limit: Option<u64>,
}

/// Starts the worker under a supervisor (the one kept on standby, if any).
async fn start(ctx: &Context, spec: &SpawnSpec, p: &Prepared) -> Result<Supervised, InfraFailure> {
    let started = ctx.standby.start(&ctx.supervisor, spec, &p.files.exit, &p.log_path).await;
    started.map_err(|e| InfraFailure::Supervisor(e.to_string()))
}

/// Maps how the worker ended (with its last status) to the outcome and
/// what is left to keep; None: stopped silently.
fn ended(
    a: &Assignment,
    exit: Exit,
    stopped: Option<Stop>,
    status: Option<&StatusFile>,
    mut o: AttemptOutcome,
) -> Option<Ran> {
    match stopped {
        Some(Stop::Silent) => return None,
        Some(Stop::Cancel { .. }) => {
            o.outcome = Outcome::Cancelled;
            o.error = "cancelled by the controller".into();
            return Some(Ran::report(o));
        }
        Some(Stop::Shutdown | Stop::Checkpoint { .. }) | None => {}
    }
    // Stopped to be resumed later: whatever the worker left is its WIP.
    o.outcome = if matches!(stopped, Some(Stop::Checkpoint { .. })) {
        Outcome::Checkpoint
    } else {
        exit.info.outcome()
    };
    let next = next_step(a, exit, status, &mut o);
    Some(Ran { outcome: o, next })
}

/// What is left to do after the worker's exit, with the outcome's texts.
fn next_step(a: &Assignment, exit: Exit, status: Option<&StatusFile>, o: &mut AttemptOutcome) -> Next {
    let status_message = status.map(|s| s.message.clone()).unwrap_or_default();
    let label = a.label();
    match o.outcome {
        Outcome::Success if a.review.is_some() => Next::Review { said: status_message },
        Outcome::Success => Next::Deliver {
            message: format!("{}\n\nSwarm-Attempt: {label}", a.title.trim()),
            summary: (!status_message.is_empty()).then_some(status_message),
        },
        Outcome::Checkpoint => {
            let mut message = format!("WIP: checkpoint {label}\n\n");
            if let Some(p) = status.and_then(|s| s.progress.as_ref()) {
                message.push_str(&format!("Progress: {}%\nStep: {}\n", p.percent, p.step));
                if !p.files_modified.is_empty() {
                    message.push_str(&format!("Files: {}\n", p.files_modified.join(", ")));
                }
            }
            if !status_message.is_empty() {
                message.push_str(&format!("Status: {status_message}\n"));
            }
            message.push_str(&format!("\nSwarm-Attempt: {label}\n"));
            o.summary = status_message;
            Next::Checkpoint { message }
        }
        Outcome::Blocked => {
            o.error = if status_message.is_empty() { "worker is blocked".into() } else { status_message };
            Next::Report
        }
        Outcome::Escalation => {
            let q = status.and_then(|s| s.question.clone());
            o.category = q.as_ref().map(|q| q.category.clone()).unwrap_or_default();
            o.error = q.map(|q| q.text).unwrap_or_else(|| status_message.clone());
            o.summary = status_message;
            Next::Report
        }
        Outcome::Signaled => {
            o.error = match (exit.info.signal, exit.memory_limit) {
                // The OOM killer's signal, and it killed in the attempt's cgroup.
                (Some(9), Some(limit)) => memory_limit_reason(limit),
                (signal, _) => format!("worker killed by signal {}", signal.unwrap_or_default()),
            };
            Next::Report
        }
        Outcome::Interrupted => {
            o.error = "worker interrupted (exit 130)".into();
            Next::Report
        }
        _ => {
            o.error = match exit.info.code {
                Some(c) => format!("worker exited with code {c}"),
                None => "worker failed".into(),
            };
            Next::Report
        }
    }
}

/// Why an attempt failed when its cgroup's OOM killer ended the worker:
/// `memory limit (8 GiB)`.
pub(super) fn memory_limit_reason(limit: u64) -> String {
    format!("memory limit ({})", swarm_core::plan::limits::size_text(limit))
}

impl<'a> Relay<'a> {
    fn new(a: &'a Assignment, sink: &'a Sink, status_file: &std::path::Path) -> Relay<'a> {
        Relay {
            a,
            sink,
            watcher: StatusWatcher::new(status_file),
            tail: VecDeque::new(),
            last_progress: None,
            progress_dirty: false,
        }
    }

    /// Follows one worker process until it exits, idles or is stopped.
    async fn watch(
        &mut self,
        worker: &mut Supervised,
        stop: &mut watch::Receiver<Option<Stop>>,
        idle: Option<Duration>,
    ) -> End {
        let mut last_activity = Instant::now();
        self.progress_dirty = false;
        let mut progress_sent = Instant::now() - PROGRESS_EVERY;
        let mut tick = tokio::time::interval(STATUS_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                exit = worker.process.wait() => return End::Exited(exit),
                Some(line) = worker.lines.recv() => {
                    last_activity = Instant::now();
                    self.push_tail(line);
                    self.progress_dirty = true;
                }
                changed = stop.changed() => {
                    let s = if changed.is_ok() { *stop.borrow_and_update() } else { Some(Stop::Shutdown) };
                    if let Some(s) = s {
                        return End::Stopped(s);
                    }
                }
                _ = tick.tick() => {
                    for ev in self.watcher.poll() {
                        last_activity = Instant::now();
                        self.relay(ev);
                    }
                    if self.progress_dirty && progress_sent.elapsed() >= PROGRESS_EVERY {
                        self.progress_dirty = false;
                        progress_sent = Instant::now();
                        self.send_progress();
                    }
                    if let Some(idle) = idle && last_activity.elapsed() >= idle {
                        return End::Idle;
                    }
                }
            }
        }
    }

    fn send_progress(&self) {
        let mut p = self.last_progress.clone().unwrap_or_else(|| Progress::new(self.a.attempt.clone()));
        p.log_tail = self.tail.iter().rev().take(PROGRESS_TAIL).rev().cloned().collect();
        self.sink.progress(p);
    }

    fn poll_twice(&mut self) {
        let events: Vec<_> = self.watcher.poll().into_iter().chain(self.watcher.poll()).collect();
        for ev in events {
            self.relay(ev);
        }
    }

    fn relay(&mut self, ev: StatusEvent) {
        let attempt = self.a.attempt.clone();
        match ev {
            StatusEvent::Status { status, message } => {
                self.sink.journaled(Event::Status { attempt, status: StatusKind::Worker(status), message })
            }
            StatusEvent::Invalid { message } => {
                self.sink.journaled(Event::Status { attempt, status: StatusKind::Invalid, message })
            }
            StatusEvent::Progress(p) => {
                self.last_progress = Some(Progress {
                    percent: p.percent,
                    step: p.step,
                    files_modified: p.files_modified,
                    tests_passing: p.tests_passing,
                    tests_total: p.tests_total,
                    ..Progress::new(attempt)
                });
                self.progress_dirty = true;
            }
            StatusEvent::Question(q) => self.sink.journaled(Event::Question {
                attempt,
                id: q.id,
                text: q.text,
                category: q.category,
                options: q.options,
            }),
        }
    }

    /// Stops a worker that went idle, noting it in the attempt's log.
    async fn stop_idle(
        &mut self,
        worker: &mut Supervised,
        grace: Duration,
        log: &mut tokio::fs::File,
        idle_secs: u64,
    ) {
        worker.stop(grace).await;
        self.drain(worker).await;
        // After the drain, so that the next worker's reader skips it.
        let _ = log
            .write_all(format!("[swarm-sidecar] idle for {idle_secs} s; stopped worker\n").as_bytes())
            .await;
    }

    async fn drain(&mut self, worker: &mut Supervised) {
        for line in worker.drain_lines(Duration::from_millis(500)).await {
            self.push_tail(line);
        }
    }

    fn push_tail(&mut self, line: String) {
        self.tail.push_back(line);
        while self.tail.len() > LOG_TAIL {
            self.tail.pop_front();
        }
    }
}
