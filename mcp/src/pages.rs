//! Whole lists from the paginated reads.

use std::future::Future;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use swarm_proto::v1;
use tonic::Status;

use crate::channel::{Operator, request};

type Ctx = RequestContext<RoleServer>;

/// Bounds the pages one list costs: at the largest page size this is far
/// beyond any swarm a controller holds.
const MAX_PAGES: usize = 1000;

/// Follows a paginated read to its end: `fetch` takes the page token and
/// returns the page's items and the next token.
async fn all<T, F, Fut>(mut fetch: F) -> Result<Vec<T>, Status>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, String), Status>>,
{
    let mut out = Vec::new();
    let mut page_token = String::new();
    for _ in 0..MAX_PAGES {
        let (items, next) = fetch(page_token).await?;
        out.extend(items);
        if next.is_empty() {
            break;
        }
        page_token = next;
    }
    Ok(out)
}

pub async fn tasks(op: &Operator, ctx: &Ctx, swarm: &str, states: Vec<i32>) -> Result<Vec<v1::Task>, Status> {
    all(|page_token| {
        let req = v1::ListTasksRequest {
            swarm_id: swarm.to_string(),
            states: states.clone(),
            page_token,
            ..Default::default()
        };
        let (mut op, req) = (op.clone(), request(ctx, req));
        async move { op.list_tasks(req).await.map(|r| r.into_inner()).map(|p| (p.tasks, p.next_page_token)) }
    })
    .await
}

pub async fn swarms(op: &Operator, ctx: &Ctx) -> Result<Vec<v1::Swarm>, Status> {
    all(|page_token| {
        let (mut op, req) = (op.clone(), request(ctx, v1::ListSwarmsRequest { page_token, ..Default::default() }));
        async move { op.list_swarms(req).await.map(|r| r.into_inner()).map(|p| (p.swarms, p.next_page_token)) }
    })
    .await
}

pub async fn workers(op: &Operator, ctx: &Ctx) -> Result<Vec<v1::Worker>, Status> {
    all(|page_token| {
        let (mut op, req) = (op.clone(), request(ctx, v1::ListWorkersRequest { page_token, ..Default::default() }));
        async move { op.list_workers(req).await.map(|r| r.into_inner()).map(|p| (p.workers, p.next_page_token)) }
    })
    .await
}
