//! The merge queue of swarms whose plan has `integration_verify`: succeeded
//! tasks wait in MERGING while batches of them ("cars") are merged
//! speculatively by the merger, each on top of the car ahead of it,
//! verified on sidecars several at once, and landed in order with one
//! compare-and-swap per passing car. The decisions (cars, bisection,
//! culprits, batch size) are `bisect.rs`'s; this module carries them out:
//! speculation here, verification in `verify.rs`, landing and culprits in
//! `land.rs`.
//!
//! The integration ref only moves from a car's base to the commit its
//! verifier passed: a car lands only once the cars ahead of it have, so its
//! base is the head, and the compare-and-swap refuses anything else.
//!
//! Nothing here is stored: a restarted controller puts every MERGING task
//! of such a swarm back in the queue (marked recovering, so the merger
//! first looks for a landing that happened before the crash), and the cars
//! that were being verified are verified again.
//!
//! `Queues` is a component: it works on the core and imports no other.
//! What the merger decided (merged, conflicting or refused tasks) goes back
//! to the dispatcher, which moves those tasks as on the direct path.

use swarm_core::plan::integration::{AUTO_MAX_PARALLEL, IntegrationVerify};
use swarm_core::{SwarmId, TaskKey, TaskState};
use swarm_git::merge::{Chained, MergeJob, MergeResult, QueueReport, QueueRequest};

use super::bisect::MergeQueue;
use super::core::Core;
use super::model::{HashMap, HashSet, Model, TierOutcome, Worker};
use crate::merger::MergerHandle;

mod fit;
mod land;
mod verify;

/// A failed speculation (a missing branch, a failed write) is tried again
/// after this, not in a hot loop.
const RETRY_MS: u64 = 1_000;
/// Most characters of failing tier output carried into a culprit's task text.
const MAX_FAILURE_TEXT: usize = 8_000;
/// The longest a car waits to fill before it takes a verifier READY tasks
/// could use (see `fit.rs`).
const FILL_MS: u64 = 1_000;
/// What a verification is taken to cost before one was timed.
const VERIFY_GUESS_MS: u64 = 1_000;

/// Whether cars are fitted to the verifiers (`fit.rs`, the default) or
/// formed as before, one per idle verifier with everything that waits
/// (`SWARM_MERGE_QUEUE_BATCHING=parallel`: the benchmark's baseline).
fn fitted() -> bool {
    static FITTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FITTED.get_or_init(|| std::env::var("SWARM_MERGE_QUEUE_BATCHING").map_or(true, |v| v != "parallel"))
}

/// Whether a failed car's culprits are sought beside the train (probes,
/// `bisect.rs`), a culprit's next attempt queued first (the default), or
/// by bisecting on the train, in queue order, as before
/// (`SWARM_MERGE_QUEUE_ISOLATION=train`: the benchmark's baseline).
fn isolating() -> bool {
    static ISOLATING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ISOLATING.get_or_init(|| std::env::var("SWARM_MERGE_QUEUE_ISOLATION").map_or(true, |v| v != "train"))
}

/// What one car (a batch on the train) is doing.
#[derive(Debug)]
pub(super) enum CarStage {
    /// The merger is merging its items onto the car ahead (or the head).
    Speculating,
    /// `head` (its items merged onto `base`) waits for a verifier or its
    /// verdict; `worker` is the verifier and its session.
    Verifying { base: String, head: String, chained: Vec<Chained>, worker: Option<(String, u64)> },
    /// It passed and waits for the cars ahead of it to land (or failed and
    /// waits to be decided).
    Verified { base: String, head: String, chained: Vec<Chained> },
    /// Its verified `head` is landing.
    Landing { chained: Vec<Chained> },
}

impl CarStage {
    /// The merged commit a car behind this one is stacked on.
    fn head(&self) -> Option<&str> {
        match self {
            CarStage::Verifying { head, .. } | CarStage::Verified { head, .. } => Some(head),
            CarStage::Landing { chained } => chained.last().map(|c| c.merge_commit.as_str()),
            CarStage::Speculating => None,
        }
    }
}

/// A verification's result from a sidecar.
#[derive(Debug, Clone)]
pub struct VerifiedReport {
    pub job: u64,
    pub commit: String,
    pub passed: bool,
    pub tiers: Vec<TierOutcome>,
    /// The sidecar could not verify (checkout, fetch): not the tree's fault.
    pub error: String,
}

#[derive(Debug)]
pub(super) struct SwarmQueue {
    queue: MergeQueue<TaskKey>,
    /// What each car on the train is doing, by its job id.
    cars: HashMap<u64, CarStage>,
    /// Put back after a restart: the merger first looks for a landing.
    recovering: HashSet<TaskKey>,
    /// The failing tiers' output of the last failed verification each task
    /// was in: the culprit it leads to gets it in its task text.
    failures: HashMap<TaskKey, String>,
    retry_at: u64,
    /// When each waiting task was queued (monotonic ms): how long a car
    /// has been filling.
    queued_at: HashMap<TaskKey, u64>,
    /// When each car's verification was sent, and the verifications timed
    /// so far (sum, count): what a verification costs a slot.
    verify_sent: HashMap<u64, u64>,
    verified_ms: (u64, u64),
}

impl SwarmQueue {
    /// Forgets the cars the queue took off the train or decided (their
    /// verifiers' verdicts are no longer wanted).
    fn sync(&mut self) {
        let cars = self.queue.cars().iter().map(|c| c.id);
        let live: HashSet<u64> = cars.chain(self.queue.probes().iter().map(|p| p.id)).collect();
        self.cars.retain(|id, _| live.contains(id));
        self.verify_sent.retain(|id, _| live.contains(id));
    }
}

/// Every swarm's queue, and the job ids they share.
#[derive(Debug, Default)]
pub(super) struct Queues {
    by_swarm: HashMap<SwarmId, SwarmQueue>,
    next_job: u64,
}

/// What a queue report decided, for the dispatcher: merge results to apply
/// as the merger's own, then culprits to hand back (after the landing, so
/// they start from the new head).
#[derive(Default)]
pub(super) struct Decided {
    pub merged: Vec<MergeResult>,
    pub culprits: Vec<TaskKey>,
}

/// The merge job of attempt `number` of `key`.
pub(super) fn merge_job(model: &Model, key: &TaskKey, number: u32, recovering: bool) -> Option<MergeJob> {
    let t = model.tasks().get(key)?;
    let swarm = model.swarms().get(&key.swarm)?;
    let attempt = model.attempts().get(&(key.clone(), number))?;
    Some(MergeJob {
        task: key.clone(),
        attempt: number,
        attempt_label: key.attempt(number).to_string(),
        integration_branch: swarm.plan.integration_branch.clone(),
        task_commit: t.result_commit.clone(),
        base_commit: attempt.base_commit.clone(),
        strategy: t.spec.strategy,
        ownership: t.spec.ownership,
        owned_globs: t.spec.files.clone(),
        title: t.spec.title.clone(),
        summary: t.notes.summary.clone(),
        recovering,
    })
}

fn integration_of(model: &Model, swarm: &SwarmId) -> Option<std::sync::Arc<IntegrationVerify>> {
    model.swarms().get(swarm).and_then(|s| s.plan.integration.clone())
}

/// Whether a swarm's succeeded tasks go through the merge queue.
pub(super) fn queues_merges(model: &Model, swarm: &SwarmId) -> bool {
    integration_of(model, swarm).is_some()
}

/// Idle sidecars that carry the swarm's verifier labels.
fn idle_verifiers<'m>(model: &'m Model, iv: &IntegrationVerify) -> impl Iterator<Item = &'m Worker> {
    model.workers().values().filter(|w| w.is_idle() && w.satisfies(&iv.labels))
}

impl Queues {
    fn swarm_queue(&mut self, model: &Model, swarm: &SwarmId) -> Option<&mut SwarmQueue> {
        let max = integration_of(model, swarm)?.max_batch as usize;
        Some(self.by_swarm.entry(swarm.clone()).or_insert_with(|| SwarmQueue {
            queue: MergeQueue::new(max).isolating(isolating()),
            cars: HashMap::default(),
            recovering: HashSet::default(),
            failures: HashMap::default(),
            retry_at: 0,
            queued_at: HashMap::default(),
            verify_sent: HashMap::default(),
            verified_ms: (0, 0),
        }))
    }

    /// A succeeded task of a queued swarm enters the queue (MERGING); the
    /// next tick puts it on the train when a verifier is free.
    pub fn enqueue(&mut self, core: &mut Core, key: &TaskKey, number: u32) {
        let Some(q) = self.swarm_queue(core.model, &key.swarm) else { return };
        if number > 1 && isolating() {
            q.queue.push_first(key.clone());
        } else {
            q.queue.push(key.clone());
        }
        q.queued_at.insert(key.clone(), core.mono_ms());
        let waiting = q.queue.waiting().count();
        core.to_merging(key, &format!("attempt {number} queued for integration verify"));
        core.fx.task_event(
            key,
            number,
            "",
            "merge_queue.queued",
            format!("queued for integration verify ({waiting} waiting)"),
            serde_json::json!({ "waiting": waiting }),
        );
    }

    /// After a restart: back in the queue without an event (the store
    /// already says MERGING), marked so a landed merge is found first.
    pub fn requeue_recovered(&mut self, model: &Model, key: &TaskKey) {
        if let Some(q) = self.swarm_queue(model, &key.swarm) {
            q.queue.push(key.clone());
            q.recovering.insert(key.clone());
        }
    }

    /// A swarm retention forgot (it ended, so its queue is empty but for
    /// what it remembers of failed verifications).
    pub fn forget(&mut self, swarm: &SwarmId) {
        self.by_swarm.remove(swarm);
    }

    /// Each turn, for every swarm: notice lost verifiers, hand cars to
    /// free ones, land what passed, and put the next car on the train.
    pub fn tick(&mut self, core: &mut Core, merger: &MergerHandle) {
        if self.by_swarm.is_empty() {
            return;
        }
        let swarms: Vec<SwarmId> = self.by_swarm.keys().cloned().collect();
        for swarm in swarms {
            self.notice_lost_verifiers(core, &swarm);
            self.dispatch_verifies(core, &swarm);
            self.try_land(core, merger, &swarm);
            self.start_car(core, merger, &swarm);
        }
    }

    /// How many cars may be out: the plan's `max_parallel`, or one per
    /// verifier busy with a car or idle now, up to the automatic bound.
    fn limit(core: &Core, iv: &IntegrationVerify, q: &SwarmQueue) -> usize {
        if iv.max_parallel > 0 {
            return iv.max_parallel as usize;
        }
        let idle = idle_verifiers(core.model, iv).count();
        (q.cars.len() + idle).clamp(1, AUTO_MAX_PARALLEL as usize)
    }

    /// Forms the next car from the waiting tasks, stacked on the last car's
    /// merged commit (or the integration head), or the next probe of a
    /// suspect group, on the integration head, and sends it to the merger
    /// to be merged in memory. One speculation at a time: a car needs the
    /// head of the car ahead of it. Which goes and a car's size are
    /// `fit.rs`'s decision (before: a car whenever a verifier was idle,
    /// with everything that waited).
    fn start_car(&mut self, core: &mut Core, merger: &MergerHandle, swarm: &SwarmId) {
        let Some(iv) = integration_of(core.model, swarm) else { return };
        let now = core.mono_ms();
        let Some(q) = self.by_swarm.get(swarm) else { return };
        let speculating = q.cars.values().any(|c| matches!(c, CarStage::Speculating));
        let idle = q.queue.waiting().next().is_none() && q.queue.suspects() == 0;
        if speculating || q.retry_at > now || idle {
            return;
        }
        let (next, ways) = if fitted() {
            let f = fit_of(core.model, &iv, q, swarm, now);
            match fit::next(&f) {
                Some(next) => (next, fit::probe_ways(&f)),
                None => return,
            }
        } else {
            match idle_verifiers(core.model, &iv).count() {
                0 => return,
                idle if q.queue.suspects() > 0 => (fit::Next::Probe, idle),
                idle => (fit::Next::Car(usize::MAX), idle),
            }
        };
        let onto = match (next, q.queue.cars().last()) {
            (fit::Next::Probe, _) | (_, None) => None,
            (fit::Next::Car(_), Some(last)) => match q.cars.get(&last.id).and_then(CarStage::head) {
                Some(head) => Some(head.to_string()),
                None => return,
            },
        };
        let Some(branch) = core.model.swarms().get(swarm).map(|s| s.plan.integration_branch.clone()) else {
            return;
        };
        let limit = Self::limit(core, &iv, q);
        let job = self.next_job + 1;
        let Some(q) = self.by_swarm.get_mut(swarm) else { return };
        let formed = match next {
            fit::Next::Probe => q.queue.form_probe(job, limit, ways),
            fit::Next::Car(n) => q.queue.form_sized(job, limit, n),
        };
        let Some(items) = formed.map(<[TaskKey]>::to_vec) else { return };
        self.next_job = job;
        let mut jobs = Vec::with_capacity(items.len());
        let mut gone = Vec::new();
        for key in &items {
            q.queued_at.remove(key);
            let number = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
            let still_merging = core.model.tasks().get(key).is_some_and(|t| t.state() == TaskState::Merging);
            match merge_job(core.model, key, number, q.recovering.contains(key)) {
                Some(job) if still_merging => jobs.push(job),
                _ => gone.push(key.clone()),
            }
        }
        if !gone.is_empty() {
            // Cancelled or otherwise decided meanwhile: the car changes,
            // so it is formed afresh next tick.
            for key in &gone {
                q.queue.remove(key);
                q.sync();
                q.recovering.remove(key);
            }
            return;
        }
        announce(core, swarm, q, job, &items, next == fit::Next::Probe, &onto);
        q.cars.insert(job, CarStage::Speculating);
        merger.queue(QueueRequest::Speculate { swarm: swarm.clone(), job, branch, onto, jobs });
    }

    /// The merger's answer to a speculation or a landing. What it decided
    /// is returned: the dispatcher applies those merge results, then hands
    /// the culprits back.
    pub fn on_report(&mut self, core: &mut Core, report: QueueReport) -> Decided {
        match report {
            QueueReport::Speculated { swarm, job, base, head, chained, decided, error } => {
                let spec = Speculated { job, base, head, chained, decided, error };
                self.speculated(core, &swarm, spec)
            }
            QueueReport::Advanced { swarm, job, head, error } => self.advanced(core, swarm, job, head, error),
        }
    }

    fn speculated(&mut self, core: &mut Core, swarm: &SwarmId, spec: Speculated) -> Decided {
        let Some(q) = self.by_swarm.get_mut(swarm) else { return Decided::default() };
        if !matches!(q.cars.get(&spec.job), Some(CarStage::Speculating)) {
            return Decided::default(); // taken off the train meanwhile
        }
        let mut decided = Decided::default();
        if let Some(error) = &spec.error {
            set_back(core, swarm, q, spec.job, format!("speculative merge failed: {error}"));
        }
        // Conflicts, refusals and merges found landed are decided as on the
        // direct path; the rest go on a new car next tick.
        for r in &spec.decided {
            let settled = q.queue.remove(&r.task);
            q.sync();
            q.recovering.remove(&r.task);
            decided.culprits.extend(settled.culprits);
        }
        if spec.error.is_some() || !spec.decided.is_empty() || spec.chained.is_empty() {
            q.queue.drop_car(spec.job);
            q.sync();
            decided.merged = spec.decided;
            return decided;
        }
        if let Some(stage) = q.cars.get_mut(&spec.job) {
            *stage =
                CarStage::Verifying { base: spec.base, head: spec.head, chained: spec.chained, worker: None };
        }
        self.dispatch_verifies(core, swarm);
        decided
    }
}

/// Car `job` could not go on (its speculation or its landing failed, as
/// `why` says): it and the cars behind it go back to the front of the
/// queue, and the next car is formed after a pause, not in a hot loop.
fn set_back(core: &mut Core, swarm: &SwarmId, q: &mut SwarmQueue, job: u64, why: String) {
    let settled = q.queue.drop_car(job);
    q.sync();
    q.retry_at = core.mono_ms() + RETRY_MS;
    let data = serde_json::json!({ "job": job, "dropped": settled.dropped });
    core.fx.event(swarm.as_str(), "", 0, "", "merge_queue.error", why, data);
}

/// The event (and span and gauge) of a car or probe put on its way.
fn announce(
    core: &mut Core,
    swarm: &SwarmId,
    q: &SwarmQueue,
    job: u64,
    items: &[TaskKey],
    probe: bool,
    onto: &Option<String>,
) {
    let tasks: Vec<String> = items.iter().map(|k| k.task.to_string()).collect();
    let ahead = q.queue.cars().len().saturating_sub(usize::from(!probe));
    let _span =
        tracing::info_span!("merge_queue.batch", swarm = %swarm, job, tasks = items.len(), ahead, probe)
            .entered();
    core.metrics.merge_queue_batch_size.set(items.len() as i64);
    let message = if probe {
        format!("probe of {} alone on the head: {}", items.len(), tasks.join(", "))
    } else {
        format!("batch of {} behind {ahead}: {}", items.len(), tasks.join(", "))
    };
    let data = serde_json::json!({ "job": job, "tasks": tasks, "batch_size": q.queue.batch_size(),
        "ahead": ahead, "onto": onto, "probe": probe });
    core.fx.event(swarm.as_str(), "", 0, "", "merge_queue.batch", message, data);
}

/// A speculation's report, less its swarm.
struct Speculated {
    job: u64,
    base: String,
    head: String,
    chained: Vec<Chained>,
    decided: Vec<MergeResult>,
    error: Option<swarm_git::merge::MergeFailure>,
}

/// The figures `fit::car_size` decides from, as the model has them now.
fn fit_of(model: &Model, iv: &IntegrationVerify, q: &SwarmQueue, swarm: &SwarmId, now: u64) -> fit::Fit {
    let idle: Vec<&Worker> = idle_verifiers(model, iv).collect();
    let claimed = q
        .cars
        .values()
        .filter(|c| matches!(c, CarStage::Speculating | CarStage::Verifying { worker: None, .. }))
        .count();
    let unclaimed = idle.len().saturating_sub(claimed);
    // READY tasks an idle verifier could run instead, the most critical
    // first; a bounded look, so that READY tasks no verifier can run (the
    // dedicated case) cost nothing per tick.
    let (mut wanted, mut ready_path) = (0, 0);
    if unclaimed > 0 {
        for key in model.ready().take(unclaimed * 4 + 16) {
            let Some(t) = model.tasks().get(key) else { continue };
            if idle.iter().any(|w| w.satisfies(&t.spec.labels)) {
                wanted += 1;
                ready_path = ready_path.max(model.critical_path(key).unwrap_or(0));
                if wanted == unclaimed {
                    break;
                }
            }
        }
    }
    let size = q.queue.batch_size();
    let waiting = q.queue.waiting().count();
    let mut spare = 0;
    if wanted > 0 && wanted == unclaimed {
        let verify_ms = q.verified_ms.0.checked_div(q.verified_ms.1).unwrap_or(VERIFY_GUESS_MS);
        let car_path = q
            .queue
            .waiting()
            .take(size)
            .flat_map(|k| model.dependents(k))
            .filter_map(|d| model.critical_path(d))
            .max()
            .unwrap_or(0);
        let (work_ms, slots) = remaining_work(model, swarm);
        if fit::can_spare(ready_path, car_path, verify_ms, ready_path.max(car_path), work_ms, slots) {
            spare = wanted;
        }
    }
    let oldest = q.queue.waiting().map(|k| q.queued_at.get(k).copied().unwrap_or(0)).min().unwrap_or(now);
    fit::Fit {
        waiting,
        size,
        free: unclaimed - wanted,
        spare,
        waited_ms: now.saturating_sub(oldest),
        fill_ms: FILL_MS,
        suspects: q.queue.suspects(),
    }
}

/// The swarm's work not done yet (its tasks to run or running, at the
/// weight a task without an estimate has) and the slots it has.
fn remaining_work(model: &Model, swarm: &SwarmId) -> (u64, usize) {
    let left = model.swarms().get(swarm).map_or(0, |s| {
        [TaskState::Pending, TaskState::Ready, TaskState::Running]
            .iter()
            .map(|st| u64::from(s.count(*st)))
            .sum()
    });
    let slots = model.workers().values().filter(|w| w.session.is_some() && !w.draining).count();
    (left.saturating_mul(model.unknown_weight_ms(swarm)), slots)
}
