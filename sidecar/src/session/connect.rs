//! Opening a session: the controller to try, the connection, the Hello
//! and the Welcome, and what a refusal says about the leader.

use std::time::Duration;

use swarm_proto::leader::standby_refusal;
use swarm_proto::v1;
use swarm_proto::v1::controller_message::Body as In;
use swarm_proto::v1::sidecar_message::Body;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tracing::Instrument;

use super::{Ended, LinkTiming, Session, SocketHandle, TrackedConnector, WELCOME_TIMEOUT};
use crate::SidecarError;

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

impl Session {
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
    pub(super) async fn connect_once(&mut self) -> Result<Ended, SidecarError> {
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
            _ = self.shutdown.cancelled(), if !self.lifecycle.is_shutting_down() => {
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
}
