//! The scheduler's model: every row it holds (swarms, tasks, attempts,
//! workers) and every index derived from them, behind one door.
//!
//! Nothing changes the model but [`Model::apply`], and each [`Transition`]
//! keeps the indexes it touches: the ready queue (ranked, see `ready.rs`), the live ownership set,
//! the dependents, each swarm's state counts, its tasks waiting on the
//! operator and its usage sum, and each worker's binding to its live
//! attempt. Recovery feeds the stored rows through the same `apply` (the
//! `…Added` transitions), so the indexes after a restart are built by the
//! very code that keeps them during a run. What a change means beyond the
//! model (events, metrics, rows to write, messages) is the caller's, told
//! by the returned [`Applied`]; the model imports nothing else of the
//! scheduler.

mod durations;
pub mod messages;
mod origin;
mod ownership;
mod ready;
mod stored;
mod types;

#[cfg(test)]
use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use swarm_core::{AttemptState, IllegalTransition, SwarmId, TaskKey, TaskState};

pub use durations::{Remembered, Source as WeightSource};
pub use origin::Origin;
pub use ownership::{LiveOwnership, Ownership};
use ready::ReadyQueue;
pub use ready::ScheduleOrder;
pub use stored::*;
pub use types::*;

/// What a READY task is ranked by: its priority plus its swarm's, and its
/// remaining critical path.
fn rank(swarms: &HashMap<SwarmId, Swarm>, tasks: &Tasks, key: &TaskKey) -> (i32, u64) {
    let (own, path) = tasks.get(key).map_or((0, 0), |t| (t.spec.priority, t.path));
    (own + swarms.get(&key.swarm).map_or(0, |s| s.plan.schedule.priority), path)
}

/// The scheduler's maps hash with foldhash, seeded per process: SipHash,
/// the standard library's default, was an eighth of the scheduler thread's
/// time in the durable benchmark. Their keys are ids the operator's plan
/// and authenticated sidecars name, each checked against the id rules.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A change of the fields of a row that no index reads.
pub type Edit<'a, T> = Box<dyn FnOnce(&mut T) + 'a>;

/// Every way the model changes.
pub enum Transition<'a> {
    /// A swarm, created or loaded; its tasks follow as `TaskAdded`.
    SwarmAdded(Swarm),
    /// A task of an added swarm, in the state it is in.
    TaskAdded(Task),
    /// An attempt, started or loaded; a live one binds its worker, which
    /// must have been added before it.
    AttemptAdded(Attempt),
    WorkerAdded(Worker),
    WorkerForgotten(&'a str),
    /// A finished swarm leaves the model with its tasks and attempts (its
    /// child swarms are forgotten each on their own). Retention forgets
    /// only a swarm none of whose attempts is live, so no worker is bound
    /// to one of them.
    SwarmForgotten(&'a SwarmId),
    /// When an ended swarm ended, as a restarted controller reckons it
    /// (not stored: the swarm's tasks' last change).
    SwarmEndedAt {
        id: &'a SwarmId,
        at: i64,
    },
    TaskState {
        key: &'a TaskKey,
        to: TaskState,
        reason: &'a str,
    },
    AttemptState {
        key: &'a TaskKey,
        number: u32,
        to: AttemptState,
    },
    /// The worker holding `key#number`, if it still does, lets it go.
    WorkerFreed {
        key: &'a TaskKey,
        number: u32,
    },
    /// A RUNNING sub-swarm task waits on the operator while its child
    /// swarm is STALLED.
    ChildStalled {
        parent: &'a TaskKey,
        stalled: bool,
    },
    Task {
        key: &'a TaskKey,
        edit: Edit<'a, Task>,
    },
    /// An attempt's fields; its usage may change (the swarm's sum follows).
    Attempt {
        key: &'a TaskKey,
        number: u32,
        edit: Edit<'a, Attempt>,
    },
    Worker {
        id: &'a str,
        edit: Edit<'a, Worker>,
    },
    Swarm {
        id: &'a SwarmId,
        edit: Edit<'a, Swarm>,
    },
    /// How READY tasks are ordered from now on (every READY task is ranked
    /// again).
    ScheduleOrder(ScheduleOrder),
    /// Computes the critical paths the ready queue waits for (after tasks
    /// were added, or when the learnt durations moved) and ranks those
    /// swarms' READY tasks again. A no-op when nothing waits.
    RankReady,
}

/// What a transition changed: the rows (to write, if the caller stores
/// the change), the swarm whose state may follow, and the states left and
/// entered.
#[derive(Debug, Default)]
pub struct Applied {
    pub task: Option<TaskKey>,
    pub attempt: Option<(TaskKey, u32)>,
    pub worker: Option<String>,
    pub swarm: Option<SwarmId>,
    /// A swarm whose state may follow from this change.
    pub touched: Option<SwarmId>,
    pub task_state: Option<(TaskState, TaskState)>,
    pub attempt_state: Option<(AttemptState, AttemptState)>,
    /// The change asked for is not one the lifecycle has; nothing changed.
    pub refused: Option<IllegalTransition>,
    /// A task became READY or ownership was freed: an idle worker's last
    /// scan may be out of date.
    pub frees_work: bool,
}

#[derive(Default)]
pub struct Model {
    swarms: HashMap<SwarmId, Swarm>,
    tasks: Tasks,
    attempts: Attempts,
    workers: HashMap<String, Worker>,
    /// READY tasks in the order they are offered (sub-swarm tasks are
    /// never offered to a sidecar, so never here), and each swarm's count
    /// of tasks a sidecar runs.
    ready: ReadyQueue,
    /// Owned globs of every RUNNING task a sidecar runs.
    running: LiveOwnership,
    dependents: HashMap<TaskKey, Vec<TaskKey>>,
}

impl Model {
    pub fn apply(&mut self, t: Transition<'_>) -> Applied {
        match t {
            Transition::SwarmAdded(swarm) => self.add_swarm(swarm),
            Transition::TaskAdded(task) => self.add_task(task),
            Transition::AttemptAdded(attempt) => self.add_attempt(attempt),
            Transition::WorkerAdded(worker) => {
                let id = worker.id.clone();
                self.workers.insert(id.clone(), worker);
                Applied { worker: Some(id), ..Applied::default() }
            }
            Transition::WorkerForgotten(id) => {
                self.workers.remove(id);
                Applied::default()
            }
            Transition::SwarmForgotten(id) => {
                self.forget_swarm(id);
                Applied::default()
            }
            Transition::TaskState { key, to, reason } => self.task_state(key, to, reason),
            Transition::AttemptState { key, number, to } => self.attempt_state(key, number, to),
            Transition::WorkerFreed { key, number } => self.free_worker(key, number),
            Transition::ChildStalled { parent, stalled } => {
                let Some(sw) = self.swarms.get_mut(&parent.swarm) else { return Applied::default() };
                let changed = if stalled {
                    sw.waits_on_operator.insert(parent.clone())
                } else {
                    sw.waits_on_operator.remove(parent)
                };
                Applied { touched: changed.then(|| parent.swarm.clone()), ..Applied::default() }
            }
            Transition::Task { key, edit } => {
                let Some(t) = self.tasks.get_mut(key) else { return Applied::default() };
                edit(t);
                Applied { task: Some(key.clone()), ..Applied::default() }
            }
            Transition::Attempt { key, number, edit } => {
                let id = (key.clone(), number);
                let Some(a) = self.attempts.get_mut(&id) else { return Applied::default() };
                let before = a.agent.usage;
                edit(a);
                let after = a.agent.usage;
                if after != before
                    && let Some(sw) = self.swarms.get_mut(&key.swarm)
                {
                    sw.usage.sub(&before);
                    sw.usage.add(&after);
                }
                Applied { attempt: Some(id), ..Applied::default() }
            }
            Transition::Worker { id, edit } => {
                let Some(w) = self.workers.get_mut(id) else { return Applied::default() };
                edit(w);
                Applied { worker: Some(id.to_string()), ..Applied::default() }
            }
            Transition::Swarm { id, edit } => {
                let Some(s) = self.swarms.get_mut(id) else { return Applied::default() };
                edit(s);
                if !s.has_ended() {
                    s.ended_at = 0;
                } else if s.ended_at == 0 {
                    s.ended_at = now_ms();
                }
                Applied { swarm: Some(id.clone()), ..Applied::default() }
            }
            Transition::SwarmEndedAt { id, at } => {
                if let Some(s) = self.swarms.get_mut(id).filter(|s| s.has_ended()) {
                    s.ended_at = at.max(1);
                }
                Applied::default()
            }
            Transition::ScheduleOrder(order) => {
                let _span = tracing::info_span!("schedule_order", order = ?order).entered();
                let (swarms, tasks) = (&self.swarms, &self.tasks);
                self.ready.set_order(order, |k| rank(swarms, tasks, k));
                Applied { frees_work: true, ..Applied::default() }
            }
            Transition::RankReady => {
                if !self.ready.stale() {
                    return Applied::default();
                }
                self.ready.refresh(&self.swarms, &mut self.tasks);
                Applied { frees_work: true, ..Applied::default() }
            }
        }
    }

    fn add_swarm(&mut self, mut swarm: Swarm) -> Applied {
        let id = swarm.id.clone();
        swarm.counts = [0; TaskState::ALL.len()];
        swarm.waits_on_operator.clear();
        swarm.usage = Default::default();
        // A child added while its parent task runs (a restart with the
        // child STALLED) makes the parent wait on the operator.
        let stalled = swarm.state == SwarmState::Stalled;
        self.swarms.insert(id.clone(), swarm);
        if stalled && let Some(parent) = id.parent() {
            self.mark_parent_waiting(&parent);
        }
        // A new swarm's row is written whole by its creator, not as a change.
        Applied { touched: Some(id), ..Applied::default() }
    }

    fn forget_swarm(&mut self, id: &SwarmId) {
        let Some(swarm) = self.swarms.remove(id) else { return };
        for key in &swarm.tasks {
            if let Some(task) = self.tasks.remove(key) {
                for number in 1..=task.attempts {
                    self.attempts.remove(&(key.clone(), number));
                }
            }
            self.dependents.remove(key);
            self.ready.set_ready(key, None);
            self.ready.set_running(key, false);
            self.running.remove(key);
        }
        self.ready.forget(id);
    }

    fn mark_parent_waiting(&mut self, parent: &TaskKey) {
        let running = self.tasks.get(parent).is_some_and(|t| t.state == TaskState::Running);
        let child_stalled = self
            .swarms
            .get(&parent.swarm.child(&parent.task))
            .is_some_and(|s| s.state == SwarmState::Stalled);
        if running
            && child_stalled
            && let Some(sw) = self.swarms.get_mut(&parent.swarm)
        {
            sw.waits_on_operator.insert(parent.clone());
        }
    }

    fn add_task(&mut self, task: Task) -> Applied {
        let key = task.key.clone();
        let state = task.state;
        for d in &task.spec.deps {
            self.dependents.entry(TaskKey::new(key.swarm.clone(), d.clone())).or_default().push(key.clone());
        }
        if let Some(sw) = self.swarms.get_mut(&key.swarm) {
            sw.counts[state.index()] += 1;
            if in_operator_review(state, &task.spec) {
                sw.waits_on_operator.insert(key.clone());
            }
        }
        let subswarm = task.spec.subplan.is_some();
        let ownership = task.ownership();
        self.tasks.insert(key.clone(), task);
        self.ready.task_added(&key.swarm);
        self.enter(&key, state, subswarm, ownership);
        if subswarm {
            self.mark_parent_waiting(&key);
        }
        Applied {
            task: Some(key.clone()),
            touched: Some(key.swarm.clone()),
            frees_work: state == TaskState::Ready,
            ..Applied::default()
        }
    }

    /// The ready queue and the live ownership as a task in `state` has them.
    fn enter(&mut self, key: &TaskKey, state: TaskState, subswarm: bool, ownership: Ownership) {
        // A sub-swarm task is never given to a sidecar, and while RUNNING
        // it holds no ownership: its child's tasks own the files and must
        // not be held off by their own parent.
        let ready = (state == TaskState::Ready && !subswarm).then(|| rank(&self.swarms, &self.tasks, key));
        self.ready.set_ready(key, ready);
        let running = state == TaskState::Running && !subswarm;
        self.ready.set_running(key, running);
        if running {
            self.running.insert(key.clone(), ownership);
        } else {
            self.running.remove(key);
        }
    }

    fn task_state(&mut self, key: &TaskKey, to: TaskState, reason: &str) -> Applied {
        let Some(task) = self.tasks.get_mut(key) else { return Applied::default() };
        let from = task.state;
        if from == to && task.reason == reason {
            return Applied::default();
        }
        if !from.may_become(to) {
            return Applied { refused: Some(IllegalTransition::Task(from, to)), ..Applied::default() };
        }
        task.state = to;
        task.reason = reason.to_string();
        if let Some(sw) = self.swarms.get_mut(&key.swarm) {
            sw.counts[from.index()] = sw.counts[from.index()].saturating_sub(1);
            sw.counts[to.index()] += 1;
            // Leaving a state ends a wait on the operator (a new reason in
            // the same state does not: a sub-swarm task's child is still
            // STALLED); entering a review that has no reviewer starts one.
            if from != to {
                sw.waits_on_operator.remove(key);
            }
            if in_operator_review(to, &task.spec) {
                sw.waits_on_operator.insert(key.clone());
            }
        }
        task.updated_at = now_ms();
        if to == TaskState::Merged {
            task.percent = 100;
        }
        let subswarm = task.spec.subplan.is_some();
        let ownership = task.ownership();
        self.enter(key, to, subswarm, ownership);
        Applied {
            task: Some(key.clone()),
            touched: Some(key.swarm.clone()),
            task_state: Some((from, to)),
            frees_work: to == TaskState::Ready || from == TaskState::Running,
            ..Applied::default()
        }
    }

    fn add_attempt(&mut self, attempt: Attempt) -> Applied {
        let id = (attempt.task.clone(), attempt.number);
        if let Some(sw) = self.swarms.get_mut(&id.0.swarm) {
            sw.usage.add(&attempt.agent.usage);
        }
        if attempt.state == AttemptState::Succeeded {
            self.learn_duration(&id.0, id.1, attempt.started_at, attempt.ended_at);
        }
        let mut worker = None;
        if attempt.state.is_live()
            && let Some(w) = self.workers.get_mut(&attempt.worker)
        {
            w.attempt = Some(id.clone());
            worker = Some(w.id.clone());
        }
        self.attempts.insert(id.clone(), attempt);
        Applied { attempt: Some(id), worker, ..Applied::default() }
    }

    fn attempt_state(&mut self, key: &TaskKey, number: u32, to: AttemptState) -> Applied {
        let id = (key.clone(), number);
        let Some(a) = self.attempts.get_mut(&id) else { return Applied::default() };
        let from = a.state;
        if !from.may_become(to) {
            return Applied { refused: Some(IllegalTransition::Attempt(from, to)), ..Applied::default() };
        }
        a.state = to;
        if !to.is_live() && a.ended_at == 0 {
            a.ended_at = now_ms();
        }
        if to == AttemptState::Succeeded && from != to {
            let (started, ended) = (a.started_at, a.ended_at);
            self.learn_duration(key, number, started, ended);
        }
        Applied { attempt: Some(id), attempt_state: Some((from, to)), ..Applied::default() }
    }

    /// A succeeded attempt's duration, as the swarm's tasks without an
    /// estimate weigh on the critical path. A reviewer's attempt is not
    /// the task's work, and is left out.
    fn learn_duration(&mut self, key: &TaskKey, number: u32, started: i64, ended: i64) {
        if started > 0
            && ended > started
            && !self.is_reviewer(key, number)
            && let Some(t) = self.tasks.get(key)
        {
            self.ready.finished(key, &t.spec, (ended - started) as u64);
        }
    }

    fn free_worker(&mut self, key: &TaskKey, number: u32) -> Applied {
        let id = (key.clone(), number);
        let holder = self.attempts.get(&id).map(|a| a.worker.as_str());
        let Some(w) = holder.and_then(|h| self.workers.get_mut(h)) else { return Applied::default() };
        if w.attempt.as_ref() != Some(&id) {
            return Applied::default();
        }
        w.attempt = None;
        w.updated_at = now_ms();
        Applied { worker: Some(w.id.clone()), frees_work: true, ..Applied::default() }
    }

    pub fn swarms(&self) -> &HashMap<SwarmId, Swarm> {
        &self.swarms
    }

    /// What the agents of `swarm` are priced at: its root plan's `prices`
    /// (a child swarm's plan has none of its own).
    pub fn prices(&self, swarm: &SwarmId) -> std::sync::Arc<swarm_core::plan::PriceTable> {
        let root = SwarmId::new(swarm.root()).ok();
        root.as_ref()
            .and_then(|r| self.swarms.get(r))
            .or_else(|| self.swarms.get(swarm))
            .map(|s| s.plan.prices.clone())
            .unwrap_or_default()
    }

    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    pub fn attempts(&self) -> &Attempts {
        &self.attempts
    }

    pub fn workers(&self) -> &HashMap<String, Worker> {
        &self.workers
    }

    /// READY tasks a sidecar may take, best first: swarms by priority and
    /// fair share (one at its `max_parallel` left out), each swarm's tasks
    /// by priority, critical path and readiness (see `ready.rs`).
    pub fn ready(&self) -> impl Iterator<Item = &TaskKey> {
        self.ready.iter(|id| {
            self.swarms.get(id).map_or((1, None), |s| (s.plan.schedule.share, s.plan.schedule.max_parallel))
        })
    }

    pub fn nothing_ready(&self) -> bool {
        self.ready.len() == 0
    }

    /// Whether critical paths wait to be computed (apply
    /// [`Transition::RankReady`] before reading [`Model::ready`]).
    pub fn ranks_stale(&self) -> bool {
        self.ready.stale()
    }

    pub fn schedule_order(&self) -> ScheduleOrder {
        self.ready.order()
    }

    /// What a task of `swarm` without an estimate weighs, in ms, as the
    /// critical paths were last computed with.
    pub fn unknown_weight_ms(&self, swarm: &SwarmId) -> u64 {
        self.ready.unknown_weight_ms(swarm)
    }

    /// What the store remembers of earlier swarms' tasks' durations.
    pub fn remember_durations(&mut self, rows: impl IntoIterator<Item = Remembered>) {
        self.ready.remember(rows);
    }

    /// What `swarm`'s tasks took: kept in the store when it is forgotten,
    /// for the next run of its plan.
    pub fn learned_durations(&self, swarm: &SwarmId) -> Vec<Remembered> {
        self.ready.learned(swarm)
    }

    /// What `key` is expected to take (ms) and where that came from.
    pub fn expected(&self, key: &TaskKey) -> Option<(u64, WeightSource)> {
        self.tasks.get(key).map(|t| self.ready.weight(&key.swarm, &t.spec))
    }

    /// What `key`, whose work succeeded after `took_ms`, was expected to
    /// take before that.
    pub fn expected_before(&self, key: &TaskKey, took_ms: u64) -> Option<(u64, WeightSource)> {
        self.tasks.get(key).map(|t| self.ready.weight_before(&key.swarm, &t.spec, took_ms))
    }

    /// Tasks of `swarm` a sidecar runs now.
    pub fn running_in(&self, swarm: &SwarmId) -> u32 {
        self.ready.running(swarm)
    }

    /// The remaining critical path below `key` (its own weight included),
    /// in ms, as last computed.
    pub fn critical_path(&self, key: &TaskKey) -> Option<u64> {
        self.tasks.get(key).map(|t| t.path)
    }

    /// The ownership of every RUNNING task a sidecar runs.
    pub fn running(&self) -> &LiveOwnership {
        &self.running
    }

    /// The tasks that name `key` among their dependencies, in plan order.
    pub fn dependents(&self, key: &TaskKey) -> &[TaskKey] {
        self.dependents.get(key).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether no new attempt of `swarm`'s tasks may start.
    pub fn is_paused(&self, swarm: &SwarmId) -> bool {
        self.swarms.get(swarm).is_some_and(|s| s.state == SwarmState::Paused)
    }

    /// Whether `key#number` is the task's live reviewer attempt.
    pub fn is_reviewer(&self, key: &TaskKey, number: u32) -> bool {
        number > 0
            && self
                .tasks()
                .get(key)
                .and_then(|t| t.notes.review.as_deref())
                .is_some_and(|r| r.reviewer == number)
    }

    /// Every derived index, in a form two models can be compared by: what
    /// recovery must rebuild exactly. The ready queue is compared as a set,
    /// since a restart queues its READY tasks in plan order.
    #[cfg(test)]
    pub fn indexes(&self) -> Indexes {
        use std::collections::BTreeMap;
        let swarms = self
            .swarms
            .values()
            .map(|s| {
                // Sums of floats differ in their last bits by order.
                let usage =
                    (s.usage.input_tokens, s.usage.output_tokens, (s.usage.cost_usd * 1e6).round() as i64);
                (s.id.to_string(), (s.counts.to_vec(), s.waits_on_operator.clone(), usage))
            })
            .collect();
        Indexes {
            ready: self.ready().cloned().collect(),
            running: self.running.keys(),
            dependents: self.dependents.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            swarms,
            bound: self
                .workers
                .values()
                .filter_map(|w| w.attempt.clone().map(|a| (w.id.clone(), a)))
                .collect::<BTreeMap<_, _>>(),
        }
    }
}

#[cfg(test)]
#[derive(Debug, PartialEq)]
pub struct Indexes {
    pub ready: BTreeSet<TaskKey>,
    pub running: BTreeSet<TaskKey>,
    pub dependents: std::collections::BTreeMap<TaskKey, Vec<TaskKey>>,
    #[allow(clippy::type_complexity)]
    pub swarms: std::collections::BTreeMap<String, (Vec<u32>, BTreeSet<TaskKey>, (u64, u64, i64))>,
    pub bound: std::collections::BTreeMap<String, (TaskKey, u32)>,
}
