//! Whole lists from the Operator API's paged reads, in-process: what the
//! dashboard shows and what the forge writes into a pull request come
//! from the same handlers `swarmctl get` calls.

use std::future::Future;

use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService as _;
use tonic::{Request, Status};

use super::operator::OperatorApi;

/// Bounds the pages one list costs: at the largest page size this is far
/// beyond any swarm the controller holds.
const MAX_PAGES: usize = 100;

/// Follows a paged read from its first page: `page` gets a page token and
/// returns that page's items and the next token (empty: the last).
async fn all<T, F, Fut>(mut page: F) -> Result<Vec<T>, Status>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, String), Status>>,
{
    let mut out = Vec::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let (items, next) = page(token).await?;
        out.extend(items);
        if next.is_empty() {
            break;
        }
        token = next;
    }
    Ok(out)
}

pub async fn swarms(reads: &OperatorApi) -> Result<Vec<v1::Swarm>, Status> {
    all(|page_token| async move {
        let page =
            reads.list_swarms(Request::new(v1::ListSwarmsRequest { page_size: 0, page_token })).await?;
        let page = page.into_inner();
        Ok((page.swarms, page.next_page_token))
    })
    .await
}

pub async fn tasks(reads: &OperatorApi, swarm: &str) -> Result<Vec<v1::Task>, Status> {
    all(|page_token| async move {
        let req = v1::ListTasksRequest {
            swarm_id: swarm.to_string(),
            states: Vec::new(),
            page_size: crate::scheduler::page::MAX_PAGE_SIZE as u32,
            page_token,
        };
        let page = reads.list_tasks(Request::new(req)).await?.into_inner();
        Ok((page.tasks, page.next_page_token))
    })
    .await
}

pub async fn workers(reads: &OperatorApi) -> Result<Vec<v1::Worker>, Status> {
    all(|page_token| async move {
        let page =
            reads.list_workers(Request::new(v1::ListWorkersRequest { page_size: 0, page_token })).await?;
        let page = page.into_inner();
        Ok((page.workers, page.next_page_token))
    })
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn pages_are_followed_to_the_last_and_an_endless_list_is_cut() {
        let three = all(|token| async move {
            let n: u32 = token.parse().unwrap_or(0);
            let next = if n < 2 { (n + 1).to_string() } else { String::new() };
            Ok::<_, Status>((vec![n * 10, n * 10 + 1], next))
        })
        .await
        .unwrap();
        assert_eq!(three, [0, 1, 10, 11, 20, 21]);

        let endless = all(|_| async { Ok::<_, Status>((vec![()], "again".to_string())) }).await.unwrap();
        assert_eq!(endless.len(), MAX_PAGES, "a server that never ends a list is cut");

        let failed = all(|_| async { Err::<(Vec<()>, String), _>(Status::unavailable("gone")) }).await;
        assert_eq!(failed.unwrap_err().code(), tonic::Code::Unavailable);
    }
}
