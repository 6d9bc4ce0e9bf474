//! Landing the train's cars in order, and handing culprits back.

use swarm_core::{SwarmId, TaskKey, TaskState};
use swarm_git::merge::{MergeResult, MergeStats, QueueRequest, Verdict};

use super::super::core::Core;
use super::super::model::TierOutcome;
use super::{CarStage, Decided, MAX_FAILURE_TEXT, Queues, set_back};
use crate::merger::MergerHandle;

impl Queues {
    /// Sends the front car to land once it passed, one landing at a time:
    /// the next car's base is the commit this one lands.
    pub(super) fn try_land(&mut self, core: &mut Core, merger: &MergerHandle, swarm: &SwarmId) {
        let Some(q) = self.by_swarm.get_mut(swarm) else { return };
        if q.cars.values().any(|c| matches!(c, CarStage::Landing { .. })) {
            return;
        }
        let Some(branch) = core.model.swarms().get(swarm).map(|s| s.plan.integration_branch.clone()) else {
            return;
        };
        let Some((job, _)) = q.queue.ready_to_land() else { return };
        let Some(CarStage::Verified { base, head, chained }) = q.cars.remove(&job) else {
            // A passed car always has its verified commit: put it back.
            let settled = q.queue.drop_car(job);
            q.sync();
            debug_assert!(settled.dropped.contains(&job));
            return;
        };
        let count = chained.len();
        q.cars.insert(job, CarStage::Landing { chained });
        merger.queue(QueueRequest::Advance { swarm: swarm.clone(), job, branch, base, head, count });
    }

    /// The merger's answer to a landing: the car's merge results (and any
    /// culprit its landing settled); or the train back in the queue.
    pub(super) fn advanced(
        &mut self,
        core: &mut Core,
        swarm: SwarmId,
        job: u64,
        head: String,
        error: Option<swarm_git::MergeError>,
    ) -> Decided {
        let Some(q) = self.by_swarm.get_mut(&swarm) else { return Decided::default() };
        if !matches!(q.cars.get(&job), Some(CarStage::Landing { .. })) {
            return Decided::default();
        }
        let Some(CarStage::Landing { chained }) = q.cars.remove(&job) else { return Decided::default() };
        let mut decided = Decided::default();
        if let Some(error) = error {
            // The ref moved or is locked: verify the whole train again on
            // the head as it is now.
            set_back(core, &swarm, q, job, format!("verified batch did not land: {error}"));
            return decided;
        }
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
        let settled = q.queue.landed(job);
        q.sync();
        for c in chained {
            q.recovering.remove(&c.task);
            q.failures.remove(&c.task);
            decided.merged.push(MergeResult {
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
        decided.culprits = settled.culprits;
        decided
    }

    /// The culprit of a failed verification goes back to its owner, with
    /// the failing tiers' output, as a conflict does.
    pub fn return_culprit(&mut self, core: &mut Core, key: &TaskKey) {
        let failure = self.by_swarm.get_mut(&key.swarm).and_then(|q| {
            q.recovering.remove(key);
            q.failures.remove(key)
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
pub(super) fn failure_text(tiers: &[TierOutcome]) -> String {
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
