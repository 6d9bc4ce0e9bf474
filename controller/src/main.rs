//! swarm-controller: parse flags, set up logging, run until Ctrl-C/SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

/// mimalloc returns the pages it frees to the system: glibc's malloc kept
/// the transient peak of a big swarm's creation turn (the parsed plan, its
/// rows and events), over a kilobyte and a half per task, for good.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc asks for transparent huge pages on its arenas, and it hands
/// freed memory back to the system: every reuse of a purged range then
/// faults in and zeroes a whole 2 MiB page. Creating a 20,000-task swarm
/// spent over a third of its time zeroing pages that way, and the resident
/// set stayed a fifth larger. The flag is the process's, so it also covers
/// arenas mapped before this call.
fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        // Only slower: the controller works the same with huge pages.
        eprintln!("swarm-controller: could not turn transparent huge pages off: {e}");
    }
}

#[derive(Debug, Parser)]
#[command(name = "swarm-controller", version, about = "The swarm control plane")]
struct Args {
    /// Address to serve the Sidecar and Operator APIs on.
    #[arg(long, env = "SWARM_LISTEN", default_value = "127.0.0.1:7420")]
    listen: SocketAddr,
    /// The repository the swarms work on.
    #[arg(long, env = "SWARM_REPO", default_value = ".")]
    repo: PathBuf,
    /// SQLite store; default <repo>/.git/swarm/swarm.db.
    #[arg(long, env = "SWARM_DB", conflicts_with = "store")]
    db: Option<PathBuf>,
    /// A PostgreSQL store (postgres://user@host:port/db) shared by several
    /// controllers: one leads, the others stand by (see README "High availability").
    #[arg(long, env = "SWARM_STORE")]
    store: Option<String>,
    /// The URL clients reach this controller at, told to them by standbys
    /// while it leads; default http://<listen address>.
    #[arg(long, env = "SWARM_ADVERTISE_URL", requires = "store")]
    advertise_url: Option<String>,
    /// How long the leader lease lasts unrenewed: the longest a dead
    /// leader keeps a standby waiting.
    #[arg(long, env = "SWARM_LEADER_LEASE_MS", default_value_t = 10_000, requires = "store")]
    leader_lease_ms: u64,
    /// Heartbeat interval given to sidecars.
    #[arg(long, env = "SWARM_HEARTBEAT_INTERVAL_MS", default_value_t = 15_000)]
    heartbeat_interval_ms: u64,
    /// How long an attempt survives without a word from its sidecar.
    #[arg(long, env = "SWARM_LEASE_TTL_MS", default_value_t = 60_000)]
    lease_ttl_ms: u64,
    /// Wait before a task whose attempt was lost is assigned again.
    #[arg(long, env = "SWARM_LOST_GRACE_MS", default_value_t = 2_000)]
    lost_grace_ms: u64,
    /// Grace between SIGINT, SIGTERM and SIGKILL when cancelling.
    #[arg(long, env = "SWARM_CANCEL_GRACE_MS", default_value_t = 5_000)]
    cancel_grace_ms: u64,
    /// Forget a worker that is gone and holds nothing after this long (its events stay).
    #[arg(long, env = "SWARM_FORGET_WORKERS_AFTER_SECS", default_value_t = 3600)]
    forget_workers_after_secs: u64,
    /// Forget a swarm (with its child swarms, their tasks, attempts and
    /// events) this long after it ended COMPLETED, FAILED or CANCELLED;
    /// the fleet's own events older than this go too. 0 keeps everything.
    #[arg(long, env = "SWARM_FORGET_FINISHED_AFTER_SECS", default_value_t = swarm_controller::DEFAULT_RETENTION.as_secs())]
    forget_finished_after_secs: u64,
    /// Cut a stream that has not said Hello within this time.
    #[arg(long, env = "SWARM_HELLO_TIMEOUT_MS", default_value_t = 5_000)]
    hello_timeout_ms: u64,
    /// Largest pack a remote sidecar may upload, in MiB.
    #[arg(long, env = "SWARM_MAX_PACK_MIB", default_value_t = 512)]
    max_pack_mib: usize,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "SWARM_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve plaintext grpc.health.v1 at ADDR for orchestrators' probes
    /// (service "" is liveness, "swarm.v1.OperatorService" readiness).
    #[arg(long, env = "SWARM_HEALTH_LISTEN")]
    health_listen: Option<SocketAddr>,
    /// Serve the read-only web dashboard at http(s)://ADDR/ (see README "Dashboard").
    #[arg(long, env = "SWARM_UI_LISTEN")]
    ui_listen: Option<SocketAddr>,
    /// Serve the MCP endpoint for orchestrating agents at http(s)://ADDR/mcp,
    /// with the Operator API's credentials (see README "Driving swarm from an agent").
    #[arg(long, env = "SWARM_MCP_LISTEN")]
    mcp_listen: Option<SocketAddr>,
    /// Server certificate chain (PEM): serve TLS. Needs --tls-key.
    #[arg(long, env = "SWARM_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long, env = "SWARM_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA (PEM) for client certificates (mTLS); a certificate's
    /// spiffe://swarm/<role>/<name> URI SAN names its identity.
    #[arg(long, env = "SWARM_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    /// Tokens file (TOML): hashed bearer tokens with roles (see `swarmctl token create`).
    #[arg(long, env = "SWARM_TOKENS")]
    tokens: Option<PathBuf>,
    /// Serve a non-loopback address without TLS or credentials: anyone who
    /// can reach the port may do anything, in the clear.
    #[arg(long, env = "SWARM_INSECURE")]
    insecure: bool,
    #[command(flatten)]
    notify: swarm_controller::notify::NotifyArgs,
    /// A source a plan's `[forge]` may read its token or webhook secret
    /// from: `env:NAME` or `file:/path`; repeat for more. None by default:
    /// a plan cannot make the controller send one of its files or
    /// variables to a forge the plan names.
    #[arg(long = "forge-secret", value_name = "SOURCE", env = "SWARM_FORGE_SECRETS", value_delimiter = ',')]
    forge_secrets: Vec<String>,
    /// How often an open pull request's checks and state are read (with
    /// conditional requests, which cost no rate limit when unchanged).
    #[arg(long, env = "SWARM_FORGE_POLL_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..))]
    forge_poll_ms: u64,
    /// Receive GitHub's webhook deliveries at http(s)://ADDR/github: a
    /// check, status, pull request, review or comment signed with a plan's
    /// `[forge] webhook_secret` wakes that swarm's poll at once. A
    /// non-loopback ADDR needs --tls-cert (or --insecure).
    #[arg(long, env = "SWARM_FORGE_WEBHOOK_LISTEN")]
    forge_webhook_listen: Option<SocketAddr>,
    /// How READY tasks are ordered: `critical-path` (priority, then the
    /// longest remaining chain of work, then readiness) or `fifo`
    /// (readiness alone: the order before, a benchmark baseline and a
    /// diagnostic).
    #[arg(long, env = "SWARM_SCHEDULE_ORDER", default_value = "critical-path", value_parser = ["critical-path", "fifo"])]
    schedule_order: String,
    /// Log format.
    #[arg(long, env = "SWARM_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    log_format: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    without_huge_pages();
    let args = Args::parse();
    let telemetry =
        swarm_telemetry::init("swarm-controller", args.log_format == "json").map_err(anyhow::Error::msg)?;
    let standby = args.standby()?;
    let health_listen = args.health_listen;
    let config = args.into_config()?;
    let shutdown = CancellationToken::new();
    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        signals.cancel();
    });
    let readiness = match health_listen {
        Some(addr) => swarm_controller::probes::serve(addr, shutdown.clone()).await?.1,
        None => swarm_controller::probes::Readiness::detached(),
    };
    // Scripts and tests read this line for the bound port.
    let ready = |addr| {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "listening on {addr}");
        let _ = out.flush();
    };
    let result = match standby {
        Some((store_url, advertise_url, lease_ttl)) => {
            let ha = swarm_controller::leader::HaConfig { store_url, advertise_url, lease_ttl, readiness };
            swarm_controller::leader::run(config, ha, shutdown, ready).await
        }
        None => {
            let serving = |addr| {
                ready(addr);
                readiness.set(true);
            };
            swarm_controller::run(config, shutdown, serving).await
        }
    }
    .context("swarm-controller");
    // Export the last spans; the exporter needs the runtime, so not on it.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    result
}

impl Args {
    /// With `--store`: the shared store's URL, the URL standbys hand to
    /// clients, and the leader's lease, each checked.
    fn standby(&self) -> anyhow::Result<Option<(String, Option<String>, Duration)>> {
        let Some(store_url) = self.store.clone() else { return Ok(None) };
        if self.leader_lease_ms < 100 {
            anyhow::bail!("--leader-lease-ms must be at least 100");
        }
        if let Some(url) = &self.advertise_url {
            // Standbys hand it to clients in a header, which they then dial.
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.len() <= "https://".len() || !url.bytes().all(|b| b.is_ascii_graphic()) {
                anyhow::bail!(
                    "--advertise-url {url:?} must be an http:// or https:// URL of printable ASCII without spaces"
                );
            }
        }
        Ok(Some((store_url, self.advertise_url.clone(), Duration::from_millis(self.leader_lease_ms))))
    }

    /// The forge's settings: secrets only from the sources the flags
    /// allow, the dashboard's URL for pull request bodies.
    fn forge_config(&self) -> anyhow::Result<swarm_controller::forge::ForgeConfig> {
        Ok(swarm_controller::forge::ForgeConfig {
            secrets: swarm_controller::forge::SecretPolicy::from_flags(&self.forge_secrets)
                .map_err(anyhow::Error::msg)?,
            dashboard: self.ui_listen.map(|at| {
                let scheme = if self.tls_cert.is_some() { "https" } else { "http" };
                format!("{scheme}://{at}/")
            }),
            poll: Duration::from_millis(self.forge_poll_ms),
            webhook_listen: self.forge_webhook_listen,
            webhook_security: swarm_controller::Security {
                tls_cert: self.tls_cert.clone(),
                tls_key: self.tls_key.clone(),
                insecure: self.insecure,
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn into_config(self) -> anyhow::Result<swarm_controller::Config> {
        if self.heartbeat_interval_ms == 0 || self.lease_ttl_ms <= self.heartbeat_interval_ms {
            anyhow::bail!("--lease-ttl-ms must be greater than --heartbeat-interval-ms (and both non-zero)");
        }
        let notify = self.notify.config()?;
        let forge = self.forge_config()?;
        Ok(swarm_controller::Config {
            listen: self.listen,
            repo: self.repo,
            db: self.db,
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms),
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            lost_grace: Duration::from_millis(self.lost_grace_ms),
            cancel_grace: Duration::from_millis(self.cancel_grace_ms),
            metrics_listen: self.metrics_listen,
            forget_workers_after: Duration::from_secs(self.forget_workers_after_secs),
            forget_finished_after: (self.forget_finished_after_secs > 0)
                .then(|| Duration::from_secs(self.forget_finished_after_secs)),
            hello_timeout: Duration::from_millis(self.hello_timeout_ms.max(1)),
            max_pack_bytes: self.max_pack_mib.saturating_mul(1 << 20),
            security: swarm_controller::Security {
                tls_cert: self.tls_cert,
                tls_key: self.tls_key,
                client_ca: self.client_ca,
                tokens_file: self.tokens,
                tokens: Vec::new(),
                insecure: self.insecure,
            },
            ui_listen: self.ui_listen,
            mcp_listen: self.mcp_listen,
            notify,
            forge,
            schedule_order: swarm_controller::scheduler::ScheduleOrder::parse(&self.schedule_order)
                .unwrap_or_default(),
        })
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
