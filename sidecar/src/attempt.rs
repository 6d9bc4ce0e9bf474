//! One attempt, from Assign to AttemptResult: move the worktree, write
//! `.swarm/task.md`, run the worker (restarting it when idle), relay its
//! status file and output, then verify, commit and report.
//!
//! The driver knows nothing about the connection: it hands every report to
//! a channel; the session journals and sends them.

pub(crate) use crate::launch::Launch;
use crate::launch::Scratch;
use crate::worker_files;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use swarm_core::Outcome;
use swarm_core::names::{check_branch, check_commit, check_id};
use swarm_proto::convert::{AttemptRef, FieldError, required_attempt};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::agent::AgentConfig;
use crate::runner::{ExitInfo, SpawnSpec};
use crate::status::{StatusEvent, StatusWatcher, WorkerStatus};
use crate::supervisor::Supervised;
use crate::verify::{self, Tier};
use crate::worktree;

/// Lines of output kept for progress and results.
const LOG_TAIL: usize = 20;
/// Lines of output sent with each progress report.
const PROGRESS_TAIL: usize = 5;
/// At most one progress report per this interval.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How often the status file is looked at.
const STATUS_POLL: Duration = Duration::from_millis(200);

/// A validated Assign.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub attempt: AttemptRef,
    pub base_commit: String,
    pub branch: String,
    pub title: String,
    pub task_text: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub verify: Vec<Tier>,
    pub idle_timeout: Option<Duration>,
    pub max_restarts: u32,
    pub traceparent: String,
    pub setup: Vec<String>,
    pub setup_every_attempt: bool,
    /// Set: a coding agent is the worker (and `command` is empty).
    pub agent: Option<AgentConfig>,
    pub owned_globs: Vec<String>,
    /// Set: a reviewer attempt (see [`crate::review`]), with the reviewed
    /// task's own base for the diff in its task text.
    pub review: Option<String>,
    /// How the worker is confined (see [`crate::sandbox`]).
    pub sandbox: crate::sandbox::Settings,
    /// Where to read the worker's secrets (see [`crate::secrets`]).
    pub secrets: Vec<(String, swarm_core::plan::SecretSource)>,
    /// The message as received, kept for the journal and for equality.
    pub wire: v1::Assign,
}

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
            verify: a.verify.iter().map(Tier::from).collect(),
            idle_timeout: (a.idle_timeout_secs > 0)
                .then(|| Duration::from_secs(u64::from(a.idle_timeout_secs))),
            max_restarts: a.max_restarts,
            traceparent: a.traceparent.clone(),
            setup: a.setup.clone(),
            setup_every_attempt: a.setup_every_attempt,
            agent,
            owned_globs: a.owned_globs.clone(),
            wire: a.clone(),
        })
    }
}

impl Assignment {
    pub fn wire_ref(&self) -> v1::AttemptRef {
        v1::AttemptRef::from(&self.attempt)
    }

    /// `swarm/task#n`.
    pub fn label(&self) -> String {
        self.attempt.task.attempt(self.attempt.number).to_string()
    }
}

/// What the driver hands to the session.
// A handful per attempt pass through the channel, and nearly all are
// `Journaled`: boxing that variant would add an allocation to each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A state-changing report: journaled, then sent with a sequence number.
    Journaled(Body),
    /// Best effort, seq 0, not journaled.
    Progress(v1::Progress),
    /// The worker's supervisor (also its process group) and the idle
    /// restarts before it, for the journal: a restarted sidecar re-adopts it.
    Pid { pid: u32, restarts: u32 },
}

/// Why the driver was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The controller's Cancel: stop with this grace, report CANCELLED.
    Cancel { grace: Duration },
    /// The controller's Cancel with `checkpoint` (a budget reached, a
    /// swarm paused with `--stop`): stop with this grace, keep the work as
    /// a WIP commit and report CHECKPOINT, so a later attempt resumes it.
    Checkpoint { grace: Duration },
    /// The controller no longer considers the attempt current: stop, report nothing.
    Silent,
    /// The sidecar is shutting down: stop, report the exit as it maps.
    Shutdown,
}

/// What the driver needs besides the assignment.
#[derive(Debug, Clone)]
pub struct Context {
    pub repo: PathBuf,
    pub worker_id: String,
    /// Grace between signals when the sidecar itself stops a worker.
    pub stop_grace: Duration,
    /// Used when the Assign has no idle timeout.
    pub default_idle_timeout: Option<Duration>,
    pub remote: Option<crate::remote::Remote>,
    /// The executable run as `<exe> __supervise ...` to supervise workers
    /// (the sidecar's own binary; see [`crate::supervisor`]).
    pub supervisor: PathBuf,
    /// What changed in the worktree since its last checkout or commit,
    /// kept across attempts (see [`crate::changes`]).
    pub tracker: crate::changes::SharedTracker,
    /// A supervisor started ahead of the next worker, kept across attempts
    /// (see [`crate::supervisor::StandbySlot`]).
    pub standby: crate::supervisor::StandbySlot,
    /// What this sidecar's kernel enforces of the worker sandbox (probed
    /// once at start).
    pub sandbox: crate::sandbox::Capability,
    /// Set once the attempt's secrets are read: the session redacts their
    /// values from every report of the attempt.
    pub redactor: std::sync::Arc<std::sync::OnceLock<crate::secrets::Redactor>>,
}

/// A worker left running (or finished) by an earlier sidecar process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adopted {
    /// The supervisor's pid, from the journal.
    pub pid: u32,
    pub restarts: u32,
}

/// How many times a failing infrastructure step is tried.
const INFRA_TRIES: u32 = 3;

/// Why an attempt ended early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The task's own fault (its setup command, its worker).
    Task(String),
    /// The sidecar's machinery failed even after its repairs.
    Infra(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Task(s)
    }
}

/// Paths inside the worktree.
#[derive(Debug, Clone)]
pub struct SwarmFiles {
    pub dir: PathBuf,
    pub task: PathBuf,
    pub status: PathBuf,
    pub answers: PathBuf,
    /// The operator's messages, one file each.
    pub messages: PathBuf,
    pub logs: PathBuf,
    /// Where the supervisor records the worker's exit.
    pub exit: PathBuf,
}

impl SwarmFiles {
    pub fn new(worktree: &Path) -> Self {
        let dir = worktree.join(worktree::SWARM_DIR);
        SwarmFiles {
            task: dir.join("task.md"),
            status: dir.join("status.json"),
            answers: dir.join("answers"),
            messages: dir.join("messages"),
            logs: dir.join("logs"),
            exit: dir.join("worker-exit.json"),
            dir,
        }
    }
}

impl SwarmFiles {
    /// The attempt's worker log: `<swarm>.<task>-<n>.log`, with the `/` of a
    /// nested swarm id written as `.` (no id component has one), so swarms
    /// sharing a task id in one worktree keep their logs apart.
    pub fn log_of(&self, attempt: &AttemptRef) -> PathBuf {
        let swarm = attempt.task.swarm.as_str().replace('/', ".");
        self.logs.join(format!("{swarm}.{}-{}.log", attempt.task.task, attempt.number))
    }

    /// Where a sidecar before the swarm id was in the name wrote the log.
    pub fn unqualified_log_of(&self, attempt: &AttemptRef) -> PathBuf {
        self.logs.join(format!("{}-{}.log", attempt.task.task, attempt.number))
    }
}

/// Appends an answer to `task.md` under "Answers" and writes `answers/<id>.md`.
pub fn record_answer(worktree: &Path, question_id: &str, text: &str) -> std::io::Result<()> {
    let files = SwarmFiles::new(worktree);
    record_note(&files, &files.answers, "## Answers", question_id, text)
}

/// Appends an operator's message to `task.md` under "Messages from the
/// operator" (as the controller renders earlier ones) and writes
/// `messages/<id>.md`, where a worker that watches its files finds it.
pub fn record_message(worktree: &Path, message_id: &str, text: &str) -> std::io::Result<()> {
    let files = SwarmFiles::new(worktree);
    record_note(&files, &files.messages, "## Messages from the operator", message_id, text)
}

fn record_note(files: &SwarmFiles, dir: &Path, heading: &str, id: &str, text: &str) -> std::io::Result<()> {
    check_id(id).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    worker_files::ensure_dir(&files.dir)?;
    worker_files::ensure_dir(dir)?;
    worker_files::write(&dir.join(format!("{id}.md")), text.as_bytes())?;
    let task = worker_files::read(&files.task, MAX_TASK_FILE).unwrap_or_default();
    let mut task = String::from_utf8_lossy(&task).into_owned();
    if !task.lines().any(|l| l.trim() == heading) {
        if !task.is_empty() && !task.ends_with('\n') {
            task.push('\n');
        }
        task.push_str(&format!("\n{heading}\n"));
    }
    task.push_str(&format!("\n### {id}\n\n{}\n", text.trim_end()));
    worker_files::write(&files.task, task.as_bytes())
}

/// The most of `task.md` read back to append a note to it.
const MAX_TASK_FILE: u64 = 16 << 20;

pub(crate) struct Sink {
    pub(crate) tx: mpsc::UnboundedSender<Report>,
}

impl Sink {
    fn journaled(&self, body: Body) {
        let _ = self.tx.send(Report::Journaled(body));
    }
}

/// Operator answers routed to the attempt's driver: (question id, text).
pub type Answers = mpsc::UnboundedReceiver<(String, String)>;

/// Runs one attempt to its end. Sends exactly one AttemptResult unless stopped
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
    let sink = Sink { tx };
    let attempt = a.wire_ref();
    // -1 until a worker exits: a result never claims an exit that did not happen.
    let mut result =
        v1::AttemptResult { attempt: Some(attempt.clone()), exit_code: -1, ..Default::default() };
    match drive(&ctx, &a, adopted, (&mut stop, &mut answers), &sink, &mut result).await {
        Ok(Some(())) => {}
        Ok(None) => return, // silent stop
        Err(Failure::Task(e)) => {
            result.outcome = v1::Outcome::Error as i32;
            if result.error.is_empty() {
                result.error = e;
            }
        }
        Err(Failure::Infra(e)) => {
            tracing::error!(error = %e, "infrastructure failure; handing the attempt back");
            result.outcome = v1::Outcome::InfraFailed as i32;
            result.error = e;
        }
    }
    sink.journaled(Body::Result(result));
    // While the sidecar waits for its next Assign, not on that Assign's path.
    ctx.standby.refill(&ctx.supervisor);
}

fn outcome(o: Outcome) -> i32 {
    v1::Outcome::from(o) as i32
}

/// Fills `result`; Ok(None) means "stopped silently, report nothing".
async fn drive(
    ctx: &Context,
    a: &Assignment,
    adopted: Option<Adopted>,
    (stop, answers): (&mut watch::Receiver<Option<Stop>>, &mut Answers),
    sink: &Sink,
    result: &mut v1::AttemptResult,
) -> Result<Option<()>, Failure> {
    let label = a.label();
    let (wt, created) = match adopted {
        Some(_) => (own_worktree(ctx).await.map_err(Failure::Infra)?, false),
        None => {
            let prepared = prepare_with_repairs(ctx, a, sink).await?;
            (prepared.path, prepared.created)
        }
    };
    let files = SwarmFiles::new(&wt);
    if adopted.is_none() {
        prepare_swarm_dir(&files, a)
            .map_err(|e| Failure::Infra(format!("writing {}: {e}", files.dir.display())))?;
        if let Some(base) = &a.review {
            // The reviewer's text carries the diff, which only the worktree has.
            let text = crate::review::task_text(&wt, &a.task_text, base).await;
            let stale = files.dir.join(crate::review::REVIEW_FILE);
            let written = match std::fs::remove_file(&stale) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => worker_files::write(&files.task, text.as_bytes()),
            };
            written.map_err(|e| Failure::Infra(format!("writing {}: {e}", files.task.display())))?;
        }
    }
    let scratch = Scratch::new(&wt, adopted.is_none())?;
    let launch = crate::launch::launch(ctx, a, &files, &scratch)?;
    let env = &launch.env;
    let confinement = launch.confinement.as_ref();
    if adopted.is_none() && (created || a.setup_every_attempt) {
        for cmd in &a.setup {
            let tier = Tier {
                name: "setup".into(),
                command: cmd.clone(),
                blocking: true,
                timeout: Duration::from_secs(3600),
            };
            let r = verify::run_tier(&tier, &wt, env, confinement).await;
            if !r.passed {
                result.log_tail = r.output_tail.lines().map(str::to_string).collect();
                return Err(Failure::Task(format!(
                    "setup command {cmd:?} failed with exit code {}",
                    r.exit_code
                )));
            }
        }
    }
    let log_path = files.log_of(&a.attempt);
    let mut log = worker_files::append(&log_path)
        .map(tokio::fs::File::from_std)
        .map_err(|e| Failure::Infra(format!("opening {}: {e}", log_path.display())))?;
    let idle = a.idle_timeout.or(ctx.default_idle_timeout);
    if let Some(cfg) = &a.agent {
        let run = AgentRun { ctx, a, cfg, wt: &wt, files: &files, launch: &launch, idle };
        return crate::agent::result::drive(run, (stop, answers), &mut log, sink, result).await;
    }
    let spec = SpawnSpec {
        argv: a.command.clone(),
        cwd: wt.clone(),
        env: env.clone(),
        confinement: launch.confinement.clone(),
    };
    let mut watcher = StatusWatcher::new(&files.status);
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut restarts = adopted.map(|ad| ad.restarts).unwrap_or(0);
    let mut last_progress: Option<v1::Progress> = None;
    let mut adopted = adopted.map(|ad| Supervised::adopt(ad.pid, &files.exit, &log_path));

    // Lives (and is timed) while the worker runs, restarts included.
    let run_span = tracing::info_span!("run", command = ?a.command);
    let (exit, stopped, spawn_error) = loop {
        let mut worker = match adopted.take() {
            Some(w) => {
                tracing::info!(parent: &run_span, attempt = %label, supervisor = w.pid(), restarts, "re-adopted the worker of an earlier sidecar process");
                w
            }
            None => {
                let w = ctx
                    .standby
                    .start(&ctx.supervisor, &spec, &files.exit, &log_path)
                    .await
                    .map_err(|e| Failure::Infra(format!("starting the worker's supervisor: {e}")))?;
                tracing::info!(parent: &run_span, attempt = %label, supervisor = w.pid(), restarts, "worker started");
                let _ = sink.tx.send(Report::Pid { pid: w.pid(), restarts });
                sink.journaled(Body::Started(v1::AttemptStarted {
                    attempt: Some(a.wire_ref()),
                    pid: w.pid(),
                    restarts,
                    sandbox: Some(launch.report.clone()),
                }));
                w
            }
        };
        let mut last_activity = Instant::now();
        let mut progress_dirty = false;
        let mut progress_sent = Instant::now() - PROGRESS_EVERY;
        let mut tick = tokio::time::interval(STATUS_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        enum End {
            Exited(ExitInfo),
            Idle,
            Stopped(Stop),
        }
        let end = loop {
            tokio::select! {
                exit = worker.process.wait() => break End::Exited(exit),
                Some(line) = worker.lines.recv() => {
                    last_activity = Instant::now();
                    push_tail(&mut tail, line);
                    progress_dirty = true;
                }
                changed = stop.changed() => {
                    let s = if changed.is_ok() { *stop.borrow_and_update() } else { Some(Stop::Shutdown) };
                    if let Some(s) = s {
                        break End::Stopped(s);
                    }
                }
                _ = tick.tick() => {
                    for ev in watcher.poll() {
                        last_activity = Instant::now();
                        relay_status(sink, a, ev, &mut last_progress, &mut progress_dirty);
                    }
                    if progress_dirty && progress_sent.elapsed() >= PROGRESS_EVERY {
                        progress_dirty = false;
                        progress_sent = Instant::now();
                        let mut p = last_progress.clone().unwrap_or_default();
                        p.attempt = Some(a.wire_ref());
                        p.log_tail = tail.iter().rev().take(PROGRESS_TAIL).rev().cloned().collect();
                        let _ = sink.tx.send(Report::Progress(p));
                    }
                    if let Some(idle) = idle && last_activity.elapsed() >= idle {
                        break End::Idle;
                    }
                }
            }
        };
        match end {
            End::Exited(exit) => {
                drain(&mut worker, &mut tail).await;
                break (exit, None, worker.spawn_error().map(str::to_string));
            }
            End::Stopped(s) => {
                let grace = match s {
                    Stop::Cancel { grace } | Stop::Checkpoint { grace } => grace,
                    _ => ctx.stop_grace,
                };
                let exit = worker.stop(grace).await;
                drain(&mut worker, &mut tail).await;
                break (exit, Some(s), worker.spawn_error().map(str::to_string));
            }
            End::Idle => {
                let idle_secs = idle.map(|d| d.as_secs()).unwrap_or_default();
                tracing::warn!(attempt = %label, restarts, idle_secs, "worker idle; stopping it");
                worker.stop(ctx.stop_grace).await;
                drain(&mut worker, &mut tail).await;
                // After the drain, so that the next worker's reader skips it.
                let _ = log
                    .write_all(format!("[swarm-sidecar] idle for {idle_secs} s; stopped worker\n").as_bytes())
                    .await;
                restarts += 1;
                if restarts > a.max_restarts {
                    result.outcome = outcome(Outcome::Stalled);
                    result.restarts = restarts - 1;
                    result.exit_code = -1;
                    result.error = format!(
                        "no output and no status change for {idle_secs} s, {} restart(s) used",
                        restarts - 1
                    );
                    result.log_tail = tail.iter().cloned().collect();
                    return Ok(Some(()));
                }
                watcher.reset_file();
            }
        }
    };
    let _ = log.flush().await;
    // Twice: an invalid file is only reported when a second look sees it unchanged.
    for ev in watcher.poll().into_iter().chain(watcher.poll()) {
        relay_status(sink, a, ev, &mut last_progress, &mut false);
    }
    tracing::info!(parent: &run_span, exit = exit.wire_code(), signal = ?exit.signal, "worker exited");
    drop(run_span);
    result.exit_code = exit.wire_code();
    result.signal = exit.signal;
    result.restarts = restarts;
    result.log_tail = tail.iter().cloned().collect();
    if let Some(e) = spawn_error {
        result.exit_code = -1;
        result.outcome = outcome(Outcome::Error);
        result.error = e;
        return Ok(Some(()));
    }
    let status = watcher.current().cloned();
    let status_message = status.as_ref().map(|s| s.message.clone()).unwrap_or_default();
    match stopped {
        Some(Stop::Silent) => return Ok(None),
        Some(Stop::Cancel { .. }) => {
            result.outcome = outcome(Outcome::Cancelled);
            result.error = "cancelled by the controller".into();
            return Ok(Some(()));
        }
        Some(Stop::Shutdown | Stop::Checkpoint { .. }) | None => {}
    }
    // Stopped to be resumed later: whatever the worker left is its WIP.
    let mapped =
        if matches!(stopped, Some(Stop::Checkpoint { .. })) { Outcome::Checkpoint } else { exit.outcome() };
    result.outcome = outcome(mapped);
    match mapped {
        Outcome::Success if a.review.is_some() => {
            crate::review::conclude(&wt, &status_message, result).map_err(Failure::Infra)?;
        }
        Outcome::Success => {
            let (tiers, ok) = verify::run_tiers(&a.verify, &wt, env, confinement).await;
            result.tiers = tiers;
            if !ok {
                result.outcome = outcome(Outcome::VerifyFailed);
                result.error = "a blocking verify tier failed".into();
            }
            let message = format!("{}\n\nSwarm-Attempt: {label}", a.title.trim());
            let (commit, subject) = commit(ctx, &wt, message).await?;
            fill_commit(ctx, a, &wt, result, &commit).await?;
            result.summary = if status_message.is_empty() { subject } else { status_message };
        }
        Outcome::Checkpoint => {
            let mut message = format!("WIP: checkpoint {label}\n\n");
            if let Some(p) = status.as_ref().and_then(|s| s.progress.as_ref()) {
                message.push_str(&format!("Progress: {}%\nStep: {}\n", p.percent, p.step));
                if !p.files_modified.is_empty() {
                    message.push_str(&format!("Files: {}\n", p.files_modified.join(", ")));
                }
            }
            if !status_message.is_empty() {
                message.push_str(&format!("Status: {status_message}\n"));
            }
            message.push_str(&format!("\nSwarm-Attempt: {label}\n"));
            let (commit, _) = commit(ctx, &wt, message).await?;
            fill_commit(ctx, a, &wt, result, &commit).await?;
            result.summary = status_message;
        }
        Outcome::Blocked => {
            result.error =
                if status_message.is_empty() { "worker is blocked".into() } else { status_message };
        }
        Outcome::Escalation => {
            let q = status.as_ref().and_then(|s| s.question.clone());
            result.category = q.as_ref().map(|q| q.category.clone()).unwrap_or_default();
            result.error = q.map(|q| q.text).unwrap_or_else(|| status_message.clone());
            result.summary = status_message;
        }
        Outcome::Signaled => {
            result.error = format!("worker killed by signal {}", exit.signal.unwrap_or_default());
        }
        Outcome::Interrupted => result.error = "worker interrupted (exit 130)".into(),
        _ => {
            result.error = match exit.code {
                Some(c) => format!("worker exited with code {c}"),
                None => "worker failed".into(),
            };
        }
    }
    Ok(Some(()))
}

/// Commits the worktree, clearing stale locks first on every try: the
/// worker's group is gone, so no git process of the attempt is left, and a
/// sidecar killed mid-commit leaves `index.lock` for its successor.
pub(crate) async fn commit(ctx: &Context, wt: &Path, message: String) -> Result<(String, String), Failure> {
    let mut last = String::new();
    for n in 1..=INFRA_TRIES {
        let (wt, message, common, id) =
            (wt.to_path_buf(), message.clone(), ctx.repo.clone(), ctx.worker_id.clone());
        let tracker = ctx.tracker.clone();
        let r = tokio::task::spawn_blocking(move || {
            let repo = git2::Repository::open(&common)?;
            crate::locks::clear_stale(repo.commondir(), &id, None)?;
            worktree::repair_git_file(&wt)?;
            match crate::worker_git::import(&wt) {
                Ok(Some(head)) => tracing::info!(%head, "took the worker's own commits"),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "left the worker's own commits out; its files are committed")
                }
            }
            let oid = commit_tracked(&tracker, &wt, &message)?;
            let (_, subject) = worktree::head(&wt)?;
            Ok::<_, worktree::WorktreeError>((oid.to_string(), subject))
        })
        .instrument(tracing::info_span!("commit", try_ = n))
        .await;
        match r {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(e)) => last = format!("committing: {e}"),
            Err(e) => last = format!("commit task failed: {e}"),
        }
        tracing::warn!(error = %last, try_ = n, "commit failed");
        tokio::time::sleep(Duration::from_millis(200 * u64::from(n))).await;
    }
    Err(Failure::Infra(format!("{last} (after {INFRA_TRIES} tries)")))
}

/// Commits what changed: only the paths the tracker saw when it can vouch
/// for them, otherwise everything (a walk of the tree). A failure drops the
/// tracker, so the next attempt starts from a full checkout.
fn commit_tracked(
    tracker: &crate::changes::SharedTracker,
    wt: &Path,
    message: &str,
) -> Result<git2::Oid, worktree::WorktreeError> {
    let mut slot = tracker.lock().unwrap_or_else(|e| e.into_inner());
    let changed = slot.as_mut().and_then(|t| t.take());
    let open = slot.as_mut().and_then(|t| t.repo_and_memo());
    let r = match (&changed, open) {
        (Some(paths), Some((repo, memo))) => crate::changes::commit_paths_in(repo, memo, message, paths),
        (Some(paths), None) => crate::changes::commit_paths(wt, message, paths),
        (None, _) => worktree::commit_all(wt, message),
    };
    if r.is_err() || changed.is_none() {
        *slot = None;
    }
    r.map(|(oid, _)| oid)
}

/// Moves the worktree to the attempt's base: only the paths that differ
/// when the tracker vouches that nothing changed since the last commit,
/// otherwise (and after any failure of that) a full checkout, after which
/// a new tracker starts.
fn prepare_tracked(
    tracker: &crate::changes::SharedTracker,
    repo: &Path,
    id: &str,
    branch: &str,
    base: &str,
    fresh: bool,
) -> Result<worktree::Prepared, worktree::WorktreeError> {
    let mut slot = tracker.lock().unwrap_or_else(|e| e.into_inner());
    if !fresh && slot.as_mut().and_then(|t| t.take()).is_some_and(|changed| changed.is_empty()) {
        let moved = match slot.as_mut().and_then(|t| t.repo_and_memo()) {
            Some((wt, memo)) => crate::changes::move_clean_in(wt, memo, id, branch, base),
            None => crate::changes::move_clean(repo, id, branch, base),
        };
        match moved {
            Ok(p) => {
                // Its own checkout is not a change.
                if slot.as_mut().and_then(|t| t.take()).is_some() {
                    return Ok(p);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "moving the worktree by its changed paths failed; checking it out in full")
            }
        }
    }
    *slot = None;
    if fresh {
        worktree::discard(repo, id)?;
    }
    let p = worktree::prepare(repo, id, branch, base)?;
    match crate::changes::Tracker::start(&p.path) {
        Ok(t) => *slot = Some(t),
        Err(e) => tracing::info!(error = %e, "not tracking worktree changes; every attempt walks it"),
    }
    Ok(p)
}

/// The worktree of an attempt being resumed (it is already prepared).
pub(crate) async fn own_worktree(ctx: &Context) -> Result<PathBuf, String> {
    let (repo, id) = (ctx.repo.clone(), ctx.worker_id.clone());
    tokio::task::spawn_blocking(move || {
        let r = git2::Repository::open(&repo).map_err(|e| e.to_string())?;
        worktree::worktree_path(&r, &id).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| format!("worktree task failed: {e}"))?
}

/// Fetches the base (remote mode) and moves the worktree to the task,
/// repairing between tries: stale locks are cleared on every try (inside
/// `prepare`), and the last try recreates the worktree from scratch.
async fn prepare_with_repairs(
    ctx: &Context,
    a: &Assignment,
    sink: &Sink,
) -> Result<worktree::Prepared, Failure> {
    let mut last = String::new();
    for n in 1..=INFRA_TRIES {
        if n > 1 {
            tracing::warn!(error = %last, try_ = n, "preparing the attempt failed; repairing and retrying");
            tokio::time::sleep(Duration::from_millis(200 * u64::from(n))).await;
        }
        if let Some(remote) = &ctx.remote
            && let Err(e) = remote.ensure_commit(&ctx.repo, &a.base_commit).await
        {
            last = format!("fetching base {}: {e}", a.base_commit);
            continue;
        }
        let (repo, id, branch, base) =
            (ctx.repo.clone(), ctx.worker_id.clone(), a.branch.clone(), a.base_commit.clone());
        let fresh = n == INFRA_TRIES;
        let tracker = ctx.tracker.clone();
        let r = tokio::task::spawn_blocking(move || {
            // The worker's own git metadata is part of a prepared worktree.
            let p = prepare_tracked(&tracker, &repo, &id, &branch, &base, fresh)?;
            crate::worker_git::prepare(&p.path)?;
            Ok::<_, worktree::WorktreeError>(p)
        })
        .instrument(tracing::info_span!("prepare", base = %a.base_commit, branch = %a.branch, try_ = n))
        .await;
        match r {
            Ok(Ok(p)) => {
                for lock in &p.cleared_locks {
                    sink.journaled(Body::Status(v1::Status {
                        attempt: Some(a.wire_ref()),
                        status: v1::WorkerStatus::Note as i32,
                        message: format!(
                            "sidecar removed a stale git lock {} (left by a crashed process)",
                            lock.display()
                        ),
                    }));
                }
                return Ok(p);
            }
            Ok(Err(worktree::WorktreeError::MissingBase(b))) if ctx.remote.is_none() => {
                // Not something a repair can fix: the controller sent a base
                // this repository does not have.
                return Err(Failure::Infra(format!(
                    "preparing worktree: base commit {b} is not in the repository"
                )));
            }
            Ok(Err(e)) => last = format!("preparing worktree: {e}"),
            Err(e) => last = format!("worktree task failed: {e}"),
        }
    }
    Err(Failure::Infra(format!("{last} (after {INFRA_TRIES} tries, the last on a recreated worktree)")))
}

pub(crate) async fn fill_commit(
    ctx: &Context,
    a: &Assignment,
    wt: &Path,
    result: &mut v1::AttemptResult,
    commit: &str,
) -> Result<(), Failure> {
    let (wt2, base, c) = (wt.to_path_buf(), a.base_commit.clone(), commit.to_string());
    let files = tokio::task::spawn_blocking(move || {
        let oid = git2::Oid::from_str(&c)?;
        worktree::files_changed(&wt2, &base, oid).map_err(|e| git2::Error::from_str(&e.to_string()))
    })
    .await
    .map_err(|e| Failure::Infra(format!("diff task failed: {e}")))?
    .map_err(|e| Failure::Infra(format!("listing changed files: {e}")))?;
    if let Some(remote) = &ctx.remote {
        let mut tries = 0;
        while let Err(e) = remote.push(&ctx.repo, &a.wire_ref(), commit, &a.base_commit).await {
            tries += 1;
            if tries >= INFRA_TRIES {
                return Err(Failure::Infra(format!("pushing result: {e} (after {tries} tries)")));
            }
            tracing::warn!(error = %e, tries, "pushing the result failed; retrying");
            tokio::time::sleep(Duration::from_millis(200 * u64::from(tries))).await;
        }
    }
    result.commit = commit.to_string();
    result.files_changed = files;
    Ok(())
}

fn relay_status(
    sink: &Sink,
    a: &Assignment,
    ev: StatusEvent,
    last_progress: &mut Option<v1::Progress>,
    progress_dirty: &mut bool,
) {
    let attempt = Some(a.wire_ref());
    match ev {
        StatusEvent::Status { status, message } => {
            sink.journaled(Body::Status(v1::Status { attempt, status: wire_status(status) as i32, message }))
        }
        StatusEvent::Invalid { message } => sink.journaled(Body::Status(v1::Status {
            attempt,
            status: v1::WorkerStatus::Unspecified as i32,
            message,
        })),
        StatusEvent::Progress(p) => {
            *last_progress = Some(v1::Progress {
                attempt,
                percent: p.percent,
                step: p.step,
                files_modified: p.files_modified,
                tests_passing: p.tests_passing,
                tests_total: p.tests_total,
                ..Default::default()
            });
            *progress_dirty = true;
        }
        StatusEvent::Question(q) => sink.journaled(Body::Question(v1::Question {
            attempt,
            question_id: q.id,
            text: q.text,
            category: q.category,
            options: q.options,
        })),
    }
}

pub(crate) fn wire_status(s: WorkerStatus) -> v1::WorkerStatus {
    match s {
        WorkerStatus::Working => v1::WorkerStatus::Working,
        WorkerStatus::Blocked => v1::WorkerStatus::Blocked,
        WorkerStatus::Question => v1::WorkerStatus::Question,
        WorkerStatus::Done => v1::WorkerStatus::Done,
    }
}

async fn drain(worker: &mut Supervised, tail: &mut VecDeque<String>) {
    for line in worker.drain_lines(Duration::from_millis(500)).await {
        push_tail(tail, line);
    }
}

fn push_tail(tail: &mut VecDeque<String>, line: String) {
    tail.push_back(line);
    while tail.len() > LOG_TAIL {
        tail.pop_front();
    }
}

/// A fresh `.swarm/` for this attempt: task.md, no stale status or answers.
fn prepare_swarm_dir(files: &SwarmFiles, a: &Assignment) -> std::io::Result<()> {
    // No worker runs now: whatever the last one left here is made plain.
    worker_files::ensure_dir(&files.dir)?;
    worker_files::ensure_dir(&files.logs)?;
    // The exit file too: a previous attempt's must never pass for this one's.
    for f in [&files.status, &files.exit] {
        match std::fs::remove_file(f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    // Earlier answers and messages are in the new task text already.
    for dir in [&files.answers, &files.messages] {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir)?,
            Ok(_) => std::fs::remove_file(dir)?,
            Err(_) => {}
        }
    }
    worker_files::write(&files.task, a.task_text.as_bytes())
}

/// An agent attempt's setting, for [`crate::agent::result`].
pub(crate) struct AgentRun<'a> {
    pub ctx: &'a Context,
    pub a: &'a Assignment,
    pub cfg: &'a AgentConfig,
    pub wt: &'a Path,
    pub files: &'a SwarmFiles,
    pub launch: &'a Launch,
    pub idle: Option<Duration>,
}
