//! Rebuilding the scheduler from its store after a (re)start.

use super::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use swarm_core::plan::TaskSpec;
use swarm_core::{AttemptState, Outcome, SwarmId, TaskId, TaskKey, TaskState};
use swarm_git::merge::{OwnedRef, RecordedRef};
use tokio::sync::broadcast;

use super::model::{Attempt, Notes, Swarm, SwarmState, Task, TierOutcome, Worker};
use super::{Effects, Scheduler, Timing, assign};
use crate::error::ControllerError;
use crate::merger::MergerHandle;
use crate::store::{Store, StoreError};

fn corrupt(table: &'static str, key: String, reason: impl Into<String>) -> ControllerError {
    ControllerError::Store(StoreError::Corrupt { table, key, reason: reason.into() })
}

pub fn recover(
    mut store: Store,
    timing: Timing,
    integrator: MergerHandle,
) -> Result<Scheduler, ControllerError> {
    let snap = store.load()?;
    let (events, _) = broadcast::channel(65_536);
    let mut s = Scheduler {
        store,
        timing,
        started: Instant::now(),
        swarms: HashMap::default(),
        tasks: HashMap::default(),
        attempts: HashMap::default(),
        workers: HashMap::default(),
        lease_seen: HashMap::default(),
        ready: BTreeSet::new(),
        ready_seq: HashMap::default(),
        next_ready_seq: 0,
        running: Default::default(),
        dependents: HashMap::default(),
        next_token: 1,
        next_event_id: snap.last_event_id + 1,
        last_committed_event: Arc::new(std::sync::atomic::AtomicU64::new(snap.last_event_id)),
        events,
        integrator,
        next_session_id: 1,
        metrics: Default::default(),
        audit: Default::default(),
        last_sweep_ms: 0,
        scan: super::assign::ScanMemo::new(),
        limits: Default::default(),
        subswarms: Default::default(),
        merge_queues: Default::default(),
        reviews: Default::default(),
        budgets: Default::default(),
    };

    // Each task's spec under the key made from the plan's own ids, so every
    // map shares one copy of them (and a row finds its spec in one lookup).
    let mut specs: HashMap<TaskKey, Arc<TaskSpec>> = HashMap::default();
    for row in snap.swarms {
        let plan = super::subswarm::stored_plan(&row.id, &row.plan)
            .map_err(|e| corrupt("swarms", row.id.clone(), e.to_string()))?;
        let state =
            SwarmState::parse(&row.state).ok_or_else(|| corrupt("swarms", row.id.clone(), "bad state"))?;
        let control = super::budget::SwarmControl::from_json(&row.control)
            .map_err(|e| corrupt("swarms", row.id.clone(), format!("bad control: {e}")))?;
        let tasks = plan.tasks.iter().map(|t| TaskKey::new(plan.swarm.clone(), t.id.clone())).collect();
        for spec in &plan.tasks {
            let key = TaskKey::new(plan.swarm.clone(), spec.id.clone());
            specs.insert(key.clone(), spec.clone());
            for d in &spec.deps {
                s.dependents
                    .entry(TaskKey::new(plan.swarm.clone(), d.clone()))
                    .or_default()
                    .push(key.clone());
            }
        }
        s.swarms.insert(
            plan.swarm.clone(),
            Swarm {
                id: plan.swarm.clone(),
                plan_text: row.plan,
                counts: [0; TaskState::ALL.len()],
                plan,
                state,
                integration_head: row.integration_head,
                created_at: row.created_at,
                tasks,
                stall: None,
                waits_on_operator: Default::default(),
                usage: Default::default(),
                control,
            },
        );
    }

    for row in snap.tasks {
        let label = format!("{}/{}", row.swarm, row.id);
        let key = key_of(&row.swarm, &row.id).ok_or_else(|| corrupt("tasks", label.clone(), "bad id"))?;
        let (key, spec) = specs
            .get_key_value(&key)
            .ok_or_else(|| corrupt("tasks", label.clone(), "task not in its swarm's plan"))?;
        let key = key.clone();
        let state: TaskState = row.state.parse().map_err(|e: String| corrupt("tasks", label.clone(), e))?;
        let notes: Notes =
            serde_json::from_str(&row.notes).map_err(|e| corrupt("tasks", label.clone(), e.to_string()))?;
        s.tasks.insert(
            key.clone(),
            Task {
                key,
                spec: spec.clone(),
                globs: assign::Ownership::compile(spec),
                state,
                attempts: row.attempts,
                retries_used: row.retries_used,
                not_before: row.not_before,
                resume_commit: row.resume_commit,
                result_commit: row.result_commit,
                merge_commit: row.merge_commit,
                reason: row.reason,
                cancel_requested: row.cancel_requested,
                notes: notes.into(),
                updated_at: row.updated_at,
                percent: 0,
                step: String::new(),
            },
        );
    }

    for t in s.tasks.values() {
        if let Some(sw) = s.swarms.get_mut(&t.key.swarm) {
            sw.counts[super::model::state_index(t.state)] += 1;
            if super::model::in_operator_review(t.state, &t.spec) {
                sw.waits_on_operator.insert(t.key.clone());
            }
        }
    }
    // A RUNNING sub-swarm task whose child is STALLED waits on the operator
    // as its child does.
    let stalled_children: Vec<TaskKey> = s
        .swarms
        .values()
        .filter(|sw| sw.state == SwarmState::Stalled)
        .filter_map(|sw| sw.id.parent())
        .filter(|parent| s.tasks.get(parent).is_some_and(|t| t.state == TaskState::Running))
        .collect();
    for parent in stalled_children {
        if let Some(sw) = s.swarms.get_mut(&parent.swarm) {
            sw.waits_on_operator.insert(parent);
        }
    }
    for sw in s.swarms.values_mut() {
        if sw.state == SwarmState::Stalled {
            sw.stall = Some(super::stall::describe(sw, &s.tasks));
        }
    }

    for row in snap.attempts {
        let label = format!("{}/{}#{}", row.swarm, row.task, row.number);
        let key =
            key_of(&row.swarm, &row.task).ok_or_else(|| corrupt("attempts", label.clone(), "bad id"))?;
        let key = specs.get_key_value(&key).map(|(k, _)| k.clone()).unwrap_or(key);
        let state: AttemptState =
            row.state.parse().map_err(|e: String| corrupt("attempts", label.clone(), e))?;
        let tiers: Vec<TierOutcome> = serde_json::from_str(&row.tiers).unwrap_or_default();
        s.next_token = s.next_token.max(row.token + 1);
        let agent = super::model::AgentRecord::from_json(&row.agent);
        if let Some(swarm) = s.swarms.get_mut(&key.swarm) {
            swarm.usage.add(&agent.usage);
        }
        s.attempts.insert(
            (key.clone(), row.number),
            Attempt {
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
                agent,
            },
        );
    }

    for row in snap.workers {
        let labels: BTreeMap<String, String> = serde_json::from_str(&row.labels).unwrap_or_default();
        s.workers.insert(
            row.id.clone(),
            Worker {
                id: row.id,
                host: row.host,
                labels,
                last_applied_seq: row.last_applied_seq,
                draining: row.draining,
                session: None,
                attempt: None,
                updated_at: row.updated_at,
                resume_secret: row.resume_secret,
                principal: row.principal,
                verifying: None,
                holds_secret: false,
            },
        );
    }

    // Live attempts go back to their workers, whose leases start afresh:
    // sidecars get a full TTL to reconnect to the restarted controller.
    let live: Vec<(TaskKey, u32, String)> = s
        .attempts
        .values()
        .filter(|a| a.state.is_live())
        .map(|a| (a.task.clone(), a.number, a.worker.clone()))
        .collect();
    for (key, number, worker) in live {
        if let Some(w) = s.workers.get_mut(&worker) {
            w.attempt = Some((key.clone(), number));
        }
        s.lease_seen.insert(worker, 0);
        if let Some(own) = s.tasks.get(&key).map(|t| t.ownership()) {
            s.running.insert(key, own);
        }
    }

    // Ready queue in plan order; merges that were in flight are submitted
    // again, marked as recovering so the integrator first looks for a merge
    // that landed before the crash.
    let mut fx = Effects::default();
    let order: Vec<TaskKey> = s.swarms.values().flat_map(|sw| sw.tasks.clone()).collect();
    for key in order {
        let Some(t) = s.tasks.get(&key) else { continue };
        match t.state {
            TaskState::Ready => {
                let seq = s.next_ready_seq;
                s.next_ready_seq += 1;
                s.ready.insert((seq, key.clone()));
                s.ready_seq.insert(key, seq);
            }
            TaskState::Merging | TaskState::Succeeded if s.queues_merges(&key.swarm) => {
                s.requeue_recovered(&key)
            }
            TaskState::Merging | TaskState::Succeeded => {
                let number = t.attempts;
                if let Some(job) = s.merge_job(&key, number, true) {
                    fx.merges.push(job);
                }
            }
            _ => {}
        }
    }
    s.requeue_reviews();
    s.recover_subswarms();
    // A controller killed while moving an integration ref leaves its lock
    // behind, and a power loss can leave the ref empty; restore those first
    // (the integrator handles requests in order).
    let owned = s
        .swarms
        .values()
        .filter(|sw| matches!(sw.state, SwarmState::Active | SwarmState::Stalled | SwarmState::Paused))
        .map(|sw| RecordedRef {
            owned: OwnedRef { swarm: sw.id.to_string(), branch: sw.plan.integration_branch.clone() },
            head: sw.integration_head.clone(),
        })
        .collect();
    s.integrator.restore_refs(owned);
    for job in fx.merges {
        s.integrator.submit(job);
    }
    tracing::info!(
        swarms = s.swarms.len(),
        tasks = s.tasks.len(),
        attempts = s.attempts.len(),
        workers = s.workers.len(),
        last_event = s.last_committed_event.load(std::sync::atomic::Ordering::Relaxed),
        "state rebuilt from the store"
    );
    Ok(s)
}

fn key_of(swarm: &str, task: &str) -> Option<TaskKey> {
    Some(TaskKey::new(SwarmId::new(swarm).ok()?, TaskId::new(task).ok()?))
}
