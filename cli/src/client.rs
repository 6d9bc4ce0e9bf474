//! The Operator API client and the id parsing its requests need.

use std::time::Duration;

use swarm_core::{SwarmId, TaskKey};
use swarm_proto::client::{AuthChannel, ClientAuth};
use swarm_proto::v1;
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

/// Most pages a list is followed for; a server that keeps handing out
/// tokens past this is broken, and the list is cut rather than looped on.
const MAX_PAGES: usize = 10_000;

/// Follows a paginated list to its end. `fetch` gets the token and returns
/// the page's items and the next token.
async fn all_pages<T, F, Fut>(mut fetch: F) -> anyhow::Result<Vec<T>>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, String), tonic::Status>>,
{
    let mut out = Vec::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let (items, next) = fetch(token.clone()).await?;
        out.extend(items);
        if next.is_empty() || next == token {
            break;
        }
        token = next;
    }
    Ok(out)
}

/// Every task of a swarm, in plan order, a page at a time.
pub async fn all_tasks(c: &mut Client, swarm_id: &str) -> anyhow::Result<Vec<v1::Task>> {
    all_pages(|page_token| {
        let req = v1::ListTasksRequest { swarm_id: swarm_id.to_string(), page_token, ..Default::default() };
        let mut c = c.clone();
        async move { c.list_tasks(req).await.map(|r| r.into_inner()).map(|r| (r.tasks, r.next_page_token)) }
    })
    .await
}

pub async fn all_swarms(c: &mut Client) -> anyhow::Result<Vec<v1::Swarm>> {
    all_pages(|page_token| {
        let req = v1::ListSwarmsRequest { page_token, ..Default::default() };
        let mut c = c.clone();
        async move { c.list_swarms(req).await.map(|r| r.into_inner()).map(|r| (r.swarms, r.next_page_token)) }
    })
    .await
}

pub async fn all_workers(c: &mut Client) -> anyhow::Result<Vec<v1::Worker>> {
    all_pages(|page_token| {
        let req = v1::ListWorkersRequest { page_token, ..Default::default() };
        let mut c = c.clone();
        async move { c.list_workers(req).await.map(|r| r.into_inner()).map(|r| (r.workers, r.next_page_token)) }
    })
    .await
}
