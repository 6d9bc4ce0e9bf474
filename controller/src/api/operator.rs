//! `OperatorService`: what swarmctl and operators call.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use swarm_core::plan::Plan;
use swarm_proto::FieldError;
use swarm_proto::convert::required_id;
use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService;
use tonic::{Request, Response, Status};

use super::{Shared, convert, requests, watch};
use crate::error::SchedError;
use crate::scheduler::{LandTarget, OperatorOp, Page};
use crate::store::Reader;

pub struct OperatorApi {
    shared: Shared,
}

impl OperatorApi {
    pub fn new(shared: Shared) -> Self {
        OperatorApi { shared }
    }
}

#[tonic::async_trait]
impl OperatorService for OperatorApi {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Event, Status>> + Send>>;
    type ReadAttemptLogStream = super::logs::LogStream;

    #[tracing::instrument(skip_all)]
    async fn read_attempt_log(
        &self,
        request: Request<v1::ReadAttemptLogRequest>,
    ) -> Result<Response<Self::ReadAttemptLogStream>, Status> {
        Ok(Response::new(super::logs::read_attempt_log(&self.shared, request.into_inner()).await?))
    }

    #[tracing::instrument(skip_all)]
    async fn create_swarm(
        &self,
        request: Request<v1::CreateSwarmRequest>,
    ) -> Result<Response<v1::CreateSwarmResponse>, Status> {
        let request = request.into_inner();
        // Checked before the plan is parsed: a bad origin costs no parse.
        let origin = super::origin::from_wire(request.origin.as_ref())?;
        let text = request.plan_toml;
        // Off the runtime: a plan of 50,000 tasks takes a few hundred
        // milliseconds to parse and check, and the sidecar streams served by
        // this worker would wait that long.
        let (text, parsed) = tokio::task::spawn_blocking(move || {
            let parsed = Plan::parse(&text);
            (text, parsed)
        })
        .await
        .map_err(|e| Status::internal(format!("parsing the plan: {e}")))?;
        let plan = parsed.map_err(|e| {
            let field =
                if e.path.is_empty() { "plan_toml".to_string() } else { format!("plan_toml: {}", e.path) };
            Status::invalid_argument(format!("{field}: {}", e.rule))
        })?;
        tracing::info!(swarm = %plan.swarm, planned = origin.is_some(), "create swarm");
        let plan = Arc::new(plan);
        // Refused before any branch is made: nothing changes for a plan
        // whose refs another swarm owns.
        self.shared.ask(|reply| OperatorOp::CheckPlanRefs { plan: plan.clone(), reply }).await?;
        // The integration branch starts at the base branch; an existing one
        // is left where it is (a resumed swarm).
        let head = self.shared.merger.ensure_branch(&plan.integration_branch, &plan.base_branch).await?;
        let (view, created) = self
            .shared
            .ask(|reply| OperatorOp::CreateSwarm {
                plan_text: text,
                plan,
                integration_head: head,
                origin,
                reply,
            })
            .await?;
        Ok(Response::new(v1::CreateSwarmResponse { swarm: Some(v1::Swarm::from(view)), created }))
    }

    #[tracing::instrument(skip_all)]
    async fn get_swarm(&self, request: Request<v1::GetSwarmRequest>) -> Result<Response<v1::Swarm>, Status> {
        let swarm = requests::swarm_id("swarm_id", &request.into_inner().swarm_id)?;
        let view = self.shared.ask(|reply| OperatorOp::GetSwarm { swarm, reply }).await?;
        Ok(Response::new(v1::Swarm::from(view)))
    }

    async fn list_swarms(
        &self,
        request: Request<v1::ListSwarmsRequest>,
    ) -> Result<Response<v1::ListSwarmsResponse>, Status> {
        let req = request.into_inner();
        let page = Page::new(req.page_size, req.page_token)?;
        let (views, next_page_token) =
            self.shared.ask(|reply| OperatorOp::ListSwarms { page, reply }).await?;
        Ok(Response::new(v1::ListSwarmsResponse {
            swarms: views.into_iter().map(v1::Swarm::from).collect(),
            next_page_token,
        }))
    }

    async fn list_tasks(
        &self,
        request: Request<v1::ListTasksRequest>,
    ) -> Result<Response<v1::ListTasksResponse>, Status> {
        let (swarm, states, page) = requests::list_tasks(request.into_inner())?;
        let (views, next_page_token) =
            self.shared.ask(|reply| OperatorOp::ListTasks { swarm, states, page, reply }).await?;
        Ok(Response::new(v1::ListTasksResponse {
            tasks: views.into_iter().map(v1::Task::from).collect(),
            next_page_token,
        }))
    }

    async fn get_task(
        &self,
        request: Request<v1::GetTaskRequest>,
    ) -> Result<Response<v1::TaskDetail>, Status> {
        let task = convert::task_key("task_id", &request.into_inner().task_id)?;
        let detail = self.shared.ask(|reply| OperatorOp::GetTask { task: task.clone(), reply }).await?;
        let mut detail = v1::TaskDetail::from(detail);
        let store = self.shared.store.clone();
        let events = tokio::task::spawn_blocking(move || -> Result<_, SchedError> {
            let mut reader = Reader::open(&store).map_err(|e| SchedError::Unavailable(e.to_string()))?;
            reader
                .read_task_events(task.swarm.as_str(), task.task.as_str(), 100_000)
                .map_err(|e| SchedError::Unavailable(e.to_string()))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        detail.events = events.into_iter().map(convert::event).collect();
        Ok(Response::new(detail))
    }

    async fn list_workers(
        &self,
        request: Request<v1::ListWorkersRequest>,
    ) -> Result<Response<v1::ListWorkersResponse>, Status> {
        let req = request.into_inner();
        let page = Page::new(req.page_size, req.page_token)?;
        let (views, next_page_token) =
            self.shared.ask(|reply| OperatorOp::ListWorkers { page, reply }).await?;
        Ok(Response::new(v1::ListWorkersResponse {
            workers: views.into_iter().map(v1::Worker::from).collect(),
            next_page_token,
        }))
    }

    async fn watch(&self, request: Request<v1::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let (swarm, start) = requests::watch(request.get_ref())?;
        let (after, stream) = watch::watch(self.shared.clone(), start, swarm).await?;
        let mut response = Response::new(stream);
        response.metadata_mut().insert(watch::STARTS_AFTER_HEADER, after.into());
        Ok(response)
    }

    #[tracing::instrument(skip_all)]
    async fn cancel_task(
        &self,
        request: Request<v1::CancelTaskRequest>,
    ) -> Result<Response<v1::CancelTaskResponse>, Status> {
        let (task, reason) = requests::cancel_task(request.into_inner())?;
        let view = self.shared.ask(|reply| OperatorOp::CancelTask { task, reason, reply }).await?;
        Ok(Response::new(v1::CancelTaskResponse { task: Some(v1::Task::from(view)) }))
    }

    #[tracing::instrument(skip_all)]
    async fn cancel_swarm(
        &self,
        request: Request<v1::CancelSwarmRequest>,
    ) -> Result<Response<v1::CancelSwarmResponse>, Status> {
        let (swarm, reason) = requests::cancel_swarm(request.into_inner())?;
        let cancelled = self.shared.ask(|reply| OperatorOp::CancelSwarm { swarm, reason, reply }).await?;
        Ok(Response::new(v1::CancelSwarmResponse { cancelled }))
    }

    #[tracing::instrument(skip_all)]
    async fn retry_task(
        &self,
        request: Request<v1::RetryTaskRequest>,
    ) -> Result<Response<v1::RetryTaskResponse>, Status> {
        let task = convert::task_key("task_id", &request.into_inner().task_id)?;
        let view = self.shared.ask(|reply| OperatorOp::RetryTask { task, reply }).await?;
        Ok(Response::new(v1::RetryTaskResponse { task: Some(v1::Task::from(view)) }))
    }

    #[tracing::instrument(skip_all, fields(task = %request.get_ref().task_id))]
    async fn review_task(
        &self,
        request: Request<v1::ReviewTaskRequest>,
    ) -> Result<Response<v1::ReviewTaskResponse>, Status> {
        let (task, decision, message) = requests::review_task(request.into_inner())?;
        let view = self.shared.ask(|reply| OperatorOp::ReviewTask { task, decision, message, reply }).await?;
        Ok(Response::new(v1::ReviewTaskResponse { task: Some(v1::Task::from(view)) }))
    }

    #[tracing::instrument(skip_all)]
    async fn answer(
        &self,
        request: Request<v1::AnswerRequest>,
    ) -> Result<Response<v1::AnswerResponse>, Status> {
        let (task, question_id, text) = requests::answer(request.into_inner())?;
        let view = self.shared.ask(|reply| OperatorOp::Answer { task, question_id, text, reply }).await?;
        Ok(Response::new(v1::AnswerResponse { task: Some(v1::Task::from(view)) }))
    }

    #[tracing::instrument(skip_all)]
    async fn send_message(
        &self,
        request: Request<v1::SendMessageRequest>,
    ) -> Result<Response<v1::SendMessageResponse>, Status> {
        let (task, text) = requests::send_message(request.into_inner())?;
        let (view, message_id) =
            self.shared.ask(|reply| OperatorOp::SendMessage { task, text, reply }).await?;
        Ok(Response::new(v1::SendMessageResponse { task: Some(v1::Task::from(view)), message_id }))
    }

    #[tracing::instrument(skip_all, fields(target = %request.get_ref().target))]
    async fn set_budget(
        &self,
        request: Request<v1::SetBudgetRequest>,
    ) -> Result<Response<v1::SetBudgetResponse>, Status> {
        Ok(Response::new(super::budget::set_budget(&self.shared, request.into_inner()).await?))
    }

    #[tracing::instrument(skip_all, fields(swarm = %request.get_ref().swarm_id))]
    async fn pause_swarm(
        &self,
        request: Request<v1::PauseSwarmRequest>,
    ) -> Result<Response<v1::PauseSwarmResponse>, Status> {
        Ok(Response::new(super::budget::pause(&self.shared, request.into_inner()).await?))
    }

    #[tracing::instrument(skip_all, fields(swarm = %request.get_ref().swarm_id))]
    async fn resume_swarm(
        &self,
        request: Request<v1::ResumeSwarmRequest>,
    ) -> Result<Response<v1::ResumeSwarmResponse>, Status> {
        Ok(Response::new(super::budget::resume(&self.shared, request.into_inner()).await?))
    }

    #[tracing::instrument(skip_all)]
    async fn drain_worker(
        &self,
        request: Request<v1::DrainWorkerRequest>,
    ) -> Result<Response<v1::DrainWorkerResponse>, Status> {
        let worker = required_id("worker_id", &request.into_inner().worker_id)?;
        let view = self.shared.ask(|reply| OperatorOp::DrainWorker { worker, reply }).await?;
        Ok(Response::new(v1::DrainWorkerResponse { worker: Some(v1::Worker::from(view)) }))
    }

    #[tracing::instrument(skip_all)]
    async fn land(&self, request: Request<v1::LandRequest>) -> Result<Response<v1::LandResponse>, Status> {
        let (swarm, target) = requests::land(request.into_inner())?;
        let land = self.shared.ask(|reply| OperatorOp::Land { swarm: swarm.clone(), target, reply }).await?;
        let result = self.land(&land).await;
        let outcome = match &result {
            Ok(l) => Ok((l.old.clone(), l.new.clone())),
            Err(e) => Err(e.message().to_string()),
        };
        let (s, t) = (land.swarm.clone(), land.target.clone());
        self.shared.ask(|reply| OperatorOp::Landed { swarm: s, target: t, outcome, reply }).await?;
        let landed = result?;
        tracing::info!(swarm = %swarm, target = %landed.target, old = %landed.old, new = %landed.new, "landed");
        Ok(Response::new(v1::LandResponse {
            target_branch: landed.target,
            old_commit: landed.old,
            new_commit: landed.new,
        }))
    }
}

impl OperatorApi {
    /// Moves the target, fast-forward only; an explicit target that a
    /// worktree has checked out is refused, since moving it would leave that
    /// worktree's files describing another commit.
    async fn land(&self, land: &LandTarget) -> Result<crate::merger::Landed, Status> {
        if land.explicit {
            let (repo, target) = (self.shared.merger.repo().to_path_buf(), land.target.clone());
            let holder = tokio::task::spawn_blocking(move || swarm_git::checked_out_in(&repo, &target))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| Status::failed_precondition(e.to_string()))?;
            if let Some(path) = holder {
                return Err(FieldError::new(
                    "target_branch",
                    format!(
                        "{:?} is checked out in {}; land into a branch no worktree uses",
                        land.target,
                        path.display()
                    ),
                )
                .into());
            }
        }
        Ok(self.shared.merger.fast_forward(&land.target, &land.head).await?)
    }
}
