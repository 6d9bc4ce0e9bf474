//! An attempt's worker output, read from the sidecar that ran it
//! (`ReadAttemptLog`, `swarmctl logs TASK --output`).
//!
//! The log lives in that sidecar's worktree, which may be on another
//! machine with no filesystem shared with the controller, so the controller
//! asks for it piece by piece on the sidecar's own Connect stream: a
//! `LogRequest` down, one `LogChunk` back with the same request id. The
//! relay knows which stream belongs to which worker only once the scheduler
//! has welcomed it, so a refused Hello never receives requests, and a chunk
//! is only accepted from the worker the request went to.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::Stream;
use swarm_proto::v1;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tracing::Instrument;

use super::Shared;
use crate::scheduler::OperatorOp;

/// Log requests queued per sidecar stream before a new one is refused.
pub const REQUEST_QUEUE: usize = 16;

/// A log request on its way down a sidecar's stream, boxed: every stream
/// has such a queue (flume's, which allocates as requests come), and one
/// waiting request should not cost the 760 bytes of the message enum.
pub type LogRequestMessage = Box<v1::ControllerMessage>;
/// Requests waiting for an answer, over all sidecars.
const MAX_PENDING: usize = 1024;
/// How long a sidecar may take to answer one request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a follower looks for new output of a running attempt.
const FOLLOW_POLL: Duration = Duration::from_millis(300);
/// How many polls between two checks that the attempt still runs.
const LIVE_CHECK_EVERY: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("sidecar {worker}, which ran {attempt}, is not connected; its log is only on that sidecar")]
    NotConnected { worker: String, attempt: String },
    #[error("sidecar {worker} went away before answering for {attempt}'s log")]
    Gone { worker: String, attempt: String },
    #[error("sidecar {worker} did not answer for {attempt}'s log within {ANSWER_TIMEOUT:?}")]
    Timeout { worker: String, attempt: String },
    #[error("log requests: too many in flight; retry shortly")]
    Busy,
    #[error("{attempt}'s log is not on sidecar {worker} (never written, or removed): {reason}")]
    NotFound { worker: String, attempt: String, reason: String },
    #[error("sidecar {worker} refused to serve {attempt}'s log: {reason}")]
    Refused { worker: String, attempt: String, reason: String },
}

impl From<LogError> for Status {
    fn from(e: LogError) -> Status {
        match &e {
            LogError::NotConnected { .. } | LogError::Gone { .. } => Status::unavailable(e.to_string()),
            LogError::Timeout { .. } => Status::deadline_exceeded(e.to_string()),
            LogError::Busy => Status::resource_exhausted(e.to_string()),
            LogError::NotFound { .. } => Status::not_found(e.to_string()),
            LogError::Refused { .. } => Status::failed_precondition(e.to_string()),
        }
    }
}

struct Conn {
    session: u64,
    tx: flume::Sender<LogRequestMessage>,
}

struct Pending {
    worker: String,
    reply: oneshot::Sender<v1::LogChunk>,
}

/// Which welcomed stream reaches which worker, and the requests waiting
/// for their chunk. Both locks are held only to look up or change a map.
#[derive(Default)]
pub struct LogRelay {
    next_id: AtomicU64,
    streams: Mutex<HashMap<String, Conn>>,
    pending: Mutex<HashMap<u64, Pending>>,
}

/// One read of a log: where to start, and how much.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub offset: u64,
    pub tail_bytes: u64,
}

impl LogRelay {
    /// Called when the scheduler's Welcome goes down a session's stream: from
    /// then on the stream is the worker's (a later session replaces it).
    pub fn register(&self, worker: &str, session: u64, tx: flume::Sender<LogRequestMessage>) {
        lock(&self.streams).insert(worker.to_string(), Conn { session, tx });
    }

    /// Called when a session's stream ends; waiting requests to that worker
    /// fail at once instead of at their timeout.
    pub fn unregister(&self, worker: &str, session: u64) {
        let mut streams = lock(&self.streams);
        if streams.get(worker).is_some_and(|c| c.session == session) {
            streams.remove(worker);
            drop(streams);
            lock(&self.pending).retain(|_, p| p.worker != worker);
        }
    }

    /// A chunk from `worker`'s stream; one naming a request that went to
    /// another worker (or none) is dropped.
    pub fn deliver(&self, worker: &str, chunk: v1::LogChunk) {
        let mut pending = lock(&self.pending);
        match pending.get(&chunk.request_id) {
            Some(p) if p.worker == worker => {
                if let Some(p) = pending.remove(&chunk.request_id) {
                    let _ = p.reply.send(chunk);
                }
            }
            _ => {
                tracing::debug!(worker, request = chunk.request_id, "log chunk for no request of this worker")
            }
        }
    }

    /// Asks `worker` for one piece of `attempt`'s log and waits for it.
    pub async fn read(
        &self,
        worker: &str,
        attempt: &v1::AttemptRef,
        range: Range,
    ) -> Result<v1::LogChunk, LogError> {
        let label = format!("{}/{}#{}", attempt.swarm_id, attempt.task_id, attempt.attempt);
        let names = || (worker.to_string(), label.clone());
        let tx = lock(&self.streams).get(worker).map(|c| c.tx.clone());
        let Some(tx) = tx else {
            let (worker, attempt) = names();
            return Err(LogError::NotConnected { worker, attempt });
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (reply, answer) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if pending.len() >= MAX_PENDING {
                return Err(LogError::Busy);
            }
            pending.insert(id, Pending { worker: worker.to_string(), reply });
        }
        let request = v1::LogRequest {
            request_id: id,
            attempt: Some(attempt.clone()),
            offset: range.offset,
            tail_bytes: range.tail_bytes,
            max_bytes: 0,
        };
        let message = v1::ControllerMessage { body: Some(v1::controller_message::Body::LogRequest(request)) };
        if let Err(e) = tx.try_send(Box::new(message)) {
            lock(&self.pending).remove(&id);
            let (worker, attempt) = names();
            return Err(match e {
                flume::TrySendError::Full(_) => LogError::Busy,
                flume::TrySendError::Disconnected(_) => LogError::Gone { worker, attempt },
            });
        }
        let chunk = match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
            Ok(Ok(chunk)) => chunk,
            Ok(Err(_)) => {
                let (worker, attempt) = names();
                return Err(LogError::Gone { worker, attempt });
            }
            Err(_) => {
                lock(&self.pending).remove(&id);
                let (worker, attempt) = names();
                return Err(LogError::Timeout { worker, attempt });
            }
        };
        if chunk.error.is_empty() {
            return Ok(chunk);
        }
        let (worker, attempt) = names();
        Err(if chunk.not_found {
            LogError::NotFound { worker, attempt, reason: chunk.error }
        } else {
            LogError::Refused { worker, attempt, reason: chunk.error }
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves a plain map behind,
    // still consistent; keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub type LogStream = Pin<Box<dyn Stream<Item = Result<v1::AttemptLogChunk, Status>> + Send>>;

/// The attempt a read is for and where it ran.
struct Target {
    task: swarm_core::TaskKey,
    wire: v1::AttemptRef,
    worker: String,
    live: bool,
}

/// `ReadAttemptLog`: checks the request, finds the attempt and its sidecar,
/// then streams the log's last `tail_bytes` and, with `follow`, what the
/// worker writes until the attempt ends.
pub async fn read_attempt_log(shared: &Shared, req: v1::ReadAttemptLogRequest) -> Result<LogStream, Status> {
    let (task, tail) = super::requests::read_attempt_log(&req)?;
    let target = find_attempt(shared, &task, req.attempt).await?;
    let label = task.attempt(target.wire.attempt).to_string();
    let span = tracing::info_span!("log.read", swarm = %task.swarm, task = %task, attempt = %label,
        worker = %target.worker, follow = req.follow);
    // The first piece is read before the call answers, so a missing log or
    // sidecar is the call's status rather than a broken stream.
    let range = match req.offset {
        Some(offset) => Range { offset, tail_bytes: 0 },
        None => Range { offset: 0, tail_bytes: tail },
    };
    let first = shared.logs.read(&target.worker, &target.wire, range).instrument(span.clone()).await?;
    let (tx, rx) = mpsc::channel(4);
    // Without `follow`, the read ends where the log ended at the first
    // piece, and sends at most `tail` bytes from where it started.
    let end = (!req.follow).then(|| first.size.min(first.offset.saturating_add(tail)));
    let skipped = if req.offset.is_some() { 0 } else { first.offset };
    let pump = pump(shared.clone(), target, (first, skipped), end, tx);
    shared.tasks.spawn(pump.instrument(span));
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

async fn find_attempt(shared: &Shared, task: &swarm_core::TaskKey, number: u32) -> Result<Target, Status> {
    let detail = shared.ask(|reply| OperatorOp::GetTask { task: task.clone(), reply }).await?;
    let found = match number {
        0 => detail.attempts.iter().max_by_key(|a| a.number),
        n => detail.attempts.iter().find(|a| a.number == n),
    };
    let Some(a) = found else {
        return Err(match (number, detail.attempts.len()) {
            (_, 0) => Status::not_found(format!("task {task} has no attempt yet")),
            (n, count) => {
                Status::not_found(format!("attempt: task {task} has no attempt {n} (it has {count})"))
            }
        });
    };
    let wire = v1::AttemptRef {
        swarm_id: task.swarm.to_string(),
        task_id: task.task.to_string(),
        attempt: a.number,
        fencing_token: a.fencing_token,
    };
    Ok(Target { task: task.clone(), wire, worker: a.worker.clone(), live: a.is_live() })
}

/// Sends the log piece by piece to the caller until `end` or, when
/// following (`end` None), until the attempt has ended and its output is
/// all sent. Ends early when the caller goes away.
async fn pump(
    shared: Shared,
    mut target: Target,
    (first, skipped): (v1::LogChunk, u64),
    end: Option<u64>,
    tx: mpsc::Sender<Result<v1::AttemptLogChunk, Status>>,
) {
    let (attempt, worker) = (target.wire.attempt, target.worker.clone());
    let chunk = |offset: u64, mut data: Vec<u8>, skipped: u64| {
        if let Some(end) = end {
            data.truncate(usize::try_from(end.saturating_sub(offset)).unwrap_or(usize::MAX));
        }
        v1::AttemptLogChunk { attempt, worker_id: worker.clone(), offset, skipped, data }
    };
    let out = chunk(first.offset, first.data, skipped);
    let mut offset = out.offset + out.data.len() as u64;
    if tx.send(Ok(out)).await.is_err() {
        return;
    }
    let mut polls = 0u32;
    loop {
        if end.is_some_and(|end| offset >= end) {
            return;
        }
        let read = match shared.logs.read(&target.worker, &target.wire, Range { offset, tail_bytes: 0 }).await
        {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        if read.offset < offset {
            // The file shrank (rewritten by a restart of the attempt's
            // worker): say so rather than send bytes twice.
            let _ = tx.send(Err(Status::aborted("the log was truncated while being read"))).await;
            return;
        }
        if !read.data.is_empty() {
            let out = chunk(read.offset, read.data, 0);
            offset = out.offset + out.data.len() as u64;
            if tx.send(Ok(out)).await.is_err() {
                return;
            }
            continue;
        }
        if end.is_some() || !target.live {
            return;
        }
        tokio::select! {
            _ = tx.closed() => return,
            _ = shared.shutdown.cancelled() => {
                // Not a clean end, which the follower would take for the
                // attempt's: it resumes from its offset after a reconnect.
                let _ = tx.send(Err(Status::unavailable("controller shutting down"))).await;
                return;
            }
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
        }
        polls += 1;
        if polls.is_multiple_of(LIVE_CHECK_EVERY) {
            // An ended attempt gets one more read (above) for what its
            // worker wrote last, then the stream ends.
            match find_attempt(&shared, &target.task, target.wire.attempt).await {
                Ok(now) => target.live = now.live,
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            }
        }
    }
}

/// The last `bytes` of a task's latest attempt's log, for a page that shows
/// it whole (the dashboard): the attempt, its sidecar, the bytes left out
/// before the tail, and the tail.
pub struct Tail {
    pub attempt: u32,
    pub worker: String,
    pub skipped: u64,
    pub data: Vec<u8>,
}

pub async fn tail(shared: &Shared, task_id: String, bytes: u64) -> Result<Tail, Status> {
    use futures::StreamExt as _;
    let req =
        v1::ReadAttemptLogRequest { task_id, attempt: 0, follow: false, tail_bytes: bytes, offset: None };
    let mut stream = read_attempt_log(shared, req).await?;
    let mut out = Tail { attempt: 0, worker: String::new(), skipped: 0, data: Vec::new() };
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if out.worker.is_empty() {
            (out.attempt, out.worker, out.skipped) = (chunk.attempt, chunk.worker_id, chunk.skipped);
        }
        out.data.extend_from_slice(&chunk.data);
    }
    Ok(out)
}
