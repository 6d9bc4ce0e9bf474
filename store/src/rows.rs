//! The rows the scheduler writes, and the batch one group commit writes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

#[derive(Debug, Clone, PartialEq)]
pub struct SwarmRow {
    pub id: String,
    /// Shared: the plan text is large and written once, so rows carry it
    /// by reference.
    pub plan: std::sync::Arc<str>,
    pub state: String,
    pub integration_head: String,
    pub created_at: i64,
    /// What the operator set on the swarm (pause, budget), JSON; empty:
    /// nothing.
    pub control: String,
    /// How the swarm was made (a planner's goal, session and cost), JSON;
    /// empty: a plan written by hand. Written once, with the plan.
    pub origin: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskRow {
    pub swarm: String,
    pub id: String,
    pub state: String,
    pub attempts: u32,
    pub retries_used: u32,
    pub not_before: i64,
    pub resume_commit: String,
    pub result_commit: String,
    pub merge_commit: String,
    pub reason: String,
    pub cancel_requested: bool,
    /// JSON: earlier failures, answers, pending question, conflict.
    pub notes: String,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttemptRow {
    pub swarm: String,
    pub task: String,
    pub number: u32,
    pub state: String,
    pub worker: String,
    pub token: u64,
    pub base_commit: String,
    pub result_commit: String,
    pub outcome: String,
    pub exit_code: i32,
    pub summary: String,
    pub error: String,
    pub started_at: i64,
    pub ended_at: i64,
    /// JSON array of tier results.
    pub tiers: String,
    /// JSON: the agent, its session and usage; empty for a plain command.
    pub agent: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkerRow {
    pub id: String,
    pub host: String,
    /// JSON object.
    pub labels: String,
    pub last_applied_seq: u64,
    pub draining: bool,
    pub updated_at: i64,
    /// The secret that proves a sidecar's claim on this id (see Welcome).
    pub resume_secret: String,
    /// The credential this worker last connected with; empty without one.
    pub principal: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventRow {
    pub id: u64,
    pub at: i64,
    pub swarm: String,
    pub task: String,
    pub attempt: u32,
    pub worker: String,
    pub kind: String,
    pub message: String,
    pub data: String,
}

/// What an earlier swarm's task took (the mean of its succeeded
/// attempts), kept after the swarm is forgotten so that the next run of
/// the plan starts from it. Keyed by plan name and task id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DurationRow {
    pub plan: String,
    pub task: String,
    pub ms: u64,
    pub samples: u32,
    pub updated_at: i64,
}

/// Everything one group commit writes. Rows of the same key collapse to
/// the last one written in the batch.
#[derive(Debug, Default)]
pub struct Batch {
    pub(super) swarms: HashMap<String, SwarmRow>,
    /// Swarms created in this batch: their plan is written once.
    pub(super) new_swarms: HashSet<String>,
    pub(super) tasks: HashMap<(String, String), TaskRow>,
    pub(super) attempts: HashMap<(String, String, u32), AttemptRow>,
    pub(super) workers: HashMap<String, WorkerRow>,
    pub(super) forgotten_workers: HashSet<String>,
    /// Swarms deleted whole (rows, attempts, events), in the order forgotten.
    pub(super) forgotten_swarms: Vec<String>,
    /// Fleet events (no swarm, no task) with ids below this are deleted.
    pub(super) fleet_events_before: Option<u64>,
    pub events: Vec<EventRow>,
    /// Earlier tasks' durations to keep (by plan and task; the later wins).
    pub(super) durations: Vec<DurationRow>,
}

impl Batch {
    /// A new swarm: its plan and its progress.
    pub fn new_swarm(&mut self, row: SwarmRow) {
        self.new_swarms.insert(row.id.clone());
        self.swarms.insert(row.id.clone(), row);
    }
    /// A swarm's progress (state, integration head); the plan is not
    /// rewritten.
    pub fn swarm(&mut self, row: SwarmRow) {
        self.swarms.insert(row.id.clone(), row);
    }
    pub fn task(&mut self, row: TaskRow) {
        self.tasks.insert((row.swarm.clone(), row.id.clone()), row);
    }
    pub fn attempt(&mut self, row: AttemptRow) {
        self.attempts.insert((row.swarm.clone(), row.task.clone(), row.number), row);
    }
    pub fn worker(&mut self, row: WorkerRow) {
        self.forgotten_workers.remove(&row.id);
        self.workers.insert(row.id.clone(), row);
    }
    /// Deletes a worker's row; its events stay.
    pub fn forget_worker(&mut self, id: &str) {
        self.workers.remove(id);
        self.forgotten_workers.insert(id.to_string());
    }
    /// Deletes a swarm and everything stored of it: its plan and
    /// progress, tasks, attempts and events. Rows of it this batch already
    /// holds are dropped; rows written after this call are a new swarm of
    /// the same id.
    pub fn forget_swarm(&mut self, id: &str) {
        self.new_swarms.remove(id);
        self.swarms.remove(id);
        self.tasks.retain(|(swarm, _), _| swarm != id);
        self.attempts.retain(|(swarm, _, _), _| swarm != id);
        self.events.retain(|e| e.swarm != id);
        self.forgotten_swarms.push(id.to_string());
    }
    /// Deletes the fleet's events (those of no swarm and no task: workers
    /// connecting, forgotten, denied) with ids below `id`.
    pub fn forget_fleet_events_before(&mut self, id: u64) {
        self.fleet_events_before = Some(self.fleet_events_before.map_or(id, |b| b.max(id)));
    }
    pub fn event(&mut self, row: EventRow) {
        self.events.push(row);
    }
    /// Keeps what a task took for the next run of its plan.
    pub fn duration(&mut self, row: DurationRow) {
        self.durations.push(row);
    }
    pub fn is_empty(&self) -> bool {
        self.swarms.is_empty()
            && self.tasks.is_empty()
            && self.attempts.is_empty()
            && self.workers.is_empty()
            && self.forgotten_workers.is_empty()
            && self.forgotten_swarms.is_empty()
            && self.fleet_events_before.is_none()
            && self.events.is_empty()
            && self.durations.is_empty()
    }
    /// Rows in the batch, for the batch-size metric.
    pub fn len(&self) -> usize {
        self.swarms.len()
            + self.tasks.len()
            + self.attempts.len()
            + self.workers.len()
            + self.forgotten_workers.len()
            + self.forgotten_swarms.len()
            + usize::from(self.fleet_events_before.is_some())
            + self.events.len()
            + self.durations.len()
    }
}

/// The batches of one commit as one set of rows: a key several of them
/// write ends as the last one wrote it, and is written once.
///
/// Rows come in key order, which is the order of the tables' keys in both
/// backends, so the rows of one commit share B-tree pages. A new swarm's
/// tasks inserted in a hash map's order got scattered rowids in SQLite,
/// and each later commit then dirtied (and wrote to the WAL) about a page
/// per task it touched.
#[derive(Default)]
pub(super) struct Merged<'a> {
    pub new_swarms: Vec<&'a SwarmRow>,
    pub swarms: BTreeMap<&'a str, &'a SwarmRow>,
    pub tasks: BTreeMap<(&'a str, &'a str), &'a TaskRow>,
    pub attempts: BTreeMap<(&'a str, &'a str, u32), &'a AttemptRow>,
    pub workers: BTreeMap<&'a str, &'a WorkerRow>,
    pub forgotten: BTreeSet<&'a str>,
    /// Deleted before any row of the commit is written.
    pub forgotten_swarms: BTreeSet<&'a str>,
    pub fleet_events_before: Option<u64>,
    pub events: Vec<&'a EventRow>,
    pub durations: BTreeMap<(&'a str, &'a str), &'a DurationRow>,
}

impl<'a> Merged<'a> {
    /// `batches` are consecutive turns, oldest first.
    pub fn of(batches: &[&'a Batch]) -> Merged<'a> {
        let mut m = Merged::default();
        for b in batches {
            // A batch's forgets come before its rows (see
            // `Batch::forget_swarm`), and the commit deletes before it
            // writes: rows of a forgotten swarm from earlier batches are
            // dropped here, later ones are a new swarm of the same id.
            for id in &b.forgotten_swarms {
                m.forget_swarm(id);
            }
            if let Some(before) = b.fleet_events_before {
                m.fleet_events_before = Some(m.fleet_events_before.map_or(before, |b| b.max(before)));
            }
            m.new_swarms.extend(b.new_swarms.iter().filter_map(|id| b.swarms.get(id)));
            m.swarms.extend(b.swarms.values().map(|r| (r.id.as_str(), r)));
            m.tasks.extend(b.tasks.values().map(|r| ((r.swarm.as_str(), r.id.as_str()), r)));
            m.attempts
                .extend(b.attempts.values().map(|r| ((r.swarm.as_str(), r.task.as_str(), r.number), r)));
            // Within a batch a worker is either written or forgotten; across
            // batches the later says which.
            for id in &b.forgotten_workers {
                m.workers.remove(id.as_str());
                m.forgotten.insert(id);
            }
            for r in b.workers.values() {
                m.forgotten.remove(r.id.as_str());
                m.workers.insert(&r.id, r);
            }
            m.events.extend(b.events.iter());
            m.durations.extend(b.durations.iter().map(|r| ((r.plan.as_str(), r.task.as_str()), r)));
        }
        m
    }

    fn forget_swarm(&mut self, id: &'a str) {
        self.new_swarms.retain(|r| r.id != id);
        self.swarms.remove(id);
        self.tasks.retain(|(swarm, _), _| *swarm != id);
        self.attempts.retain(|(swarm, _, _), _| *swarm != id);
        self.events.retain(|e| e.swarm != id);
        self.forgotten_swarms.insert(id);
    }
}

/// Figures from one commit, for metrics and the benchmark.
#[derive(Debug, Clone, Copy)]
pub struct CommitStats {
    pub rows: usize,
    pub micros: u64,
}
