//! The Connect session: Hello/Welcome, replay of the journal, heartbeats,
//! controller commands, and reconnection with backoff. The worker keeps
//! running while the stream is down; its reports are journaled meanwhile.
//!
//! One state machine over the same fields, a concern per file: where the
//! session is in its life (`lifecycle`: serving, draining, shutting down),
//! connecting and the Hello (`connect`), the stream's loop and each
//! controller message (`stream`), the Welcome's verdict on the attempt in
//! hand (`resume`), the attempts it runs (`attempts`) and the link's
//! liveness (`liveness`).

use std::path::PathBuf;
use std::time::Duration;

use nix::fcntl::Flock;
use swarm_proto::convert::AttemptRef;
use swarm_proto::leader::Controllers;
use swarm_proto::v1;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::attempt::{self, Assignment, Context, Event, Report, Stop};
use crate::config::{Config, OrphanPolicy, default_worker_id};
use crate::journal::Journal;
use crate::outcome::AttemptOutcome;
use crate::{SidecarError, orphans, worktree};

mod attempts;
mod connect;
mod lifecycle;
mod liveness;
mod resume;
mod stream;

use attempts::adoptable;
use lifecycle::Lifecycle;
use liveness::{LinkTiming, SocketHandle, TrackedConnector};

const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const WELCOME_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);

/// How many infrastructure failures in a row make the sidecar drain itself.
const MAX_INFRA_FAILURES: u32 = 3;

/// An attempt held from before a restart.
struct Held {
    assign: v1::Assign,
    /// Its worker, still running under its supervisor or finished with its
    /// exit recorded; None when the worker is lost.
    adopt: Option<attempt::Adopted>,
    /// Whether a worker was ever started for it (its supervisor's pid was
    /// journaled). A sidecar that died before that, while preparing, simply
    /// runs the attempt: its worker has never run, so it cannot run twice.
    started: bool,
}

/// The attempt being worked on.
struct Current {
    assignment: Assignment,
    stop: watch::Sender<Option<Stop>>,
    task: JoinHandle<()>,
    /// Operator answers for the driver (an agent takes them as messages).
    answers: mpsc::UnboundedSender<(String, String)>,
    /// The attempt's secrets' values, once read, to redact from its reports.
    redactor: std::sync::Arc<std::sync::OnceLock<crate::secrets::Redactor>>,
}

/// What the operator sent for the attempt in hand.
#[derive(Debug, Clone, Copy)]
enum Note {
    /// An answer to the worker's question.
    Answer,
    /// A message of the operator's own.
    Message,
}

/// How an attempt's driver starts.
enum Launch {
    Run,
    /// Follow a worker an earlier sidecar process started.
    Adopt(attempt::Adopted),
    /// Checkpoint the work of an agent an earlier sidecar process started.
    LostAgent,
}

/// How one connection ended.
enum Ended {
    /// Drained or shut down: exit.
    Done,
    /// The stream broke; reconnect. True when a Welcome had been received.
    Broken(bool),
}

struct Session {
    cfg: Config,
    worker_id: String,
    repo: PathBuf,
    workspaces: worktree::Workspaces,
    worktree: PathBuf,
    journal: Journal,
    current: Option<Current>,
    /// An attempt held from before a restart, until the Welcome says
    /// whether the controller still holds it.
    held: Option<Held>,
    /// Consecutive attempts that ended INFRA_FAILED.
    infra_failures: u32,
    /// This binary, run as the workers' supervisor.
    supervisor: PathBuf,
    /// What changed in the worktree, across attempts.
    tracker: crate::changes::SharedTracker,
    /// The next worker's supervisor, started while idle.
    standby: crate::supervisor::StandbySlot,
    /// What this kernel enforces of the worker sandbox.
    sandbox: crate::sandbox::Capability,
    /// Where attempts get their cgroups.
    cgroups: crate::sandbox::Cgroups,
    reports_tx: mpsc::UnboundedSender<Report>,
    reports_rx: mpsc::UnboundedReceiver<Report>,
    /// Merge queue verdicts (`verify_job`), sent unjournaled: a lost one is
    /// verified again by the controller.
    verified_tx: mpsc::UnboundedSender<v1::SidecarMessage>,
    verified_rx: mpsc::UnboundedReceiver<v1::SidecarMessage>,
    /// Serving, draining or shutting down.
    lifecycle: Lifecycle,
    shutdown: CancellationToken,
    /// The session's unary calls to the controller (context, packs).
    link: crate::link::ControllerLink,
    remote: Option<crate::remote::Remote>,
    /// The controllers to connect to, and which one is tried next.
    controllers: Controllers,
    /// Whether to wait before the next connection attempt: false right
    /// after a controller that was not the leader, while others are untried.
    back_off: bool,
    /// The lease of the last Welcome: how fast a dead link must be noticed.
    lease: Option<Duration>,
    /// The socket of the connection being used (see `liveness`).
    socket: SocketHandle,
    _lock: Flock<std::fs::File>,
}

/// Runs the sidecar until drained or `shutdown` is cancelled.
pub async fn run(mut cfg: Config, shutdown: CancellationToken) -> Result<(), SidecarError> {
    // First: a sidecar that cannot run its workers as their user must not start.
    let user = cfg.worker_user.take().map(crate::sandbox::WorkerUser::for_this_process).transpose();
    cfg.worker_user = user.map_err(|e| SidecarError::Config(e.to_string()))?.flatten();
    let repo =
        cfg.repo.canonicalize().map_err(|e| SidecarError::Repo(format!("{}: {e}", cfg.repo.display())))?;
    let worker_id = match &cfg.worker_id {
        Some(id) => id.clone(),
        None => default_worker_id(&repo),
    };
    swarm_core::names::check_id(&worker_id).map_err(|e| SidecarError::Config(format!("worker id: {e}")))?;
    let workspaces = worktree::Workspaces::new(&repo, cfg.workspaces.as_deref())
        .map_err(|e| SidecarError::Repo(e.to_string()))?;
    let worktree = workspaces.worktree(&worker_id).map_err(|e| SidecarError::Repo(e.to_string()))?;
    if let Some(user) = &cfg.worker_user {
        user.check_reaches_worktree(&repo, &worktree).map_err(|e| SidecarError::Config(e.to_string()))?;
    }
    let lock =
        orphans::take_lock(&workspaces.dir, &worker_id).map_err(|e| SidecarError::Config(e.to_string()))?;
    let mut journal = Journal::open(orphans::journal_path(&workspaces.dir, &worker_id))?;
    let supervisor = match &cfg.supervisor {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| SidecarError::Config(format!("cannot find the sidecar's own executable: {e}")))?,
    };
    let held = journal.in_hand().cloned().map(|h| {
        let adopt = adoptable(&worktree, &h);
        Held { started: h.pid.is_some() || adopt.is_some(), assign: h.assign, adopt }
    });
    report_orphans(&cfg, &workspaces, &worker_id, &mut journal)?;
    let controllers = Controllers::parse(&cfg.controller).map_err(|e| SidecarError::Config(e.to_string()))?;
    let link = crate::link::ControllerLink::new(&worker_id);
    let remote = cfg.remote.then(|| crate::remote::Remote::new(link.clone()));
    let (reports_tx, reports_rx) = mpsc::unbounded_channel();
    let (verified_tx, verified_rx) = mpsc::unbounded_channel();
    let (sandbox, cgroups) = probe_confinement();
    let mut s = Session {
        held,
        infra_failures: 0,
        sandbox,
        cgroups,
        supervisor,
        tracker: Default::default(),
        standby: Default::default(),
        cfg,
        worker_id,
        repo,
        workspaces,
        worktree,
        journal,
        current: None,
        reports_tx,
        reports_rx,
        verified_tx,
        verified_rx,
        lifecycle: Lifecycle::Serving,
        shutdown,
        link,
        remote,
        controllers,
        back_off: true,
        lease: None,
        socket: SocketHandle::default(),
        _lock: lock,
    };
    let span = tracing::info_span!("sidecar", worker = %s.worker_id);
    if s.held.is_none() {
        // Before the Hello: a sidecar takes work only once its worktree is
        // ready, so no task waits for a checkout of the whole tree.
        let (tracker, ws, id) = (s.tracker.clone(), s.workspaces.clone(), s.worker_id.clone());
        let warm = span.clone();
        let _ = tokio::task::spawn_blocking(move || {
            warm.in_scope(|| crate::attempt::warm_worktree(&tracker, &ws, &id))
        })
        .await;
    }
    s.run().instrument(span).await
}

/// Worktrees of this worker id no journal holds: removed when the policy
/// says so, and reported either way.
fn report_orphans(
    cfg: &Config,
    workspaces: &worktree::Workspaces,
    worker_id: &str,
    journal: &mut Journal,
) -> Result<(), SidecarError> {
    let orphan_ids = orphans::scan(&workspaces.dir, worker_id);
    if orphan_ids.is_empty() {
        return Ok(());
    }
    let removed = cfg.orphans == OrphanPolicy::Remove;
    if removed && let Err(e) = orphans::remove(workspaces, &orphan_ids) {
        tracing::warn!(error = %e, "removing orphaned worktrees failed");
    }
    tracing::info!(?orphan_ids, removed, "orphaned worktrees");
    journal.append_report(crate::wire::fitted(Event::Orphans { worktrees: orphan_ids, removed }))?;
    Ok(())
}

/// What this kernel enforces of the worker sandbox, and where attempts
/// get their cgroups; said once in the log.
fn probe_confinement() -> (crate::sandbox::Capability, crate::sandbox::Cgroups) {
    let sandbox = crate::sandbox::probe();
    if !sandbox.is_full() {
        let (_, missing) = sandbox.split();
        tracing::warn!(abi = sandbox.abi, missing = %missing.join("; "),
            "the worker sandbox is not fully enforced on this kernel; tasks with sandbox = \"required\" will not run here");
    }
    let cgroups = crate::sandbox::Cgroups::probe();
    match cgroups.base() {
        Some(base) => tracing::info!(base = %base.display(), controllers = ?cgroups.controllers(),
            "each attempt gets a cgroup of its own"),
        None => tracing::info!(
            why = cgroups.why_not(),
            "attempts get no cgroup: a worker's supervisor ends its processes, and limits fall back to rlimits"
        ),
    }
    (sandbox, cgroups)
}

fn same_attempt(held: &AttemptRef, r: Option<&v1::AttemptRef>) -> bool {
    r.and_then(|r| AttemptRef::try_from(r).ok())
        .is_some_and(|r| r.task == held.task && r.number == held.number)
}
