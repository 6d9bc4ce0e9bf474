//! The Operator API client and the id parsing its requests need.

use std::time::Duration;

use swarm_core::{SwarmId, TaskKey};
use swarm_proto::client::{AuthChannel, ClientAuth};
use swarm_proto::leader::{Controllers, NOT_LEADER, standby_refusal};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;

use crate::exit::{Unreachable, Usage};
use crate::transport;

pub type Client = OperatorServiceClient<AuthChannel>;

/// The controller to talk to and the credentials to show it.
#[derive(Debug, Clone)]
pub struct Target {
    /// One URL, or several comma-separated (a leader and its standbys).
    pub url: String,
    pub auth: ClientAuth,
}

/// Rounds over every URL while some controller answers as a standby (an
/// election may be under way); unreachable controllers end it after one.
const ROUNDS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Connects to the leading controller among `target.url`'s URLs
/// (`http://` or `https://host:port`, comma-separated): the first that
/// answers as leader, following the leader a standby names.
pub async fn connect(target: &Target) -> anyhow::Result<Client> {
    Ok(OperatorServiceClient::new(connect_channel(target).await?))
}

/// The channel to the leading controller, with the target's credentials.
pub async fn connect_channel(target: &Target) -> anyhow::Result<AuthChannel> {
    let mut controllers = Controllers::parse(&target.url).map_err(|e| Usage(e.to_string()))?;
    let mut tried: Vec<String> = Vec::new();
    let mut backoff = FIRST_BACKOFF;
    let mut round = 1;
    loop {
        let url = controllers.current();
        let failure = match try_leader(target, &url).await? {
            Ok(channel) => return Ok(channel),
            Err(failure) => failure,
        };
        tracing::debug!(%url, reason = %failure.reason, "controller not usable");
        tried.retain(|t| !t.starts_with(&format!("{url}: ")));
        tried.push(format!("{url}: {}", failure.reason));
        if controllers.failed(failure.leader) {
            let any_standby = tried.iter().any(|t| t.ends_with(NOT_LEADER));
            if round >= ROUNDS || !any_standby {
                return Err(Unreachable(unreachable_text(&tried)).into());
            }
            round += 1;
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
    }
}

/// Why one controller could not be used.
struct NotUsable {
    reason: String,
    /// The leader it named.
    leader: Option<String>,
}

/// Connects to `url` and asks it one cheap question to learn whether it
/// leads; any answer but a standby's refusal (even a denial) means it
/// does, and the command then meets that answer itself.
async fn try_leader(target: &Target, url: &str) -> anyhow::Result<Result<AuthChannel, NotUsable>> {
    let endpoint =
        target.auth.endpoint(url).map_err(|e| Usage(e.to_string()))?.connect_timeout(Duration::from_secs(5));
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        Err(e) => {
            let reason = transport::explain(url, &target.auth, &transport::chain_text(&e));
            return Ok(Err(NotUsable { reason, leader: None }));
        }
    };
    let channel = target.auth.wrap(channel).map_err(|e| Usage(e.to_string()))?;
    let mut client = OperatorServiceClient::new(channel.clone());
    let probe = client.list_swarms(v1::ListSwarmsRequest { page_size: 1, ..Default::default() }).await;
    match probe {
        Err(status) if transport::is_transport(&status) => {
            // Refused below gRPC (TLS, HTTP/2): no command could get through.
            let reason = transport::explain(url, &target.auth, &transport::status_text(&status));
            Ok(Err(NotUsable { reason, leader: None }))
        }
        Err(status) => match standby_refusal(&status) {
            Some(leader) => Ok(Err(NotUsable { reason: NOT_LEADER.to_string(), leader })),
            None => Ok(Ok(channel)),
        },
        Ok(_) => Ok(Ok(channel)),
    }
}

fn unreachable_text(tried: &[String]) -> String {
    match tried {
        [one] => format!("cannot reach the controller at {one}"),
        many => format!("no controller answered as the leader ({})", many.join("; ")),
    }
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
    // Sub-plan files are read here: the controller gets plan text only.
    let text = crate::subplan::inline(&text, path).map_err(|e| Usage(format!("{}: {e}", path.display())))?;
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

/// A swarm's tasks in these states only, a page at a time.
pub async fn tasks_in_states(
    c: &mut Client,
    swarm_id: &str,
    states: &[v1::TaskState],
) -> anyhow::Result<Vec<v1::Task>> {
    let states: Vec<i32> = states.iter().map(|s| *s as i32).collect();
    all_pages(|page_token| {
        let req = v1::ListTasksRequest {
            swarm_id: swarm_id.to_string(),
            states: states.clone(),
            page_token,
            ..Default::default()
        };
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

/// Whether waiting and reconnecting can fix `e`: the controller being
/// unreachable or the connection breaking, not a refusal.
pub fn retryable(e: &anyhow::Error) -> bool {
    if e.downcast_ref::<Unreachable>().is_some() {
        return true;
    }
    match e.downcast_ref::<tonic::Status>() {
        Some(s) => !matches!(
            s.code(),
            tonic::Code::InvalidArgument
                | tonic::Code::NotFound
                | tonic::Code::PermissionDenied
                | tonic::Code::Unauthenticated
                | tonic::Code::Unimplemented
                | tonic::Code::FailedPrecondition
                | tonic::Code::OutOfRange
        ),
        None => false,
    }
}
