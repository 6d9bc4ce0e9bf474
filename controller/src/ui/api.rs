//! The dashboard's JSON reads. Each calls the Operator API's read handler
//! in-process, so it answers from the scheduler's model exactly as
//! `swarmctl get` and `describe` do, with the same validation and errors.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService as _;
use tonic::{Code, Request, Status};

use super::{Ui, dto};
use crate::api::pages;

/// The events a task's page shows, the latest ones.
pub const DETAIL_EVENTS: usize = 500;
/// How much of the worker log's end a task's page shows.
pub const LOG_TAIL_BYTES: u64 = 16 << 10;

/// A read's failure, as JSON `{"error": ...}` with the matching HTTP code.
pub struct ApiError(Status);

impl From<Status> for ApiError {
    fn from(s: Status) -> ApiError {
        ApiError(s)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = match self.0.code() {
            Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (code, Json(serde_json::json!({ "error": self.0.message() }))).into_response()
    }
}

type Reply<T> = Result<Json<T>, ApiError>;

#[tracing::instrument(skip_all)]
pub async fn swarms(State(ui): State<Ui>) -> Reply<Vec<dto::Swarm>> {
    let swarms = pages::swarms(&ui.reads).await?;
    Ok(Json(swarms.iter().map(dto::Swarm::from).collect()))
}

#[derive(serde::Serialize)]
pub struct SwarmPage {
    swarm: dto::Swarm,
    tasks: Vec<dto::Task>,
    /// What each task was expected to take against what it took, as
    /// `describe swarm -o json` has it, and worded as swarmctl words it.
    durations: swarm_view::Timings,
    durations_text: dto::DurationsText,
}

#[tracing::instrument(skip_all, fields(swarm = %swarm))]
pub async fn swarm(State(ui): State<Ui>, Path(swarm): Path<String>) -> Reply<SwarmPage> {
    let req = v1::GetSwarmRequest { swarm_id: swarm.clone() };
    let view = ui.reads.get_swarm(Request::new(req)).await?.into_inner();
    let tasks: Vec<dto::Task> = pages::tasks(&ui.reads, &swarm).await?.iter().map(dto::Task::from).collect();
    let durations = swarm_view::Timings::of(&tasks, swarm_view::text::now_ms());
    let durations_text = dto::DurationsText::from(&durations);
    Ok(Json(SwarmPage { swarm: dto::Swarm::from(&view), tasks, durations, durations_text }))
}

#[tracing::instrument(skip_all, fields(swarm = %swarm, task = %task))]
pub async fn task(
    State(ui): State<Ui>,
    Path((swarm, task)): Path<(String, String)>,
) -> Reply<dto::TaskDetail> {
    let req = v1::GetTaskRequest { task_id: format!("{swarm}/{task}") };
    let detail = ui.reads.get_task(Request::new(req)).await?.into_inner();
    let attempted = detail.attempts.len();
    let mut page = dto::TaskDetail::new(&detail, DETAIL_EVENTS);
    if attempted == 0 {
        page.log = "No attempt yet.".into();
        return Ok(Json(page));
    }
    // A sidecar that is gone or slow costs this page its log, not the page.
    match crate::api::logs::tail(&ui.shared, format!("{swarm}/{task}"), LOG_TAIL_BYTES).await {
        Ok(tail) => page.log_tail = Some(tail.into()),
        Err(status) => page.log = status.message().to_string(),
    }
    Ok(Json(page))
}

#[tracing::instrument(skip_all)]
pub async fn workers(State(ui): State<Ui>) -> Reply<Vec<dto::Worker>> {
    let workers = pages::workers(&ui.reads).await?;
    Ok(Json(workers.iter().map(dto::Worker::from).collect()))
}
