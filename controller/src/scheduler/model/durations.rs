//! What a task is expected to take, when its plan gives no `estimate`:
//! learned from what is known, most specific first.
//!
//! 1. The task's own earlier attempts in this swarm (a retry).
//! 2. The same task (plan name and task id) in earlier swarms: what a
//!    forgotten swarm's tasks took is kept in the store
//!    (`task_durations`), so a plan run again after its last run was
//!    forgotten, or after a restart, starts with them.
//! 3. This swarm's tasks that own files in the same directory.
//! 4. The median of this swarm's attempts so far.
//! 5. Nothing known: the caller's guess (the mean of the swarm's
//!    estimates, else one second).
//!
//! A task whose plan gives an `estimate` weighs exactly that: nothing
//! learned changes it (`estimates_are_never_overridden`, a property test).
//! Durations are those of succeeded attempts, start to end.

use swarm_core::plan::TaskSpec;
use swarm_core::{SwarmId, TaskId};

use super::HashMap;

/// Where a task's weight came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Estimate,
    Attempts,
    Earlier,
    Directory,
    Median,
    Guess,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Estimate => "estimate",
            Source::Attempts => "attempts",
            Source::Earlier => "earlier run",
            Source::Directory => "directory",
            Source::Median => "swarm median",
            Source::Guess => "guess",
        }
    }

    /// Whether more completions in the swarm can change this weight.
    fn moves(self) -> bool {
        matches!(self, Source::Directory | Source::Median | Source::Guess)
    }
}

/// A running mean.
#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    sum: u64,
    n: u32,
}

impl Mean {
    fn add(&mut self, ms: u64) {
        self.sum = self.sum.saturating_add(ms);
        self.n = self.n.saturating_add(1);
    }

    fn get(&self) -> Option<u64> {
        self.sum.checked_div(u64::from(self.n)).map(|ms| ms.max(1))
    }

    /// The mean with one sample of `ms` taken back out.
    fn without(self, ms: u64) -> Mean {
        if self.n == 0 { self } else { Mean { sum: self.sum.saturating_sub(ms), n: self.n - 1 } }
    }
}

/// What one swarm's attempts taught.
#[derive(Debug, Default)]
struct Learned {
    tasks: HashMap<TaskId, Mean>,
    dirs: HashMap<String, Mean>,
    samples: Vec<u64>,
    /// Samples when the weights were last read for its paths, and whether
    /// any weight then could move with more samples.
    read_at: usize,
    moving: bool,
}

/// A remembered duration of an earlier swarm's task, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    pub plan: String,
    pub task: String,
    pub ms: u64,
    pub samples: u32,
}

#[derive(Debug, Default)]
pub struct Durations {
    /// Earlier swarms' tasks, by plan name (a root swarm's id) and task id.
    earlier: HashMap<(String, String), u64>,
    swarms: HashMap<SwarmId, Learned>,
}

/// The directory a task's first owned glob lies in: the part before any
/// wildcard, up to its last `/`.
pub fn owned_dir(spec: &TaskSpec) -> &str {
    let Some(glob) = spec.files.first() else { return "" };
    let plain = glob.find(['*', '?', '[', '{']).map_or(glob.as_str(), |at| &glob[..at]);
    plain.rfind('/').map_or("", |at| &plain[..at])
}

impl Durations {
    /// What the store remembers of earlier swarms.
    pub fn remember(&mut self, rows: impl IntoIterator<Item = Remembered>) {
        for r in rows {
            self.earlier.insert((r.plan, r.task), r.ms.max(1));
        }
    }

    /// An attempt of `spec` in `swarm` succeeded after `ms`. Whether the
    /// swarm's paths should be computed again: a weight that moves with
    /// the swarm's samples was read, and the samples grew by a quarter
    /// since (so a swarm's paths are computed O(log n) times).
    pub fn finished(&mut self, swarm: &SwarmId, spec: &TaskSpec, ms: u64) -> bool {
        let l = self.swarms.entry(swarm.clone()).or_default();
        l.tasks.entry(spec.id.clone()).or_default().add(ms);
        l.dirs.entry(owned_dir(spec).to_string()).or_default().add(ms);
        l.samples.push(ms);
        l.moving && l.samples.len() * 4 >= l.read_at * 5 + 4
    }

    /// Each spec's weight and its source, for one computation of `swarm`'s
    /// paths; `guess` is the weight when nothing is known.
    pub fn weights(
        &mut self,
        swarm: &SwarmId,
        specs: &[std::sync::Arc<TaskSpec>],
        guess: u64,
    ) -> Vec<(u64, Source)> {
        let l = self.swarms.entry(swarm.clone()).or_default();
        let median = median(&mut l.samples);
        let plan = swarm.as_str();
        let weights: Vec<(u64, Source)> =
            specs.iter().map(|s| weigh(s, l, &self.earlier, plan, median, guess)).collect();
        l.read_at = l.samples.len();
        l.moving = weights.iter().any(|(_, src)| src.moves());
        weights
    }

    /// The weight of one task as it would be computed now.
    pub fn weight(&self, swarm: &SwarmId, spec: &TaskSpec, guess: u64) -> (u64, Source) {
        let empty = Learned::default();
        let l = self.swarms.get(swarm).unwrap_or(&empty);
        let mut samples = l.samples.clone();
        weigh(spec, l, &self.earlier, swarm.as_str(), median(&mut samples), guess)
    }

    /// The weight of a task whose work succeeded after `own_ms`, as it was
    /// expected before: that sample left out of what its task, its
    /// directory and its swarm learned, so that a task without an
    /// estimate is not said to have been expected to take what it took.
    pub fn weight_before(&self, swarm: &SwarmId, spec: &TaskSpec, guess: u64, own_ms: u64) -> (u64, Source) {
        let empty = Learned::default();
        let l = self.swarms.get(swarm).unwrap_or(&empty);
        let mut before = Learned::default();
        if let Some(m) = l.tasks.get(&spec.id) {
            before.tasks.insert(spec.id.clone(), m.without(own_ms));
        }
        let dir = owned_dir(spec);
        if let Some(m) = l.dirs.get(dir) {
            before.dirs.insert(dir.to_string(), m.without(own_ms));
        }
        let mut samples = l.samples.clone();
        if let Some(at) = samples.iter().position(|&ms| ms == own_ms) {
            samples.swap_remove(at);
        }
        weigh(spec, &before, &self.earlier, swarm.as_str(), median(&mut samples), guess)
    }

    /// `swarm` is forgotten: its tasks' means become what earlier runs of
    /// its plan took. Returned: the rows for the store to keep.
    pub fn forget(&mut self, swarm: &SwarmId) -> Vec<Remembered> {
        let Some(l) = self.swarms.remove(swarm) else { return Vec::new() };
        let mut rows = Vec::with_capacity(l.tasks.len());
        for (task, mean) in l.tasks {
            let Some(ms) = mean.get() else { continue };
            self.earlier.insert((swarm.to_string(), task.to_string()), ms);
            rows.push(Remembered { plan: swarm.to_string(), task: task.to_string(), ms, samples: mean.n });
        }
        rows
    }

    /// The rows `forget` would return, without forgetting.
    pub fn rows_of(&self, swarm: &SwarmId) -> Vec<Remembered> {
        let Some(l) = self.swarms.get(swarm) else { return Vec::new() };
        l.tasks
            .iter()
            .filter_map(|(task, mean)| {
                Some(Remembered {
                    plan: swarm.to_string(),
                    task: task.to_string(),
                    ms: mean.get()?,
                    samples: mean.n,
                })
            })
            .collect()
    }
}

fn weigh(
    spec: &TaskSpec,
    l: &Learned,
    earlier: &HashMap<(String, String), u64>,
    plan: &str,
    median: Option<u64>,
    guess: u64,
) -> (u64, Source) {
    if let Some(ms) = spec.estimate_ms {
        return (ms, Source::Estimate);
    }
    if let Some(ms) = l.tasks.get(&spec.id).and_then(Mean::get) {
        return (ms, Source::Attempts);
    }
    if let Some(&ms) = earlier.get(&(plan.to_string(), spec.id.to_string())) {
        return (ms, Source::Earlier);
    }
    if let Some(ms) = l.dirs.get(owned_dir(spec)).and_then(Mean::get) {
        return (ms, Source::Directory);
    }
    if let Some(ms) = median {
        return (ms, Source::Median);
    }
    (guess.max(1), Source::Guess)
}

fn median(samples: &mut [u64]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let mid = samples.len() / 2;
    Some(*samples.select_nth_unstable(mid).1)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use swarm_core::plan::Plan;

    use super::*;

    fn plan(tasks: &str) -> Vec<Arc<TaskSpec>> {
        Plan::parse(&format!("name = \"p\"\n[defaults]\ncommand = \"true\"\n{tasks}")).expect("plan").tasks
    }

    fn swarm() -> SwarmId {
        SwarmId::new("p").expect("id")
    }

    #[test]
    fn the_most_specific_knowledge_wins() {
        let specs = plan(
            "[[tasks]]\nid = \"a\"\nfiles = [\"src/x/a.rs\"]\n\
             [[tasks]]\nid = \"b\"\nfiles = [\"src/x/b.rs\"]\n\
             [[tasks]]\nid = \"c\"\nfiles = [\"src/y/**\"]\n\
             [[tasks]]\nid = \"d\"\nfiles = [\"docs/d.md\"]\n\
             [[tasks]]\nid = \"e\"\nfiles = [\"e\"]\nestimate = \"7s\"\n",
        );
        let mut d = Durations::default();
        assert_eq!(d.weights(&swarm(), &specs, 1_000)[0], (1_000, Source::Guess));
        d.remember([Remembered { plan: "p".into(), task: "c".into(), ms: 9_000, samples: 1 }]);
        d.finished(&swarm(), &specs[0], 4_000);
        d.finished(&swarm(), &specs[4], 100);
        let w = d.weights(&swarm(), &specs, 1_000);
        assert_eq!(w[0], (4_000, Source::Attempts), "its own attempt");
        assert_eq!(w[1], (4_000, Source::Directory), "a sibling in src/x");
        assert_eq!(w[2], (9_000, Source::Earlier), "an earlier run of plan p");
        assert_eq!(w[3], (4_000, Source::Median), "nothing nearer: the swarm's median");
        assert_eq!(w[4], (7_000, Source::Estimate), "an estimate is never overridden");
    }

    #[test]
    fn a_forgotten_swarm_is_what_the_next_run_of_its_plan_starts_from() {
        let specs = plan("[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n");
        let mut d = Durations::default();
        d.finished(&swarm(), &specs[0], 3_000);
        d.finished(&swarm(), &specs[0], 5_000);
        let rows = d.forget(&swarm());
        assert_eq!(rows, [Remembered { plan: "p".into(), task: "a".into(), ms: 4_000, samples: 2 }]);
        assert_eq!(d.weights(&swarm(), &specs, 1_000)[0], (4_000, Source::Earlier));
        let mut restarted = Durations::default();
        restarted.remember(rows);
        assert_eq!(restarted.weights(&swarm(), &specs, 1_000)[0], (4_000, Source::Earlier));
    }

    #[test]
    fn what_a_finished_task_was_expected_to_take_leaves_its_own_time_out() {
        let specs = plan(
            "[[tasks]]\nid = \"a\"\nfiles = [\"src/a.rs\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"src/b.rs\"]\n",
        );
        let mut d = Durations::default();
        d.finished(&swarm(), &specs[0], 9_000);
        assert_eq!(d.weight_before(&swarm(), &specs[0], 1_000, 9_000), (1_000, Source::Guess), "the first");
        d.finished(&swarm(), &specs[1], 3_000);
        assert_eq!(d.weight_before(&swarm(), &specs[1], 1_000, 3_000), (9_000, Source::Directory));
        // A retry that succeeded again was expected to take what the first did.
        d.finished(&swarm(), &specs[0], 5_000);
        assert_eq!(d.weight_before(&swarm(), &specs[0], 1_000, 5_000), (9_000, Source::Attempts));
        assert_eq!(d.weight(&swarm(), &specs[0], 1_000), (7_000, Source::Attempts), "a rerun's weight");
    }

    #[test]
    fn paths_are_recomputed_as_samples_grow_by_a_quarter_and_only_when_a_weight_moves() {
        let specs = plan("[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b\"]\n");
        let mut d = Durations::default();
        d.weights(&swarm(), &specs, 1_000);
        assert!(d.finished(&swarm(), &specs[0], 10), "the first sample moves every guess");
        d.weights(&swarm(), &specs, 1_000);
        let stale: Vec<bool> = (0..8).map(|_| d.finished(&swarm(), &specs[0], 10)).collect();
        assert!(stale.iter().any(|s| *s));
        let estimated = plan("[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\nestimate = \"1s\"\n");
        let mut d = Durations::default();
        d.weights(&swarm(), &estimated, 1_000);
        assert!(!d.finished(&swarm(), &estimated[0], 10), "an estimated swarm learns nothing to reorder");
    }

    #[test]
    fn the_owned_directory_is_before_the_first_wildcard() {
        let specs = plan(
            "[[tasks]]\nid = \"a\"\nfiles = [\"src/auth/**\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"README\"]\n\
             [[tasks]]\nid = \"c\"\nfiles = [\"src/*/mod.rs\"]\n",
        );
        assert_eq!(owned_dir(&specs[0]), "src/auth");
        assert_eq!(owned_dir(&specs[1]), "");
        assert_eq!(owned_dir(&specs[2]), "src");
    }

    /// Tasks (estimate, deps), durations learned (task, ms), earlier runs'
    /// durations (task, ms).
    type Learning = (Vec<(u64, Vec<usize>)>, Vec<(usize, u64)>, Vec<(usize, u64)>);

    /// A DAG of up to 12 tasks, each depending on some earlier ones, each
    /// with an estimate; and durations learned for them in any amount.
    fn estimated_plan() -> impl Strategy<Value = Learning> {
        (1usize..12).prop_flat_map(|n| {
            let tasks =
                proptest::collection::vec((1u64..100_000, proptest::collection::vec(0usize..n, 0..3)), n);
            let learned = proptest::collection::vec((0usize..n, 1u64..1_000_000), 0..30);
            let earlier = proptest::collection::vec((0usize..n, 1u64..1_000_000), 0..12);
            (tasks, learned, earlier)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Learned durations never reorder tasks whose estimates are
        /// given: their weights, and so every path among them, stay the
        /// estimates, whatever was learned.
        #[test]
        fn estimates_are_never_overridden((tasks, learned, earlier) in estimated_plan()) {
            let mut text = String::new();
            for (i, (ms, deps)) in tasks.iter().enumerate() {
                let deps: std::collections::BTreeSet<usize> = deps.iter().copied().filter(|&d| d < i).collect();
                let deps: Vec<String> = deps.iter().map(|d| format!("\"t{d}\"")).collect();
                text.push_str(&format!(
                    "[[tasks]]\nid = \"t{i}\"\nfiles = [\"d/t{i}\"]\nestimate = \"{ms}ms\"\ndeps = [{}]\n",
                    deps.join(", ")
                ));
            }
            let specs = plan(&text);
            let mut d = Durations::default();
            d.remember(earlier.iter().map(|(i, ms)| Remembered {
                plan: "p".into(), task: format!("t{i}"), ms: *ms, samples: 1,
            }));
            for (i, ms) in &learned {
                d.finished(&swarm(), &specs[*i], *ms);
            }
            let weights = d.weights(&swarm(), &specs, 1_000);
            let given: Vec<u64> = specs.iter().map(|s| s.estimate_ms.unwrap_or(0)).collect();
            prop_assert_eq!(weights.iter().map(|w| w.0).collect::<Vec<_>>(), given);
            let ms: Vec<u64> = weights.iter().map(|w| w.0).collect();
            let learned_paths = swarm_core::plan::critical_paths_weighted(&specs, &ms);
            let plain_paths = swarm_core::plan::critical_paths(&specs, 1_000);
            prop_assert_eq!(learned_paths, plain_paths);
        }
    }
}
