//! Leases: a worker not heard from for the lease TTL loses its attempt,
//! and the task is READY again after the grace period; a sidecar silent
//! for as long is treated as gone.

use std::sync::atomic::Ordering;

use swarm_core::{AttemptState, TaskKey};

use super::components::Components;
use super::core::Core;
use super::model::{self, Transition, now_ms};
use super::sessions;

/// Takes the attempts of workers whose lease ran out, and drops the
/// streams of sidecars silent for a whole TTL.
pub(super) fn expire(core: &mut Core<'_>, parts: &mut Components) {
    let now = core.mono_ms();
    let ttl = core.timing.lease_ttl.as_millis() as u64;
    let mut expired = Vec::new();
    for (id, w) in core.model.workers() {
        let Some((key, number)) = w.attempt().cloned() else { continue };
        let seen = core.lease_seen.entry(id.clone()).or_insert(now);
        if let Some(s) = &w.session {
            *seen = (*seen).max(s.last_seen.load(Ordering::Relaxed));
        }
        if now.saturating_sub(*seen) > ttl {
            expired.push((id.clone(), key, number));
        }
    }
    for (worker, key, number) in expired {
        lose_attempt(core, parts, &worker, &key, number);
    }
    // A sidecar silent for a whole TTL is treated as gone, with or
    // without an attempt: its stream is dropped (so a live one
    // reconnects and is told what is current) and it gets no new work.
    let silent: Vec<(String, u64)> = core
        .model
        .workers()
        .values()
        .filter_map(|w| w.session.as_ref().map(|s| (w.id.clone(), s)))
        .filter(|(_, s)| now.saturating_sub(s.last_seen.load(Ordering::Relaxed)) > ttl)
        .map(|(id, s)| (id, s.id))
        .collect();
    for (worker, session) in silent {
        sessions::disconnected(core, &worker, session);
    }
}

fn lose_attempt(core: &mut Core<'_>, parts: &mut Components, worker: &str, key: &TaskKey, number: u32) {
    let _span = tracing::warn_span!("lease.expired", task = %key, attempt = number, worker).entered();
    if parts.reviews.lose_reviewer(core, worker, key, number) {
        return;
    }
    core.set_attempt_state(key, number, AttemptState::Lost);
    core.free_worker_of(key, number);
    let grace = core.timing.lost_grace.as_millis() as i64;
    let cancel = core.model.tasks().get(key).is_some_and(|t| t.cancel_requested);
    let edit = |task: &mut model::Task| {
        task.notes.failures.push(format!("attempt {number}: worker {worker} lost (lease expired)"));
        task.not_before = now_ms() + grace;
    };
    core.transition(Transition::Task { key, edit: Box::new(edit) });
    if cancel {
        core.to_cancelled(key, "cancelled by the operator; its worker was lost");
    } else {
        core.to_ready(key, &format!("attempt {number} lost: worker {worker} lease expired"));
    }
}
