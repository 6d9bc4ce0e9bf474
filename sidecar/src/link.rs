//! The sidecar's unary calls to the controller beside its Connect stream:
//! the client of the current session and the proof that the caller holds
//! it (the worker id and the session's resume secret), which the
//! controller checks before it moves a pack or answers about an attempt.

use std::sync::{Arc, Mutex};

use swarm_proto::client::AuthChannel;
use swarm_proto::convert::AttemptRef;
use swarm_proto::limits::{SECRET_HEADER, WORKER_HEADER};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tonic::Request;
use tonic::metadata::MetadataValue;

/// The current session's way to the controller, shared by the attempts.
#[derive(Debug, Clone)]
pub struct ControllerLink {
    worker: String,
    /// Calls go to the controller that welcomed the session (with several
    /// controllers, only the leader answers), which answers them only for
    /// the sidecar holding the worker id's live session.
    session: Arc<Mutex<Option<LinkSession>>>,
}

#[derive(Debug, Clone)]
pub(crate) struct LinkSession {
    pub client: SidecarServiceClient<AuthChannel>,
    pub secret: String,
}

impl ControllerLink {
    pub fn new(worker: &str) -> ControllerLink {
        ControllerLink { worker: worker.to_string(), session: Arc::new(Mutex::new(None)) }
    }

    /// A new session (from its Welcome): the channel it came on and its secret.
    pub fn set_session(&self, client: SidecarServiceClient<AuthChannel>, secret: &str) {
        if let Ok(mut s) = self.session.lock() {
            *s = Some(LinkSession { client, secret: secret.to_string() });
        }
    }

    /// The client and secret of the current session.
    pub(crate) fn session(&self) -> Result<LinkSession, tonic::Status> {
        self.session
            .lock()
            .ok()
            .and_then(|s| s.clone())
            .ok_or_else(|| tonic::Status::unavailable("no session with the controller yet"))
    }

    /// Names the caller as the controller's sidecar RPCs require.
    pub(crate) fn request<T>(&self, secret: &str, message: T) -> Request<T> {
        let mut request = Request::new(message);
        for (key, value) in [(WORKER_HEADER, self.worker.as_str()), (SECRET_HEADER, secret)] {
            if let Ok(v) = MetadataValue::try_from(value) {
                request.metadata_mut().insert(key, v);
            }
        }
        request
    }

    /// The tasks `attempt` depends on and its swarm's other tasks, as the
    /// controller has them now.
    pub async fn task_context(&self, attempt: &AttemptRef) -> Result<v1::TaskContext, tonic::Status> {
        let LinkSession { mut client, secret } = self.session()?;
        let req = v1::GetTaskContextRequest { attempt: Some(v1::AttemptRef::from(attempt)) };
        Ok(client.get_task_context(self.request(&secret, req)).await?.into_inner())
    }

    /// Starts the child swarm of `attempt`'s task with the tasks of
    /// `plan_toml` (or answers with the one it started before).
    pub async fn spawn_children(
        &self,
        attempt: &AttemptRef,
        plan_toml: &str,
    ) -> Result<v1::ChildrenStatus, tonic::Status> {
        let LinkSession { mut client, secret } = self.session()?;
        let req = v1::SpawnChildrenRequest {
            attempt: Some(v1::AttemptRef::from(attempt)),
            plan_toml: plan_toml.to_string(),
        };
        Ok(client.spawn_children(self.request(&secret, req)).await?.into_inner())
    }

    /// `attempt`'s child swarm as the controller has it now.
    pub async fn children(&self, attempt: &AttemptRef) -> Result<v1::ChildrenStatus, tonic::Status> {
        let LinkSession { mut client, secret } = self.session()?;
        let req = v1::GetChildrenRequest { attempt: Some(v1::AttemptRef::from(attempt)) };
        Ok(client.get_children(self.request(&secret, req)).await?.into_inner())
    }
}
