//! The Operator API's budget and pause calls: checked at the edge
//! (`requests.rs`; an error names the field), then handed to the scheduler.

use swarm_proto::v1;
use tonic::Status;

use super::{Shared, requests};
use crate::scheduler::OperatorOp;

pub async fn set_budget(shared: &Shared, req: v1::SetBudgetRequest) -> Result<v1::SetBudgetResponse, Status> {
    let (target, change) = requests::set_budget(&req)?;
    tracing::info!(target = %req.target, ?change, "set budget");
    let (swarm, task) = shared.ask(|reply| OperatorOp::SetBudget { target, change, reply }).await?;
    Ok(v1::SetBudgetResponse { swarm: Some(v1::Swarm::from(swarm)), task: task.map(v1::Task::from) })
}

pub async fn pause(shared: &Shared, req: v1::PauseSwarmRequest) -> Result<v1::PauseSwarmResponse, Status> {
    let (swarm, stop, reason) = requests::pause(req)?;
    tracing::info!(swarm = %swarm, stop, "pause swarm");
    let view = shared.ask(|reply| OperatorOp::PauseSwarm { swarm, stop, reason, reply }).await?;
    Ok(v1::PauseSwarmResponse { swarm: Some(v1::Swarm::from(view)) })
}

pub async fn resume(shared: &Shared, req: v1::ResumeSwarmRequest) -> Result<v1::ResumeSwarmResponse, Status> {
    let swarm = requests::swarm(&req.swarm_id)?;
    tracing::info!(swarm = %swarm, "resume swarm");
    let view = shared.ask(|reply| OperatorOp::ResumeSwarm { swarm, reply }).await?;
    Ok(v1::ResumeSwarmResponse { swarm: Some(v1::Swarm::from(view)) })
}
