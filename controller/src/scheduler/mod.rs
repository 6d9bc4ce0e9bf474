//! The scheduler: the single writer of task state.
//!
//! It runs on its own thread and owns the in-memory model and the store's
//! write connection. Each turn of its loop takes a batch of commands
//! (reports, operator requests, merge results), applies them to the model,
//! assigns READY tasks to idle workers, and commits every resulting row in
//! one transaction (group commit). Only after the commit do acks, assigns,
//! replies, Watch events and merge jobs leave the thread: nothing outside
//! ever sees a state the store does not hold.

mod assign;
mod bisect;
mod branch_report;
mod budget;
pub mod command;
mod limits;
mod merge_queue;
mod merged;
mod model;
mod operator;
pub mod outbound;
mod pause;
mod pipeline;
pub mod reads;
mod recover;
mod refs;
mod reports;
mod review;
mod sandbox;
mod sessions;
pub mod stall;
pub mod subswarm;
mod task_text;
#[cfg(test)]
mod tests;
mod transition;
pub mod views;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use swarm_core::{AttemptState, SwarmId, TaskKey, TaskState};
use swarm_git::merge::MergeJob;
use tokio::sync::broadcast;

pub use command::{BudgetChange, BudgetTarget, ReviewVerdict};
pub use command::{
    Command, HelloInfo, OperatorOp, PackClaim, Report, ReportedAttempt, ResultReport, SandboxReported,
    merger_sink,
};
pub use merge_queue::VerifiedReport;
pub use model::{AgentRecord, Attempt, Session, SwarmState, TierOutcome, now_ms};
pub(crate) use model::{HashMap, HashSet};
pub use outbound::{AgentAssign, AssignSpec, AttemptHandle, CloseCode, Outbound};
pub use reads::Page;
pub use refs::LandTarget;

use crate::merger::MergerHandle;
use crate::metrics::Metrics;
use crate::store::{Batch, EventRow, Store};
use model::{Model, Transition};
use pipeline::{Pipeline, Released, Releaser, Turn};

/// Timing knobs. 15 s heartbeats and a 60 s lease: a sidecar survives three
/// lost heartbeats before its attempt is taken away.
#[derive(Debug, Clone)]
pub struct Timing {
    pub heartbeat_interval: Duration,
    pub heartbeat_jitter: Duration,
    pub lease_ttl: Duration,
    /// How long a task whose attempt was LOST waits before it is READY.
    pub lost_grace: Duration,
    /// Grace between the signals of a Cancel, passed to the sidecar.
    pub cancel_grace: Duration,
    /// A worker that is gone and holds nothing is forgotten after this.
    pub forget_workers_after: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat_interval: Duration::from_secs(15),
            heartbeat_jitter: Duration::from_secs(3),
            lease_ttl: Duration::from_secs(60),
            lost_grace: Duration::from_secs(2),
            cancel_grace: Duration::from_secs(5),
            forget_workers_after: Duration::from_secs(3600),
        }
    }
}

/// Most commands applied in one group commit.
const MAX_BATCH: usize = 4096;
/// Commands the API may queue before its senders wait: a few turns' worth,
/// so a burst never waits while the scheduler keeps up, and a scheduler
/// that falls behind (a slow disk) holds the callers back instead of
/// growing its queue without end.
pub const COMMAND_QUEUE: usize = 4 * MAX_BATCH;

/// What waits for the scheduler. Commands (the API's, the controller's)
/// queue in a bounded channel whose senders wait when it is full; the
/// merger's results have their own unbounded one, so that thread
/// never waits on the scheduler: the scheduler hands it merge jobs, and
/// their results are bounded by those jobs.
pub struct Inbox {
    commands: flume::Receiver<Command>,
    results: flume::Receiver<Command>,
}

/// The scheduler's inbox, with the senders of its commands (holding
/// `capacity`) and of the merger's results (for `merger_sink`).
pub fn inbox(capacity: usize) -> (flume::Sender<Command>, flume::Sender<Command>, Inbox) {
    let (commands, commands_rx) = flume::bounded(capacity);
    let (results, results_rx) = flume::unbounded();
    (commands, results, Inbox { commands: commands_rx, results: results_rx })
}

/// Which of the inbox's channels lost its last sender.
enum Gone {
    Commands,
    Results,
}

impl Inbox {
    /// The next command, waiting at most a tick; results first.
    fn wait(&self, results_open: bool) -> Result<Option<Command>, Gone> {
        if !results_open {
            return match self.commands.recv_timeout(TICK) {
                Ok(cmd) => Ok(Some(cmd)),
                Err(flume::RecvTimeoutError::Timeout) => Ok(None),
                Err(flume::RecvTimeoutError::Disconnected) => Err(Gone::Commands),
            };
        }
        flume::Selector::new()
            .recv(&self.results, |r| r.map_err(|_| Gone::Results))
            .recv(&self.commands, |r| r.map_err(|_| Gone::Commands))
            .wait_timeout(TICK)
            .map_or(Ok(None), |r| r.map(Some))
    }

    /// A command already waiting, results first.
    fn try_next(&self) -> Option<Command> {
        self.results.try_recv().or_else(|_| self.commands.try_recv()).ok()
    }
}
const TICK: Duration = Duration::from_millis(50);

/// A unix-ms stamp as a time.
fn unix_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// The data of a `task.state` or `attempt.state` event.
#[derive(serde::Serialize)]
struct StateChange<'a> {
    from: &'a str,
    to: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// Side effects of one turn, released after its commit.
#[derive(Default)]
struct Effects {
    batch: Batch,
    outbound: Vec<(Session, Outbound)>,
    replies: Vec<Box<dyn FnOnce() + Send>>,
    merges: Vec<MergeJob>,
    touched_swarms: HashSet<SwarmId>,
    /// Rows changed this turn; written once each, from their final state,
    /// just before the commit.
    dirty_tasks: HashSet<TaskKey>,
    dirty_attempts: HashSet<(TaskKey, u32)>,
    dirty_workers: HashSet<String>,
    /// An earlier turn's commit is still in flight: the model is ahead of
    /// the store even before this turn changes anything.
    behind_store: bool,
    /// The id the turn's next event gets: taken from the scheduler when the
    /// turn starts and given back when it ends, so that whatever records an
    /// event needs only the turn's effects, not the scheduler.
    next_event_id: u64,
}

impl Effects {
    /// Appends an event to the batch and returns its id. `swarm` and `task`
    /// may be empty (worker events, swarm events).
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        swarm: &str,
        task: &str,
        attempt: u32,
        worker: &str,
        kind: &str,
        message: String,
        data: impl serde::Serialize,
    ) -> u64 {
        let id = self.next_event_id;
        self.next_event_id += 1;
        self.batch.event(EventRow {
            id,
            at: now_ms(),
            swarm: swarm.to_string(),
            task: task.to_string(),
            attempt,
            worker: worker.to_string(),
            kind: kind.to_string(),
            message,
            // Straight to text: the hot events pass borrowed structs, not a
            // `serde_json::Value` built key by key and then printed.
            data: serde_json::to_string(&data).unwrap_or_else(|_| "{}".into()),
        });
        id
    }

    /// An event about one task (and attempt, when non-zero).
    #[allow(clippy::too_many_arguments)]
    fn task_event(
        &mut self,
        key: &TaskKey,
        attempt: u32,
        worker: &str,
        kind: &str,
        message: String,
        data: impl serde::Serialize,
    ) -> u64 {
        self.event(key.swarm.as_str(), key.task.as_str(), attempt, worker, kind, message, data)
    }

    /// Nothing has changed in this turn yet: the model is what the store holds.
    fn untouched(&self) -> bool {
        !self.behind_store
            && self.batch.is_empty()
            && self.outbound.is_empty()
            && self.merges.is_empty()
            && self.touched_swarms.is_empty()
            && self.dirty_tasks.is_empty()
            && self.dirty_attempts.is_empty()
            && self.dirty_workers.is_empty()
    }
}

impl Effects {
    /// The rows to commit, and what leaves once they are committed.
    fn split(self) -> (Batch, Released) {
        let Effects { batch, outbound, replies, merges, .. } = self;
        (batch, Released { outbound, replies, merges })
    }
}

pub struct Scheduler {
    store: Store,
    timing: Timing,
    started: Instant,
    /// The rows and their indexes, changed only through `Model::apply`.
    model: Model,
    /// Mono ms each worker's lease was last renewed.
    lease_seen: HashMap<String, u64>,
    next_token: u64,
    next_event_id: u64,
    /// The newest event whose commit is done (and which was broadcast).
    last_committed_event: Arc<AtomicU64>,
    events: broadcast::Sender<Arc<EventRow>>,
    merger: MergerHandle,
    next_session_id: u64,
    metrics: Arc<Metrics>,
    /// Windows of the rate-limited audit events.
    audit: crate::audit::Aggregator,
    /// Mono ms of the last registry sweep.
    last_sweep_ms: u64,
    /// Scans of the ready set that found nothing, until something changes.
    scan: assign::ScanMemo,
    /// Agent usage limits holding agent tasks back.
    limits: limits::RateLimits,
    /// Sub-swarm tasks whose child swarm is being started.
    subswarms: subswarm::SubSwarms,
    /// Merge queues of swarms that verify their merged tree.
    merge_queues: merge_queue::Queues,
    /// Tasks in REVIEW waiting for a reviewer attempt.
    reviews: review::ReviewQueue,
    /// Budget stops sent, swarms found over budget, the breaker's windows.
    budgets: budget::Budgets,
}

impl Scheduler {
    /// Rebuilds the scheduler from its store.
    pub fn recover(
        store: Store,
        timing: Timing,
        merger: MergerHandle,
    ) -> Result<Scheduler, crate::error::ControllerError> {
        recover::recover(store, timing, merger)
    }

    /// Reports into `metrics` from now on, starting with the current task
    /// states.
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        for t in self.model.tasks().values() {
            metrics.task_state(None, t.state());
        }
        self.metrics = metrics;
        self.count_stalled();
    }

    /// The loop; returns when told to shut down or when a commit fails (the
    /// model then no longer matches the store, and only a restart, which
    /// rebuilds from the store, is safe).
    ///
    /// Commits are pipelined (see `scheduler::pipeline`): turns are written in order, as
    /// many per transaction as are waiting, and each turn's acks, assigns,
    /// replies, events and merge jobs leave only once a sync has made its
    /// commit durable. Meanwhile this thread applies the next turns. A turn
    /// may build on state whose commit is still in flight, but nothing it
    /// produces leaves before a durable commit that holds it and everything
    /// before it.
    pub fn run(mut self, inbox: Inbox) -> Result<(), crate::error::ControllerError> {
        let pipeline = Pipeline::start(self.store.reopen()?, self.releaser(), self.metrics.clone())?;
        let mut pending: Vec<Command> = Vec::with_capacity(MAX_BATCH);
        // A merger that stopped is the supervisor's to report; the
        // scheduler goes on without its results.
        let mut results_open = true;
        loop {
            match inbox.wait(results_open) {
                Ok(Some(first)) => pending.push(first),
                Ok(None) => {}
                Err(Gone::Results) => results_open = false,
                Err(Gone::Commands) => return pipeline.stop(),
            }
            while pending.len() < MAX_BATCH {
                match inbox.try_next() {
                    Some(cmd) => pending.push(cmd),
                    None => break,
                }
            }
            // Reads first: before the turn's first change they are answered
            // at once, so none waits behind more than the commit in flight.
            pending.sort_by_key(|c| !c.is_read());
            let behind = pipeline.behind();
            let (keep_running, fx) = self.apply_turn(pending.drain(..), behind);
            let (batch, released) = fx.split();
            if batch.is_empty() && !behind {
                // Nothing to write and nothing before it to wait for.
                self.releaser().release(Vec::new(), released);
            } else if pipeline.send(Turn { batch, released }).is_err() {
                // The committer stopped: a commit or a sync failed.
                return pipeline.stop();
            }
            if !keep_running {
                return pipeline.stop();
            }
        }
    }

    /// One turn, committed and released before it returns: apply commands,
    /// expire leases, assign, commit, release. Returns false after a
    /// Shutdown command.
    pub fn turn(
        &mut self,
        commands: impl IntoIterator<Item = Command>,
    ) -> Result<bool, crate::error::ControllerError> {
        let (keep_running, fx) = self.apply_turn(commands, false);
        let (batch, released) = fx.split();
        if !batch.is_empty() {
            match self.store.commit(&batch) {
                Ok(stats) => {
                    self.metrics.batch_rows.observe(stats.rows as f64);
                    Metrics::observe(&self.metrics.commit_latency, Duration::from_micros(stats.micros));
                }
                Err(e) => {
                    tracing::error!(error = %e, "store commit failed; stopping the scheduler");
                    return Err(e.into());
                }
            }
        }
        self.releaser().release(batch.events, released);
        Ok(keep_running)
    }

    /// Applies one turn to the model; returns its effects, rows included.
    fn apply_turn(
        &mut self,
        commands: impl IntoIterator<Item = Command>,
        behind_store: bool,
    ) -> (bool, Effects) {
        let mut fx = Effects { behind_store, next_event_id: self.next_event_id, ..Effects::default() };
        let mut keep_running = true;
        for cmd in commands {
            if matches!(cmd, Command::Shutdown) {
                keep_running = false;
                continue;
            }
            self.handle(cmd, &mut fx);
        }
        self.tick(&mut fx);
        self.schedule(&mut fx);
        self.schedule_reviews(&mut fx);
        if !fx.touched_swarms.is_empty() {
            // A child swarm's end moves its parent task, which touches the
            // parent swarm: refresh until nothing more moves.
            while !fx.touched_swarms.is_empty() {
                for swarm in std::mem::take(&mut fx.touched_swarms) {
                    self.refresh_swarm(&swarm, &mut fx);
                    self.after_swarm_refresh(&swarm, &mut fx);
                }
            }
            self.count_stalled();
        }
        for key in std::mem::take(&mut fx.dirty_tasks) {
            if let Some(t) = self.model.tasks().get(&key) {
                fx.batch.task(t.row());
            }
        }
        for key in std::mem::take(&mut fx.dirty_attempts) {
            if let Some(a) = self.model.attempts().get(&key) {
                fx.batch.attempt(a.row());
            }
        }
        for id in std::mem::take(&mut fx.dirty_workers) {
            if let Some(w) = self.model.workers().get(&id) {
                fx.batch.worker(w.row());
            }
        }
        self.next_event_id = fx.next_event_id;
        (keep_running, fx)
    }

    fn releaser(&self) -> Releaser {
        Releaser {
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            merger: self.merger.clone(),
            last_committed: self.last_committed_event.clone(),
        }
    }

    fn handle(&mut self, cmd: Command, fx: &mut Effects) {
        match cmd {
            Command::Hello { hello, session } => self.on_hello(hello, session, fx),
            Command::Report { worker, session, seq, report } => {
                self.on_report(&worker, session, seq, report, fx)
            }
            Command::Disconnected { worker, session } => self.on_disconnected(&worker, session, fx),
            Command::Heard { worker, session } => self.on_heard(&worker, session),
            Command::Operator(op) => self.on_operator(op, fx),
            Command::Subscribe { reply } => {
                // On the thread that broadcasts, after the commits before it:
                // the subscription starts exactly after the id it is given.
                let (last, events) = (self.last_committed_event.clone(), self.events.clone());
                fx.replies.push(Box::new(move || {
                    let _ = reply.send((last.load(Ordering::Acquire), events.subscribe()));
                }));
            }
            Command::Merged(mut result) => {
                if let Some(removed) = result.lock_removed.take() {
                    self.on_lock_removed(removed, fx);
                }
                self.on_merged(result, fx)
            }
            Command::LockRemoved(removed) => self.on_lock_removed(removed, fx),
            Command::RefRepaired(repaired) => self.on_ref_repaired(repaired, fx),
            Command::Queue(report) => self.on_queue_report(report, fx),
            Command::Denied { client, message } => {
                self.audited(fx, &client, "auth.denied", None, message, serde_json::json!({}));
            }
            Command::AuthorizePack { claim, reply } => {
                // Nothing is written, so the answer need not wait for a commit.
                let _ = reply.send(self.authorize_pack(&claim));
            }
            Command::Shutdown => {}
        }
    }

    /// Records, in the swarm's audit log, that a stale lock on its
    /// integration ref was removed.
    fn on_lock_removed(&mut self, removed: swarm_git::merge::LockRemoved, fx: &mut Effects) {
        fx.event(
            &removed.swarm,
            "",
            0,
            "",
            "integration.lock_removed",
            format!("removed stale lock {} on {} ({} ms old)", removed.path, removed.branch, removed.age_ms),
            serde_json::json!({ "branch": removed.branch, "path": removed.path, "age_ms": removed.age_ms }),
        );
    }

    /// Records, in the swarm's audit log, that its integration ref was
    /// behind the recorded head at start, or unreadable, and was put back.
    fn on_ref_repaired(&mut self, repaired: swarm_git::merge::RefRepaired, fx: &mut Effects) {
        fx.event(
            &repaired.swarm,
            "",
            0,
            "",
            "integration.ref_repaired",
            format!(
                "integration ref {} held {:?}, behind the recorded head or no commit id (a power loss?); put back at the recorded head {}",
                repaired.branch, repaired.found, repaired.head
            ),
            serde_json::json!({ "branch": repaired.branch, "found": repaired.found, "head": repaired.head }),
        );
    }

    /// The clock origin of lease timestamps.
    pub fn started(&self) -> Instant {
        self.started
    }

    fn mono_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The one place a task changes state (the model keeps the ready
    /// queue, the live ownership and the swarm's counts); records the
    /// transition as an event.
    fn set_state(&mut self, key: &TaskKey, to: TaskState, reason: &str, fx: &mut Effects) {
        let Some(task) = self.model.tasks().get(key) else { return };
        let from = task.state();
        if from == to && task.reason == reason {
            return;
        }
        let span =
            tracing::info_span!("task.transition", swarm = %key.swarm, task = %key, from = %from, to = %to);
        if !span.is_disabled() {
            swarm_telemetry::join_swarm_trace(&span, key.swarm.as_str(), &key.to_string());
        }
        let _span = span.entered();
        if from != to {
            self.metrics.task_state(Some(from), to);
            if from == TaskState::Ready && to == TaskState::Running {
                let waited = now_ms().saturating_sub(task.updated_at.max(task.not_before)).max(0);
                Metrics::observe(&self.metrics.assignment_latency, Duration::from_millis(waited as u64));
            }
        }
        let attempt = task.attempts;
        let subswarm = task.spec.subplan.is_some();
        let applied = self.transition(Transition::TaskState { key, to, reason }, fx);
        let Some((from, to)) = applied.task_state else { return };
        if to.is_terminal() && from != to {
            // The task's span in the swarm's trace: the parent its attempts'
            // and merges' spans name; it lives from the swarm's creation.
            let created = self.model.swarms().get(&key.swarm).map(|s| s.created_at).unwrap_or(0);
            swarm_telemetry::export_task_span(
                key.swarm.as_str(),
                &key.to_string(),
                unix_time(created),
                SystemTime::now(),
                to.as_str(),
            );
        }
        if subswarm && to == TaskState::Ready {
            self.subswarm_ready(key);
        }
        let message =
            if reason.is_empty() { format!("{from} -> {to}") } else { format!("{from} -> {to}: {reason}") };
        fx.task_event(
            key,
            attempt,
            "",
            "task.state",
            message,
            StateChange { from: from.as_str(), to: to.as_str(), reason: Some(reason) },
        );
    }

    /// READY when every dependency is MERGED, PENDING otherwise.
    fn make_ready(&mut self, key: &TaskKey, reason: &str, fx: &mut Effects) {
        let Some(task) = self.model.tasks().get(key) else { return };
        let deps_merged = task.spec.deps.iter().all(|d| {
            let dep = TaskKey::new(key.swarm.clone(), d.clone());
            self.model.tasks().get(&dep).is_some_and(|t| t.state() == TaskState::Merged)
        });
        let to = if deps_merged { TaskState::Ready } else { TaskState::Pending };
        self.set_state(key, to, reason, fx);
    }

    fn set_attempt_state(&mut self, key: &TaskKey, number: u32, to: AttemptState, fx: &mut Effects) {
        let applied = self.transition(Transition::AttemptState { key, number, to }, fx);
        let Some((from, to)) = applied.attempt_state else { return };
        let worker =
            self.model.attempts().get(&(key.clone(), number)).map(|a| a.worker.clone()).unwrap_or_default();
        tracing::info!(attempt = %key.attempt(number), %from, %to, "attempt state");
        fx.task_event(
            key,
            number,
            &worker,
            "attempt.state",
            format!("{} {from} -> {to}", key.attempt(number)),
            StateChange { from: from.as_str(), to: to.as_str(), reason: None },
        );
    }

    /// Releases the worker holding `key#number`, if any.
    fn free_worker_of(&mut self, key: &TaskKey, number: u32, fx: &mut Effects) {
        self.transition(Transition::WorkerFreed { key, number }, fx);
    }

    fn send(&self, worker: &str, message: Outbound, fx: &mut Effects) {
        if let Some(session) = self.model.workers().get(worker).and_then(|w| w.session.clone()) {
            fx.outbound.push((session, message));
        }
    }

    /// Lease expiry: a worker not heard from for the lease TTL loses its
    /// attempt, and the task is READY again after the grace period.
    fn tick(&mut self, fx: &mut Effects) {
        let now = self.mono_ms();
        let ttl = self.timing.lease_ttl.as_millis() as u64;
        let mut expired = Vec::new();
        for (id, w) in self.model.workers() {
            let Some((key, number)) = w.attempt().cloned() else { continue };
            let seen = self.lease_seen.entry(id.clone()).or_insert(now);
            if let Some(s) = &w.session {
                *seen = (*seen).max(s.last_seen.load(std::sync::atomic::Ordering::Relaxed));
            }
            if now.saturating_sub(*seen) > ttl {
                expired.push((id.clone(), key, number));
            }
        }
        for (worker, key, number) in expired {
            self.lose_attempt(&worker, &key, number, fx);
        }
        // A sidecar silent for a whole TTL is treated as gone, with or
        // without an attempt: its stream is dropped (so a live one
        // reconnects and is told what is current) and it gets no new work.
        let silent: Vec<(String, u64)> = self
            .model
            .workers()
            .values()
            .filter_map(|w| w.session.as_ref().map(|s| (w.id.clone(), s)))
            .filter(|(_, s)| now.saturating_sub(s.last_seen.load(std::sync::atomic::Ordering::Relaxed)) > ttl)
            .map(|(id, s)| (id, s.id))
            .collect();
        for (worker, session) in silent {
            self.on_disconnected(&worker, session, fx);
        }
        self.sweep_registry(fx);
        if self.limits.lift(&self.metrics, fx) {
            self.scan.changed();
        }
        self.tick_subswarms(fx);
        self.tick_merge_queues(fx);
        let connected = self.model.workers().values().filter(|w| w.session.is_some()).count();
        self.metrics.workers_connected.set(connected as i64);
    }

    fn lose_attempt(&mut self, worker: &str, key: &TaskKey, number: u32, fx: &mut Effects) {
        let _span = tracing::warn_span!("lease.expired", task = %key, attempt = number, worker).entered();
        if self.lose_reviewer(worker, key, number, fx) {
            return;
        }
        self.set_attempt_state(key, number, AttemptState::Lost, fx);
        self.free_worker_of(key, number, fx);
        let grace = self.timing.lost_grace.as_millis() as i64;
        let cancel = self.model.tasks().get(key).is_some_and(|t| t.cancel_requested);
        let edit = |task: &mut model::Task| {
            task.notes.failures.push(format!("attempt {number}: worker {worker} lost (lease expired)"));
            task.not_before = now_ms() + grace;
        };
        self.transition(Transition::Task { key, edit: Box::new(edit) }, fx);
        if cancel {
            self.set_state(key, TaskState::Cancelled, "cancelled by the operator; its worker was lost", fx);
        } else {
            self.set_state(
                key,
                TaskState::Ready,
                &format!("attempt {number} lost: worker {worker} lease expired"),
                fx,
            );
        }
    }

    /// Moves a swarm between ACTIVE, STALLED and its end states, from its
    /// state counts (a task walk only to describe a stall).
    fn refresh_swarm(&mut self, id: &SwarmId, fx: &mut Effects) {
        let Some(swarm) = self.model.swarms().get(id) else { return };
        if !matches!(swarm.state, SwarmState::Active | SwarmState::Stalled | SwarmState::Paused) {
            return;
        }
        let total = swarm.tasks.len() as u32;
        let count = |s: TaskState| swarm.count(s);
        let terminal: u32 = TaskState::ALL.iter().filter(|s| s.is_terminal()).map(|s| count(*s)).sum();
        let next = if count(TaskState::Merged) == total {
            SwarmState::Completed
        } else if terminal == total {
            SwarmState::Failed
        } else if stall::nothing_moves(swarm.counts(), swarm.waits_on_operator().len()) {
            SwarmState::Stalled
        } else {
            SwarmState::Active
        };
        let from = swarm.state;
        // A paused swarm stays paused until resumed, unless it has ended.
        if from == SwarmState::Paused && !matches!(next, SwarmState::Completed | SwarmState::Failed) {
            return;
        }
        let stall = (next == SwarmState::Stalled).then(|| stall::describe(swarm, self.model.tasks()));
        let described = stall.clone();
        let edit = |swarm: &mut model::Swarm| swarm.stall = described;
        self.model.apply(Transition::Swarm { id, edit: Box::new(edit) });
        if next == from {
            return;
        }
        let edit = |swarm: &mut model::Swarm| {
            swarm.state = next;
            swarm.control.paused = None;
        };
        self.transition(Transition::Swarm { id, edit: Box::new(edit) }, fx);
        let created_at = self.model.swarms().get(id).map(|s| s.created_at).unwrap_or(0);
        if matches!(next, SwarmState::Completed | SwarmState::Failed | SwarmState::Cancelled) {
            // The root of the swarm's trace, which its tasks' spans name.
            swarm_telemetry::export_swarm_span(
                id.as_str(),
                unix_time(created_at),
                SystemTime::now(),
                next.as_str(),
            );
        }
        let _span =
            tracing::info_span!("swarm.transition", swarm = %id, from = from.as_str(), to = next.as_str())
                .entered();
        match stall {
            Some(stall) => {
                tracing::warn!(reason = %stall.reason, tasks = ?stall.tasks, "swarm stalled");
                fx.event(
                    id.as_str(),
                    "",
                    0,
                    "",
                    "swarm.stalled",
                    format!("swarm {id} STALLED: {}", stall.reason),
                    serde_json::json!({ "state": next.as_str(), "reason": stall.reason, "tasks": stall.tasks }),
                );
            }
            None => {
                fx.event(
                    id.as_str(),
                    "",
                    0,
                    "",
                    "swarm.state",
                    format!("swarm {id} {}", next.as_str()),
                    serde_json::json!({ "state": next.as_str(), "from": from.as_str() }),
                );
            }
        }
    }

    /// The stalled-swarms gauge, after swarm states may have changed.
    fn count_stalled(&self) {
        let stalled = self.model.swarms().values().filter(|s| s.state == SwarmState::Stalled).count();
        self.metrics.swarms_stalled.set(stalled as i64);
    }
}
