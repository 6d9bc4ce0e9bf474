//! Rebuilding the scheduler from its store after a (re)start.

use super::HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

use swarm_core::plan::TaskSpec;
use swarm_core::{AttemptState, Outcome, SwarmId, TaskId, TaskKey, TaskState};
use swarm_git::merge::{OwnedRef, RecordedRef};

use super::components::Components;
use super::core::{Effects, Shared, Timing};
use super::model::{
    AgentRecord, Attempt, Model, Notes, Stall, Swarm, SwarmControl, SwarmState, Task, TierOutcome,
    Transition, Worker,
};
use crate::error::ControllerError;
use crate::merger::MergerHandle;
use crate::store::{AttemptRow, Snapshot, StoreError};

fn corrupt(table: &'static str, key: String, reason: impl Into<String>) -> ControllerError {
    ControllerError::Store(StoreError::Corrupt { table, key, reason: reason.into() })
}

/// The scheduler's core and components as the store's rows leave them.
pub(super) struct Recovered {
    pub shared: Shared,
    pub parts: Components,
}

/// Long: the order of its steps (rows, stalls, leases, requeued merges,
/// reviews and sub-swarms, the refs) is the point, so they stand together.
pub(super) fn recover(
    snap: Snapshot,
    timing: Timing,
    merger: MergerHandle,
) -> Result<Recovered, ControllerError> {
    let last_event = snap.last_event_id;
    let mut s = Recovered { shared: Shared::new(timing), parts: Components::new(merger) };
    load(&mut s.shared.model, snap)?;
    s.shared.next_token = s.shared.model.attempts().values().map(|a| a.token + 1).max().unwrap_or(1);
    // Why a STALLED swarm is stalled is described, not stored.
    let stalled: Vec<(SwarmId, Stall)> = s
        .shared
        .model
        .swarms()
        .values()
        .filter(|sw| sw.state == SwarmState::Stalled)
        .map(|sw| (sw.id.clone(), super::stall::describe(sw, s.shared.model.tasks())))
        .collect();
    for (id, stall) in stalled {
        let edit = |sw: &mut Swarm| sw.stall = Some(stall);
        s.shared.model.apply(Transition::Swarm { id: &id, edit: Box::new(edit) });
    }
    // Live attempts' workers get a full TTL to reconnect to the restarted
    // controller.
    for a in s
        .shared
        .model
        .attempts()
        .values()
        .filter(|a| a.state.is_live() && a.worker != super::subswarm::NO_WORKER)
    {
        s.shared.lease_seen.insert(a.worker.clone(), 0);
    }

    // Ready queue in plan order; merges that were in flight are submitted
    // again, marked as recovering so the merger first looks for a merge
    // that landed before the crash.
    let mut fx = Effects::default();
    let order: Vec<TaskKey> = s.shared.model.swarms().values().flat_map(|sw| sw.tasks.clone()).collect();
    for key in order {
        let Some(t) = s.shared.model.tasks().get(&key) else { continue };
        match t.state() {
            TaskState::Merging | TaskState::Succeeded
                if super::merge_queue::queues_merges(&s.shared.model, &key.swarm) =>
            {
                s.parts.merge_queues.requeue_recovered(&s.shared.model, &key)
            }
            TaskState::Merging | TaskState::Succeeded => {
                let number = t.attempts;
                if let Some(job) = super::merge_queue::merge_job(&s.shared.model, &key, number, true) {
                    fx.merges.push(job);
                }
            }
            _ => {}
        }
    }
    s.parts.reviews.recover(&mut s.shared.model);
    s.parts.subswarms.recover(&s.shared.model, &s.parts.merger);
    // A controller killed while moving an integration ref leaves its lock
    // behind, and a power loss can leave the ref empty; restore those first
    // (the merger handles requests in order).
    let owned = s
        .shared
        .model
        .swarms()
        .values()
        .filter(|sw| sw.state.is_live())
        .map(|sw| RecordedRef {
            owned: OwnedRef { swarm: sw.id.to_string(), branch: sw.plan.integration_branch.clone() },
            head: sw.integration_head.clone(),
        })
        .collect();
    s.parts.merger.restore_refs(owned);
    for job in fx.merges {
        s.parts.merger.submit(job);
    }
    tracing::info!(
        swarms = s.shared.model.swarms().len(),
        tasks = s.shared.model.tasks().len(),
        attempts = s.shared.model.attempts().len(),
        workers = s.shared.model.workers().len(),
        last_event,
        "state rebuilt from the store"
    );
    Ok(s)
}

/// Feeds the stored rows through `Model::apply`: the indexes are built by
/// the transitions that keep them during a run. Workers come before the
/// attempts that bind them, each task in its swarm's plan order (the
/// order of the ready queue).
fn load(model: &mut Model, snap: Snapshot) -> Result<(), ControllerError> {
    // Each task's spec under the key made from the plan's own ids, so every
    // map shares one copy of them (and a row finds its spec in one lookup).
    let mut specs: HashMap<TaskKey, Arc<TaskSpec>> = HashMap::default();
    let mut order: Vec<TaskKey> = Vec::new();
    model.remember_durations(snap.durations.into_iter().map(|r| super::model::Remembered {
        plan: r.plan,
        task: r.task,
        ms: r.ms,
        samples: r.samples,
    }));
    for row in snap.swarms {
        let plan = super::subswarm::stored_plan(&row.id, &row.plan)
            .map_err(|e| corrupt("swarms", row.id.clone(), e.to_string()))?;
        let state =
            SwarmState::parse(&row.state).ok_or_else(|| corrupt("swarms", row.id.clone(), "bad state"))?;
        let control = SwarmControl::from_json(&row.control)
            .map_err(|e| corrupt("swarms", row.id.clone(), format!("bad control: {e}")))?;
        for spec in &plan.tasks {
            let key = TaskKey::new(plan.swarm.clone(), spec.id.clone());
            specs.insert(key.clone(), spec.clone());
            order.push(key);
        }
        let origin = super::model::Origin::from_json(&row.origin)
            .map_err(|e| corrupt("swarms", row.id.clone(), format!("bad origin: {e}")))?;
        let mut swarm = Swarm::new(row.plan, plan, state, row.integration_head, row.created_at, control);
        swarm.origin = origin.map(Arc::new);
        model.apply(Transition::SwarmAdded(swarm));
    }

    let mut tasks: HashMap<TaskKey, Task> = HashMap::default();
    for row in snap.tasks {
        let label = format!("{}/{}", row.swarm, row.id);
        let key = key_of(&row.swarm, &row.id).ok_or_else(|| corrupt("tasks", label.clone(), "bad id"))?;
        let (key, spec) = specs
            .get_key_value(&key)
            .ok_or_else(|| corrupt("tasks", label.clone(), "task not in its swarm's plan"))?;
        let state: TaskState = row.state.parse().map_err(|e: String| corrupt("tasks", label.clone(), e))?;
        let notes: Notes =
            serde_json::from_str(&row.notes).map_err(|e| corrupt("tasks", label.clone(), e.to_string()))?;
        let mut task = Task::new(key.clone(), spec.clone(), state, row.updated_at);
        task.attempts = row.attempts;
        task.retries_used = row.retries_used;
        task.not_before = row.not_before;
        task.resume_commit = row.resume_commit;
        task.result_commit = row.result_commit;
        task.merge_commit = row.merge_commit;
        task.reason = row.reason;
        task.cancel_requested = row.cancel_requested;
        task.notes = notes.into();
        tasks.insert(key.clone(), task);
    }
    for key in &order {
        if let Some(task) = tasks.remove(key) {
            model.apply(Transition::TaskAdded(task));
        }
    }

    for row in snap.workers {
        let labels: BTreeMap<String, String> = serde_json::from_str(&row.labels).unwrap_or_default();
        let mut worker = Worker::new(row.id, row.updated_at);
        worker.host = row.host;
        worker.labels = labels;
        worker.last_applied_seq = row.last_applied_seq;
        worker.draining = row.draining;
        worker.resume_secret = row.resume_secret;
        worker.principal = row.principal;
        model.apply(Transition::WorkerAdded(worker));
    }

    for row in snap.attempts {
        model.apply(Transition::AttemptAdded(attempt_of(row, &specs)?));
    }
    Ok(())
}

/// A stored attempt, under its task's shared key when its plan has it.
fn attempt_of(row: AttemptRow, specs: &HashMap<TaskKey, Arc<TaskSpec>>) -> Result<Attempt, ControllerError> {
    let label = format!("{}/{}#{}", row.swarm, row.task, row.number);
    let key = key_of(&row.swarm, &row.task).ok_or_else(|| corrupt("attempts", label.clone(), "bad id"))?;
    let key = specs.get_key_value(&key).map(|(k, _)| k.clone()).unwrap_or(key);
    let state: AttemptState = row.state.parse().map_err(|e: String| corrupt("attempts", label.clone(), e))?;
    let tiers: Vec<TierOutcome> = serde_json::from_str(&row.tiers).unwrap_or_default();
    Ok(Attempt {
        task: key,
        number: row.number,
        state,
        worker: row.worker,
        token: row.token,
        base_commit: row.base_commit,
        result_commit: row.result_commit,
        outcome: Outcome::parse(&row.outcome),
        exit_code: row.exit_code,
        summary: row.summary,
        error: row.error,
        started_at: row.started_at,
        ended_at: row.ended_at,
        tiers,
        agent: AgentRecord::from_json(&row.agent),
    })
}

fn key_of(swarm: &str, task: &str) -> Option<TaskKey> {
    Some(TaskKey::new(SwarmId::new(swarm).ok()?, TaskId::new(task).ok()?))
}
