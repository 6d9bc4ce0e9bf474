//! The Operator API client and the id parsing its requests need.

use std::time::Duration;

use swarm_core::{SwarmId, TaskKey};
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::exit::{Unreachable, Usage};

pub type Client = OperatorServiceClient<Channel>;

/// Connects to the controller at `url` (`http://host:port`).
pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| Usage(format!("--controller {url:?}: not a valid URL: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Unreachable(format!("cannot reach the controller at {url}: {}", source_text(&e))))?;
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
