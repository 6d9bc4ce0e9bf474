//! Whole lists from the Operator API's paged reads, in-process: what the
//! dashboard shows and what the forge writes into a pull request come
//! from the same handlers `swarmctl get` calls.

use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService as _;
use tonic::{Request, Status};

use super::operator::OperatorApi;

/// Bounds the pages one list costs: at the largest page size this is far
/// beyond any swarm the controller holds.
const MAX_PAGES: usize = 100;

pub async fn swarms(reads: &OperatorApi) -> Result<Vec<v1::Swarm>, Status> {
    let mut out = Vec::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let req = v1::ListSwarmsRequest { page_size: 0, page_token: token };
        let page = reads.list_swarms(Request::new(req)).await?.into_inner();
        out.extend(page.swarms);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    Ok(out)
}

pub async fn tasks(reads: &OperatorApi, swarm: &str) -> Result<Vec<v1::Task>, Status> {
    let mut out = Vec::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let req = v1::ListTasksRequest {
            swarm_id: swarm.to_string(),
            states: Vec::new(),
            page_size: crate::scheduler::reads::MAX_PAGE_SIZE as u32,
            page_token: token,
        };
        let page = reads.list_tasks(Request::new(req)).await?.into_inner();
        out.extend(page.tasks);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    Ok(out)
}

pub async fn workers(reads: &OperatorApi) -> Result<Vec<v1::Worker>, Status> {
    let mut out = Vec::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let req = v1::ListWorkersRequest { page_size: 0, page_token: token };
        let page = reads.list_workers(Request::new(req)).await?.into_inner();
        out.extend(page.workers);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    Ok(out)
}
