//! The sidecar's calls for an agent that splits its task: `SpawnChildren`
//! (checked and composed by the scheduler, the child's branch made by the
//! merger at the attempt's base, then the child stored) and `GetChildren`.

use swarm_proto::v1;
use tonic::Status;
use tracing::Instrument as _;

use super::Shared;
use crate::scheduler::SpawnPlan;
use crate::scheduler::views::ChildrenView;
use crate::scheduler::{Command, PackClaim};

pub(super) async fn spawn(
    shared: &Shared,
    claim: PackClaim,
    fragment: String,
) -> Result<v1::ChildrenStatus, Status> {
    let attempt = claim.attempt.clone().map(|a| a.task.attempt(a.number).to_string()).unwrap_or_default();
    let span = tracing::info_span!("children.spawn", attempt = %attempt);
    async {
        let (reply, answer) = tokio::sync::oneshot::channel();
        shared.send(Command::PlanSpawn { claim: claim.clone(), fragment, reply }).await?;
        let (text, plan, base) = match answer.await.map_err(|_| stopped())?? {
            SpawnPlan::Exists(view) => return Ok(wire(view)),
            SpawnPlan::New { text, plan, base } => (text, plan, base),
        };
        // The caller's branch: in a shared repository it exists already
        // (the caller's worktree made it, and its sidecar left it for the
        // child), and its head is where the child starts.
        let head = shared.merger.ensure_branch_at(&plan.integration_branch, &base).await?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        shared.send(Command::SpawnChildren { claim, text, plan, head, reply }).await?;
        Ok(wire(answer.await.map_err(|_| stopped())??))
    }
    .instrument(span)
    .await
}

pub(super) async fn status(shared: &Shared, claim: PackClaim) -> Result<v1::ChildrenStatus, Status> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    shared.send(Command::Children { claim, reply }).await?;
    Ok(wire(answer.await.map_err(|_| stopped())??))
}

fn stopped() -> Status {
    Status::unavailable("scheduler stopped")
}

fn wire(view: ChildrenView) -> v1::ChildrenStatus {
    v1::ChildrenStatus {
        swarm: view.swarm,
        state: view.state,
        integration_head: view.integration_head,
        tasks: view
            .tasks
            .into_iter()
            .map(|t| v1::ChildTask {
                id: t.id,
                state: v1::TaskState::from(t.state) as i32,
                reason: t.reason,
                summary: t.summary,
                merge_commit: t.merge_commit,
            })
            .collect(),
        stalled: view.stalled,
    }
}
