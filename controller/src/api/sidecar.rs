//! `SidecarService`: the Connect stream, and pack transfer for sidecars
//! that do not share the controller's repository.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::Stream;
use swarm_proto::convert::{required_attempt, required_commit};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_service_server::SidecarService;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::{Shared, convert};
use crate::scheduler::{Command, Outbound, Session};

/// How long a new stream may take to say Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Outbound messages queued per sidecar before it counts as stuck.
const OUTBOUND_QUEUE: usize = 1024;
pub const MAX_PACK_BYTES: usize = 512 << 20;
const PACK_CHUNK: usize = 1 << 20;

pub struct SidecarApi {
    shared: Shared,
    next_session: Arc<AtomicU64>,
}

impl SidecarApi {
    pub fn new(shared: Shared) -> Self {
        SidecarApi { shared, next_session: Arc::new(AtomicU64::new(1)) }
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl SidecarService for SidecarApi {
    type ConnectStream = BoxStream<v1::ControllerMessage>;
    type FetchPackStream = BoxStream<v1::PackChunk>;

    async fn connect(
        &self,
        request: Request<Streaming<v1::SidecarMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let (_, extensions, mut inbound) = request.into_parts();
        let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no hello within 10 s"))??
            .ok_or_else(|| Status::invalid_argument("stream closed before hello"))?;
        let Some(v1::sidecar_message::Body::Hello(hello)) = &first.body else {
            return Err(Status::invalid_argument("body: the first message on a stream must be hello"));
        };
        let hello = convert::hello(hello)?;
        super::auth::authorize_worker(&self.shared, &extensions, &hello.worker_id)?;
        let worker = hello.worker_id.clone();
        let worker_span = worker.clone();
        let session_id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("sidecar.session", worker = %worker, session = session_id);
        let (tx, rx) = mpsc::channel::<Outbound>(OUTBOUND_QUEUE);
        let (err_tx, err_rx) = mpsc::channel::<Status>(1);
        let last_seen = Arc::new(AtomicU64::new(self.shared.mono_ms()));
        let session = Session { id: session_id, tx, last_seen: last_seen.clone() };
        self.shared.send(Command::Hello { hello, session })?;

        let shared = self.shared.clone();
        self.shared
            .tasks
            .spawn(read_reports(shared, inbound, worker, session_id, last_seen, err_tx).instrument(span));
        Ok(Response::new(Box::pin(responses(worker_span, rx, err_rx, self.shared.shutdown.clone()))))
    }

    async fn fetch_pack(
        &self,
        request: Request<v1::FetchPackRequest>,
    ) -> Result<Response<Self::FetchPackStream>, Status> {
        let req = request.into_inner();
        let want = required_commit("want", &req.want)?;
        if req.have.len() > 10_000 {
            return Err(Status::invalid_argument("have: at most 10000 commits"));
        }
        let mut haves = Vec::with_capacity(req.have.len());
        for (i, h) in req.have.iter().enumerate() {
            haves.push(required_commit(&format!("have[{i}]"), h)?);
        }
        let repo = self.shared.integrator.repo().to_path_buf();
        let span = tracing::info_span!("pack.fetch", want = %want, haves = haves.len());
        let pack = tokio::task::spawn_blocking(move || {
            let _g = span.enter();
            swarm_git::build_pack(&repo, &want, &haves)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let chunks: Vec<Result<v1::PackChunk, Status>> =
            pack.chunks(PACK_CHUNK).map(|c| Ok(v1::PackChunk { data: c.to_vec() })).collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn push_pack(
        &self,
        request: Request<Streaming<v1::PushPackChunk>>,
    ) -> Result<Response<v1::PushPackResponse>, Status> {
        let mut chunks = request.into_inner();
        let mut data = Vec::new();
        let mut tip = None;
        while let Some(chunk) = chunks.message().await? {
            if tip.is_none() {
                required_attempt("attempt", chunk.attempt.as_ref())?;
                tip = Some(required_commit("tip", &chunk.tip)?);
            }
            if data.len() + chunk.data.len() > MAX_PACK_BYTES {
                return Err(Status::resource_exhausted(format!("data: pack exceeds {MAX_PACK_BYTES} bytes")));
            }
            data.extend_from_slice(&chunk.data);
        }
        let tip =
            tip.ok_or_else(|| Status::invalid_argument("tip: the first chunk must name the tip commit"))?;
        let repo = self.shared.integrator.repo().to_path_buf();
        let span = tracing::info_span!("pack.push", tip = %tip, bytes = data.len());
        let t = tip.clone();
        let objects = tokio::task::spawn_blocking(move || {
            let _g = span.enter();
            swarm_git::receive_pack(&repo, &data, &t, MAX_PACK_BYTES)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::invalid_argument(format!("data: {e}")))?;
        Ok(Response::new(v1::PushPackResponse { tip, objects }))
    }
}

/// Reads a sidecar's stream until it ends, turning each message into a
/// scheduler command. Heartbeats only renew the lease clock.
async fn read_reports(
    shared: Shared,
    mut inbound: Streaming<v1::SidecarMessage>,
    worker: String,
    session: u64,
    last_seen: Arc<AtomicU64>,
    errors: mpsc::Sender<Status>,
) {
    loop {
        let message = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            m = inbound.message() => m,
        };
        let message = match message {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(status) => {
                tracing::debug!(%status, "sidecar stream ended");
                break;
            }
        };
        let now = shared.mono_ms();
        let previous = last_seen.swap(now, Ordering::Relaxed);
        shared.metrics.heartbeat_lag.observe(now.saturating_sub(previous) as f64 / 1000.0);
        let Some(body) = &message.body else {
            let _ = errors.try_send(Status::invalid_argument("body: is required"));
            break;
        };
        match convert::report(message.seq, body) {
            Ok(None) => {}
            Ok(Some(report)) => {
                let cmd = Command::Report { worker: worker.clone(), session, seq: message.seq, report };
                if shared.send(cmd).is_err() {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "invalid report; closing the stream");
                let _ = errors.try_send(Status::invalid_argument(e.to_string()));
                break;
            }
        }
    }
    let _ = shared.send(Command::Disconnected { worker, session });
}

/// The response stream: the scheduler's messages, ended by an error from
/// the reader, by the scheduler dropping the session, or by shutdown.
fn responses(
    worker: String,
    rx: mpsc::Receiver<Outbound>,
    err_rx: mpsc::Receiver<Status>,
    shutdown: tokio_util::sync::CancellationToken,
) -> impl Stream<Item = Result<v1::ControllerMessage, Status>> + Send {
    futures::stream::unfold(Some((worker, rx, err_rx, shutdown)), |state| async move {
        let (worker, mut rx, mut err_rx, shutdown) = state?;
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => Some((Err(Status::unavailable("controller shutting down")), None)),
            Some(status) = err_rx.recv() => Some((Err(status), None)),
            m = rx.recv() => m.map(|m| {
                let m = convert::outbound(traced(m, &worker));
                (Ok(m), Some((worker, rx, err_rx, shutdown)))
            }),
        }
    })
}

/// Gives an Assign its trace context: an `attempt.assign` span in the
/// swarm's trace (one trace per swarm, the task as the parent), whose
/// `traceparent` the sidecar continues and hands to the worker.
fn traced(mut m: Outbound, worker: &str) -> Outbound {
    if let Outbound::Assign(a) = &mut m
        && a.traceparent.is_empty()
    {
        let task = &a.attempt.task;
        let label = task.attempt(a.attempt.number).to_string();
        let span = tracing::info_span!("attempt.assign", swarm = %task.swarm, task = %task, attempt = %label,
            worker, token = a.attempt.token, branch = %a.branch);
        a.traceparent =
            swarm_telemetry::continue_swarm_trace(&span, task.swarm.as_str(), &task.to_string(), &label);
    }
    m
}
