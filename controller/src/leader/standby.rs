//! What a standby serves while another controller leads: health, and for
//! every other call UNAVAILABLE "not the leader" with the leader's
//! advertised URL in the `swarm-leader` response metadata, so a client
//! (sidecar, swarmctl) can go there instead of retrying here.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use swarm_proto::v1::operator_service_server::OperatorServiceServer;
use swarm_proto::v1::sidecar_service_server::SidecarServiceServer;
use tokio_util::sync::CancellationToken;
use tonic::server::NamedService;

use crate::api::admit::{Admit, AdmitLayer};
use crate::api::operator::OperatorApi;
use crate::api::sidecar::SidecarApi;
use crate::error::ControllerError;

pub use swarm_proto::leader::{LEADER_HEADER, NOT_LEADER};

/// The leader's advertised URL as last read from the lease row.
pub type LeaderUrl = Arc<RwLock<String>>;

/// A running standby server; [`Standby::stop`] hands the port back.
pub struct Standby {
    stop: CancellationToken,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Standby {
    pub async fn serve(
        listener: std::net::TcpListener,
        tls: Option<tonic::transport::ServerTlsConfig>,
        leader: LeaderUrl,
    ) -> Result<Standby, ControllerError> {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|source| ControllerError::Listen { addr: "standby".into(), source })?;
        let (reporter, health) = tonic_health::server::health_reporter();
        // The process is up; the swarm services are not served here, so a
        // load balancer checking them finds the leader.
        reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        for service in [
            <SidecarServiceServer<SidecarApi> as NamedService>::NAME,
            <OperatorServiceServer<OperatorApi> as NamedService>::NAME,
        ] {
            reporter.set_service_status(service, tonic_health::ServingStatus::NotServing).await;
        }
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).map_err(|e| ControllerError::Security(format!("TLS: {e}")))?;
        }
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let stop = CancellationToken::new();
        let token = stop.clone();
        let server = tokio::spawn(async move {
            builder
                .layer(AdmitLayer::with(NotLeader { leader }))
                .add_service(health)
                .serve_with_incoming_shutdown(incoming, token.cancelled())
                .await
        });
        Ok(Standby { stop, server })
    }

    /// Stops serving; open connections get GOAWAY and a bounded drain.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if tokio::time::timeout(Duration::from_secs(3), &mut self.server).await.is_err() {
            self.server.abort();
        }
    }
}

/// Lets health through and refuses every other call with the leader's URL.
#[derive(Clone)]
struct NotLeader {
    leader: LeaderUrl,
}

impl Admit for NotLeader {
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), tonic::Status> {
        if req.uri().path().starts_with("/grpc.health.v1.Health/") {
            return Ok(());
        }
        let leader = self.leader.read().map(|l| l.clone()).unwrap_or_default();
        Err(not_the_leader(&leader))
    }
}

/// The refusal, with the leader's URL when one is known.
pub fn not_the_leader(leader: &str) -> tonic::Status {
    let mut status = tonic::Status::unavailable(NOT_LEADER);
    if let Ok(value) = leader.parse()
        && !leader.is_empty()
    {
        status.metadata_mut().insert(LEADER_HEADER, value);
    }
    status
}
