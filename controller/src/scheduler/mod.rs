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
mod components;
mod core;
mod forge;
mod leases;
mod limits;
mod merge_queue;
mod merged;
mod model;
mod operator;
pub mod outbound;
mod outcome;
pub mod page;
mod pause;
mod pipeline;
mod reads;
mod recover;
mod refs;
mod reply;
mod reports;
mod retention;
mod review;
mod sandbox;
mod sessions;
pub mod spawn;
pub mod stall;
pub mod subswarm;
mod swarm_state;
mod task_text;
#[cfg(test)]
mod tests;
mod transitions;
pub mod views;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

pub use command::{BudgetChange, BudgetTarget, LandTarget, ReviewVerdict, SpawnPlan};
pub use command::{
    Command, HelloInfo, OperatorOp, PackClaim, Report, ReportedAttempt, ResultReport, SandboxReported,
    merger_sink,
};
pub use merge_queue::VerifiedReport;
pub(crate) use model::HashMap;
pub use model::messages::{FeedbackTaken, ForgeFeedback};
pub use model::{
    AgentRecord, Attempt, ForgeState, Origin, PendingReply, PullRecord, Session, SwarmState, TierOutcome,
    now_ms,
};
// What a question's category and a pause's author mean to the operator's webhooks.
pub use model::{BUDGET_CATEGORY, MAX_FLAKY, PERMISSION_CATEGORY, ScheduleOrder};
pub use outbound::{AgentAssign, AssignSpec, AttemptHandle, CloseCode, Outbound};
pub use page::Page;
pub use pause::BY_BREAKER;

use self::core::{Core, Effects, Shared};
pub use self::core::{DEFAULT_RETENTION, Timing};
use crate::merger::MergerHandle;
use crate::metrics::Metrics;
use crate::store::{EventRow, Store};
use components::Components;
use pipeline::{Pipeline, Releaser, Turn};

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

pub struct Scheduler {
    store: Store,
    /// The model and what a change of it needs, shared by the components.
    shared: Shared,
    next_event_id: u64,
    /// The newest event whose commit is done (and which was broadcast).
    last_committed_event: Arc<AtomicU64>,
    events: broadcast::Sender<Arc<EventRow>>,
    /// The components beside the core, which the handlers borrow with it.
    parts: Components,
}

impl Scheduler {
    /// Rebuilds the scheduler from its store.
    pub fn recover(
        mut store: Store,
        timing: Timing,
        merger: MergerHandle,
    ) -> Result<Scheduler, crate::error::ControllerError> {
        let snap = store.load()?;
        let last_event_id = snap.last_event_id;
        let recover::Recovered { shared, parts } = recover::recover(snap, timing, merger)?;
        let (events, _) = broadcast::channel(65_536);
        Ok(Scheduler {
            store,
            shared,
            next_event_id: last_event_id + 1,
            last_committed_event: Arc::new(AtomicU64::new(last_event_id)),
            events,
            parts,
        })
    }

    /// Reports into `metrics` from now on, starting with the current task
    /// states.
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        for t in self.shared.model.tasks().values() {
            metrics.task_state(None, t.state());
        }
        self.shared.metrics = metrics;
        self.shared.count_stalled();
    }

    /// Orders READY tasks by `order` from now on (the controller's
    /// `--schedule-order`, a benchmark and diagnostic knob).
    pub fn set_schedule_order(&mut self, order: ScheduleOrder) {
        self.shared.model.apply(model::Transition::ScheduleOrder(order));
        self.shared.scan.changed();
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
        let pipeline = Pipeline::start(self.store.reopen()?, self.releaser(), self.shared.metrics.clone())?;
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
                    self.shared.metrics.batch_rows.observe(stats.rows as f64);
                    Metrics::observe(
                        &self.shared.metrics.commit_latency,
                        Duration::from_micros(stats.micros),
                    );
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
        assign::schedule(&mut self.shared.core(&mut fx), &self.parts.limits);
        let limits = &self.parts.limits;
        self.parts
            .reviews
            .schedule(&mut self.shared.core(&mut fx), |w, now| limits.limited_until(w, now).is_some());
        if !fx.touched_swarms.is_empty() {
            // A child swarm's end moves its parent task, which touches the
            // parent swarm: refresh until nothing more moves.
            while !fx.touched_swarms.is_empty() {
                for swarm in std::mem::take(&mut fx.touched_swarms) {
                    swarm_state::refresh(&mut self.shared.core(&mut fx), &swarm);
                    if let Some((parent, number, span)) =
                        subswarm::after_refresh(&mut self.core(&mut fx), &swarm)
                    {
                        span.in_scope(|| {
                            merged::after_success(
                                &mut self.shared.core(&mut fx),
                                &mut self.parts.reviews,
                                &mut self.parts.merge_queues,
                                &parent,
                                number,
                            )
                        });
                    }
                }
            }
            self.shared.count_stalled();
        }
        self.route_follow_ups(&mut fx);
        for key in std::mem::take(&mut fx.dirty_tasks) {
            if let Some(t) = self.shared.model.tasks().get(&key) {
                fx.batch.task(t.row());
            }
        }
        for key in std::mem::take(&mut fx.dirty_attempts) {
            if let Some(a) = self.shared.model.attempts().get(&key) {
                fx.batch.attempt(a.row());
            }
        }
        for id in std::mem::take(&mut fx.dirty_workers) {
            if let Some(w) = self.shared.model.workers().get(&id) {
                fx.batch.worker(w.row());
            }
        }
        self.next_event_id = fx.next_event_id;
        (keep_running, fx)
    }

    fn releaser(&self) -> Releaser {
        Releaser {
            events: self.events.clone(),
            metrics: self.shared.metrics.clone(),
            merger: self.parts.merger.clone(),
            last_committed: self.last_committed_event.clone(),
        }
    }

    fn handle(&mut self, cmd: Command, fx: &mut Effects) {
        match cmd {
            Command::Hello { hello, session } => {
                reports::on_hello(&mut self.shared.core(fx), &mut self.parts, hello, session)
            }
            Command::Report { worker, session, seq, report } => {
                reports::on_report(&mut self.shared.core(fx), &mut self.parts, &worker, session, seq, report)
            }
            Command::Disconnected { worker, session } => {
                sessions::disconnected(&mut self.core(fx), &worker, session)
            }
            Command::Heard { worker, session } => sessions::heard(&mut self.core(fx), &worker, session),
            Command::Operator(op) => operator::on_operator(&mut self.shared.core(fx), &mut self.parts, op),
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
                    merged::on_lock_removed(fx, removed);
                }
                merged::on_merged(&mut self.shared.core(fx), result)
            }
            Command::LockRemoved(removed) => merged::on_lock_removed(fx, removed),
            Command::RefRepaired(repaired) => merged::on_ref_repaired(fx, repaired),
            Command::Queue(report) => {
                merged::on_queue_report(&mut self.shared.core(fx), &mut self.parts.merge_queues, report)
            }
            Command::Denied { client, message } => {
                let data = serde_json::json!({});
                self.parts.sessions.audited(
                    &mut self.shared.core(fx),
                    &client,
                    "auth.denied",
                    None,
                    message,
                    data,
                );
            }
            Command::AuthorizePack { claim, reply } => {
                // Nothing is written, so the answer need not wait for a commit.
                let _ = reply.send(sessions::authorize_pack(&self.shared.model, &claim));
            }
            Command::TaskContext { claim, reply } => {
                // Nothing is written, so the answer need not wait for a commit.
                let _ = reply.send(sessions::task_context(&self.shared.model, &claim));
            }
            Command::PlanSpawn { claim, fragment, reply } => {
                let r = spawn::plan_spawn(&mut self.core(fx), &claim, &fragment);
                reply::after_commit(fx, reply, r);
            }
            Command::SpawnChildren { claim, text, plan, head, reply } => {
                let r = spawn::spawn_children(&mut self.core(fx), &claim, text, plan, &head);
                reply::after_commit(fx, reply, r);
            }
            Command::Children { claim, reply } => {
                let r = spawn::children(&self.shared.model, &claim);
                reply::read(fx, reply, r);
            }
            Command::ForgeTargets { swarm, reply } => {
                let targets = views::ForgeTarget::all(&self.shared.model, swarm.as_ref());
                reply::read(fx, reply, Ok(targets));
            }
            Command::ForgeSynced { swarm, state, reply } => {
                let r = forge::synced(&mut self.core(fx), &swarm, state);
                reply::after_commit(fx, reply, r);
            }
            Command::ForgeClaim { swarm, key, reply } => {
                let r = forge::claim(&mut self.core(fx), &swarm, key);
                reply::after_commit(fx, reply, r);
            }
            Command::ForgeFeedback { swarm, feedback, reply } => {
                let r = forge::feedback(&mut self.core(fx), &swarm, feedback);
                reply::after_commit(fx, reply, r);
            }
            Command::Shutdown => {}
        }
    }

    /// The clock origin of lease timestamps.
    pub fn started(&self) -> Instant {
        self.shared.started
    }

    /// The core, for a call that needs nothing else of the scheduler (a
    /// component's call borrows `self.shared.core(fx)` beside it).
    fn core<'t>(&'t mut self, fx: &'t mut Effects) -> Core<'t> {
        self.shared.core(fx)
    }

    /// Hands what the core noted for a component to it.
    fn route_follow_ups(&mut self, fx: &mut Effects) {
        for key in std::mem::take(&mut fx.ready_subswarms) {
            self.parts.subswarms.ready(&key);
        }
    }

    /// Lease expiry: a worker not heard from for the lease TTL loses its
    /// attempt, and the task is READY again after the grace period.
    fn tick(&mut self, fx: &mut Effects) {
        leases::expire(&mut self.shared.core(fx), &mut self.parts);
        self.parts.sessions.sweep(&mut self.shared.core(fx));
        for swarm in self.parts.retention.sweep(&mut self.shared.core(fx)) {
            self.parts.merge_queues.forget(&swarm);
            self.parts.budgets.forget(&swarm);
        }
        if self.parts.limits.lift(&self.shared.metrics, fx) {
            self.shared.scan.changed();
        }
        self.route_follow_ups(fx);
        self.parts.subswarms.tick(&mut self.shared.core(fx), &self.parts.merger);
        self.parts.merge_queues.tick(&mut self.shared.core(fx), &self.parts.merger);
        let connected = self.shared.model.workers().values().filter(|w| w.session.is_some()).count();
        self.shared.metrics.workers_connected.set(connected as i64);
    }
}
