//! The scheduler's core, which every component shares: the model, the
//! turn's effects, and the primitives that change a task, an attempt or a
//! worker and record what changed. A component gets a [`Core`] for the
//! length of a call and nothing else of the scheduler, so it needs no
//! other component to do its work; what another component must hear of
//! goes back to the dispatcher (a return value, or a follow-up in
//! [`Effects`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng as _;
use swarm_core::plan::Plan;
use swarm_core::{AttemptState, SwarmId, TaskKey, TaskState};
use swarm_git::merge::MergeJob;

use super::model::{
    self, AgentRecord, Applied, Attempt, HashMap, HashSet, Model, Session, SwarmState, Transition, now_ms,
};
use super::outbound::{AttemptHandle, Outbound};
use super::pipeline::Released;
use crate::error::SchedError;
use crate::metrics::Metrics;
use crate::store::{Batch, EventRow};

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
    /// A swarm that ended is forgotten (with its rows and events) after
    /// this; `None` keeps every swarm.
    pub forget_finished_after: Option<Duration>,
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
            forget_finished_after: Some(DEFAULT_RETENTION),
        }
    }
}

/// A week: long enough to read an ended swarm's report and events after
/// a weekend, short enough that a busy controller's store stays small.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A unix-ms stamp as a time.
pub(super) fn unix_time(ms: i64) -> SystemTime {
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
pub(super) struct Effects {
    pub(super) batch: Batch,
    pub(super) outbound: Vec<(Session, Outbound)>,
    pub(super) replies: Vec<Box<dyn FnOnce() + Send>>,
    pub(super) merges: Vec<MergeJob>,
    pub(super) touched_swarms: HashSet<SwarmId>,
    /// Rows changed this turn; written once each, from their final state,
    /// just before the commit.
    pub(super) dirty_tasks: HashSet<TaskKey>,
    pub(super) dirty_attempts: HashSet<(TaskKey, u32)>,
    pub(super) dirty_workers: HashSet<String>,
    /// An earlier turn's commit is still in flight: the model is ahead of
    /// the store even before this turn changes anything.
    pub(super) behind_store: bool,
    /// Sub-swarm tasks that became READY, for the dispatcher to hand to
    /// `SubSwarms` (the core knows no component).
    pub(super) ready_subswarms: Vec<TaskKey>,
    /// The id the turn's next event gets: taken from the scheduler when the
    /// turn starts and given back when it ends, so that whatever records an
    /// event needs only the turn's effects, not the scheduler.
    pub(super) next_event_id: u64,
}

impl Effects {
    /// Appends an event to the batch and returns its id. `swarm` and `task`
    /// may be empty (worker events, swarm events).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn event(
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
    pub(super) fn task_event(
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
    pub(super) fn untouched(&self) -> bool {
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
    pub(super) fn split(self) -> (Batch, Released) {
        let Effects { batch, outbound, replies, merges, .. } = self;
        (batch, Released { outbound, replies, merges })
    }
}

/// What the last scans of the ready set found, so they are not repeated
/// while nothing that could change their answer has changed.
#[derive(Debug, Default)]
pub(super) struct ScanMemo {
    /// Bumped by every change that can make a task assignable.
    pub epoch: u64,
    /// Workers whose full scan at that epoch found nothing.
    pub found_nothing: HashMap<String, u64>,
    /// When the earliest task skipped for its backoff becomes assignable.
    pub due_ms: i64,
    /// Scans made, for tests and metrics.
    pub full_scans: u64,
}

impl ScanMemo {
    pub fn new() -> ScanMemo {
        ScanMemo { epoch: 0, found_nothing: HashMap::default(), due_ms: i64::MAX, full_scans: 0 }
    }

    /// Something changed that may make a task assignable.
    pub fn changed(&mut self) {
        self.epoch += 1;
    }
}

/// What the core owns between turns. The scheduler keeps it apart from
/// its components so that a component and a [`Core`] can be borrowed at
/// once.
pub(super) struct Shared {
    /// The rows and their indexes, changed only through `Model::apply`.
    pub model: Model,
    pub metrics: Arc<Metrics>,
    pub timing: Timing,
    /// Scans of the ready set that found nothing, until something changes.
    pub scan: ScanMemo,
    /// The clock origin of lease timestamps.
    pub started: Instant,
    pub next_token: u64,
    /// Mono ms each worker's lease was last renewed.
    pub lease_seen: HashMap<String, u64>,
}

impl Shared {
    pub fn new(timing: Timing) -> Shared {
        Shared {
            model: Model::default(),
            metrics: Default::default(),
            timing,
            scan: ScanMemo::new(),
            started: Instant::now(),
            next_token: 1,
            lease_seen: HashMap::default(),
        }
    }

    /// The core for one call, recording into `fx`.
    pub fn core<'t>(&'t mut self, fx: &'t mut Effects) -> Core<'t> {
        Core {
            model: &mut self.model,
            fx,
            metrics: &self.metrics,
            timing: &self.timing,
            scan: &mut self.scan,
            next_token: &mut self.next_token,
            lease_seen: &mut self.lease_seen,
            started: self.started,
        }
    }

    /// The stalled-swarms gauge, after swarm states may have changed.
    pub fn count_stalled(&self) {
        count_stalled(&self.model, &self.metrics);
    }
}

/// The core as a component sees it during a turn.
pub(super) struct Core<'t> {
    /// Read freely; changed through [`Core::transition`] and its kin.
    pub model: &'t mut Model,
    pub fx: &'t mut Effects,
    pub metrics: &'t Metrics,
    pub timing: &'t Timing,
    pub scan: &'t mut ScanMemo,
    /// Mono ms each worker's lease was last renewed.
    pub lease_seen: &'t mut HashMap<String, u64>,
    next_token: &'t mut u64,
    started: Instant,
}

impl Core<'_> {
    pub fn mono_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A fresh fencing token.
    pub fn next_token(&mut self) -> u64 {
        let token = *self.next_token;
        *self.next_token += 1;
        token
    }

    /// Applies `t` to the model and notes what it changed in the turn's
    /// effects: its rows are written (a swarm's at once, the others once
    /// at the end of the turn), its swarm refreshed, idle workers
    /// rescanned. A change that is not stored (live progress, a session)
    /// goes to `self.model.apply` directly.
    pub fn transition(&mut self, t: Transition<'_>) -> Applied {
        let applied = self.model.apply(t);
        let fx = &mut *self.fx;
        if let Some(k) = &applied.task {
            fx.dirty_tasks.insert(k.clone());
        }
        if let Some(a) = &applied.attempt {
            fx.dirty_attempts.insert(a.clone());
        }
        if let Some(w) = &applied.worker {
            fx.dirty_workers.insert(w.clone());
        }
        if let Some(sw) = applied.swarm.as_ref().and_then(|id| self.model.swarms().get(id)) {
            fx.batch.swarm(sw.row());
        }
        if let Some(id) = &applied.touched {
            fx.touched_swarms.insert(id.clone());
        }
        if applied.frees_work {
            self.scan.changed();
        }
        applied
    }

    /// Changes fields of a task that no index reads; the row is written.
    pub fn edit_task<'a>(&mut self, key: &'a TaskKey, edit: impl FnOnce(&mut model::Task) + 'a) {
        self.transition(Transition::Task { key, edit: Box::new(edit) });
    }

    /// A task's live progress, which is not stored: it is reported again.
    pub fn edit_task_unstored<'a>(&mut self, key: &'a TaskKey, edit: impl FnOnce(&mut model::Task) + 'a) {
        self.model.apply(Transition::Task { key, edit: Box::new(edit) });
    }

    pub fn edit_attempt<'a>(&mut self, key: &'a TaskKey, number: u32, edit: impl FnOnce(&mut Attempt) + 'a) {
        self.transition(Transition::Attempt { key, number, edit: Box::new(edit) });
    }

    pub fn edit_worker<'a>(&mut self, id: &'a str, edit: impl FnOnce(&mut model::Worker) + 'a) {
        self.transition(Transition::Worker { id, edit: Box::new(edit) });
    }

    /// What a worker's row does not hold: its session, what it verifies.
    pub fn edit_worker_unstored<'a>(&mut self, id: &'a str, edit: impl FnOnce(&mut model::Worker) + 'a) {
        self.model.apply(Transition::Worker { id, edit: Box::new(edit) });
    }

    /// Changes a swarm; its row is written.
    pub fn edit_swarm<'a>(&mut self, id: &'a SwarmId, edit: impl FnOnce(&mut model::Swarm) + 'a) {
        self.transition(Transition::Swarm { id, edit: Box::new(edit) });
    }

    /// The one place a task changes state (the model keeps the ready
    /// queue, the live ownership and the swarm's counts); records the
    /// transition as an event. Callers name the transition instead
    /// (`to_running`, `to_merging`…, in `transitions.rs`).
    pub(super) fn set_state(&mut self, key: &TaskKey, to: TaskState, reason: &str) {
        let Some(task) = self.model.tasks().get(key) else { return };
        let from = task.state();
        if from == to && task.reason == reason {
            return;
        }
        if !from.may_become(to) {
            // A bug in a caller, never a peer's doing: the history stays
            // one a run could have had, and the refusal is loud.
            let refused = swarm_core::IllegalTransition::Task(from, to);
            tracing::error!(swarm = %key.swarm, task = %key, %refused, reason, "task transition refused");
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
        let applied = self.transition(Transition::TaskState { key, to, reason });
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
            self.fx.ready_subswarms.push(key.clone());
        }
        let message =
            if reason.is_empty() { format!("{from} -> {to}") } else { format!("{from} -> {to}: {reason}") };
        self.fx.task_event(
            key,
            attempt,
            "",
            "task.state",
            message,
            StateChange { from: from.as_str(), to: to.as_str(), reason: Some(reason) },
        );
    }

    /// READY when every dependency is MERGED, PENDING otherwise.
    pub fn make_ready(&mut self, key: &TaskKey, reason: &str) {
        let Some(task) = self.model.tasks().get(key) else { return };
        let deps_merged = task.spec.deps.iter().all(|d| {
            let dep = TaskKey::new(key.swarm.clone(), d.clone());
            self.model.tasks().get(&dep).is_some_and(|t| t.state() == TaskState::Merged)
        });
        let to = if deps_merged { TaskState::Ready } else { TaskState::Pending };
        self.set_state(key, to, reason);
    }

    pub fn set_attempt_state(&mut self, key: &TaskKey, number: u32, to: AttemptState) {
        let applied = self.transition(Transition::AttemptState { key, number, to });
        if let Some(refused) = applied.refused {
            tracing::error!(attempt = %key.attempt(number), %refused, "attempt transition refused");
        }
        let Some((from, to)) = applied.attempt_state else { return };
        let worker =
            self.model.attempts().get(&(key.clone(), number)).map(|a| a.worker.clone()).unwrap_or_default();
        tracing::info!(attempt = %key.attempt(number), %from, %to, "attempt state");
        self.fx.task_event(
            key,
            number,
            &worker,
            "attempt.state",
            format!("{} {from} -> {to}", key.attempt(number)),
            StateChange { from: from.as_str(), to: to.as_str(), reason: None },
        );
    }

    /// A new attempt of `key`, ASSIGNED to `worker_id` from `base`: the
    /// worker now holds it, and its lease starts now. The caller has
    /// already counted the attempt on its task.
    pub fn begin_attempt(&mut self, key: &TaskKey, number: u32, worker_id: &str, base: String, kind: String) {
        let token = self.next_token();
        let agent = AgentRecord { kind, ..Default::default() };
        let attempt = Attempt::begin(
            key.clone(),
            number,
            AttemptState::Assigned,
            worker_id.to_string(),
            token,
            base,
            agent,
        );
        self.transition(Transition::AttemptAdded(attempt));
        self.edit_worker(worker_id, |w| w.updated_at = now_ms());
        let now = self.mono_ms();
        self.lease_seen.insert(worker_id.to_string(), now);
    }

    /// Releases the worker holding `key#number`, if any.
    pub fn free_worker_of(&mut self, key: &TaskKey, number: u32) {
        self.transition(Transition::WorkerFreed { key, number });
    }

    pub fn send(&mut self, worker: &str, message: Outbound) {
        if let Some(session) = self.model.workers().get(worker).and_then(|w| w.session.clone()) {
            self.fx.outbound.push((session, message));
        }
    }

    /// Exit 1 and its kin: retry with exponential backoff and jitter while
    /// retries last, then FAILED.
    pub fn fail_or_retry(&mut self, key: &TaskKey, number: u32, why: &str) {
        let Some(t) = self.model.tasks().get(key) else { return };
        let (used, max) = (t.retries_used + 1, t.spec.retry.max_retries);
        let failure = format!("attempt {number}: {why}");
        if t.retries_used < max {
            self.metrics.retries.inc();
            let base = t.spec.retry.backoff_ms(used) as f64;
            let jittered = base * rand::rng().random_range(0.8..=1.2);
            self.edit_task(key, |t| {
                t.notes.failures.push(failure);
                t.retries_used = used;
                t.not_before = now_ms() + jittered as i64;
            });
            let reason = format!("retry {used}/{max} in {} ms after {why}", jittered as i64);
            self.make_ready(key, &reason);
        } else {
            self.edit_task(key, |t| t.notes.failures.push(failure));
            self.to_failed(key, &format!("{why} (retries exhausted: {max})"));
        }
    }

    /// Adds a swarm on its integration branch at `head` and makes its
    /// first tasks READY: a swarm the operator created, or a task's child.
    pub fn insert_swarm(&mut self, plan_text: Arc<str>, plan: Arc<Plan>, head: &str) {
        self.insert_swarm_from(plan_text, plan, head, None);
    }

    /// A new swarm with how it was made (a planner's goal and cost), which
    /// is written with its plan.
    pub fn insert_swarm_from(
        &mut self,
        plan_text: Arc<str>,
        plan: Arc<Plan>,
        head: &str,
        origin: Option<Arc<model::Origin>>,
    ) {
        let _span =
            tracing::info_span!("swarm.create", swarm = %plan.swarm, tasks = plan.tasks.len()).entered();
        let now = now_ms();
        let mut swarm = model::Swarm::new(
            plan_text,
            plan.clone(),
            SwarmState::Active,
            head.to_string(),
            now,
            Default::default(),
        );
        swarm.origin = origin;
        self.fx.batch.new_swarm(swarm.row());
        self.fx.event(
            plan.swarm.as_str(),
            "",
            0,
            "",
            "swarm.created",
            format!("swarm {} created with {} tasks at {}", plan.swarm, plan.tasks.len(), head),
            serde_json::json!({ "integration_head": head, "tasks": plan.tasks.len() }),
        );
        self.transition(Transition::SwarmAdded(swarm));
        for spec in &plan.tasks {
            let key = TaskKey::new(plan.swarm.clone(), spec.id.clone());
            // Becomes READY or PENDING just below; the transition is
            // recorded from this initial state.
            let task = model::Task::new(key, spec.clone(), TaskState::Pending, now);
            self.metrics.task_state(None, task.state());
            self.transition(Transition::TaskAdded(task));
        }
        for key in self.model.swarms().get(&plan.swarm).map(|s| s.tasks.clone()).unwrap_or_default() {
            if self.model.tasks().get(&key).is_some_and(|t| t.spec.deps.is_empty()) {
                self.make_ready(&key, "no dependencies");
            }
        }
    }

    /// The operator's retry: a task that ended or stopped short of MERGED is
    /// made READY again (or PENDING) with its retries restored.
    pub fn retry(&mut self, key: &TaskKey) -> Result<(), SchedError> {
        let t = find_task(self.model, key)?;
        match t.state() {
            TaskState::Failed
            | TaskState::Blocked
            | TaskState::Escalated
            | TaskState::Conflict
            | TaskState::Rejected
            | TaskState::Cancelled => {
                self.edit_task(key, |t| {
                    t.retries_used = 0;
                    t.cancel_requested = false;
                    t.not_before = 0;
                });
                if self.model.swarms().get(&key.swarm).is_some_and(|s| !s.state.is_live()) {
                    self.edit_swarm(&key.swarm, |s| s.state = SwarmState::Active);
                }
                self.make_ready(key, "retried by the operator");
                Ok(())
            }
            other => Err(SchedError::FailedPrecondition(format!(
                "task {key} is {other}; only FAILED, BLOCKED, ESCALATED, CONFLICT, REJECTED or CANCELLED tasks can be retried"
            ))),
        }
    }

    /// Sends the worker of `key#number` a Cancel; with `checkpoint` it
    /// keeps the work (WIP commit, agent session) and reports CHECKPOINT.
    pub fn send_stop(&mut self, key: &TaskKey, number: u32, reason: &str, checkpoint: bool) {
        let Some(a) = self.model.attempts().get(&(key.clone(), number)) else { return };
        let message = Outbound::Cancel {
            attempt: AttemptHandle { task: key.clone(), number, token: a.token },
            grace_ms: self.timing.cancel_grace.as_millis() as u32,
            reason: reason.to_string(),
            checkpoint,
        };
        let worker = a.worker.clone();
        self.send(&worker, message);
    }

    pub fn send_cancel(&mut self, key: &TaskKey, number: u32, reason: &str) {
        self.send_stop(key, number, reason, false);
    }

    /// The stalled-swarms gauge, after swarm states may have changed.
    pub fn count_stalled(&self) {
        count_stalled(self.model, self.metrics);
    }
}

fn count_stalled(model: &Model, metrics: &Metrics) {
    let stalled = model.swarms().values().filter(|s| s.state == SwarmState::Stalled).count();
    metrics.swarms_stalled.set(stalled as i64);
}

/// Swarm `id`, or why there is none.
pub(super) fn find_swarm<'m>(model: &'m Model, id: &str) -> Result<&'m model::Swarm, SchedError> {
    SwarmId::new(id)
        .ok()
        .and_then(|id| model.swarms().get(&id))
        .ok_or_else(|| SchedError::NotFound(format!("swarm {id:?} not found")))
}

/// Task `key`, or why there is none.
pub(super) fn find_task<'m>(model: &'m Model, key: &TaskKey) -> Result<&'m model::Task, SchedError> {
    model.tasks().get(key).ok_or_else(|| SchedError::NotFound(format!("task {key} not found")))
}
