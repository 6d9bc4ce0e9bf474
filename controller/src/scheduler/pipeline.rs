//! The commit pipeline behind the scheduler's thread.
//!
//! The scheduler applies turn N+1 while a `store-commit` thread writes turn
//! N; a `store-release` thread makes the written turns durable and then
//! releases their effects (acks, assigns, replies, events, merge jobs), in
//! turn order. Nothing a turn produces leaves the process before a sync
//! that holds it and every turn before it.
//!
//! For SQLite the sync is the WAL's `fdatasync`, made apart from the
//! commit: the committer writes the next group of turns while the last
//! group's sync is under way, and one sync covers every group that
//! finished writing before it. With `synchronous=FULL` the fsync ran inside
//! the commit, so the committer's disk wait and its CPU work took turns.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use swarm_git::merge::MergeJob;
use tokio::sync::broadcast;

use super::Session;
use super::outbound::{self, Outbound};
use crate::error::ControllerError;
use crate::merger::MergerHandle;
use crate::metrics::Metrics;
use crate::store::sqlite::WalSync;
use crate::store::{Batch, EventRow, Store};

/// Turns queued for the committer at most; the scheduler waits beyond.
const MAX_TURNS_IN_FLIGHT: usize = 64;

/// What a turn releases after its commit (with the batch's events).
pub(super) struct Released {
    pub outbound: Vec<(Session, Outbound)>,
    pub replies: Vec<Box<dyn FnOnce() + Send>>,
    pub merges: Vec<MergeJob>,
}

/// One applied turn on its way to the store.
pub(super) struct Turn {
    pub batch: Batch,
    pub released: Released,
}

/// Releases turns' effects, on whichever thread committed them.
pub(super) struct Releaser {
    pub events: broadcast::Sender<Arc<EventRow>>,
    pub metrics: Arc<Metrics>,
    pub merger: MergerHandle,
    pub last_committed: Arc<AtomicU64>,
}

impl Releaser {
    pub fn release(&self, events: Vec<EventRow>, r: Released) {
        for event in events {
            self.last_committed.store(event.id, Ordering::Release);
            // No receivers is fine: nobody is watching.
            let _ = self.events.send(Arc::new(event));
        }
        for (session, message) in r.outbound {
            outbound::deliver(&session, message, &self.metrics);
        }
        for reply in r.replies {
            reply();
        }
        for job in r.merges {
            self.merger.submit(job);
        }
    }
}

/// The scheduler's end of the pipeline.
pub(super) struct Pipeline {
    turns: SyncSender<Turn>,
    committer: JoinHandle<Result<(), ControllerError>>,
    /// Turns sent and not yet released.
    in_flight: Arc<AtomicUsize>,
}

impl Pipeline {
    /// Starts the committer on `store`, a write connection of its own.
    pub fn start(
        mut store: Store,
        releaser: Releaser,
        metrics: Arc<Metrics>,
    ) -> Result<Pipeline, ControllerError> {
        let wal = store.defer_sync()?;
        store.checkpoint_in_background()?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (turns, rx) = std::sync::mpsc::sync_channel::<Turn>(MAX_TURNS_IN_FLIGHT);
        let committer = {
            let in_flight = in_flight.clone();
            std::thread::Builder::new()
                .name("store-commit".into())
                .spawn(move || commit_loop(store, wal, rx, releaser, metrics, in_flight))
                .map_err(|e| ControllerError::Thread(e.to_string()))?
        };
        Ok(Pipeline { turns, committer, in_flight })
    }

    /// A turn is still between the scheduler and its release: the model is
    /// ahead of what has left.
    pub fn behind(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Queues a turn; waits while the pipeline is full. Err once the
    /// committer has stopped, which only a failed commit or sync does.
    pub fn send(&self, turn: Turn) -> Result<(), ()> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.turns.send(turn).map_err(|_| ())
    }

    /// Waits until every queued turn is released (or the first failure),
    /// and returns that failure.
    pub fn stop(self) -> Result<(), ControllerError> {
        drop(self.turns);
        self.committer
            .join()
            .unwrap_or_else(|_| Err(ControllerError::Thread("store-commit thread panicked".into())))
    }
}

/// The committer: every turn waiting is written in one transaction, then
/// handed to the release thread. A failed commit or sync ends the pipeline
/// with the error and releases nothing of that group or any later one.
fn commit_loop(
    mut store: Store,
    wal: Option<WalSync>,
    rx: Receiver<Turn>,
    releaser: Releaser,
    metrics: Arc<Metrics>,
    in_flight: Arc<AtomicUsize>,
) -> Result<(), ControllerError> {
    let (committed, to_release) = std::sync::mpsc::sync_channel::<Vec<Turn>>(MAX_TURNS_IN_FLIGHT);
    let release = {
        let metrics = metrics.clone();
        std::thread::Builder::new()
            .name("store-release".into())
            .spawn(move || release_loop(to_release, wal, releaser, &metrics, &in_flight))
            .map_err(|e| ControllerError::Thread(e.to_string()))?
    };
    let committing = commit_groups(&mut store, &rx, &committed, &metrics);
    // Whatever was committed is still released before the loop ends.
    drop(committed);
    let releasing = release
        .join()
        .unwrap_or_else(|_| Err(ControllerError::Thread("store-release thread panicked".into())));
    // A failed sync stops the committer too; its error is the cause.
    releasing.and(committing)
}

fn commit_groups(
    store: &mut Store,
    rx: &Receiver<Turn>,
    committed: &SyncSender<Vec<Turn>>,
    metrics: &Metrics,
) -> Result<(), ControllerError> {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        let batches: Vec<&Batch> = group.iter().map(|t| &t.batch).filter(|b| !b.is_empty()).collect();
        if !batches.is_empty() {
            match store.commit_all(&batches) {
                Ok(stats) => {
                    metrics.batch_rows.observe(stats.rows as f64);
                    Metrics::observe(&metrics.commit_latency, Duration::from_micros(stats.micros));
                }
                Err(e) => {
                    tracing::error!(error = %e, "store commit failed; stopping the scheduler");
                    return Err(e.into());
                }
            }
        }
        if committed.send(group).is_err() {
            return Err(ControllerError::Thread("store-release thread stopped".into()));
        }
    }
    Ok(())
}

/// Syncs and releases committed groups in commit order: every group
/// waiting is made durable by one sync, then released.
fn release_loop(
    committed: Receiver<Vec<Turn>>,
    wal: Option<WalSync>,
    releaser: Releaser,
    metrics: &Metrics,
    in_flight: &AtomicUsize,
) -> Result<(), ControllerError> {
    while let Ok(first) = committed.recv() {
        let mut groups = vec![first];
        groups.extend(committed.try_iter());
        if let Some(wal) = &wal {
            let started = Instant::now();
            if let Err(e) = wal.sync() {
                tracing::error!(error = %e, "store sync failed; stopping the scheduler");
                return Err(e.into());
            }
            Metrics::observe(&metrics.sync_latency, started.elapsed());
        }
        for group in groups {
            let done = group.len();
            for turn in group {
                releaser.release(turn.batch.events, turn.released);
            }
            in_flight.fetch_sub(done, Ordering::AcqRel);
        }
    }
    Ok(())
}
