//! swarm-controller: owns task assignment over a task graph and merge
//! integration of the workers' branches.
//!
//! [`start`] opens the store, rebuilds the scheduler from it, starts the
//! merger and the scheduler threads, and serves the Sidecar and
//! Operator APIs. See ARCHITECTURE.md for how the parts fit.

pub mod api;
pub mod audit;
pub mod error;
pub mod forge;
pub mod leader;
pub mod mcp;
pub mod merger;
pub mod metrics;
pub mod notify;
pub mod probes;
pub mod scheduler;
/// The store is its own crate; the scheduler names it `crate::store`.
pub use swarm_store as store;
pub mod supervise;
pub mod ui;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use swarm_proto::v1::operator_service_server::OperatorServiceServer;
use swarm_proto::v1::sidecar_service_server::SidecarServiceServer;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use api::auth::Security;
pub use error::{ControllerError, SchedError};
pub use scheduler::DEFAULT_RETENTION;
use scheduler::{Command, Scheduler, Timing};
use store::{Location, Store};
use supervise::Supervisor;

use swarm_proto::limits::MAX_MESSAGE_BYTES;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The repository the swarm works on (its `.git` holds the store by
    /// default, and the integration branches).
    pub repo: PathBuf,
    /// The SQLite file; default `<repo>/.git/swarm/swarm.db`.
    pub db: Option<PathBuf>,
    pub heartbeat_interval: Duration,
    pub lease_ttl: Duration,
    pub lost_grace: Duration,
    pub cancel_grace: Duration,
    /// Where to serve Prometheus `GET /metrics`; none by default.
    pub metrics_listen: Option<SocketAddr>,
    /// A worker that is gone and holds nothing is forgotten after this.
    pub forget_workers_after: Duration,
    /// A swarm that ended is forgotten, rows and events, after this; `None`
    /// keeps every swarm.
    pub forget_finished_after: Option<Duration>,
    /// A stream that has not said Hello by then is cut.
    pub hello_timeout: Duration,
    /// Largest pack a remote sidecar may upload.
    pub max_pack_bytes: usize,
    /// TLS and credentials; none (anonymous callers, loopback only) by default.
    pub security: Security,
    /// Where to serve the read-only web dashboard; none by default.
    pub ui_listen: Option<SocketAddr>,
    /// Where to serve the MCP endpoint (`/mcp`) for orchestrating agents;
    /// none by default.
    pub mcp_listen: Option<SocketAddr>,
    /// Operator webhooks; none by default.
    pub notify: notify::NotifyConfig,
    /// Pushes and pull requests for swarms whose plan has a `[forge]`.
    pub forge: forge::ForgeConfig,
    /// How READY tasks are ordered: critical path (the default) or FIFO,
    /// the order before it, kept as a benchmark baseline and diagnostic.
    pub schedule_order: scheduler::ScheduleOrder,
}

impl Config {
    /// Loopback on an ephemeral port, the default timings.
    pub fn local(repo: PathBuf) -> Config {
        let t = Timing::default();
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            repo,
            db: None,
            heartbeat_interval: t.heartbeat_interval,
            lease_ttl: t.lease_ttl,
            lost_grace: t.lost_grace,
            cancel_grace: t.cancel_grace,
            metrics_listen: None,
            forget_workers_after: t.forget_workers_after,
            forget_finished_after: t.forget_finished_after,
            hello_timeout: api::sidecar::HELLO_TIMEOUT,
            max_pack_bytes: api::sidecar::MAX_PACK_BYTES,
            security: Security::default(),
            ui_listen: None,
            mcp_listen: None,
            notify: notify::NotifyConfig::default(),
            forge: forge::ForgeConfig::default(),
            schedule_order: scheduler::ScheduleOrder::default(),
        }
    }

    fn timing(&self) -> Timing {
        Timing {
            heartbeat_interval: self.heartbeat_interval,
            // A fifth of the interval spreads a fleet started together.
            heartbeat_jitter: self.heartbeat_interval / 5,
            lease_ttl: self.lease_ttl,
            lost_grace: self.lost_grace,
            cancel_grace: self.cancel_grace,
            forget_workers_after: self.forget_workers_after,
            forget_finished_after: self.forget_finished_after,
        }
    }
}

/// A running controller.
pub struct Controller {
    addr: SocketAddr,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<Result<(), ControllerError>>,
    scheduler: Option<JoinHandle<()>>,
    supervisor: Supervisor,
    commands: flume::Sender<Command>,
    tasks: TaskTracker,
    metrics_addr: Option<SocketAddr>,
    ui_addr: Option<SocketAddr>,
    mcp_addr: Option<SocketAddr>,
}

/// Opens the store, rebuilds state and starts serving.
pub async fn start(config: Config) -> Result<Controller, ControllerError> {
    start_with(config, None, None).await
}

/// [`start`] on a listener already bound (a standby that won the lease
/// keeps its port) and with the store at `store` (default: the SQLite file
/// of `config.db` or the repository's).
pub async fn start_with(
    config: Config,
    listener: Option<std::net::TcpListener>,
    store: Option<Location>,
) -> Result<Controller, ControllerError> {
    // Refuse an unsafe listener before touching the store.
    let server_auth = check_listeners(&config)?;
    let (workdir, db) = locate(&config)?;
    let location = store.unwrap_or_else(|| Location::Sqlite(db.clone()));

    let (commands, results, inbox) = scheduler::inbox(scheduler::COMMAND_QUEUE);
    let shutdown = CancellationToken::new();
    let supervisor = Supervisor::new(shutdown.clone());
    let (merger, merger_thread) = merger::spawn(&workdir, scheduler::merger_sink(results))?;
    // Opened and loaded off the async threads: a blocking Postgres client
    // may neither run nor be dropped on them.
    let mut scheduler = tokio::task::spawn_blocking({
        let (location, timing, merger) = (location.clone(), config.timing(), merger.clone());
        move || Scheduler::recover(Store::open_at(&location)?, timing, merger)
    })
    .await
    .map_err(|e| ControllerError::Thread(e.to_string()))??;
    let metrics = Arc::new(metrics::Metrics::default());
    scheduler.set_metrics(metrics.clone());
    scheduler.set_schedule_order(config.schedule_order);
    let started = scheduler.started();
    let scheduler = supervisor.spawn("scheduler", move || scheduler.run(inbox))?;
    supervisor.spawn("merger", move || {
        merger_thread.join().map_err(|_| ControllerError::Thread("the merger panicked".into()))
    })?;

    let listen_err = |source| ControllerError::Listen { addr: config.listen.to_string(), source };
    let listener = match listener {
        Some(bound) => tokio::net::TcpListener::from_std(bound).map_err(listen_err)?,
        None => tokio::net::TcpListener::bind(config.listen).await.map_err(listen_err)?,
    };
    let addr = listener
        .local_addr()
        .map_err(|source| ControllerError::Listen { addr: config.listen.to_string(), source })?;
    let metrics_addr = match config.metrics_listen {
        Some(at) => Some(
            metrics::serve(at, metrics.clone(), shutdown.clone())
                .await
                .map_err(|source| ControllerError::Listen { addr: at.to_string(), source })?,
        ),
        None => None,
    };
    let tasks = TaskTracker::new();
    // Before the API serves: no swarm can be created, nor wait, unheard.
    notify::start(config.notify.clone(), &commands, metrics.clone(), &tasks, shutdown.clone())
        .await
        .map_err(ControllerError::Notify)?;
    let shared = api::Shared {
        scheduler: commands.clone(),
        merger,
        db_path: Arc::new(db),
        store: Arc::new(location.clone()),
        started,
        shutdown: shutdown.clone(),
        tasks: tasks.clone(),
        metrics,
        logs: Arc::default(),
    };
    forge::start(config.forge.clone(), workdir.clone(), &shared).await.map_err(ControllerError::Thread)?;
    let authenticator = Arc::new(server_auth.authenticator);
    let (ui_addr, mcp_addr) = serve_web(&config, &shared, &authenticator, &shutdown).await?;
    let tls = server_auth.tls.is_some();
    let grpc =
        Grpc { config: &config, shared, authenticator, tls: server_auth.tls, shutdown: shutdown.clone() };
    let server = serve_grpc(grpc, listener, supervisor.clone()).await?;
    tracing::info!(%addr, tls, metrics = ?metrics_addr, store = %location, "controller serving");
    Ok(Controller {
        addr,
        shutdown,
        server,
        scheduler: Some(scheduler),
        supervisor,
        commands,
        tasks,
        metrics_addr,
        ui_addr,
        mcp_addr,
    })
}

/// Every listener the configuration asks for, checked against its
/// security settings (none serves in the clear off loopback unless told
/// to); the gRPC listener's authentication and TLS.
fn check_listeners(config: &Config) -> Result<swarm_auth::ServerAuth, ControllerError> {
    let server_auth = config.security.prepare(config.listen).map_err(ControllerError::Security)?;
    if let Some(at) = config.ui_listen {
        ui::check_listen(at, &config.security).map_err(ControllerError::Security)?;
    }
    if let Some(at) = config.mcp_listen {
        mcp::check_listen(at, &config.security).map_err(ControllerError::Security)?;
    }
    if let Some(at) = config.forge.webhook_listen {
        forge::check_webhook_listen(at, &config.security).map_err(ControllerError::Security)?;
    }
    Ok(server_auth)
}

/// The repository's work tree (where the merger works) and the store's
/// default file, under its common git directory.
fn locate(config: &Config) -> Result<(PathBuf, PathBuf), ControllerError> {
    let repo_err =
        |reason: String| ControllerError::Repository { path: config.repo.display().to_string(), reason };
    let repo = git2::Repository::open(&config.repo).map_err(|e| repo_err(e.message().to_string()))?;
    let workdir = repo.workdir().map(|p| p.to_path_buf()).unwrap_or_else(|| repo.path().to_path_buf());
    let db = config.db.clone().unwrap_or_else(|| repo.commondir().join("swarm").join("swarm.db"));
    Ok((workdir, db))
}

/// The dashboard and the MCP endpoint, where configured.
async fn serve_web(
    config: &Config,
    shared: &api::Shared,
    authenticator: &Arc<swarm_auth::Authenticator>,
    shutdown: &CancellationToken,
) -> Result<(Option<SocketAddr>, Option<SocketAddr>), ControllerError> {
    let listen_err = |at: SocketAddr| move |source| ControllerError::Listen { addr: at.to_string(), source };
    let ui_addr = match config.ui_listen {
        Some(at) => Some(
            ui::serve(at, shared.clone(), authenticator.clone(), &config.security, shutdown.clone())
                .await
                .map_err(listen_err(at))?,
        ),
        None => None,
    };
    let mcp_addr = match config.mcp_listen {
        Some(at) => Some(
            mcp::serve(at, shared.clone(), authenticator.clone(), &config.security, shutdown.clone())
                .await
                .map_err(listen_err(at))?,
        ),
        None => None,
    };
    Ok((ui_addr, mcp_addr))
}

/// What the gRPC server is made of.
struct Grpc<'c> {
    config: &'c Config,
    shared: api::Shared,
    authenticator: Arc<swarm_auth::Authenticator>,
    tls: Option<tonic::transport::ServerTlsConfig>,
    shutdown: CancellationToken,
}

/// The Sidecar and Operator APIs, health and reflection, behind the
/// authentication layer, served on `listener` until shutdown.
async fn serve_grpc(
    grpc: Grpc<'_>,
    listener: tokio::net::TcpListener,
    served: Supervisor,
) -> Result<tokio::task::JoinHandle<Result<(), ControllerError>>, ControllerError> {
    let Grpc { config, shared, authenticator, tls, shutdown } = grpc;
    let auth_layer = api::auth::AuthLayer::new(authenticator, shared.clone());
    let sidecar = SidecarServiceServer::new(api::sidecar::SidecarApi::new(
        shared.clone(),
        config.hello_timeout,
        config.max_pack_bytes,
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES);
    let operator = OperatorServiceServer::new(api::operator::OperatorApi::new(shared))
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    // grpc_health_probe and grpcurl work without the .proto files.
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<SidecarServiceServer<api::sidecar::SidecarApi>>().await;
    health_reporter.set_serving::<OperatorServiceServer<api::operator::OperatorApi>>().await;
    health_reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(swarm_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ControllerError::Thread(format!("reflection: {e}")))?;
    // Nagle off on every accepted connection: tonic's `tcp_nodelay` only
    // applies to listeners it binds itself, and with Nagle a small message
    // (an Assign, an Ack) can sit out the peer's 40 ms delayed ACK.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).map_err(|e| ControllerError::Security(format!("TLS: {e}")))?;
    }
    Ok(tokio::spawn(async move {
        builder
            .http2_keepalive_interval(Some(Duration::from_secs(20)))
            .tcp_nodelay(true)
            .layer(auth_layer)
            .add_service(health)
            .add_service(reflection)
            .add_service(sidecar)
            .add_service(operator)
            .serve_with_incoming_shutdown(incoming, shutdown.cancelled())
            .await
            .map_err(ControllerError::from)?;
        served.check()
    }))
}

impl Controller {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where `GET /metrics` is served, when `metrics_listen` was set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where the dashboard is served, when `ui_listen` was set.
    pub fn ui_addr(&self) -> Option<SocketAddr> {
        self.ui_addr
    }

    /// Where `/mcp` is served, when `mcp_listen` was set.
    pub fn mcp_addr(&self) -> Option<SocketAddr> {
        self.mcp_addr
    }

    /// Completes when the controller stops on its own: a supervised thread
    /// (scheduler, merger) ended; [`Controller::shutdown`] then says why.
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.shutdown.clone().cancelled_owned()
    }

    /// Stops serving, ends every stream, and stops the scheduler after its
    /// last commit. An error if a supervised thread had failed.
    pub async fn shutdown(mut self) -> Result<(), ControllerError> {
        self.shutdown.cancel();
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.tasks.wait()).await;
        let served = match tokio::time::timeout(Duration::from_secs(10), &mut self.server).await {
            Ok(joined) => joined.map_err(|e| ControllerError::Thread(e.to_string()))?,
            Err(_) => {
                self.server.abort();
                Ok(())
            }
        };
        let _ = self.commands.send_async(Command::Shutdown).await;
        if let Some(thread) = self.scheduler.take() {
            // The supervisor records how it ended.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.supervisor.check()?;
        served
    }
}

/// Runs until `shutdown` is cancelled: what `main` calls.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ControllerError> {
    let controller = start(config).await?;
    on_ready(controller.local_addr());
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = controller.stopped() => {}
    }
    controller.shutdown().await
}
