//! Verifying the train's cars: each merged commit goes to an idle sidecar
//! with the verifier labels, several at once; a lost verifier's car goes
//! to another; a verdict is taken only from the verifier of that car and
//! commit.

use swarm_core::{SwarmId, TaskKey};

use super::super::core::Core;
use super::super::model::{Transition, Worker};
use super::super::outbound::{Outbound, VerifyMergeSpec};
use super::land::failure_text;
use super::{CarStage, Queues, VerifiedReport, idle_verifiers, integration_of};
use crate::merger::MergerHandle;

impl Queues {
    /// A car whose verifier's session ended is verified elsewhere.
    pub(super) fn notice_lost_verifiers(&mut self, core: &mut Core, swarm: &SwarmId) {
        let Some(q) = self.by_swarm.get_mut(swarm) else { return };
        let mut lost = Vec::new();
        for (job, car) in q.cars.iter_mut() {
            let CarStage::Verifying { worker: worker @ Some(_), .. } = car else { continue };
            let Some((id, session)) = worker.clone() else { continue };
            let w = core.model.workers().get(id.as_str());
            if w.and_then(|w| w.session.as_ref()).map(|s| s.id) != Some(session) {
                *worker = None;
                lost.push((*job, id));
            }
        }
        for (job, id) in lost {
            let edit = move |w: &mut Worker| {
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
        }
    }

    /// Hands each probe and car waiting for a verifier to an idle sidecar
    /// with the plan's verifier labels, probes first (a culprit found goes
    /// back to its owner sooner), then the front car first; the rest wait
    /// for the next tick.
    pub(super) fn dispatch_verifies(&mut self, core: &mut Core, swarm: &SwarmId) {
        let Some(iv) = integration_of(core.model, swarm) else { return };
        let Some(q) = self.by_swarm.get(swarm) else { return };
        let probes = q.queue.probes().iter().map(|p| p.id);
        let waiting: Vec<u64> = probes
            .chain(q.queue.cars().iter().map(|c| c.id))
            .filter(|id| matches!(q.cars.get(id), Some(CarStage::Verifying { worker: None, .. })))
            .collect();
        for job in waiting {
            let mut idle: Vec<(&str, u64)> = idle_verifiers(core.model, &iv)
                .filter_map(|w| Some((w.id.as_str(), w.session.as_ref()?.id)))
                .collect();
            idle.sort();
            let Some((worker, session)) = idle.first().map(|(w, s)| (w.to_string(), *s)) else { return };
            self.send_verify(core, swarm, job, worker, session, &iv);
        }
    }

    fn send_verify(
        &mut self,
        core: &mut Core,
        swarm: &SwarmId,
        job: u64,
        worker: String,
        session: u64,
        iv: &swarm_core::plan::integration::IntegrationVerify,
    ) {
        let Some(q) = self.by_swarm.get_mut(swarm) else { return };
        let Some(CarStage::Verifying { head, chained, worker: w, .. }) = q.cars.get_mut(&job) else { return };
        *w = Some((worker.clone(), session));
        let head = head.clone();
        q.verify_sent.insert(job, core.mono_ms());
        let attempts: Vec<String> = chained.iter().map(|c| c.task.attempt(c.attempt).to_string()).collect();
        let keys: Vec<TaskKey> = chained.iter().map(|c| c.task.clone()).collect();
        core.edit_worker_unstored(&worker, |w| w.verifying = Some(job));
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
            core.to_merging(key, &reason);
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

    /// A sidecar's verdict on a car. Long: its checks, its event and what
    /// the verdict settles read in the order they happen.
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
        let found = self.by_swarm.iter().find_map(|(swarm, q)| match q.cars.get(&r.job) {
            Some(CarStage::Verifying { head, worker: Some((w, _)), .. })
                if w == worker_id && *head == r.commit =>
            {
                Some(swarm.clone())
            }
            _ => None,
        });
        let Some(swarm) = found else { return }; // late, or its car left the train
        let _span = tracing::info_span!("merge_queue.verdict", swarm = %swarm, job = r.job, worker = worker_id, passed = r.passed).entered();
        let Some(q) = self.by_swarm.get_mut(&swarm) else { return };
        if !r.error.is_empty() {
            if let Some(CarStage::Verifying { worker, .. }) = q.cars.get_mut(&r.job) {
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
        let Some(CarStage::Verifying { base, head, chained, .. }) = q.cars.remove(&r.job) else { return };
        if let Some(sent) = q.verify_sent.remove(&r.job) {
            let ms = core.mono_ms().saturating_sub(sent);
            q.verified_ms = (q.verified_ms.0.saturating_add(ms), q.verified_ms.1 + 1);
        }
        let tasks: Vec<String> = chained.iter().map(|c| c.task.task.to_string()).collect();
        if !r.passed {
            let failure = failure_text(&r.tiers);
            for c in &chained {
                q.failures.insert(c.task.clone(), failure.clone());
            }
        }
        q.cars.insert(r.job, CarStage::Verified { base, head: head.clone(), chained });
        // A probe that passed may land as it is (then it is a car).
        let probe = q.queue.probes().iter().any(|p| p.id == r.job);
        let settled =
            if probe { q.queue.probe_verdict(r.job, r.passed) } else { q.queue.verdict(r.job, r.passed) };
        q.sync();
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
                "dropped": settled.dropped, "probe": probe,
                "tiers": r.tiers.iter().map(|t| serde_json::json!({ "name": t.name, "passed": t.passed, "exit_code": t.exit_code })).collect::<Vec<_>>() }),
        );
        for key in settled.culprits {
            self.return_culprit(core, &key);
        }
        self.try_land(core, merger, &swarm);
    }
}
