//! High availability over a shared Postgres store: several controllers,
//! one leader.
//!
//! Each controller binds its port at once and competes for the lease
//! ([`lease`]). A standby serves health and answers everything else with
//! UNAVAILABLE and the leader's URL ([`standby`]), polling the lease a few
//! times per TTL. The winner stops its standby server, opens the store
//! fenced by its new epoch, loads the snapshot and serves on the same port.
//! The leader renews the lease every third of the TTL; when a renewal finds
//! the epoch gone, or no renewal has succeeded for three quarters of the
//! TTL (so it stops before a standby can win), it steps down: it stops
//! serving and the process exits with an error, for its supervisor to
//! restart it as a standby. A commit the store refuses for a later epoch
//! stops it the same way.

pub use swarm_store::lease;
pub mod standby;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::ControllerError;
use crate::store::{Location, StoreError};
use crate::{Config, Controller};
use lease::{Claim, Lease};
use standby::{LeaderUrl, Standby};

#[derive(Debug, Clone)]
pub struct HaConfig {
    /// `postgres://user@host:port/db`.
    pub store_url: String,
    /// The URL clients reach this controller at; `http://<bound address>`
    /// by default.
    pub advertise_url: Option<String>,
    /// How long a lease lasts without renewal: the longest a dead leader
    /// blocks a standby.
    pub lease_ttl: Duration,
    /// Ready only while leading: orchestrators route to the leader.
    pub readiness: crate::probes::Readiness,
}

/// Runs until `shutdown` (then releases the lease) or until this
/// controller is deposed (then returns [`StoreError::Fenced`]).
pub async fn run(
    config: Config,
    ha: HaConfig,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ControllerError> {
    crate::store::postgres::config(&ha.store_url)?;
    let server_auth = config.security.prepare(config.listen).map_err(ControllerError::Security)?;
    let listen_err = |source| ControllerError::Listen { addr: config.listen.to_string(), source };
    let listener = std::net::TcpListener::bind(config.listen).map_err(listen_err)?;
    listener.set_nonblocking(true).map_err(listen_err)?;
    let addr = listener.local_addr().map_err(listen_err)?;
    let advertise = ha.advertise_url.clone().unwrap_or_else(|| format!("http://{addr}"));
    on_ready(addr);

    let leader: LeaderUrl = Arc::new(RwLock::new(String::new()));
    let standby =
        Standby::serve(listener.try_clone().map_err(listen_err)?, server_auth.tls.clone(), leader.clone())
            .await?;
    let won = campaign(&ha, &advertise, &leader, &shutdown).await;
    standby.stop().await;
    let Some((lease, epoch)) = won? else { return Ok(()) };

    let location = Location::Postgres { url: ha.store_url.clone(), epoch };
    let controller = crate::start_with(config, Some(listener), Some(location)).await?;
    tracing::info!(epoch, %advertise, "leading");
    ha.readiness.set(true);
    let led = lead(controller, lease, epoch, ha.lease_ttl, shutdown).await;
    ha.readiness.set(false);
    led
}

/// Polls the lease until this controller wins it (`Some`) or `shutdown`.
#[tracing::instrument(name = "campaign", skip_all, fields(advertise))]
async fn campaign(
    ha: &HaConfig,
    advertise: &str,
    leader: &LeaderUrl,
    shutdown: &CancellationToken,
) -> Result<Option<(Lease, i64)>, ControllerError> {
    let poll = (ha.lease_ttl / 4).max(Duration::from_millis(50));
    let mut lease: Option<Lease> = None;
    loop {
        let (url, advertise_url, ttl) = (ha.store_url.clone(), advertise.to_string(), ha.lease_ttl);
        let attempt = tokio::task::spawn_blocking(move || -> (Option<Lease>, Result<Claim, StoreError>) {
            let mut lease = match lease {
                Some(l) => l,
                None => match Lease::connect(&url, &advertise_url, ttl) {
                    Ok(l) => l,
                    Err(e) => return (None, Err(e)),
                },
            };
            let claim = lease.try_acquire();
            (Some(lease), claim)
        })
        .await
        .map_err(|e| ControllerError::Thread(e.to_string()))?;
        lease = match attempt {
            (Some(l), Ok(Claim::Won(epoch))) => return Ok(Some((l, epoch))),
            (l, Ok(Claim::Held { leader_url })) => {
                if let Ok(mut known) = leader.write()
                    && *known != leader_url
                {
                    tracing::info!(leader = %leader_url, "standing by");
                    *known = leader_url;
                }
                l
            }
            (_, Err(e @ StoreError::TooNew { .. })) => return Err(e.into()),
            // A lost connection is made again on the next poll.
            (_, Err(e)) => {
                tracing::warn!(error = %e, "the lease could not be read; retrying");
                None
            }
            (None, Ok(Claim::Won(_))) => None,
        };
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Serves as leader: renews the lease on its own thread, steps down when
/// it is lost, releases it on a clean stop.
async fn lead(
    controller: Controller,
    lease: Lease,
    epoch: i64,
    ttl: Duration,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let renewed = Arc::new(Mutex::new(Instant::now()));
    let lost = CancellationToken::new();
    let stop_renewing = CancellationToken::new();
    let renewer = spawn_renewer(lease, epoch, ttl, renewed.clone(), lost.clone(), stop_renewing.clone())?;
    // Checked here, not only by the renewer, since a renewal can hang on a
    // dead connection.
    let mut tick = tokio::time::interval((ttl / 8).max(Duration::from_millis(20)));
    let deposed = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break false,
            _ = controller.stopped() => break false,
            _ = lost.cancelled() => break true,
            _ = tick.tick() => {
                let since = renewed.lock().map(|at| at.elapsed()).unwrap_or(Duration::MAX);
                if since >= ttl * 3 / 4 {
                    tracing::error!(epoch, ?since, "the lease was not renewed in time; stepping down");
                    break true;
                }
            }
        }
    };
    if deposed {
        tracing::error!(epoch, "no longer the leader; stopping");
    }
    let stopped = controller.shutdown().await;
    stop_renewing.cancel();
    let lease = tokio::task::spawn_blocking(move || renewer.join()).await;
    if !deposed && let Ok(Ok(mut lease)) = lease {
        // The last commit is done: a standby may take over now.
        let _ = tokio::task::spawn_blocking(move || lease.release(epoch)).await;
    }
    match stopped {
        Err(e) => Err(e),
        Ok(()) if deposed => Err(StoreError::Fenced { epoch }.into()),
        Ok(()) => Ok(()),
    }
}

fn spawn_renewer(
    mut lease: Lease,
    epoch: i64,
    ttl: Duration,
    renewed: Arc<Mutex<Instant>>,
    lost: CancellationToken,
    stop: CancellationToken,
) -> Result<std::thread::JoinHandle<Lease>, ControllerError> {
    let every = (ttl / 3).max(Duration::from_millis(20));
    std::thread::Builder::new()
        .name("lease-renew".into())
        .spawn(move || {
            let span = tracing::info_span!("lease_renew", epoch, holder = %lease.holder());
            let _entered = span.enter();
            while !stop.is_cancelled() {
                let started = Instant::now();
                match lease.renew(epoch) {
                    Ok(true) => {
                        if let Ok(mut at) = renewed.lock() {
                            *at = started;
                        }
                    }
                    Ok(false) => {
                        tracing::error!(epoch, "the lease was taken by another controller");
                        lost.cancel();
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "lease renewal failed; retrying");
                        if let Err(e) = lease.reconnect() {
                            tracing::warn!(error = %e, "the store is unreachable");
                        }
                    }
                }
                let wait = every.saturating_sub(started.elapsed());
                let deadline = Instant::now() + wait;
                while !stop.is_cancelled() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10).min(wait));
                }
            }
            lease
        })
        .map_err(|e| ControllerError::Thread(format!("lease-renew: {e}")))
}
