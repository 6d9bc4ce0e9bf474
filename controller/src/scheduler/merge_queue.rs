//! The merge queue of swarms whose plan has `integration_verify`: succeeded
//! tasks wait in MERGING while batches of them are merged speculatively by
//! the merger, verified on a sidecar, and landed with one
//! compare-and-swap per passing batch. The decisions (batches, bisection,
//! culprits, batch size) are `bisect.rs`'s; this module carries them out.
//!
//! Nothing here is stored: a restarted controller puts every MERGING task
//! of such a swarm back in the queue (marked recovering, so the merger
//! first looks for a landing that happened before the crash), and a batch
//! that was being verified is verified again.
//!
//! `Queues` is a component: it works on the core and imports no other.
//! What the merger decided (merged, conflicting or refused tasks) goes back
//! to the dispatcher, which moves those tasks as on the direct path.

use swarm_core::plan::integration::IntegrationVerify;
use swarm_core::{SwarmId, TaskKey, TaskState};
use swarm_git::merge::{Chained, MergeJob, MergeResult, MergeStats, QueueReport, QueueRequest, Verdict};

use super::bisect::{Decision, MergeQueue};
use super::core::Core;
use super::model::{HashMap, HashSet, Model, TierOutcome, Transition, Worker};
use super::outbound::{Outbound, VerifyMergeSpec};
use crate::merger::MergerHandle;

/// A failed speculation (a missing branch, a failed write) is tried again
/// after this, not in a hot loop.
const RETRY_MS: u64 = 1_000;
/// Most characters of failing tier output carried into a culprit's task text.
const MAX_FAILURE_TEXT: usize = 8_000;

/// What the queue of one swarm is doing.
#[derive(Debug, Default)]
pub(super) enum Stage {
    #[default]
    Idle,
    /// The merger is merging the items under verification.
    Speculating { job: u64 },
    /// `head` (the items merged onto `base`) waits for a verifier or its
    /// verdict; `worker` is the verifier and its session.
    Verifying { job: u64, base: String, head: String, chained: Vec<Chained>, worker: Option<(String, u64)> },
    /// The verified `head` is landing; the culprit found in the same
    /// verdict is handed back once it has (so it starts from the new head).
    Landing { job: u64, chained: Vec<Chained>, culprit: Option<TaskKey> },
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
    stage: Stage,
    /// Put back after a restart: the merger first looks for a landing.
    recovering: HashSet<TaskKey>,
    /// The failing tiers' output of the last failed verification: the
    /// culprit it leads to gets it in its task text.
    last_failure: String,
    retry_at: u64,
}

/// Every swarm's queue, and the job ids they share.
#[derive(Debug, Default)]
pub(super) struct Queues {
    by_swarm: HashMap<SwarmId, SwarmQueue>,
    next_job: u64,
}

/// What a queue report decided, for the dispatcher: merge results to apply
/// as the merger's own, then a culprit to hand back.
#[derive(Default)]
pub(super) struct Decided {
    pub merged: Vec<MergeResult>,
    pub culprit: Option<TaskKey>,
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

fn has_verifier(model: &Model, swarm: &SwarmId) -> bool {
    let Some(iv) = integration_of(model, swarm) else { return false };
    model.workers().values().any(|w| w.is_idle() && w.satisfies(&iv.labels))
}

impl Queues {
    fn swarm_queue(&mut self, model: &Model, swarm: &SwarmId) -> Option<&mut SwarmQueue> {
        let max = integration_of(model, swarm)?.max_batch as usize;
        Some(self.by_swarm.entry(swarm.clone()).or_insert_with(|| SwarmQueue {
            queue: MergeQueue::new(max),
            stage: Stage::Idle,
            recovering: HashSet::default(),
            last_failure: String::new(),
            retry_at: 0,
        }))
    }

    /// A succeeded task of a queued swarm enters the queue (MERGING); the
    /// next tick starts a batch if none is under way.
    pub fn enqueue(&mut self, core: &mut Core, key: &TaskKey, number: u32) {
        let Some(q) = self.swarm_queue(core.model, &key.swarm) else { return };
        q.queue.push(key.clone());
        let waiting = q.queue.waiting().count();
        core.set_state(key, TaskState::Merging, &format!("attempt {number} queued for integration verify"));
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

    /// Each turn: start batches, find verifiers, notice lost ones.
    pub fn tick(&mut self, core: &mut Core, merger: &MergerHandle) {
        if self.by_swarm.is_empty() {
            return;
        }
        let now = core.mono_ms();
        let swarms: Vec<SwarmId> = self.by_swarm.keys().cloned().collect();
        for swarm in swarms {
            let free = has_verifier(core.model, &swarm);
            let Some(q) = self.by_swarm.get_mut(&swarm) else { continue };
            match &mut q.stage {
                // A batch is formed when a verifier is free to take it, so
                // everything that queued up meanwhile is verified together.
                Stage::Idle if q.retry_at <= now && !q.queue.is_empty() && free => {
                    self.start_batch(core, merger, &swarm)
                }
                Stage::Verifying { worker: Some((id, session)), job, .. } => {
                    let w = core.model.workers().get(id.as_str());
                    if w.and_then(|w| w.session.as_ref()).map(|s| s.id) != Some(*session) {
                        let (id, job) = (id.clone(), *job);
                        if let Stage::Verifying { worker, .. } = &mut q.stage {
                            *worker = None;
                        }
                        let edit = |w: &mut Worker| {
                            if w.verifying == Some(job) {
                                w.verifying = None;
                            }
                        };
                        core.model.apply(Transition::Worker { id: &id, edit: Box::new(edit) });
                        core.fx.event(
                            swarm.as_str(),
                            "",
                            0,
                            &id,
                            "merge_queue.verifier_lost",
                            format!("verifier {id} lost; verifying elsewhere"),
                            serde_json::json!({ "job": job }),
                        );
                        self.dispatch_verify(core, &swarm);
                    }
                }
                Stage::Verifying { worker: None, .. } => self.dispatch_verify(core, &swarm),
                _ => {}
            }
        }
    }

    /// Sends the items under verification (a fresh batch or the next half
    /// of a bisection) to the merger to be merged in memory.
    fn start_batch(&mut self, core: &mut Core, merger: &MergerHandle, swarm: &SwarmId) {
        let Some(q) = self.by_swarm.get_mut(swarm) else { return };
        let Some(items) = q.queue.next().map(<[TaskKey]>::to_vec) else { return };
        let bisecting = q.queue.is_bisecting();
        let size = q.queue.batch_size();
        let recovering = q.recovering.clone();
        let mut jobs = Vec::with_capacity(items.len());
        let mut gone = Vec::new();
        for key in &items {
            let number = core.model.tasks().get(key).map(|t| t.attempts).unwrap_or(0);
            let still_merging = core.model.tasks().get(key).is_some_and(|t| t.state() == TaskState::Merging);
            match merge_job(core.model, key, number, recovering.contains(key)) {
                Some(job) if still_merging => jobs.push(job),
                _ => gone.push(key.clone()),
            }
        }
        if !gone.is_empty() {
            // Cancelled or otherwise decided meanwhile: the batch changes,
            // so it is formed afresh next tick.
            if let Some(q) = self.by_swarm.get_mut(swarm) {
                for key in &gone {
                    q.queue.remove(key);
                    q.recovering.remove(key);
                }
            }
            return;
        }
        self.next_job += 1;
        let job = self.next_job;
        let Some(branch) = core.model.swarms().get(swarm).map(|s| s.plan.integration_branch.clone()) else {
            return;
        };
        let tasks: Vec<String> = items.iter().map(|k| k.task.to_string()).collect();
        let (kind, what) =
            if bisecting { ("merge_queue.bisect", "bisecting") } else { ("merge_queue.batch", "batch") };
        let _span =
            tracing::info_span!("merge_queue.batch", swarm = %swarm, job, tasks = items.len(), bisecting)
                .entered();
        core.metrics.merge_queue_batch_size.set(items.len() as i64);
        core.fx.event(
            swarm.as_str(),
            "",
            0,
            "",
            kind,
            format!("{what} of {}: {}", items.len(), tasks.join(", ")),
            serde_json::json!({ "job": job, "tasks": tasks, "batch_size": size }),
        );
        if let Some(q) = self.by_swarm.get_mut(swarm) {
            q.stage = Stage::Speculating { job };
        }
        merger.queue(QueueRequest::Speculate { swarm: swarm.clone(), job, branch, jobs });
    }

    /// Picks an idle sidecar with the plan's verifier labels and sends it
    /// the merged commit; without one, the next tick tries again.
    fn dispatch_verify(&mut self, core: &mut Core, swarm: &SwarmId) {
        let Some(iv) = integration_of(core.model, swarm) else { return };
        let Some(Stage::Verifying { job, head, chained, worker: None, .. }) =
            self.by_swarm.get(swarm).map(|q| &q.stage)
        else {
            return;
        };
        let (job, head) = (*job, head.clone());
        let attempts: Vec<String> = chained.iter().map(|c| c.task.attempt(c.attempt).to_string()).collect();
        let keys: Vec<TaskKey> = chained.iter().map(|c| c.task.clone()).collect();
        let mut idle: Vec<&str> = core
            .model
            .workers()
            .values()
            .filter(|w| w.is_idle() && w.satisfies(&iv.labels))
            .map(|w| w.id.as_str())
            .collect();
        idle.sort();
        let Some(worker) = idle.first().map(|w| w.to_string()) else { return };
        let Some(session) = core.model.workers().get(&worker).and_then(|w| w.session.as_ref()).map(|s| s.id)
        else {
            return;
        };
        core.edit_worker_unstored(&worker, |w| w.verifying = Some(job));
        if let Some(Stage::Verifying { worker: w, .. }) = self.by_swarm.get_mut(swarm).map(|q| &mut q.stage) {
            *w = Some((worker.clone(), session));
        }
        let _span =
            tracing::info_span!("merge_queue.verify", swarm = %swarm, job, worker = %worker).entered();
        core.metrics.merge_queue_verifications.inc();
        // The reason is what `get tasks` and the report show of the queue.
        let reason = format!(
            "integration verify: {} task(s) merged at {} on {worker}",
            keys.len(),
            &head[..head.len().min(12)]
        );
        for key in &keys {
            core.set_state(key, TaskState::Merging, &reason);
        }
        core.fx.event(
            swarm.as_str(),
            "",
            0,
            &worker,
            "merge_queue.verifying",
            format!("verifying {} on {worker}", &head[..head.len().min(12)]),
            serde_json::json!({ "job": job, "commit": head, "attempts": attempts }),
        );
        let message = Outbound::VerifyMerge(Box::new(VerifyMergeSpec {
            job,
            swarm: swarm.to_string(),
            commit: head,
            tiers: iv.tiers.clone(),
            attempts,
            traceparent: String::new(),
            sandbox: iv.sandbox.clone(),
        }));
        core.send(&worker, message);
    }

    /// The merger's answer to a speculation or a landing. What it decided
    /// is returned: the dispatcher applies those merge results, then hands
    /// the culprit back.
    pub fn on_report(&mut self, core: &mut Core, report: QueueReport) -> Decided {
        match report {
            QueueReport::Speculated { swarm, job, base, head, chained, decided, error } => {
                let now = core.mono_ms();
                let Some(q) = self.by_swarm.get_mut(&swarm) else { return Decided::default() };
                if !matches!(q.stage, Stage::Speculating { job: j } if j == job) {
                    return Decided::default();
                }
                q.stage = Stage::Idle;
                for r in &decided {
                    q.queue.remove(&r.task);
                    q.recovering.remove(&r.task);
                }
                if let Some(error) = error {
                    q.retry_at = now + RETRY_MS;
                    core.fx.event(
                        swarm.as_str(),
                        "",
                        0,
                        "",
                        "merge_queue.error",
                        format!("speculative merge failed: {error}"),
                        serde_json::json!({ "job": job }),
                    );
                }
                // Conflicts, refusals and merges found landed are decided as
                // on the direct path; the rest form a new batch next tick.
                if !decided.is_empty() || chained.is_empty() {
                    return Decided { merged: decided, culprit: None };
                }
                if let Some(q) = self.by_swarm.get_mut(&swarm) {
                    q.stage = Stage::Verifying { job, base, head, chained, worker: None };
                }
                self.dispatch_verify(core, &swarm);
                Decided::default()
            }
            QueueReport::Advanced { swarm, job, head, error } => self.advanced(core, swarm, job, head, error),
        }
    }

    /// The merger's answer to a landing: the batch's merge results, and the
    /// culprit found with it; or the batch back in the queue.
    fn advanced(
        &mut self,
        core: &mut Core,
        swarm: SwarmId,
        job: u64,
        head: String,
        error: Option<swarm_git::MergeError>,
    ) -> Decided {
        let now = core.mono_ms();
        let Some(q) = self.by_swarm.get_mut(&swarm) else { return Decided::default() };
        let Stage::Landing { job: j, .. } = &q.stage else { return Decided::default() };
        if *j != job {
            return Decided::default();
        }
        let Stage::Landing { chained, culprit, .. } = std::mem::take(&mut q.stage) else {
            return Decided::default();
        };
        let mut merged = Vec::new();
        if let Some(error) = error {
            // The ref moved or is locked: verify these again on the
            // head as it is now.
            q.queue.requeue_front(chained.iter().map(|c| c.task.clone()).collect());
            q.retry_at = now + RETRY_MS;
            core.fx.event(
                swarm.as_str(),
                "",
                0,
                "",
                "merge_queue.error",
                format!("verified batch did not land: {error}"),
                serde_json::json!({ "job": job }),
            );
        } else {
            let tasks: Vec<String> = chained.iter().map(|c| c.task.task.to_string()).collect();
            core.fx.event(
                swarm.as_str(),
                "",
                0,
                "",
                "merge_queue.landed",
                format!("landed {} verified: {}", chained.len(), tasks.join(", ")),
                serde_json::json!({ "job": job, "head": head, "tasks": tasks }),
            );
            for c in chained {
                q.recovering.remove(&c.task);
                merged.push(MergeResult {
                    task: c.task,
                    attempt: c.attempt,
                    verdict: Verdict::Merged {
                        head: head.clone(),
                        stats: MergeStats::Verified {
                            result: c.merge_commit.clone(),
                            files_changed: c.files_changed,
                            job,
                        },
                        merge_commit: c.merge_commit,
                    },
                    ownership_warning: Vec::new(),
                    lock_removed: None,
                });
            }
        }
        Decided { merged, culprit }
    }

    /// A sidecar's verdict on a speculative merge. Long: its checks, its
    /// event and the landing or the culprit read in the order they happen.
    pub fn on_verified(
        &mut self,
        core: &mut Core,
        merger: &MergerHandle,
        worker_id: &str,
        r: VerifiedReport,
    ) {
        if core.model.workers().get(worker_id).is_some_and(|w| w.verifying == Some(r.job)) {
            core.edit_worker_unstored(worker_id, |w| w.verifying = None);
            core.scan.changed();
        }
        let found = self.by_swarm.iter().find_map(|(swarm, q)| match &q.stage {
            Stage::Verifying { job, head, worker: Some((w, _)), .. }
                if *job == r.job && w == worker_id && *head == r.commit =>
            {
                Some(swarm.clone())
            }
            _ => None,
        });
        let Some(swarm) = found else { return }; // late or unknown: the verdict is not wanted
        let _span = tracing::info_span!("merge_queue.verdict", swarm = %swarm, job = r.job, worker = worker_id, passed = r.passed).entered();
        if !r.error.is_empty() {
            if let Some(Stage::Verifying { worker, .. }) = self.by_swarm.get_mut(&swarm).map(|q| &mut q.stage)
            {
                *worker = None;
            }
            core.fx.event(
                swarm.as_str(),
                "",
                0,
                worker_id,
                "merge_queue.verifier_error",
                format!("{worker_id} could not verify: {}", r.error),
                serde_json::json!({ "job": r.job }),
            );
            return; // the next tick sends it to a verifier again
        }
        let Some(q) = self.by_swarm.get_mut(&swarm) else { return };
        let Stage::Verifying { base, head, chained, .. } = std::mem::take(&mut q.stage) else { return };
        let tasks: Vec<String> = chained.iter().map(|c| c.task.task.to_string()).collect();
        if !r.passed {
            q.last_failure = failure_text(&r.tiers);
        }
        let decisions = q.queue.verdict(r.passed);
        let size = q.queue.batch_size();
        let (kind, what) =
            if r.passed { ("merge_queue.passed", "passed") } else { ("merge_queue.failed", "failed") };
        core.fx.event(
            swarm.as_str(),
            "",
            0,
            worker_id,
            kind,
            format!("integration verify {what} for {}", tasks.join(", ")),
            serde_json::json!({ "job": r.job, "commit": head, "tasks": tasks, "next_batch_size": size,
                "tiers": r.tiers.iter().map(|t| serde_json::json!({ "name": t.name, "passed": t.passed, "exit_code": t.exit_code })).collect::<Vec<_>>() }),
        );
        let mut land = None;
        let mut culprit = None;
        for d in decisions {
            match d {
                Decision::Land(items) => land = Some(items),
                Decision::Culprit(key) => culprit = Some(key),
            }
        }
        match land {
            Some(items) => {
                let Some(branch) = core.model.swarms().get(&swarm).map(|s| s.plan.integration_branch.clone())
                else {
                    return;
                };
                debug_assert_eq!(items.len(), chained.len());
                let count = chained.len();
                if let Some(q) = self.by_swarm.get_mut(&swarm) {
                    q.stage = Stage::Landing { job: r.job, chained, culprit };
                }
                merger.queue(QueueRequest::Advance { swarm, job: r.job, branch, base, head, count });
            }
            None => {
                if let Some(key) = culprit {
                    self.return_culprit(core, &key);
                }
            }
        }
    }

    /// The culprit of a failed verification goes back to its owner, with
    /// the failing tiers' output, as a conflict does.
    pub fn return_culprit(&mut self, core: &mut Core, key: &TaskKey) {
        let failure = self.by_swarm.get_mut(&key.swarm).map(|q| {
            q.recovering.remove(key);
            q.last_failure.clone()
        });
        let Some(t) = core.model.tasks().get(key) else { return };
        if t.state() != TaskState::Merging {
            return;
        }
        let number = t.attempts;
        let (commit, branch) = (
            t.result_commit.clone(),
            core.model
                .swarms()
                .get(&key.swarm)
                .map(|s| s.plan.integration_branch.clone())
                .unwrap_or_default(),
        );
        let failure = failure.unwrap_or_default();
        let description = format!(
            "Your previous result (commit {commit}) passed its own verification, but the integration \
             branch {branch} with it merged fails the plan's integration verify, and bisection found \
             your change to be the cause (another task's change may have landed first, e.g. a rename).\n\
             This attempt starts from the new integration head; make your change work with it.\n\n\
             Failing integration verify output:\n\n```\n{failure}\n```\n"
        );
        let _span = tracing::info_span!("merge_queue.culprit", swarm = %key.swarm, task = %key, attempt = %key.attempt(number)).entered();
        core.fx.task_event(
            key,
            number,
            "",
            "merge_queue.culprit",
            "integration verify fails with this task's change".to_string(),
            serde_json::json!({ "commit": commit, "output": failure }),
        );
        core.edit_task(key, |t| {
            t.notes.conflict = Some(description);
            t.resume_commit.clear();
        });
        // Unlike a textual conflict, a culprit spends a retry: a change that
        // keeps breaking the merged tree must not loop through the queue
        // forever.
        core.fail_or_retry(key, number, "integration verify failed with this change");
    }
}

/// The failing blocking tiers' output, bounded.
fn failure_text(tiers: &[TierOutcome]) -> String {
    let mut out = String::new();
    for t in tiers.iter().filter(|t| !t.passed) {
        out.push_str(&format!("[{}] exit {}\n{}\n", t.name, t.exit_code, t.output_tail.trim_end()));
    }
    if out.len() > MAX_FAILURE_TEXT {
        let mut cut = MAX_FAILURE_TEXT;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}
