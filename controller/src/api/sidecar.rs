//! `SidecarService`: the Connect stream, and pack transfer for sidecars
//! that do not share the controller's repository.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::Stream;
use swarm_proto::convert::{required_attempt, required_commit};
use swarm_proto::limits::{MAX_MESSAGE_BYTES, SECRET_HEADER, WORKER_HEADER};
use swarm_proto::v1;
use swarm_proto::v1::sidecar_service_server::SidecarService;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::logs::LogRequestMessage;
use super::{Shared, convert};
use crate::scheduler::outbound::{OutboundRx, outbound_queue};
use crate::scheduler::views::ContextTask;
use crate::scheduler::{Command, Outbound, PackClaim, ReportedAttempt, Session};

/// How long a new stream may take to say Hello, by default.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Outbound messages queued per sidecar before it counts as stuck.
const OUTBOUND_QUEUE: usize = 1024;
/// Largest pack upload, by default.
pub const MAX_PACK_BYTES: usize = 512 << 20;
/// Pack uploads staged at once; each may take up to `MAX_PACK_BYTES` of disk.
pub const MAX_CONCURRENT_PUSHES: usize = 4;
const PACK_CHUNK: usize = 1 << 20;

pub struct SidecarApi {
    shared: Shared,
    next_session: Arc<AtomicU64>,
    hello_timeout: Duration,
    max_pack_bytes: usize,
    pushes: Arc<Semaphore>,
}

impl SidecarApi {
    pub fn new(shared: Shared, hello_timeout: Duration, max_pack_bytes: usize) -> Self {
        SidecarApi {
            shared,
            next_session: Arc::new(AtomicU64::new(1)),
            hello_timeout,
            max_pack_bytes,
            pushes: Arc::new(Semaphore::new(MAX_CONCURRENT_PUSHES)),
        }
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
        let first = tokio::time::timeout(self.hello_timeout, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded(format!("no hello within {:?}", self.hello_timeout)))??
            .ok_or_else(|| Status::invalid_argument("stream closed before hello"))?;
        let Some(v1::sidecar_message::Body::Hello(hello)) = &first.body else {
            return Err(Status::invalid_argument("body: the first message on a stream must be hello"));
        };
        let mut hello = convert::hello(hello)?;
        super::auth::authorize_worker(&self.shared, &extensions, &hello.worker_id)?;
        hello.principal = principal(&extensions);
        let worker = hello.worker_id.clone();
        let worker_span = worker.clone();
        let session_id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("sidecar.session", worker = %worker, session = session_id);
        let (tx, rx) = outbound_queue(OUTBOUND_QUEUE);
        let (err_tx, err_rx) = flume::bounded::<Status>(1);
        let (log_tx, log_rx) = flume::bounded(super::logs::REQUEST_QUEUE);
        let last_seen = Arc::new(AtomicU64::new(self.shared.mono_ms()));
        let closed = self.shared.shutdown.child_token();
        let session = Session { id: session_id, tx, last_seen: last_seen.clone(), closed: closed.clone() };
        self.shared.send(Command::Hello { hello, session }).await?;

        let shared = self.shared.clone();
        let reader = read_reports(shared, inbound, worker, session_id, last_seen, err_tx, closed.clone());
        self.shared.tasks.spawn(reader.instrument(span));
        let out = Outgoing { worker: worker_span, session: session_id, rx, err_rx, logs: (log_tx, log_rx) };
        Ok(Response::new(Box::pin(responses(out, self.shared.clone(), closed))))
    }

    async fn fetch_pack(
        &self,
        request: Request<v1::FetchPackRequest>,
    ) -> Result<Response<Self::FetchPackStream>, Status> {
        let claim = self.pack_claim(request.metadata(), request.extensions(), None)?;
        let req = request.into_inner();
        let want = required_commit("want", &req.want)?;
        if req.have.len() > 10_000 {
            return Err(Status::invalid_argument("have: at most 10000 commits"));
        }
        let mut haves = Vec::with_capacity(req.have.len());
        for (i, h) in req.have.iter().enumerate() {
            haves.push(required_commit(&format!("have[{i}]"), h)?);
        }
        self.authorize_pack(claim).await?;
        let repo = self.shared.merger.repo().to_path_buf();
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

    /// Streams the upload to a temporary file (bounded in size, and in how
    /// many run at once) only after the caller proved it holds the live
    /// attempt the pack is for; then indexes it from there.
    async fn push_pack(
        &self,
        request: Request<Streaming<v1::PushPackChunk>>,
    ) -> Result<Response<v1::PushPackResponse>, Status> {
        let (metadata, extensions, mut chunks) = request.into_parts();
        let first = chunks.message().await?.ok_or_else(|| {
            Status::invalid_argument("attempt: the first chunk must name the attempt and tip")
        })?;
        let attempt = required_attempt("attempt", first.attempt.as_ref())?;
        let tip = required_commit("tip", &first.tip)?;
        let reported =
            ReportedAttempt { task: attempt.task, number: attempt.number, token: attempt.fencing_token };
        let label = reported.task.attempt(reported.number).to_string();
        self.authorize_pack(self.pack_claim(&metadata, &extensions, Some(reported))?).await?;
        let _permit = self.pushes.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "pack uploads: at most {MAX_CONCURRENT_PUSHES} at once; retry shortly"
            ))
        })?;
        let span = tracing::info_span!("pack.push", attempt = %label, tip = %tip);
        let repo = self.shared.merger.repo().to_path_buf();
        let incoming = self.incoming_dir()?;
        let file = tempfile::NamedTempFile::new_in(&incoming)
            .map_err(|e| Status::internal(format!("pack staging file in {}: {e}", incoming.display())))?;
        let (std_file, path) = file.into_parts();
        let mut out = tokio::fs::File::from_std(std_file);
        let mut size = first.data.len();
        out.write_all(&first.data).await.map_err(|e| Status::internal(format!("pack staging: {e}")))?;
        while let Some(chunk) = chunks.message().await? {
            size = size.saturating_add(chunk.data.len());
            if size > self.max_pack_bytes {
                return Err(Status::resource_exhausted(format!(
                    "data: pack exceeds {} bytes",
                    self.max_pack_bytes
                )));
            }
            out.write_all(&chunk.data).await.map_err(|e| Status::internal(format!("pack staging: {e}")))?;
        }
        out.flush().await.map_err(|e| Status::internal(format!("pack staging: {e}")))?;
        drop(out);
        let (t, max) = (tip.clone(), self.max_pack_bytes);
        let objects = tokio::task::spawn_blocking(move || {
            let _g = span.enter();
            // `path` removes the staging file when it drops, here.
            swarm_git::receive_pack_file(&repo, &path, &t, max)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::invalid_argument(format!("data: {e}")))?;
        Ok(Response::new(v1::PushPackResponse { tip, objects }))
    }

    async fn get_task_context(
        &self,
        request: Request<v1::GetTaskContextRequest>,
    ) -> Result<Response<v1::TaskContext>, Status> {
        let (metadata, extensions, req) = request.into_parts();
        let attempt = required_attempt("attempt", req.attempt.as_ref())?;
        let reported =
            ReportedAttempt { task: attempt.task, number: attempt.number, token: attempt.fencing_token };
        let span = tracing::info_span!("task.context", swarm = %reported.task.swarm, task = %reported.task, attempt = %reported.task.attempt(reported.number));
        let claim = self.pack_claim(&metadata, &extensions, Some(reported))?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.shared.send(Command::TaskContext { claim, reply }).instrument(span).await?;
        let view = answer.await.map_err(|_| Status::unavailable("scheduler stopped"))??;
        let task = |t: &ContextTask| v1::ContextTask {
            id: t.id.clone(),
            title: t.title.clone(),
            state: v1::TaskState::from(t.state) as i32,
            reason: t.reason.clone(),
            summary: t.summary.clone(),
            owned_globs: t.owned_globs.clone(),
        };
        Ok(Response::new(v1::TaskContext {
            dependencies: view.dependencies.iter().map(task).collect(),
            siblings: view.siblings.iter().map(task).collect(),
        }))
    }

    async fn spawn_children(
        &self,
        request: Request<v1::SpawnChildrenRequest>,
    ) -> Result<Response<v1::ChildrenStatus>, Status> {
        let (metadata, extensions, req) = request.into_parts();
        let claim = self.attempt_claim(&metadata, &extensions, req.attempt.as_ref())?;
        super::children::spawn(&self.shared, claim, req.plan_toml).await.map(Response::new)
    }

    async fn get_children(
        &self,
        request: Request<v1::GetChildrenRequest>,
    ) -> Result<Response<v1::ChildrenStatus>, Status> {
        let (metadata, extensions, req) = request.into_parts();
        let claim = self.attempt_claim(&metadata, &extensions, req.attempt.as_ref())?;
        super::children::status(&self.shared, claim).await.map(Response::new)
    }
}

impl SidecarApi {
    async fn authorize_pack(&self, claim: PackClaim) -> Result<(), Status> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.shared.send(Command::AuthorizePack { claim, reply }).await?;
        answer.await.map_err(|_| Status::unavailable("scheduler stopped"))??;
        Ok(())
    }

    /// Where uploads are staged: beside the store, on the same filesystem
    /// as the repository's objects.
    fn incoming_dir(&self) -> Result<std::path::PathBuf, Status> {
        let dir = self
            .shared
            .db_path
            .parent()
            .map(|d| d.join("incoming"))
            .unwrap_or_else(|| std::env::temp_dir().join("swarm-incoming"));
        std::fs::create_dir_all(&dir).map_err(|e| Status::internal(format!("{}: {e}", dir.display())))?;
        Ok(dir)
    }
}

impl SidecarApi {
    /// The worker a pack transfer is for, from its metadata; the caller's
    /// credential must cover that worker id, as for its Hello.
    /// The claim of a call about one attempt (the caller must hold it).
    fn attempt_claim(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
        attempt: Option<&v1::AttemptRef>,
    ) -> Result<PackClaim, Status> {
        let attempt = required_attempt("attempt", attempt)?;
        let reported =
            ReportedAttempt { task: attempt.task, number: attempt.number, token: attempt.fencing_token };
        self.pack_claim(metadata, extensions, Some(reported))
    }

    fn pack_claim(
        &self,
        metadata: &MetadataMap,
        extensions: &tonic::Extensions,
        attempt: Option<ReportedAttempt>,
    ) -> Result<PackClaim, Status> {
        let get = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let worker = get(WORKER_HEADER);
        swarm_core::names::check_id(&worker)
            .map_err(|rule| Status::unauthenticated(format!("{WORKER_HEADER}: {rule}")))?;
        super::auth::authorize_worker(&self.shared, extensions, &worker)?;
        Ok(PackClaim { worker, resume_secret: get(SECRET_HEADER), principal: principal(extensions), attempt })
    }
}

/// The credential a stream proved, when credentials are in use: with it, a
/// sidecar restarted without its journal may still take its worker id back.
fn principal(extensions: &tonic::Extensions) -> Option<String> {
    extensions.get::<super::auth::Identity>().filter(|i| !i.unrestricted).map(|i| i.principal.clone())
}

/// Reads a sidecar's stream until it ends, turning each message into a
/// scheduler command. Heartbeats only renew the lease clock (the first
/// message also tells the scheduler the sidecar has its Welcome).
async fn read_reports(
    shared: Shared,
    mut inbound: Streaming<v1::SidecarMessage>,
    worker: String,
    session: u64,
    last_seen: Arc<AtomicU64>,
    errors: flume::Sender<Status>,
    closed: tokio_util::sync::CancellationToken,
) {
    // A sidecar sends nothing after its Hello until it has the Welcome.
    let mut heard = false;
    loop {
        let message = tokio::select! {
            // Shutdown, or the scheduler closed the session.
            _ = closed.cancelled() => break,
            m = inbound.message() => m,
        };
        let message = match message {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(status) => {
                tracing::debug!(%status, "sidecar stream ended");
                // A message over the decoding limit must not end the stream
                // as if all were well: the sidecar would replay it forever.
                if matches!(status.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted) {
                    let _ = errors.try_send(Status::resource_exhausted(format!(
                        "message over the limit of {MAX_MESSAGE_BYTES} bytes: {}",
                        status.message()
                    )));
                }
                break;
            }
        };
        let now = shared.mono_ms();
        let previous = last_seen.swap(now, Ordering::Relaxed);
        shared.metrics.heartbeat_lag.observe(now.saturating_sub(previous) as f64 / 1000.0);
        if !heard {
            heard = true;
            if shared.send(Command::Heard { worker: worker.clone(), session }).await.is_err() {
                break;
            }
        }
        let Some(body) = message.body else {
            let _ = errors.try_send(Status::invalid_argument("body: is required"));
            break;
        };
        let body = match body {
            v1::sidecar_message::Body::LogChunk(chunk) => {
                shared.logs.deliver(&worker, chunk);
                continue;
            }
            body => body,
        };
        let body = &body;
        match convert::report(message.seq, body) {
            Ok(None) => {}
            Ok(Some(report)) => {
                let cmd = Command::Report { worker: worker.clone(), session, seq: message.seq, report };
                if shared.send(cmd).await.is_err() {
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
    shared.logs.unregister(&worker, session);
    let _ = shared.send(Command::Disconnected { worker, session }).await;
}

/// What flows down one sidecar's stream: the scheduler's messages, an
/// error from the reader, and the operators' log requests.
struct Outgoing {
    worker: String,
    session: u64,
    rx: OutboundRx,
    err_rx: flume::Receiver<Status>,
    logs: (flume::Sender<LogRequestMessage>, flume::Receiver<LogRequestMessage>),
}

/// The response stream: the scheduler's messages and log requests, ended
/// by an error from the reader, by the scheduler dropping or closing the
/// session, or by shutdown (`closed` is a child of the shutdown token).
/// The stream takes log requests once the scheduler's Welcome went down it:
/// only then is it the worker's.
fn responses(
    out: Outgoing,
    shared: Shared,
    closed: tokio_util::sync::CancellationToken,
) -> impl Stream<Item = Result<v1::ControllerMessage, Status>> + Send {
    futures::stream::unfold(Some((out, shared, closed)), |state| async move {
        let (out, shared, closed) = state?;
        let shutdown = shared.shutdown.clone();
        let next = tokio::select! {
            biased;
            _ = shutdown.cancelled() => Err(Status::unavailable("controller shutting down")),
            _ = closed.cancelled() => Err(Status::resource_exhausted("outbound queue full; reconnect")),
            Ok(status) = out.err_rx.recv_async() => Err(status),
            m = out.rx.recv_async() => match m {
                Err(_) => return None,
                Ok(m) => {
                    if matches!(m, Outbound::Welcome { .. }) {
                        shared.logs.register(&out.worker, out.session, out.logs.0.clone());
                    }
                    convert::outbound(traced(m, &out.worker))
                }
            },
            Ok(request) = out.logs.1.recv_async() => Ok(*request),
        };
        match next {
            Ok(m) => Some((Ok(m), Some((out, shared, closed)))),
            Err(status) => Some((Err(status), None)),
        }
    })
}

/// Gives an Assign its trace context: an `attempt.assign` span in the
/// swarm's trace (one trace per swarm, the task as the parent), whose
/// `traceparent` the sidecar continues and hands to the worker. A merge
/// queue's verification joins the same trace under the swarm's root, since
/// it covers several tasks.
fn traced(mut m: Outbound, worker: &str) -> Outbound {
    match &mut m {
        Outbound::Assign(a) if a.traceparent.is_empty() => {
            let task = &a.attempt.task;
            let label = task.attempt(a.attempt.number).to_string();
            let span = tracing::info_span!("attempt.assign", swarm = %task.swarm, task = %task, attempt = %label,
                worker, token = a.attempt.token, branch = %a.branch);
            a.traceparent =
                swarm_telemetry::continue_swarm_trace(&span, task.swarm.as_str(), &task.to_string(), &label);
        }
        Outbound::VerifyMerge(v) if v.traceparent.is_empty() => {
            let span = tracing::info_span!("merge_queue.verify_dispatch", swarm = %v.swarm, job = v.job,
                commit = %v.commit, worker, tasks = v.attempts.len());
            let key = format!("{}:verify:{}", v.swarm, v.job);
            v.traceparent = swarm_telemetry::continue_swarm_root_trace(&span, &v.swarm, &key);
        }
        _ => {}
    }
    m
}
