//! The ready queue: READY tasks in the order the scheduler offers them.
//!
//! Within a swarm, tasks are ranked by priority (higher first: the task's
//! own plus its swarm's), then by the remaining critical path below the
//! task (longest first), then by readiness. Each swarm keeps its READY
//! tasks in an ordered set under that rank, so taking the best is
//! O(log n). Between swarms the scheduler walks the swarms in the order
//! [`ReadyQueue::iter`] gives: the higher head priority first, then the
//! swarm furthest below its fair share of running tasks (`running /
//! share`, lowest first); a swarm at its `max_parallel` is left out. That
//! walk sorts the swarms that have READY tasks, O(s log s) for s of them,
//! which stays small beside the tasks; the swarms without any are not
//! visited.
//!
//! The critical path below a task is the heaviest chain of tasks that
//! depend on it, itself included. A task's weight is its `estimate`; a
//! task without one weighs what `durations.rs` learned of it (its own
//! earlier attempts, the same task in earlier runs of the plan, its
//! directory's tasks, the swarm's median), else the mean of the swarm's
//! estimates, else one second. Paths are computed for the whole swarm at
//! once (reverse topological order, O(tasks + deps)), lazily: after tasks
//! were added, and when a weight that moves with the swarm's samples was
//! used and the samples grew by a quarter since, so that a completion
//! costs O(1) and a swarm's paths are computed O(log tasks) times. A swarm
//! whose tasks all have estimates is never recomputed for what was learnt.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use swarm_core::{SwarmId, TaskKey};

use super::durations::{Durations, Remembered, Source};
use super::{HashMap, HashSet, Swarm, Tasks};

/// The weight of a task nothing is known about: one second.
const UNIT_MS: u64 = 1_000;

/// How READY tasks are ordered within a swarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScheduleOrder {
    /// Priority, then remaining critical path, then readiness.
    #[default]
    CriticalPath,
    /// Readiness alone: the order before critical-path scheduling, kept as
    /// the benchmark's baseline and to tell an ordering problem apart.
    Fifo,
}

impl ScheduleOrder {
    pub fn parse(s: &str) -> Option<ScheduleOrder> {
        match s {
            "critical-path" => Some(ScheduleOrder::CriticalPath),
            "fifo" => Some(ScheduleOrder::Fifo),
            _ => None,
        }
    }
}

/// A READY task's place: priority and path descending, readiness ascending.
type Rank = (Reverse<i32>, Reverse<u64>, u64);

/// The rank of a task that became READY as the `seq`th, under `order`.
fn rank_in(order: ScheduleOrder, priority: i32, path: u64, seq: u64) -> Rank {
    match order {
        ScheduleOrder::CriticalPath => (Reverse(priority), Reverse(path), seq),
        ScheduleOrder::Fifo => (Reverse(0), Reverse(0), seq),
    }
}

#[derive(Debug, Default)]
struct SwarmQueue {
    ready: BTreeSet<(Rank, TaskKey)>,
    /// Its tasks a sidecar runs now.
    running: u32,
    /// Tasks were added, or learnt weights moved, since its tasks' paths
    /// (`Task::path`) were computed.
    stale: bool,
    /// The mean weight its paths were computed with.
    basis_ms: u64,
}

#[derive(Debug, Default)]
pub struct ReadyQueue {
    order: ScheduleOrder,
    swarms: HashMap<SwarmId, SwarmQueue>,
    /// Swarms with READY tasks: what a decision walks, rather than every
    /// swarm the controller ever ran.
    open: HashSet<SwarmId>,
    /// Swarms whose paths wait for [`ReadyQueue::refresh`].
    stale: Vec<SwarmId>,
    /// Where each READY task sits, to take it out.
    rank: HashMap<TaskKey, Rank>,
    running: HashSet<TaskKey>,
    next_seq: u64,
    durations: Durations,
}

impl ReadyQueue {
    pub fn len(&self) -> usize {
        self.rank.len()
    }

    pub fn order(&self) -> ScheduleOrder {
        self.order
    }

    /// A task of `swarm` was added: its paths are out of date.
    pub fn task_added(&mut self, swarm: &SwarmId) {
        self.mark_stale(swarm);
    }

    fn mark_stale(&mut self, swarm: &SwarmId) {
        let q = self.swarms.entry(swarm.clone()).or_default();
        if !q.stale {
            q.stale = true;
            self.stale.push(swarm.clone());
        }
    }

    /// Whether some swarm's paths wait for [`ReadyQueue::refresh`].
    pub fn stale(&self) -> bool {
        !self.stale.is_empty()
    }

    /// `key` is READY, ranked by `(priority, path)` (its priority and its
    /// swarm's summed; its remaining critical path), or not.
    pub fn set_ready(&mut self, key: &TaskKey, ready: Option<(i32, u64)>) {
        if let Some(rank) = self.rank.remove(key)
            && let Some(q) = self.swarms.get_mut(&key.swarm)
        {
            q.ready.remove(&(rank, key.clone()));
            if q.ready.is_empty() {
                self.open.remove(&key.swarm);
            }
        }
        let Some((priority, path)) = ready else { return };
        let rank = rank_in(self.order, priority, path, self.next_seq);
        self.next_seq += 1;
        let q = self.swarms.entry(key.swarm.clone()).or_default();
        if q.ready.is_empty() {
            self.open.insert(key.swarm.clone());
        }
        q.ready.insert((rank, key.clone()));
        self.rank.insert(key.clone(), rank);
    }

    /// Drops a forgotten swarm's queue; its tasks were taken out first.
    pub fn forget(&mut self, swarm: &SwarmId) {
        self.durations.forget(swarm);
        self.swarms.remove(swarm);
        self.open.remove(swarm);
        self.stale.retain(|s| s != swarm);
    }

    /// `key` runs on a sidecar, or no longer does.
    pub fn set_running(&mut self, key: &TaskKey, running: bool) {
        let changed = if running { self.running.insert(key.clone()) } else { self.running.remove(key) };
        if changed && let Some(q) = self.swarms.get_mut(&key.swarm) {
            q.running = if running { q.running + 1 } else { q.running.saturating_sub(1) };
        }
    }

    /// An attempt of `key` (`spec`) succeeded after `ms`: what it learns.
    pub fn finished(&mut self, key: &TaskKey, spec: &swarm_core::plan::TaskSpec, ms: u64) {
        if self.durations.finished(&key.swarm, spec, ms) {
            self.mark_stale(&key.swarm);
        }
    }

    /// What the store remembers of earlier swarms' tasks.
    pub fn remember(&mut self, rows: impl IntoIterator<Item = Remembered>) {
        self.durations.remember(rows);
    }

    /// What `swarm`'s tasks took, for the store to keep once it is
    /// forgotten.
    pub fn learned(&self, swarm: &SwarmId) -> Vec<Remembered> {
        self.durations.rows_of(swarm)
    }

    /// A task's weight as it would be computed now, and where it came from.
    pub fn weight(&self, swarm: &SwarmId, spec: &swarm_core::plan::TaskSpec) -> (u64, Source) {
        let guess = self.swarms.get(swarm).map_or(UNIT_MS, |q| q.basis_ms.max(1));
        self.durations.weight(swarm, spec, guess)
    }

    /// A task's weight before its work succeeded after `own_ms`
    /// (`Durations::weight_before`).
    pub fn weight_before(
        &self,
        swarm: &SwarmId,
        spec: &swarm_core::plan::TaskSpec,
        own_ms: u64,
    ) -> (u64, Source) {
        let guess = self.swarms.get(swarm).map_or(UNIT_MS, |q| q.basis_ms.max(1));
        self.durations.weight_before(swarm, spec, guess, own_ms)
    }

    /// The weight of a task of `swarm` without an estimate, as its paths
    /// were last computed with.
    pub fn unknown_weight_ms(&self, swarm: &SwarmId) -> u64 {
        self.swarms.get(swarm).map_or(UNIT_MS, |q| q.basis_ms.max(1))
    }

    /// Running tasks of `swarm`.
    pub fn running(&self, swarm: &SwarmId) -> u32 {
        self.swarms.get(swarm).map_or(0, |q| q.running)
    }

    /// Switches the order, ranking every READY task again.
    pub fn set_order(&mut self, order: ScheduleOrder, rank: impl Fn(&TaskKey) -> (i32, u64)) {
        self.order = order;
        // In readiness order, which the new sequence numbers keep.
        let mut keys: Vec<(u64, TaskKey)> = self.rank.iter().map(|(k, rank)| (rank.2, k.clone())).collect();
        keys.sort_unstable();
        for (_, key) in keys {
            self.set_ready(&key, Some(rank(&key)));
        }
    }

    /// Computes the paths of each stale swarm into its tasks and ranks its
    /// READY tasks again (in their readiness order, which re-ranking keeps).
    pub fn refresh(&mut self, swarms: &HashMap<SwarmId, Swarm>, tasks: &mut Tasks) {
        for id in std::mem::take(&mut self.stale) {
            let Some(q) = self.swarms.get_mut(&id) else { continue };
            q.stale = false;
            let Some(swarm) = swarms.get(&id) else { continue };
            let _span =
                tracing::debug_span!("critical_path", swarm = %id, tasks = swarm.tasks.len()).entered();
            let specs: Vec<_> =
                swarm.tasks.iter().filter_map(|k| tasks.get(k)).map(|t| t.spec.clone()).collect();
            let estimates = specs
                .iter()
                .filter_map(|s| s.estimate_ms)
                .fold((0u64, 0u64), |(sum, n), ms| (sum.saturating_add(ms), n + 1));
            let guess = estimates.0.checked_div(estimates.1).map_or(UNIT_MS, |ms| ms.max(1));
            let weights: Vec<u64> =
                self.durations.weights(&id, &specs, guess).into_iter().map(|(ms, _)| ms).collect();
            let sum = weights.iter().fold(0u64, |a, w| a.saturating_add(*w));
            q.basis_ms = sum.checked_div(weights.len() as u64).unwrap_or(guess).max(1);
            let paths = swarm_core::plan::critical_paths_weighted(&specs, &weights);
            for (spec, path) in specs.iter().zip(paths) {
                if let Some(t) = tasks.get_mut(&TaskKey::new(id.clone(), spec.id.clone())) {
                    t.path = path;
                }
            }
            // Ranked again in readiness order, in bulk: a swarm of thousands
            // of READY tasks is refreshed as often as what it learns grows
            // by a quarter, and one set insertion and two map updates per
            // task made this most of the scheduler's time.
            let mut ready: Vec<(u64, TaskKey)> =
                std::mem::take(&mut q.ready).into_iter().map(|(rank, key)| (rank.2, key)).collect();
            ready.sort_unstable_by_key(|(seq, _)| *seq);
            let mut ranked = Vec::with_capacity(ready.len());
            for (_, key) in ready {
                let (priority, path) = super::rank(swarms, tasks, &key);
                let rank = rank_in(self.order, priority, path, self.next_seq);
                self.next_seq += 1;
                match self.rank.get_mut(&key) {
                    Some(r) => *r = rank,
                    None => {
                        self.rank.insert(key.clone(), rank);
                    }
                }
                ranked.push((rank, key));
            }
            ranked.sort_unstable();
            q.ready = ranked.into_iter().collect();
            if q.ready.is_empty() {
                self.open.remove(&id);
            }
        }
    }

    /// READY tasks in the order they are offered: swarms by head priority
    /// and fair share (those at `max_parallel` left out), each swarm's
    /// tasks by rank. `limits` gives a swarm's share and cap.
    pub fn iter<'a>(
        &'a self,
        limits: impl Fn(&SwarmId) -> (u32, Option<u32>),
    ) -> impl Iterator<Item = &'a TaskKey> + 'a {
        let mut open: Vec<(&SwarmId, &SwarmQueue, u64)> = self
            .open
            .iter()
            .filter_map(|id| Some((id, self.swarms.get(id)?)))
            .filter_map(|(id, q)| {
                let (share, cap) = limits(id);
                (cap.is_none_or(|cap| q.running < cap)).then_some((id, q, u64::from(share.max(1))))
            })
            .collect();
        open.sort_by(|a, b| {
            let head = |q: &SwarmQueue| q.ready.first().map(|(rank, _)| rank.0);
            // running_a / share_a against running_b / share_b, exactly.
            let load_a = u64::from(a.1.running) * b.2;
            let load_b = u64::from(b.1.running) * a.2;
            head(a.1).cmp(&head(b.1)).then(load_a.cmp(&load_b)).then(a.0.cmp(b.0))
        });
        open.into_iter().flat_map(|(_, q, _)| q.ready.iter().map(|(_, k)| k))
    }
}

#[cfg(test)]
mod tests {
    use swarm_core::plan::Plan;

    use super::*;

    fn specs(tasks: &str) -> Vec<std::sync::Arc<swarm_core::plan::TaskSpec>> {
        Plan::parse(&format!("name = \"s\"\n[defaults]\ncommand = \"true\"\n{tasks}")).expect("plan").tasks
    }

    #[test]
    fn a_path_is_the_task_and_its_heaviest_chain_of_dependents() {
        // a -> {b, c} -> d; b is expected to take 5 s, the rest weigh 1 s.
        let specs = specs(
            "[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n\
             [[tasks]]\nid = \"b\"\nfiles = [\"b\"]\ndeps = [\"a\"]\nestimate = \"5s\"\n\
             [[tasks]]\nid = \"c\"\nfiles = [\"c\"]\ndeps = [\"a\"]\n\
             [[tasks]]\nid = \"d\"\nfiles = [\"d\"]\ndeps = [\"b\", \"c\"]\n",
        );
        assert_eq!(swarm_core::plan::critical_paths(&specs, 1_000), [7_000, 6_000, 2_000, 1_000]);
    }

    #[test]
    fn a_swarm_whose_weights_were_learnt_is_recomputed_as_it_learns() {
        let swarm = SwarmId::new("s").expect("id");
        let specs = specs("[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n");
        let key = TaskKey::new(swarm.clone(), specs[0].id.clone());
        let mut q = ReadyQueue::default();
        q.durations.weights(&swarm, &specs, UNIT_MS);
        q.finished(&key, &specs[0], 10_000);
        assert!(q.stale(), "the first duration replaces the guess");

        let specs = super::tests::specs("[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\nestimate = \"1s\"\n");
        let mut q = ReadyQueue::default();
        q.durations.weights(&swarm, &specs, UNIT_MS);
        q.finished(&key, &specs[0], 10_000);
        assert!(!q.stale(), "every weight is an estimate: nothing learnt reorders it");
    }
}
