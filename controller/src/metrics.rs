//! Prometheus metrics (prometheus-client) and the `GET /metrics` endpoint.
//!
//! The scheduler thread and the API update the families with atomic
//! operations; [`serve`] renders the registry in the OpenMetrics text format
//! from a tiny HTTP/1.0 responder (one request per connection).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use swarm_core::TaskState;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

type StateLabel = Vec<(&'static str, &'static str)>;
/// A webhook endpoint by its host: never the full URL, whose path or
/// query may hold the hook's token.
pub type EndpointLabel = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    tasks: Family<StateLabel, Gauge>,
    /// `tasks`' gauge of each state, in `TaskState::ALL` order: every
    /// transition moves a task between two, and the family's own lookup (a
    /// label vector built and hashed under a lock) was ~3% of the scheduler
    /// thread. Made up front, so every state is reported from the start.
    tasks_by_state: Vec<Gauge>,
    pub workers_connected: Gauge,
    pub heartbeat_lag: Histogram,
    pub assignment_latency: Histogram,
    pub merge_duration: Histogram,
    pub batch_rows: Histogram,
    pub commit_latency: Histogram,
    pub sync_latency: Histogram,
    pub retries: Counter,
    pub fenced_reports: Counter,
    pub refused_hellos: Counter,
    pub sessions_closed_full: Counter,
    pub swarms_stalled: Gauge,
    /// Requests refused at the edge, by gRPC code.
    pub auth_denied: Family<StateLabel, Counter>,
    /// Agent tokens by kind (input, output, cache_read, cache_creation).
    pub agent_tokens: Family<StateLabel, Counter>,
    /// Agent spend; a float counter of dollars.
    pub agent_cost_usd: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Usage limits (accounts or workers) currently holding agent tasks back.
    pub rate_limits_active: Gauge,
    pub rate_limited_attempts: Counter,
    /// Merge queue verifications sent to sidecars (retries included).
    pub merge_queue_verifications: Counter,
    /// Tasks in the merge queue's latest batch or bisection half.
    pub merge_queue_batch_size: Gauge,
    pub notify: NotifyMetrics,
    pub forge: ForgeMetrics,
}

/// GitHub's webhook deliveries (`forge/inbound.rs`).
#[derive(Default)]
pub struct ForgeMetrics {
    /// Deliveries by outcome: accepted, duplicate, bad_signature,
    /// malformed, too_large, ignored.
    pub webhooks: Family<StateLabel, Counter>,
    /// Swarms not woken because the forge loop's queue was full (their
    /// next poll catches up).
    pub wakes_dropped: Counter,
    /// Syncs of a swarm's branch and pull request, by outcome: ok,
    /// retrying (a failure time may mend), refused (waits for people).
    pub syncs: Family<StateLabel, Counter>,
    /// Swarms with a sync, retry or poll scheduled: the forge's pending calls.
    pub pending: Gauge,
}

impl ForgeMetrics {
    /// Counts one delivery that ended as `outcome`.
    pub fn webhook(&self, outcome: &'static str) {
        self.webhooks.get_or_create(&vec![("outcome", outcome)]).inc();
    }

    /// Counts one sync that ended as `outcome`.
    pub fn sync(&self, outcome: &'static str) {
        self.syncs.get_or_create(&vec![("outcome", outcome)]).inc();
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "forge_syncs",
            "Syncs of swarms' branches and pull requests, by outcome",
            self.syncs.clone(),
        );
        registry.register(
            "forge_pending",
            "Swarms with a forge sync, retry or poll scheduled",
            self.pending.clone(),
        );
        registry.register(
            "forge_webhooks",
            "GitHub webhook deliveries received, by outcome",
            self.webhooks.clone(),
        );
        registry.register(
            "forge_webhook_wakes_dropped",
            "Swarms a webhook did not wake because the forge loop's queue was full",
            self.wakes_dropped.clone(),
        );
    }
}

/// The operator webhooks' counts, per endpoint (`notify/`).
#[derive(Default)]
pub struct NotifyMetrics {
    /// Notifications the endpoint accepted (a 2xx).
    pub delivered: Family<EndpointLabel, Counter>,
    /// Notifications given up on: attempts exhausted or refused for good.
    pub failed: Family<EndpointLabel, Counter>,
    /// Attempts that failed (each retry counts), so a flapping endpoint shows before it loses one.
    pub attempts_failed: Family<EndpointLabel, Counter>,
    /// Oldest notifications dropped because the endpoint's queue was full.
    pub dropped: Family<EndpointLabel, Counter>,
    pub queued: Family<EndpointLabel, Gauge>,
    /// Events the notifier missed because it fell behind the scheduler's feed.
    pub lagged: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("swarm");
        let secs = || Histogram::new(exponential_buckets(0.001, 2.0, 18));
        let tasks: Family<StateLabel, Gauge> = Family::default();
        let tasks_by_state = TaskState::ALL
            .iter()
            .map(|s| tasks.get_or_create(&vec![("state", s.as_str())]).clone())
            .collect();
        let m = Metrics {
            tasks,
            tasks_by_state,
            workers_connected: Gauge::default(),
            heartbeat_lag: secs(),
            assignment_latency: secs(),
            merge_duration: secs(),
            batch_rows: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            commit_latency: secs(),
            sync_latency: secs(),
            retries: Counter::default(),
            fenced_reports: Counter::default(),
            refused_hellos: Counter::default(),
            sessions_closed_full: Counter::default(),
            swarms_stalled: Gauge::default(),
            auth_denied: Family::default(),
            agent_tokens: Family::default(),
            agent_cost_usd: Counter::default(),
            rate_limits_active: Gauge::default(),
            rate_limited_attempts: Counter::default(),
            merge_queue_verifications: Counter::default(),
            merge_queue_batch_size: Gauge::default(),
            notify: NotifyMetrics::default(),
            forge: ForgeMetrics::default(),
            registry: Registry::default(),
        };
        m.register(&mut registry);
        m.notify.register(&mut registry);
        m.forge.register(&mut registry);
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// The scheduler's, the store's and the API's own series.
    fn register(&self, registry: &mut Registry) {
        registry.register("tasks", "Tasks by state", self.tasks.clone());
        registry.register(
            "workers_connected",
            "Sidecars with an open stream",
            self.workers_connected.clone(),
        );
        registry.register(
            "heartbeat_lag_seconds",
            "Time since a sidecar's previous message, at each message",
            self.heartbeat_lag.clone(),
        );
        registry.register(
            "assignment_latency_seconds",
            "From READY to assigned",
            self.assignment_latency.clone(),
        );
        registry.register(
            "merge_duration_seconds",
            "Merge time of one merger batch",
            self.merge_duration.clone(),
        );
        registry.register("store_batch_rows", "Rows per group commit", self.batch_rows.clone());
        registry.register("store_commit_seconds", "Group commit latency", self.commit_latency.clone());
        registry.register(
            "store_sync_seconds",
            "WAL sync latency, one per group of commits released together (SQLite only)",
            self.sync_latency.clone(),
        );
        registry.register("retries", "Automatic retries after a failed attempt", self.retries.clone());
        registry.register("fenced_reports", "Stale reports fenced", self.fenced_reports.clone());
        registry.register(
            "refused_hellos",
            "Hellos refused because another sidecar holds the worker id",
            self.refused_hellos.clone(),
        );
        registry.register(
            "sessions_closed_queue_full",
            "Sidecar sessions closed because their outbound queue was full",
            self.sessions_closed_full.clone(),
        );
        registry.register(
            "swarms_stalled",
            "Swarms in which nothing can move (STALLED)",
            self.swarms_stalled.clone(),
        );
        registry.register(
            "auth_denied",
            "Requests refused by authentication or authorization",
            self.auth_denied.clone(),
        );
        registry.register(
            "agent_tokens",
            "Tokens spent by agent attempts, by kind",
            self.agent_tokens.clone(),
        );
        registry.register("agent_cost_usd", "Dollars spent by agent attempts", self.agent_cost_usd.clone());
        registry.register(
            "rate_limits_active",
            "Agent usage limits (per account label or worker) holding tasks back until their reset",
            self.rate_limits_active.clone(),
        );
        registry.register(
            "rate_limited_attempts",
            "Agent attempts that ended on a usage limit",
            self.rate_limited_attempts.clone(),
        );
        registry.register(
            "merge_queue_verifications",
            "Merged trees sent to a sidecar for integration verify",
            self.merge_queue_verifications.clone(),
        );
        registry.register(
            "merge_queue_batch_size",
            "Tasks verified together in the merge queue's latest verification",
            self.merge_queue_batch_size.clone(),
        );
    }
}

impl NotifyMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "notify_delivered",
            "Webhook notifications the endpoint accepted",
            self.delivered.clone(),
        );
        registry.register(
            "notify_failed",
            "Webhook notifications given up on (attempts exhausted or refused)",
            self.failed.clone(),
        );
        registry.register(
            "notify_attempts_failed",
            "Webhook delivery attempts that failed, retries included",
            self.attempts_failed.clone(),
        );
        registry.register(
            "notify_dropped",
            "Webhook notifications dropped, oldest first, from a full endpoint queue",
            self.dropped.clone(),
        );
        registry.register("notify_queued", "Webhook notifications waiting for delivery", self.queued.clone());
        registry.register(
            "notify_lagged",
            "Events the webhook notifier skipped because it fell behind the event feed",
            self.lagged.clone(),
        );
    }
}

impl Metrics {
    /// A task now counts in `to` (and no longer in `from`, if it had one).
    pub fn task_state(&self, from: Option<TaskState>, to: TaskState) {
        if let Some(from) = from {
            self.state_gauge(from).dec();
        }
        self.state_gauge(to).inc();
    }

    fn state_gauge(&self, state: TaskState) -> &Gauge {
        &self.tasks_by_state[state.index()]
    }

    /// Counts what one finished agent attempt spent.
    pub fn agent_usage(&self, u: &swarm_core::Usage) {
        for (kind, n) in [
            ("input", u.input_tokens),
            ("output", u.output_tokens),
            ("cache_read", u.cache_read_tokens),
            ("cache_creation", u.cache_creation_tokens),
        ] {
            self.agent_tokens.get_or_create(&vec![("kind", kind)]).inc_by(n);
        }
        self.agent_cost_usd.inc_by(u.cost_usd);
    }

    pub fn observe(h: &Histogram, d: Duration) {
        h.observe(d.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Binds `addr` and answers `GET /metrics` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = tokio::select! {
                _ = shutdown.cancelled() => return,
                c = listener.accept() => match c {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept failed");
                        continue;
                    }
                },
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let reply = tokio::time::timeout(Duration::from_secs(5), respond(&mut conn, &metrics)).await;
                if let Ok(Err(e)) = reply {
                    tracing::debug!(error = %e, "metrics request failed");
                }
            });
        }
    });
    Ok(bound)
}

async fn respond(conn: &mut tokio::net::TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let path = head.lines().next().and_then(|l| l.strip_prefix("GET ")).and_then(|l| l.split(' ').next());
    let (status, kind, body) = match path {
        Some("/metrics") => {
            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics.render())
        }
        _ => ("404 Not Found", "text/plain", "only GET /metrics\n".to_string()),
    };
    let reply = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(reply.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn serves_metrics_and_404() {
        let metrics = Arc::new(Metrics::default());
        metrics.task_state(None, TaskState::Ready);
        metrics.task_state(Some(TaskState::Ready), TaskState::Running);
        metrics.retries.inc();
        let stop = CancellationToken::new();
        let addr = serve(SocketAddr::from(([127, 0, 0, 1], 0)), metrics, stop.clone()).await.unwrap();
        let get = |path: &'static str| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
            let mut s = String::new();
            c.read_to_string(&mut s).await.unwrap();
            s
        };
        let ok = get("/metrics").await;
        assert!(ok.starts_with("HTTP/1.0 200 OK"), "{ok}");
        assert!(ok.contains("swarm_tasks{state=\"RUNNING\"} 1"), "{ok}");
        assert!(ok.contains("swarm_tasks{state=\"READY\"} 0"), "{ok}");
        assert!(ok.contains("swarm_retries_total 1"), "{ok}");
        assert!(ok.ends_with("# EOF\n"), "{ok}");
        assert!(get("/other").await.starts_with("HTTP/1.0 404"));
        stop.cancel();
    }
}
