//! Live updates: the Operator API's `Watch` as server-sent events, one
//! `data:` line of JSON per event with the event id as the SSE id. A
//! browser's `EventSource` reconnects by itself and sends that id back as
//! `Last-Event-ID`, and `Watch` resumes after it with no gap and no
//! duplicate, so a dashboard that lost its connection misses nothing.

use std::convert::Infallible;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt as _};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService as _;
use tonic::{Request, Status};

use super::api::ApiError;
use super::{Ui, dto};

#[derive(Debug, serde::Deserialize)]
pub struct Params {
    /// Only this swarm's events; all when absent.
    swarm: Option<String>,
    /// Resume after this event id (0: only new events).
    after: Option<u64>,
}

#[tracing::instrument(skip_all, fields(swarm = params.swarm.as_deref().unwrap_or("")))]
pub async fn stream(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
            Status::invalid_argument("Last-Event-ID: must be an event id (a non-negative integer)")
        })?),
    };
    // Without a cursor the stream starts at the newest event: the page has
    // just read the state and wants what changes from here.
    let after = match resume.or(params.after) {
        Some(id) => id,
        None => latest(&ui).await?,
    };
    let req = v1::WatchRequest {
        after_event_id: after,
        swarm_id: params.swarm.unwrap_or_default(),
        ..Default::default()
    };
    let events = ui.reads.watch(Request::new(req)).await?.into_inner();
    let sse = events.map(|item| {
        Ok(match item {
            Ok(e) => {
                let id = e.id.to_string();
                let json = serde_json::to_string(&dto::Event::from(&e)).unwrap_or_else(|_| "{}".into());
                Event::default().id(id).data(json)
            }
            // The browser sees why, then reconnects with its last id.
            Err(status) => Event::default().event("error").data(status.message()),
        })
    });
    Ok(Sse::new(sse).keep_alive(KeepAlive::default()))
}

/// The id of the newest committed event: the scheduler's answer to a
/// subscription (the receiver is dropped; `Watch` makes its own).
async fn latest(ui: &Ui) -> Result<u64, ApiError> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    ui.shared.send(crate::scheduler::Command::Subscribe { reply }).await.map_err(Status::from)?;
    let (last, _live) = rx.await.map_err(|_| Status::unavailable("scheduler stopped"))?;
    Ok(last)
}
