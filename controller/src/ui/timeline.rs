//! The swarm page's timeline: where the swarm's time went
//! (`swarm_view::timeline`), as its model and its SVG, made from the same
//! reads the rest of the page uses plus the swarm's events from the store.

use axum::Json;
use axum::extract::{Path, State};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService as _;
use swarm_view::timeline::{self, Timeline};
use tonic::{Request, Status};

use super::Ui;
use super::api::ApiError;
use crate::api::{convert, pages};
use crate::scheduler::OperatorOp;
use crate::store::Reader;

/// Above this many tasks the timeline is not made (one scheduler read per
/// task for its attempts, on every refresh): the page says so instead.
pub const MAX_TASKS: usize = 2000;
/// The most events read for one timeline, oldest first.
pub const MAX_EVENTS: usize = 200_000;
const PAGE: usize = 5000;

#[derive(serde::Serialize)]
pub struct TimelinePage {
    timeline: Option<Timeline>,
    /// The drawing, an `<svg>` element; empty when there is no timeline.
    svg: String,
    summary: String,
    /// Why there is no timeline, when there is none.
    #[serde(skip_serializing_if = "String::is_empty")]
    note: String,
}

#[tracing::instrument(skip_all, fields(swarm = %swarm))]
pub async fn timeline(
    State(ui): State<Ui>,
    Path(swarm): Path<String>,
) -> Result<Json<TimelinePage>, ApiError> {
    let req = v1::GetSwarmRequest { swarm_id: swarm.clone() };
    let view = ui.reads.get_swarm(Request::new(req)).await?.into_inner();
    let tasks = pages::tasks(&ui.reads, &swarm).await?;
    if tasks.len() > MAX_TASKS {
        let note = format!("{} tasks: more than {MAX_TASKS}, too many to draw a timeline of", tasks.len());
        return Ok(Json(TimelinePage { timeline: None, svg: String::new(), summary: String::new(), note }));
    }
    let mut attempts = Vec::new();
    for t in &tasks {
        // The scheduler's record only: the task's events (what GetTask
        // reads from the store for each task) come with the swarm's below.
        let key = convert::task_key("task", &format!("{swarm}/{}", t.id)).map_err(Status::from)?;
        let detail =
            ui.shared.ask(|reply| OperatorOp::GetTask { task: key, reply }).await.map_err(Status::from)?;
        let detail = v1::TaskDetail::from(detail);
        attempts.extend(detail.attempts.into_iter().map(|a| (t.id.clone(), a)));
    }
    let workers = pages::workers(&ui.reads).await?;
    let events = swarm_events(&ui, &swarm).await?;
    let now = swarm_view::text::now_ms();
    let source = timeline::Source {
        swarm: &view,
        tasks: &tasks,
        attempts: &attempts,
        events: &events,
        workers: &workers,
        now,
    };
    let t = timeline::build(&source);
    let svg = swarm_view::timeline_svg::render(&t);
    let summary = swarm_view::timeline_svg::summary(&t);
    Ok(Json(TimelinePage { timeline: Some(t), svg, summary, note: String::new() }))
}

/// The swarm's events up to the newest committed one, oldest first (at
/// most [`MAX_EVENTS`]); its child swarms' are left out.
async fn swarm_events(ui: &Ui, swarm: &str) -> Result<Vec<v1::Event>, Status> {
    let store = ui.shared.store.clone();
    let swarm = swarm.to_string();
    let rows = tokio::task::spawn_blocking(move || -> Result<Vec<v1::Event>, String> {
        let mut reader = Reader::open(&store).map_err(|e| e.to_string())?;
        let up_to = reader.last_event_id().map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let mut cursor = 0;
        while out.len() < MAX_EVENTS {
            let page = reader.read_events(cursor, up_to, Some(&swarm), PAGE).map_err(|e| e.to_string())?;
            let full = page.len() == PAGE;
            for e in page {
                cursor = e.id;
                if e.swarm == swarm {
                    out.push(convert::event(e));
                }
            }
            if !full {
                break;
            }
        }
        Ok(out)
    })
    .await
    .map_err(|e| Status::internal(e.to_string()))?
    .map_err(Status::unavailable)?;
    Ok(rows)
}
