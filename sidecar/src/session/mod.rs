//! The Connect session: Hello/Welcome, replay of the journal, heartbeats,
//! controller commands, and reconnection with backoff. The worker keeps
//! running while the stream is down; its reports are journaled meanwhile.
//!
//! Longer than most files (~700 lines): connecting, the stream's loop, the
//! replay on Welcome and the handling of each controller message are one
//! state machine over the same fields; the attempts it runs are in
//! `attempts`.

use std::path::PathBuf;
use std::time::Duration;

use nix::fcntl::Flock;
use rand::Rng;
use swarm_proto::convert::AttemptRef;
use swarm_proto::leader::{Controllers, standby_refusal};
use swarm_proto::v1;
use swarm_proto::v1::controller_message::Body as In;
use swarm_proto::v1::sidecar_message::Body;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::Instrument;

use crate::attempt::{self, Assignment, Context, Event, Report, Stop};
use crate::config::{Config, OrphanPolicy, default_worker_id};
use crate::journal::Journal;
use crate::outcome::AttemptOutcome;
use crate::{SidecarError, orphans, worktree};

mod attempts;
mod liveness;

use attempts::adoptable;
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
    draining: bool,
    shutting_down: bool,
    /// After a shutdown request, give up waiting for acks at this point.
    give_up_at: Option<tokio::time::Instant>,
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

/// Sidecar, stream and Welcome of a session that was opened.
type Opened = (
    SidecarServiceClient<swarm_proto::client::AuthChannel>,
    mpsc::Sender<v1::SidecarMessage>,
    tonic::Streaming<v1::ControllerMessage>,
    v1::Welcome,
);

/// Why a session could not be opened, and the leader a standby named.
struct NotOpened {
    error: SidecarError,
    leader: Option<String>,
}

impl From<SidecarError> for NotOpened {
    fn from(error: SidecarError) -> NotOpened {
        NotOpened { error, leader: None }
    }
}

/// A refused stream: a standby's refusal names the leader to try.
fn refused(status: tonic::Status) -> NotOpened {
    match standby_refusal(&status) {
        Some(leader) => NotOpened { error: SidecarError::Connect(status.message().to_string()), leader },
        None => SidecarError::Connect(status.to_string()).into(),
    }
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
    let orphan_ids = orphans::scan(&workspaces.dir, &worker_id);
    if !orphan_ids.is_empty() {
        let removed = cfg.orphans == OrphanPolicy::Remove;
        if removed && let Err(e) = orphans::remove(&workspaces, &orphan_ids) {
            tracing::warn!(error = %e, "removing orphaned worktrees failed");
        }
        tracing::info!(?orphan_ids, removed, "orphaned worktrees");
        journal.append_report(crate::wire::fitted(Event::Orphans { worktrees: orphan_ids, removed }))?;
    }
    let controllers = Controllers::parse(&cfg.controller).map_err(|e| SidecarError::Config(e.to_string()))?;
    let link = crate::link::ControllerLink::new(&worker_id);
    let remote = cfg.remote.then(|| crate::remote::Remote::new(link.clone()));
    let (reports_tx, reports_rx) = mpsc::unbounded_channel();
    let (verified_tx, verified_rx) = mpsc::unbounded_channel();
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
        draining: false,
        shutting_down: false,
        give_up_at: None,
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

impl Session {
    async fn run(&mut self) -> Result<(), SidecarError> {
        let mut backoff = INITIAL_BACKOFF;
        let configured_max = Duration::from_millis(self.cfg.reconnect_max_ms.max(100));
        loop {
            match self.connect_once().await {
                Ok(Ended::Done) => return self.finish().await,
                Ok(Ended::Broken(welcomed)) => {
                    if welcomed {
                        backoff = INITIAL_BACKOFF;
                    }
                    tracing::info!("stream to controller closed; reconnecting");
                }
                // A bad URL or credential file does not heal by retrying.
                Err(e @ (SidecarError::Journal(_) | SidecarError::Config(_))) => return Err(e),
                Err(e) => tracing::warn!(error = %e, "cannot reach controller"),
            }
            let gave_up = self.give_up_at.is_some_and(|t| t <= tokio::time::Instant::now());
            if self.shutting_down && (self.current.is_none() || gave_up) {
                return self.finish().await;
            }
            if !std::mem::replace(&mut self.back_off, true) {
                continue;
            }
            let max = LinkTiming::for_lease(self.lease).backoff_max(configured_max);
            backoff = backoff.min(max);
            let jitter = rand::rng().random_range(0..=backoff.as_millis() as u64 / 2);
            let sleep = tokio::time::sleep(backoff + Duration::from_millis(jitter));
            backoff = (backoff * 2).min(max);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    _ = self.shutdown.cancelled(), if !self.shutting_down => self.begin_shutdown(),
                    Some(r) = self.reports_rx.recv() => {
                        self.record(r).await?;
                        if self.shutting_down && self.current.is_none() {
                            return self.finish().await;
                        }
                    }
                }
            }
        }
    }

    async fn finish(&mut self) -> Result<(), SidecarError> {
        if let Some(c) = self.current.take() {
            let _ = c.stop.send(Some(Stop::Shutdown));
            let _ = c.task.await;
            while let Ok(r) = self.reports_rx.try_recv() {
                self.record(r).await?;
            }
        }
        Ok(())
    }

    fn begin_shutdown(&mut self) {
        tracing::info!("shutting down");
        self.shutting_down = true;
        // Room for the worker's stop sequence, then a little for the acks.
        self.give_up_at =
            Some(tokio::time::Instant::now() + self.cfg.stop_grace() * 2 + Duration::from_secs(5));
        if let Some(c) = &self.current {
            let _ = c.stop.send(Some(Stop::Shutdown));
        }
    }

    /// The configured labels, and the sandbox label when this kernel
    /// enforces the whole sandbox (what `sandbox = "required"` asks for).
    fn labels(&self) -> std::collections::HashMap<String, String> {
        use swarm_core::plan::sandbox::{SANDBOX_ENFORCED, SANDBOX_LABEL};
        let mut labels: std::collections::HashMap<_, _> = self.cfg.labels.iter().cloned().collect();
        if self.sandbox.is_full() {
            labels.insert(SANDBOX_LABEL.to_string(), SANDBOX_ENFORCED.to_string());
        }
        labels
    }

    fn hello(&self) -> v1::SidecarMessage {
        let in_hand = self
            .current
            .as_ref()
            .map(|c| v1::AttemptRef::from(&c.assignment.attempt))
            .or_else(|| self.held.as_ref().and_then(|h| h.assign.attempt.clone()));
        v1::SidecarMessage {
            seq: 0,
            body: Some(Body::Hello(v1::Hello {
                worker_id: self.worker_id.clone(),
                labels: self.labels(),
                host: hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default(),
                capacity: 1,
                last_acked_seq: self.journal.acked(),
                attempt_in_hand: in_hand,
                shares_repository: !self.cfg.remote,
                version: env!("CARGO_PKG_VERSION").to_string(),
                resume_secret: self.journal.resume_secret().to_string(),
                protocol: swarm_proto::compat::PROTOCOL,
            })),
        }
    }

    /// One session with the leading controller, from Hello to the end of
    /// its stream.
    async fn connect_once(&mut self) -> Result<Ended, SidecarError> {
        let url = self.controllers.current();
        let span = tracing::info_span!("connect", controller = %url);
        let (client, out, mut inbound, welcome) = match self.open(&url).instrument(span).await {
            Ok(Some(opened)) => opened,
            Ok(None) => return Ok(Ended::Broken(false)),
            Err(NotOpened { error, leader }) => {
                if let Some(leader) = &leader {
                    tracing::info!(%url, %leader, "not the leader; trying the leader it named");
                }
                self.back_off = self.controllers.failed(leader);
                return Err(error);
            }
        };
        self.controllers.succeeded();
        tracing::info!(controller = %url, session = %welcome.session_id, last_applied = welcome.last_applied_seq,
            resumed = welcome.attempt_resumed, "connected");
        self.journal.applied_up_to(welcome.last_applied_seq)?;
        self.journal.set_resume_secret(&welcome.resume_secret)?;
        self.lease = Some(Duration::from_millis(welcome.lease_ttl_ms.into()));
        if let Some(timeout) = LinkTiming::user_timeout(self.lease)
            && let Err(e) = self.socket.set_user_timeout(timeout)
        {
            tracing::warn!(error = %e, "cannot bound the connection's unacknowledged time; pings alone will");
        }
        self.link.set_session(client, &welcome.resume_secret);
        let ended = self.stream(out, &mut inbound, welcome).await;
        self.socket.release();
        ended
    }

    /// Connects to `url`, says Hello and waits for the Welcome; None when a
    /// shutdown came first.
    async fn open(&mut self, url: &str) -> Result<Option<Opened>, NotOpened> {
        let auth = self.cfg.client_auth();
        let timing = LinkTiming::for_lease(self.lease);
        let endpoint = auth
            .endpoint(url)
            .map_err(|e| SidecarError::Config(e.to_string()))?
            .connect_timeout(timing.connect_timeout)
            // Notice a half-open connection even when nothing is being sent.
            .http2_keep_alive_interval(timing.keepalive_interval)
            .keep_alive_timeout(timing.keepalive_timeout)
            .keep_alive_while_idle(true);
        self.socket = SocketHandle::default();
        let connector = TrackedConnector::new(timing.connect_timeout, self.socket.clone());
        let channel: Channel = tokio::select! {
            c = endpoint.connect_with_connector(connector) => c.map_err(|e| SidecarError::Connect(e.to_string()))?,
            _ = self.shutdown.cancelled(), if !self.shutting_down => {
                self.begin_shutdown();
                return Ok(None);
            }
        };
        let channel = auth.wrap(channel).map_err(|e| SidecarError::Config(e.to_string()))?;
        let mut client = SidecarServiceClient::new(channel);
        let (out, out_rx) = mpsc::channel::<v1::SidecarMessage>(1024);
        let _ = out.send(self.hello()).await;
        let mut inbound = client.connect(ReceiverStream::new(out_rx)).await.map_err(refused)?.into_inner();
        let welcome = match tokio::time::timeout(WELCOME_TIMEOUT, inbound.message()).await {
            Ok(Ok(Some(v1::ControllerMessage { body: Some(In::Welcome(w)) }))) => w,
            Ok(Ok(other)) => {
                return Err(SidecarError::Protocol(format!("expected Welcome, got {other:?}")).into());
            }
            Ok(Err(e)) => return Err(refused(e)),
            Err(_) => return Err(SidecarError::Protocol("no Welcome within 10 s".into()).into()),
        };
        Ok(Some((client, out, inbound, welcome)))
    }

    /// The session's stream after the Welcome: replay, reports, heartbeats
    /// and the controller's commands, until it breaks or the sidecar is done.
    async fn stream(
        &mut self,
        out: mpsc::Sender<v1::SidecarMessage>,
        inbound: &mut tonic::Streaming<v1::ControllerMessage>,
        welcome: v1::Welcome,
    ) -> Result<Ended, SidecarError> {
        self.resume(welcome.attempt_resumed).await?;
        for (seq, event) in self.journal.unacked() {
            if out.send(crate::wire::message(*seq, event)).await.is_err() {
                return Ok(Ended::Broken(true));
            }
        }
        let interval = match welcome.heartbeat_interval_ms {
            0 => DEFAULT_HEARTBEAT,
            ms => Duration::from_millis(u64::from(ms)),
        };
        let jitter = u64::from(welcome.heartbeat_jitter_ms);
        let next_beat = || {
            interval + Duration::from_millis(if jitter > 0 { rand::rng().random_range(0..jitter) } else { 0 })
        };
        // The first beat goes at once: until the controller hears from a
        // sidecar after its Welcome (whose secret is journaled by now), it
        // gives it no work.
        let beat = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(beat);
        loop {
            if (self.draining || self.shutting_down)
                && self.current.is_none()
                && self.journal.unacked().is_empty()
            {
                tracing::info!("drained; closing the stream");
                return Ok(Ended::Done);
            }
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(m)) => {
                        if let Some(ack) = self.on_message(m).await? {
                            let _ = out.send(ack).await;
                        }
                    }
                    Ok(None) => return Ok(Ended::Broken(true)),
                    Err(e) => {
                        tracing::warn!(error = %e, "stream error");
                        return Ok(Ended::Broken(true));
                    }
                },
                Some(r) = self.reports_rx.recv() => {
                    if let Some(msg) = self.record(r).await?
                        && out.send(msg).await.is_err()
                    {
                        return Ok(Ended::Broken(true));
                    }
                }
                Some(msg) = self.verified_rx.recv() => {
                    if out.send(msg).await.is_err() {
                        return Ok(Ended::Broken(true));
                    }
                }
                _ = &mut beat => {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or_default();
                    let hb = v1::SidecarMessage { seq: 0, body: Some(Body::Heartbeat(v1::Heartbeat { sent_at_unix_ms: now })) };
                    if out.send(hb).await.is_err() {
                        return Ok(Ended::Broken(true));
                    }
                    beat.as_mut().reset(tokio::time::Instant::now() + next_beat());
                }
                _ = self.shutdown.cancelled(), if !self.shutting_down => {
                    self.begin_shutdown();
                    if self.current.is_none() {
                        return Ok(Ended::Done);
                    }
                }
                _ = sleep_until_opt(self.give_up_at) => {
                    tracing::warn!(unacked = self.journal.unacked().len(), "stopping without all acks; the journal keeps them");
                    return Ok(Ended::Done);
                }
            }
        }
    }

    /// Applies the Welcome's verdict on the attempt in hand.
    async fn resume(&mut self, resumed: bool) -> Result<(), SidecarError> {
        if let Some(held) = self.held.take() {
            let assignment = Assignment::try_from(&held.assign).ok();
            match (resumed, held.adopt, assignment) {
                (true, Some(adopt), Some(assignment)) => {
                    tracing::info!(attempt = %assignment.label(), supervisor = adopt.pid, "re-adopting the worker of a previous sidecar process");
                    self.start(assignment, Some(adopt));
                    return Ok(());
                }
                // Agents run without a supervisor (their stdin is a pipe to the
                // old sidecar process), so one that was started is gone: keep
                // its work and hand its session back instead of losing it.
                (true, None, Some(assignment)) if held.started && assignment.agent.is_some() => {
                    tracing::info!(attempt = %assignment.label(), "the agent of a previous sidecar process is gone; checkpointing its work");
                    self.start_with(assignment, Launch::LostAgent);
                    return Ok(());
                }
                (true, None, Some(assignment)) if !held.started => {
                    tracing::info!(attempt = %assignment.label(), "the previous sidecar process never started its worker; running it now");
                    self.start(assignment, None);
                    return Ok(());
                }
                (_, Some(adopt), _) => {
                    tracing::warn!(
                        supervisor = adopt.pid,
                        "the attempt of a previous sidecar process is not resumed; stopping its worker"
                    );
                    // What left the group is below the supervisor (its subreaper),
                    // while it lives; a pid of one that exited may be anyone's.
                    let exit_file = attempt::SwarmFiles::new(&self.worktree).exit;
                    if crate::supervisor::is_supervisor(adopt.pid, &exit_file) {
                        crate::reaper::kill_descendants(adopt.pid);
                    }
                    crate::runner::kill_group(adopt.pid as i32, nix::sys::signal::Signal::SIGKILL);
                }
                _ => {}
            }
            let lost = held.assign;
            if resumed {
                tracing::warn!("reporting the attempt of a previous sidecar process as lost");
                match lost.attempt.as_ref().map(AttemptRef::try_from) {
                    Some(Ok(attempt)) => {
                        let result = AttemptOutcome::error(attempt, "sidecar restarted; worker lost");
                        self.journal.append_report(Event::Result(result))?;
                    }
                    // Journaled only once it was valid: a damaged journal.
                    _ => {
                        tracing::error!(attempt = ?lost.attempt, "the lost attempt has no valid id; not reporting it")
                    }
                }
            }
            self.journal.release()?;
        }
        if !resumed && let Some(c) = self.current.take() {
            tracing::warn!(attempt = %c.assignment.label(), "controller no longer holds this attempt; stopping it");
            let _ = c.stop.send(Some(Stop::Silent));
            let _ = c.task.await;
            // Whatever it reported on its way out belongs to an attempt the
            // controller no longer holds; left queued, it would be taken
            // for the next attempt's.
            let mut dropped = 0;
            while self.reports_rx.try_recv().is_ok() {
                dropped += 1;
            }
            if dropped > 0 {
                tracing::info!(dropped, "dropped the reports of the stopped attempt");
            }
            self.journal.release()?;
        }
        Ok(())
    }

    /// Journals a report from the attempt driver; returns what to send.
    async fn record(&mut self, r: Report) -> Result<Option<v1::SidecarMessage>, SidecarError> {
        let redactor = self.current.as_ref().and_then(|c| c.redactor.get());
        match r {
            Report::Pid { pid, restarts } => {
                self.journal.set_pid(pid, restarts)?;
                Ok(None)
            }
            Report::Progress(mut p) => {
                if let Some(r) = redactor {
                    r.progress(&mut p);
                }
                Ok(Some(v1::SidecarMessage { seq: 0, body: Some(Body::Progress((&p).into())) }))
            }
            Report::Journaled(mut event) => {
                if let Some(r) = redactor {
                    r.report(&mut event);
                }
                let current = self.current.as_ref().map(|c| &c.assignment.attempt);
                if let Some(reported) = event.attempt()
                    && !current.is_some_and(|c| c.task == reported.task && c.number == reported.number)
                {
                    // A report of an attempt stopped silently, which must not
                    // end (or be journaled as) the attempt now in hand.
                    tracing::warn!(?reported, "dropping a report of an attempt no longer in hand");
                    return Ok(None);
                }
                let is_result = if let Event::Result(outcome) = &mut event {
                    self.count_infra_failure(outcome);
                    true
                } else {
                    false
                };
                let event = crate::wire::fitted(event);
                if !is_result {
                    let seq = self.journal.append_report(event.clone())?;
                    return Ok(Some(crate::wire::message(seq, &event)));
                }
                // The result and the release, with one fsync.
                let seq = self.journal.append_result(event.clone())?;
                if let Some(c) = self.current.take() {
                    tracing::info!(attempt = %c.assignment.label(), seq, "attempt finished");
                    let _ = c.task.await;
                }
                Ok(Some(crate::wire::message(seq, &event)))
            }
        }
    }

    /// Records an operator's answer or message in the attempt's worktree
    /// (where any worker finds it) and hands it to the attempt's driver (an
    /// agent gets it as a message).
    async fn hand_to_attempt(&self, attempt: Option<&v1::AttemptRef>, note: Note, id: &str, text: &str) {
        let Some(cur) = self.current.as_ref().filter(|c| same_attempt(&c.assignment.attempt, attempt)) else {
            tracing::warn!(?attempt, id, "{note:?} for an attempt not in hand");
            return;
        };
        let (wt, owned_id, owned_text) = (self.worktree.clone(), id.to_string(), text.to_string());
        let recorded = tokio::task::spawn_blocking(move || match note {
            Note::Answer => attempt::record_answer(&wt, &owned_id, &owned_text),
            Note::Message => attempt::record_message(&wt, &owned_id, &owned_text),
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = recorded {
            tracing::warn!(id, error = %e, "cannot record the operator's {note:?}");
        }
        let key = match note {
            Note::Answer => id.to_string(),
            Note::Message => format!("{}{id}", crate::agent::driver::MESSAGE_PREFIX),
        };
        let _ = cur.answers.send((key, text.to_string()));
    }

    /// Handles one controller message; may return a message to send.
    async fn on_message(
        &mut self,
        m: v1::ControllerMessage,
    ) -> Result<Option<v1::SidecarMessage>, SidecarError> {
        match m.body {
            Some(In::Ack(a)) => self.journal.ack(a.seq)?,
            Some(In::Assign(a)) => self.on_assign(a)?,
            Some(In::Cancel(c)) => {
                if let Some(cur) = &self.current
                    && same_attempt(&cur.assignment.attempt, c.attempt.as_ref())
                {
                    let grace = if c.grace_ms == 0 {
                        self.cfg.stop_grace()
                    } else {
                        Duration::from_millis(u64::from(c.grace_ms))
                    };
                    tracing::info!(attempt = %cur.assignment.label(), reason = %c.reason, checkpoint = c.checkpoint, "cancel");
                    let stop = if c.checkpoint { Stop::Checkpoint { grace } } else { Stop::Cancel { grace } };
                    let _ = cur.stop.send(Some(stop));
                } else {
                    tracing::warn!(attempt = ?c.attempt, "cancel for an attempt not in hand");
                }
            }
            Some(In::Answer(a)) => {
                self.hand_to_attempt(a.attempt.as_ref(), Note::Answer, &a.question_id, &a.text).await
            }
            Some(In::Message(m)) => {
                self.hand_to_attempt(m.attempt.as_ref(), Note::Message, &m.message_id, &m.text).await
            }
            Some(In::LogRequest(r)) => {
                let mut answer = crate::log_serve::answer(&self.worktree, r).await;
                // Only the attempt in hand's secrets are known here; a
                // finished attempt's log is served as its worker wrote it.
                if let (Some(Body::LogChunk(chunk)), Some(redactor)) =
                    (answer.body.as_mut(), self.current.as_ref().and_then(|c| c.redactor.get()))
                {
                    redactor.redact_bytes(&mut chunk.data);
                }
                return Ok(Some(answer));
            }
            Some(In::VerifyMerge(v)) => {
                let place = crate::verify_job::Verifier {
                    repo: self.repo.clone(),
                    workspaces: self.workspaces.clone(),
                    worker_id: self.worker_id.clone(),
                    remote: self.remote.clone(),
                    exe: self.supervisor.clone(),
                    kernel: self.sandbox,
                    worker_user: self.cfg.worker_user.clone(),
                };
                let tx = self.verified_tx.clone();
                // Off the session loop: heartbeats go on while the tiers run.
                tokio::spawn(async move {
                    let _ = tx.send(crate::verify_job::run(place, v).await);
                });
            }
            Some(In::Drain(d)) => {
                tracing::info!(reason = %d.reason, "draining");
                self.draining = true;
            }
            Some(In::Welcome(_)) | None => tracing::warn!("unexpected message from controller"),
        }
        Ok(None)
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn same_attempt(held: &AttemptRef, r: Option<&v1::AttemptRef>) -> bool {
    r.and_then(|r| AttemptRef::try_from(r).ok())
        .is_some_and(|r| r.task == held.task && r.number == held.number)
}
