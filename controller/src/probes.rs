//! A plaintext gRPC health port for orchestrators: the kubelet's gRPC
//! probe speaks no TLS, and the API port is TLS-only wherever it faces a
//! network. The port serves `grpc.health.v1.Health` and nothing else, so
//! leaving it in the clear discloses only whether this controller is up
//! and whether it leads.
//!
//! Liveness is the service `""`: SERVING while the process runs.
//! Readiness is [`READINESS`]: SERVING only while this controller serves
//! the API (always, once started, without HA; only as the leader with it),
//! so a Service routes to the leader and a standby stays alive but unready.

use std::net::SocketAddr;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;

use crate::error::ControllerError;

/// The service name a readiness probe asks about.
pub const READINESS: &str = "swarm.v1.OperatorService";

/// Flips readiness; dropping it leaves the last state.
#[derive(Debug, Clone)]
pub struct Readiness(watch::Sender<bool>);

impl Readiness {
    /// A readiness switch with no port behind it (no `--health-listen`).
    pub fn detached() -> Readiness {
        Readiness(watch::channel(false).0)
    }

    pub fn set(&self, serving: bool) {
        self.0.send_replace(serving);
    }
}

/// Binds `addr` and serves health on it until `shutdown`; returns the
/// bound address and the switch for readiness (initially not ready).
pub async fn serve(
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, Readiness), ControllerError> {
    let listen_err = |source| ControllerError::Listen { addr: addr.to_string(), source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen_err)?;
    let bound = listener.local_addr().map_err(listen_err)?;
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ServingStatus::Serving).await;
    reporter.set_service_status(READINESS, ServingStatus::NotServing).await;
    let (tx, mut rx) = watch::channel(false);
    let follow = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = follow.cancelled() => return,
                changed = rx.changed() => if changed.is_err() { return },
            }
            let serving = *rx.borrow_and_update();
            let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
            tracing::info!(ready = serving, "readiness");
            reporter.set_service_status(READINESS, status).await;
        }
    });
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming_shutdown(incoming, shutdown.cancelled())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the health port stopped");
        }
    });
    tracing::info!(addr = %bound, "health port serving");
    Ok((bound, Readiness(tx)))
}
