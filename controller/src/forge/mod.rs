//! The forge loop's outbound half: when a swarm with a `[forge]` completes
//! (or, with `pr = "task"`, as each task merges), its integration branch is
//! pushed to the remote from the repository the controller owns and one
//! pull request is opened or updated with the branch report.
//!
//! The forge is a peer, not a dependency: this task follows the
//! scheduler's committed-event feed, never holds the scheduler, and calls
//! the forge on its own time — one swarm at a time, retried with back-off
//! and the forge's rate-limit reset honoured. What a sync did goes back to
//! the scheduler as a command (`ForgeSynced`), so it is stored with the
//! swarm and shown wherever the swarm is. Every call is idempotent: the
//! push is a plain (never forced) update to the commit already recorded
//! or a fast-forward from it, and a pull request is found by its head
//! branch before one is opened, so a restart repeats nothing.

mod body;
mod conversation;
mod failed;
mod inbound;
mod land;
mod pull;
mod replies;
mod route;
pub mod secrets;
mod slash;
mod sync;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use swarm_core::SwarmId;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use inbound::check_listen as check_webhook_listen;
pub use secrets::SecretPolicy;

use crate::api::Shared;
use crate::api::auth::Security;
use crate::api::operator::OperatorApi;
use crate::scheduler::Command;
use crate::scheduler::views::ForgeTarget;
use crate::store::EventRow;

/// The controller's side of every swarm's `[forge]`.
#[derive(Debug, Clone)]
pub struct ForgeConfig {
    /// Which token sources a plan may name.
    pub secrets: SecretPolicy,
    /// The dashboard's address, for the pull request's link.
    pub dashboard: Option<String>,
    /// First retry after a failed sync; doubled up to `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// How often an open pull request's checks and state are read.
    pub poll: Duration,
    /// Where GitHub's webhook deliveries are received (`POST /github`);
    /// none by default. A delivery only wakes the poll of its swarms.
    pub webhook_listen: Option<SocketAddr>,
    /// The controller's certificate and key (HTTPS on `webhook_listen`)
    /// and `--insecure`. Its tokens and client CA are not used: a delivery
    /// is authenticated by its signature.
    pub webhook_security: Security,
}

impl Default for ForgeConfig {
    fn default() -> Self {
        ForgeConfig {
            secrets: SecretPolicy::default(),
            dashboard: None,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            poll: Duration::from_secs(30),
            webhook_listen: None,
            webhook_security: Security::default(),
        }
    }
}

/// Subscribes to the scheduler's events and starts the forge task, owned
/// by the controller's tracker and ended by its shutdown. Subscribed before
/// it returns, so nothing committed after is missed; what happened before
/// (a restart) is caught up from the swarms' recorded forge state.
pub async fn start(config: ForgeConfig, repo: PathBuf, shared: &Shared) -> Result<(), String> {
    let (reply, rx) = oneshot::channel();
    shared.scheduler.send_async(Command::Subscribe { reply }).await.map_err(|_| "the scheduler stopped")?;
    let (_, live) = rx.await.map_err(|_| "the scheduler stopped".to_string())?;
    let reads = Arc::new(OperatorApi::new(shared.clone()));
    let woken = match config.webhook_listen {
        Some(at) => inbound::serve(at, &config, repo.clone(), shared).await?.1,
        None => mpsc::channel(1).1,
    };
    let syncer = sync::Syncer::new(repo, &config, reads, shared.scheduler.clone());
    let run = run(
        syncer,
        config.poll,
        live,
        woken,
        shared.scheduler.clone(),
        shared.metrics.clone(),
        shared.shutdown.clone(),
    );
    shared.tasks.spawn(run.instrument(tracing::info_span!("forge")));
    Ok(())
}

/// What is due: each swarm's next sync and how many failed in a row.
#[derive(Default)]
struct Due {
    at: BTreeMap<SwarmId, (Instant, u32)>,
}

impl Due {
    /// Now, unless a retry is already waiting (a rate limit stays
    /// honoured); a poll that is not due yet is brought forward.
    fn soon(&mut self, swarm: SwarmId) {
        let entry = self.at.entry(swarm).or_insert((Instant::now(), 0));
        if entry.1 == 0 {
            entry.0 = entry.0.min(Instant::now());
        }
    }

    fn next(&self) -> Option<(SwarmId, Instant, u32)> {
        self.at.iter().min_by_key(|(_, (at, _))| *at).map(|(s, (at, n))| (s.clone(), *at, *n))
    }
}

async fn run(
    mut syncer: sync::Syncer,
    poll: Duration,
    mut live: broadcast::Receiver<Arc<EventRow>>,
    mut woken: mpsc::Receiver<SwarmId>,
    scheduler: flume::Sender<Command>,
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: CancellationToken,
) {
    let mut due = Due::default();
    // Whatever a restart interrupted: every swarm with a forge is looked at once.
    for target in targets(&scheduler, None).await {
        due.soon(target.swarm);
    }
    loop {
        metrics.forge.pending.set(due.at.len() as i64);
        let next = due.next();
        let wake =
            next.as_ref().map(|(_, at, _)| *at).unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            Some(swarm) = woken.recv() => due.soon(swarm),
            received = live.recv() => match received {
                Ok(event) => {
                    if wakes(&event)
                        && let Ok(id) = SwarmId::new(event.swarm.clone())
                    {
                        due.soon(id);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "the forge fell behind the event feed; looking at every swarm");
                    for target in targets(&scheduler, None).await {
                        due.soon(target.swarm);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tokio::time::sleep_until(wake), if next.is_some() => {
                let Some((swarm, _, failures)) = next else { continue };
                due.at.remove(&swarm);
                let Some(target) = targets(&scheduler, Some(swarm.clone())).await.pop() else { continue };
                let outcome = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    outcome = syncer.sync(&target, failures) => outcome,
                };
                metrics.forge.sync(outcome.result);
                if let Some(state) = outcome.state {
                    record(&scheduler, swarm.clone(), state).await;
                }
                if let Some(at) = outcome.retry {
                    due.at.insert(swarm, (at, failures.saturating_add(1)));
                } else if outcome.watching {
                    // An open pull request's checks and state, polled with
                    // conditional requests that cost no quota when unchanged.
                    due.at.insert(swarm, (Instant::now() + poll, 0));
                }
            }
        }
    }
}

/// Events after which a swarm may have something to push.
fn wakes(event: &EventRow) -> bool {
    matches!(event.kind.as_str(), "task.merged" | "swarm.state" | "swarm.resumed" | "task.replied")
}

async fn targets(scheduler: &flume::Sender<Command>, swarm: Option<SwarmId>) -> Vec<ForgeTarget> {
    let (reply, rx) = oneshot::channel();
    if scheduler.send_async(Command::ForgeTargets { swarm, reply }).await.is_err() {
        return Vec::new();
    }
    rx.await.ok().and_then(Result::ok).unwrap_or_default()
}

async fn record(scheduler: &flume::Sender<Command>, swarm: SwarmId, state: crate::scheduler::ForgeState) {
    let (reply, rx) = oneshot::channel();
    let sent = scheduler.send_async(Command::ForgeSynced { swarm: swarm.clone(), state, reply }).await;
    if sent.is_ok()
        && let Ok(Err(e)) = rx.await
    {
        tracing::warn!(%swarm, error = %e, "the forge's sync was not recorded");
    }
}
