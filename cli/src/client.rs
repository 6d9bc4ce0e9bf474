//! The Operator API client and the id parsing its requests need.

use std::time::Duration;

use swarm_core::{SwarmId, TaskKey};
use swarm_proto::client::{AuthChannel, ClientAuth};
use swarm_proto::v1::operator_service_client::OperatorServiceClient;

use crate::exit::{Unreachable, Usage};

pub type Client = OperatorServiceClient<AuthChannel>;

/// The controller to talk to and the credentials to show it.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub auth: ClientAuth,
}

/// Connects to the controller at `target.url` (`http://` or `https://host:port`).
pub async fn connect(target: &Target) -> anyhow::Result<Client> {
    let url = &target.url;
    let endpoint = target
        .auth
        .endpoint(url)
        .map_err(|e| Usage(format!("--controller {url:?}: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Unreachable(format!("cannot reach the controller at {url}: {}", source_text(&e))))?;
    let channel = target.auth.wrap(channel).map_err(|e| Usage(e.to_string()))?;
    Ok(OperatorServiceClient::new(channel))
}

fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text.push_str(": ");
        text.push_str(&s.to_string());
        cur = s.source();
    }
    text
}

/// Validates a full task id, `SWARM/TASK`, before it goes on the wire.
pub fn task_id(raw: &str) -> anyhow::Result<String> {
    TaskKey::parse(raw).map_err(|rule| Usage(format!("task {raw:?}: {rule} (expected SWARM/TASK)")))?;
    Ok(raw.to_string())
}

pub fn swarm_id(raw: &str) -> anyhow::Result<String> {
    SwarmId::new(raw).map_err(|rule| Usage(format!("swarm {raw:?}: {rule}")))?;
    Ok(raw.to_string())
}

/// Reads a plan file and validates it locally, so a bad plan never reaches
/// the controller.
pub fn read_plan(path: &std::path::Path) -> anyhow::Result<(String, swarm_core::plan::Plan)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Usage(format!("cannot read plan {}: {e}", path.display())))?;
    let plan = swarm_core::plan::Plan::parse(&text).map_err(|e| Usage(format!("{}: {e}", path.display())))?;
    Ok((text, plan))
}
