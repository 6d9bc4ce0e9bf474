//! The gRPC edge: converts wire messages into domain commands (validating
//! them on the way, so the scheduler never sees a prost type or a bad
//! value) and the scheduler's views back into wire messages.

pub mod admit;
pub mod auth;
mod budget;
mod children;
pub mod convert;
pub mod logs;
pub mod operator;
pub mod origin;
pub mod pages;
pub mod requests;
pub mod sidecar;
pub mod watch;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::SchedError;
use crate::merger::MergerHandle;
use crate::scheduler::{Command, OperatorOp};

/// What every handler shares.
#[derive(Clone)]
pub struct Shared {
    /// The scheduler's bounded command queue: a send waits while it is
    /// full, holding the caller (not a thread) back.
    pub scheduler: flume::Sender<Command>,
    pub merger: MergerHandle,
    pub db_path: Arc<std::path::PathBuf>,
    /// Where Watch replays and GetTask read committed events.
    pub store: Arc<crate::store::Location>,
    /// The scheduler's clock origin, for lease timestamps.
    pub started: Instant,
    pub shutdown: CancellationToken,
    /// Owns every per-stream task, so shutdown can wait for them.
    pub tasks: TaskTracker,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Reaches each connected sidecar for its attempts' logs.
    pub logs: Arc<logs::LogRelay>,
}

impl Shared {
    pub async fn send(&self, cmd: Command) -> Result<(), SchedError> {
        self.scheduler.send_async(cmd).await.map_err(|_| SchedError::Unavailable("scheduler stopped".into()))
    }

    /// From code that cannot wait: at once while the queue has room, else
    /// by a task the controller's tracker owns.
    pub fn send_soon(&self, cmd: Command) {
        if let Err(flume::TrySendError::Full(cmd)) = self.scheduler.try_send(cmd) {
            let scheduler = self.scheduler.clone();
            self.tasks.spawn(async move {
                let _ = scheduler.send_async(cmd).await;
            });
        }
    }

    /// Sends an operator request and waits for its (post-commit) reply.
    pub async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, SchedError>>) -> OperatorOp,
    ) -> Result<T, SchedError> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Operator(make(tx))).await?;
        rx.await.map_err(|_| SchedError::Unavailable("scheduler stopped".into()))?
    }

    pub fn mono_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}
