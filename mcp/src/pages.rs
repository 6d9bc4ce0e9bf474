//! Whole lists from the paginated reads.

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use swarm_proto::v1;
use tonic::Status;

use crate::Operator;
use crate::tools::request;

type Ctx = RequestContext<RoleServer>;

/// Bounds the pages one list costs: at the largest page size this is far
/// beyond any swarm a controller holds.
const MAX_PAGES: usize = 1000;

pub async fn tasks(op: &Operator, ctx: &Ctx, swarm: &str, states: Vec<i32>) -> Result<Vec<v1::Task>, Status> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let req = v1::ListTasksRequest {
            swarm_id: swarm.to_string(),
            states: states.clone(),
            page_token,
            ..Default::default()
        };
        let page = op.clone().list_tasks(request(ctx, req)).await?.into_inner();
        out.extend(page.tasks);
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }
    Ok(out)
}

pub async fn swarms(op: &Operator, ctx: &Ctx) -> Result<Vec<v1::Swarm>, Status> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = op
            .clone()
            .list_swarms(request(ctx, v1::ListSwarmsRequest { page_token, ..Default::default() }))
            .await?;
        let page = page.into_inner();
        out.extend(page.swarms);
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }
    Ok(out)
}

pub async fn workers(op: &Operator, ctx: &Ctx) -> Result<Vec<v1::Worker>, Status> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let page = op
            .clone()
            .list_workers(request(ctx, v1::ListWorkersRequest { page_token, ..Default::default() }))
            .await?;
        let page = page.into_inner();
        out.extend(page.workers);
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }
    Ok(out)
}
