//! The Operator API's budget and pause calls: validated here, at the edge
//! (an error names the field), then handed to the scheduler.

use swarm_core::plan::budget::{check_tokens, check_usd};
use swarm_core::{SwarmId, TaskKey};
use swarm_proto::FieldError;
use swarm_proto::v1;
use tonic::Status;

use super::{Shared, convert};
use crate::scheduler::{BudgetChange, BudgetTarget, OperatorOp};

/// A root swarm's id, or a task id (`<swarm>/<task>`). A child swarm's id
/// (`app/auth`) reads as its parent task's: the budget of a task with a
/// sub-plan is not enforced (it runs no agent), so this names the task.
fn target(field: &str, id: &str) -> Result<BudgetTarget, Status> {
    if id.is_empty() {
        return Err(FieldError::new(field, "must not be empty").into());
    }
    if !id.contains('/') {
        let swarm = SwarmId::new(id).map_err(|rule| FieldError::new(field, rule))?;
        return Ok(BudgetTarget::Swarm(swarm));
    }
    TaskKey::parse(id).map(BudgetTarget::Task).map_err(|rule| FieldError::new(field, rule).into())
}

/// A dollar amount: 0 removes the cap.
fn usd(field: &str, v: Option<f64>) -> Result<Option<f64>, Status> {
    match v {
        Some(0.0) => Ok(Some(0.0)),
        Some(v) => Ok(Some(check_usd(field, v).map_err(|e| FieldError::new(field, e.rule))?)),
        None => Ok(None),
    }
}

fn tokens(field: &str, v: Option<u64>) -> Result<Option<u64>, Status> {
    match v {
        Some(0) => Ok(Some(0)),
        Some(v) => Ok(Some(check_tokens(field, v).map_err(|e| FieldError::new(field, e.rule))?)),
        None => Ok(None),
    }
}

pub async fn set_budget(shared: &Shared, req: v1::SetBudgetRequest) -> Result<v1::SetBudgetResponse, Status> {
    let target = target("target", &req.target)?;
    let change = BudgetChange {
        usd: usd("usd", req.usd)?,
        tokens: tokens("tokens", req.tokens)?,
        max_usd_per_hour: usd("max_usd_per_hour", req.max_usd_per_hour)?,
    };
    if matches!(target, BudgetTarget::Task(_)) && change.max_usd_per_hour.is_some() {
        return Err(FieldError::new(
            "max_usd_per_hour",
            "the burn-rate breaker is set on a swarm, not a task",
        )
        .into());
    }
    if change == BudgetChange::default() {
        return Err(FieldError::new("usd", "set usd, tokens or max_usd_per_hour").into());
    }
    tracing::info!(target = %req.target, ?change, "set budget");
    let (swarm, task) = shared.ask(|reply| OperatorOp::SetBudget { target, change, reply }).await?;
    Ok(v1::SetBudgetResponse { swarm: Some(convert::swarm(swarm)), task: task.map(convert::task) })
}

fn swarm_id(id: &str) -> Result<SwarmId, Status> {
    SwarmId::new(id).map_err(|rule| FieldError::new("swarm_id", rule).into())
}

pub async fn pause(shared: &Shared, req: v1::PauseSwarmRequest) -> Result<v1::PauseSwarmResponse, Status> {
    let swarm = swarm_id(&req.swarm_id)?;
    swarm_core::names::check_text(&req.reason, convert::MAX_TEXT)
        .map_err(|rule| FieldError::new("reason", rule))?;
    tracing::info!(swarm = %swarm, stop = req.stop, "pause swarm");
    let (stop, reason) = (req.stop, req.reason);
    let view = shared.ask(|reply| OperatorOp::PauseSwarm { swarm, stop, reason, reply }).await?;
    Ok(v1::PauseSwarmResponse { swarm: Some(convert::swarm(view)) })
}

pub async fn resume(shared: &Shared, req: v1::ResumeSwarmRequest) -> Result<v1::ResumeSwarmResponse, Status> {
    let swarm = swarm_id(&req.swarm_id)?;
    tracing::info!(swarm = %swarm, "resume swarm");
    let view = shared.ask(|reply| OperatorOp::ResumeSwarm { swarm, reply }).await?;
    Ok(v1::ResumeSwarmResponse { swarm: Some(convert::swarm(view)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_a_swarm_or_a_task_and_bad_amounts_name_their_field() {
        assert!(matches!(target("target", "app"), Ok(BudgetTarget::Swarm(_))));
        assert!(matches!(target("target", "app/api"), Ok(BudgetTarget::Task(_))));
        assert!(target("target", "").is_err());
        let e = usd("usd", Some(-1.0)).expect_err("negative");
        assert!(e.message().starts_with("usd:"), "{}", e.message());
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(usd("max_usd_per_hour", Some(f64::NAN)).is_err());
        assert_eq!(usd("usd", Some(0.0)).expect("zero"), Some(0.0));
        assert_eq!(tokens("tokens", Some(0)).expect("zero"), Some(0));
    }
}
