//! Sidecar sessions: who may claim a worker id, the protocol's sequence
//! numbers, the rate-limited audit of what a peer repeats, and forgetting
//! workers that are gone.
//!
//! Fencing tokens protect against a stale attempt, not against an impostor:
//! they are only as good as the binding between a stream and a worker id.
//! That binding is the resume secret given in Welcome (kept in the
//! sidecar's journal) or, with credentials, the identity the stream proved.
//!
//! `Sessions` is a component: it works on the core and imports no other.
//! What a reconnected sidecar's attempt needs (its Assign again, a cancel,
//! a stop) is the dispatcher's, from what `hello` returns.

use std::sync::atomic::Ordering;

use rand::Rng;
use swarm_core::{AttemptState, TaskKey};

use super::core::Core;
use super::model::messages::{HelloInfo, PackClaim, ReportedAttempt};
use super::model::{Model, Session, Transition, Worker, now_ms};
use super::outbound::{CloseCode, Outbound};
use super::views::ContextView;
use crate::audit::{Aggregator, Hit, Summary};
use crate::error::SchedError;
use swarm_proto::limits::SECRET_HEADER;

/// How often idle, disconnected workers are looked for.
const FORGET_SWEEP_MS: u64 = 1_000;

/// The sessions' memory between turns.
pub(super) struct Sessions {
    next_session_id: u64,
    /// Windows of the rate-limited audit events.
    audit: Aggregator,
    /// Mono ms of the last registry sweep.
    last_sweep_ms: u64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions { next_session_id: 1, audit: Aggregator::default(), last_sweep_ms: 0 }
    }
}

/// A Hello that claimed its worker id and was welcomed.
pub(super) struct Welcomed {
    /// The attempt the worker holds in the model, if any.
    pub current: Option<(TaskKey, u32)>,
    /// Whether the sidecar still holds that attempt.
    pub resumed: bool,
    draining: bool,
}

impl Sessions {
    /// A sidecar's Hello: the worker id is claimed (or refused, and the
    /// stream closed) and the sidecar welcomed. The caller enters the
    /// `sidecar.hello` span, sees to the attempt it holds, then calls
    /// [`connected`]. Long: the claim, the worker's row and the Welcome,
    /// in the protocol's order.
    pub fn hello(&mut self, core: &mut Core, hello: &HelloInfo, session: Session) -> Option<Welcomed> {
        let proven = match may_claim(core.model, hello) {
            Ok(proven) => proven,
            Err(reason) => {
                tracing::warn!(%reason, "hello refused");
                core.metrics.refused_hellos.inc();
                self.audited(
                    core,
                    &hello.worker_id,
                    "hello.refused",
                    None,
                    reason.clone(),
                    serde_json::json!({}),
                );
                core.fx
                    .outbound
                    .push((session, Outbound::Close { code: CloseCode::AlreadyExists, message: reason }));
                return None;
            }
        };
        let now = now_ms();
        if !core.model.workers().contains_key(&hello.worker_id) {
            core.transition(Transition::WorkerAdded(Worker::new(hello.worker_id.clone(), now)));
        }
        core.edit_worker(&hello.worker_id, |worker| {
            // The secret a sidecar proved stays valid, so a Welcome lost with
            // its stream does not lock the sidecar out; any other claim gets a
            // fresh one, which ends every older sidecar's claim.
            if worker.resume_secret.is_empty() || !secrets_match(&hello.resume_secret, &worker.resume_secret)
            {
                worker.resume_secret = new_secret();
            }
            // A sidecar that proved nothing may never receive the Welcome that
            // carries its new secret; it gets work once it speaks after it.
            worker.holds_secret = proven;
            if let Some(p) = &hello.principal {
                worker.principal = p.clone();
            }
            // A new session replaces the old one; dropping its sender ends the
            // old stream.
            worker.session = Some(session.clone());
            worker.host = hello.host.clone();
            worker.labels = hello.labels.clone();
            worker.updated_at = now;
        });
        let worker = core.model.workers().get(&hello.worker_id)?;
        let current = worker.attempt().cloned();
        let last_applied_seq = worker.last_applied_seq;
        let draining = worker.draining;
        let resume_secret = worker.resume_secret.clone();
        let mono = core.mono_ms();
        core.lease_seen.insert(hello.worker_id.clone(), mono);
        // Its labels may be new.
        core.scan.changed();

        let held = hello.attempt_in_hand.as_ref();
        let resumed = match (&current, held) {
            (Some((key, number)), Some(h)) => {
                let token = core.model.attempts().get(&(key.clone(), *number)).map(|a| a.token);
                &h.task == key && h.number == *number && Some(h.token) == token
            }
            _ => false,
        };
        if let Some(h) = held.filter(|_| !resumed) {
            fence_stale_hand(core, &hello.worker_id, h);
        }
        core.fx.outbound.push((
            session,
            Outbound::Welcome {
                session_id: format!("{}-{}", hello.worker_id, self.next_session_id),
                heartbeat_interval_ms: core.timing.heartbeat_interval.as_millis() as u32,
                heartbeat_jitter_ms: core.timing.heartbeat_jitter.as_millis() as u32,
                lease_ttl_ms: core.timing.lease_ttl.as_millis() as u32,
                last_applied_seq,
                attempt_resumed: resumed,
                resume_secret,
            },
        ));
        self.next_session_id += 1;
        Some(Welcomed { current, resumed, draining })
    }

    /// Checks a state-changing report's sequence number against the last
    /// one applied: the next one is applied, an old one is a replay (acked
    /// again, nothing else), and a gap is refused: the stream is closed
    /// with the reason and nothing changes. Returns whether to apply it.
    pub fn admit_seq(&mut self, core: &mut Core, worker_id: &str, session: u64, seq: u64) -> bool {
        let Some(last) = core.model.workers().get(worker_id).map(|w| w.last_applied_seq) else {
            return false;
        };
        if seq <= last {
            core.send(worker_id, Outbound::Ack { seq });
            return false;
        }
        if last.checked_add(1) == Some(seq) {
            return true;
        }
        let expected = last.saturating_add(1);
        let reason = format!(
            "seq: a report must carry sequence number {expected} (the next after {last}) or at most {last} \
             (a replay), got {seq}; nothing was applied"
        );
        tracing::warn!(worker = worker_id, seq, last, "sequence gap; closing the stream");
        let data = serde_json::json!({ "seq": seq, "last_applied": last });
        self.audited(core, worker_id, "report.seq_gap", None, reason.clone(), data);
        if let Some(s) = core.model.workers().get(worker_id).and_then(|w| w.session.clone()) {
            core.fx
                .outbound
                .push((s, Outbound::Close { code: CloseCode::FailedPrecondition, message: reason }));
        }
        disconnected(core, worker_id, session);
        false
    }

    /// Records an event about something a peer can repeat at will, at most
    /// once per client and window, with a summary of the rest.
    pub fn audited(
        &mut self,
        core: &mut Core,
        client: &str,
        kind: &'static str,
        about: Option<(&TaskKey, u32)>,
        message: String,
        data: serde_json::Value,
    ) -> bool {
        let (hit, summary) = self.audit.hit(client, kind, core.mono_ms());
        if let Some(s) = summary {
            audit_summary(core, s);
        }
        if hit == Hit::Suppressed {
            return false;
        }
        match about {
            Some((key, attempt)) => core.fx.task_event(key, attempt, client, kind, message, data),
            None => core.fx.event("", "", 0, client, kind, message, data),
        };
        true
    }

    /// Ends audit windows, and forgets workers that are gone and hold
    /// nothing once `forget_workers_after` has passed (their events stay),
    /// so that a stream of Hellos cannot grow the registry forever.
    pub fn sweep(&mut self, core: &mut Core) {
        let mono = core.mono_ms();
        if mono.saturating_sub(self.last_sweep_ms) < FORGET_SWEEP_MS {
            return;
        }
        self.last_sweep_ms = mono;
        for s in self.audit.expire(mono) {
            audit_summary(core, s);
        }
        let cutoff = now_ms().saturating_sub(core.timing.forget_workers_after.as_millis() as i64);
        let gone: Vec<String> = core
            .model
            .workers()
            .values()
            .filter(|w| w.session.is_none() && w.attempt().is_none() && w.updated_at < cutoff)
            .map(|w| w.id.clone())
            .collect();
        for id in gone {
            core.model.apply(Transition::WorkerForgotten(&id));
            core.lease_seen.remove(&id);
            core.fx.dirty_workers.remove(&id);
            core.fx.batch.forget_worker(&id);
            core.fx.event(
                "",
                "",
                0,
                &id,
                "worker.forgotten",
                format!(
                    "worker {id} forgotten: gone, holding nothing, for longer than {:?}",
                    core.timing.forget_workers_after
                ),
                serde_json::json!({}),
            );
        }
    }
}

/// After the Hello's attempt was seen to: a draining worker is told again,
/// and the connection is recorded.
pub(super) fn connected(core: &mut Core, hello: &HelloInfo, welcomed: &Welcomed) {
    if welcomed.draining {
        core.send(&hello.worker_id, Outbound::Drain { reason: "draining".into() });
    }
    let resumed = welcomed.resumed;
    core.fx.event(
        "",
        "",
        0,
        &hello.worker_id,
        "worker.connected",
        format!("worker {} connected from {} (resumed: {resumed})", hello.worker_id, hello.host),
        serde_json::json!({ "labels": hello.labels, "last_acked_seq": hello.last_acked_seq, "resumed": resumed }),
    );
}

/// Whether this Hello may claim its worker id, and whether it proved
/// the claim. A known id with a live session or an attempt in hand
/// belongs to the sidecar that can prove it: by its resume secret, or
/// by the same credential. An idle, disconnected id may be claimed
/// afresh (a sidecar whose journal was lost must be able to come back).
/// No attempt is ever given to a claim not yet proven (`holds_secret`),
/// so a sidecar that lost its first Welcome finds its id idle.
fn may_claim(model: &Model, hello: &HelloInfo) -> Result<bool, String> {
    let same_identity =
        |w: &Worker| hello.principal.as_deref().is_some_and(|p| !p.is_empty() && p == w.principal);
    let Some(w) = model.workers().get(&hello.worker_id) else {
        return Ok(hello.principal.as_deref().is_some_and(|p| !p.is_empty()));
    };
    if same_identity(w) || secrets_match(&hello.resume_secret, &w.resume_secret) {
        return Ok(true);
    }
    let id = &w.id;
    if w.session.is_some() {
        return Err(format!(
            "worker {id} is connected; another sidecar may take its id over only with its resume secret \
             (kept in that sidecar's journal) or its credential"
        ));
    }
    if let Some((key, number)) = w.attempt() {
        return Err(format!(
            "worker {id} holds {}; until its lease expires only the sidecar with its resume secret \
             or credential may resume it",
            key.attempt(*number)
        ));
    }
    Ok(hello.principal.as_deref().is_some_and(|p| !p.is_empty()))
}

/// The sidecar of `session` spoke after its Welcome, so it keeps the
/// Welcome's resume secret (a sidecar journals it before it sends
/// anything else): from now on it may be given work.
pub(super) fn heard(core: &mut Core, worker_id: &str, session: u64) {
    let Some(w) = core.model.workers().get(worker_id) else { return };
    if w.holds_secret || w.session.as_ref().map(|s| s.id) != Some(session) {
        return;
    }
    core.edit_worker_unstored(worker_id, |w| w.holds_secret = true);
    core.scan.changed();
}

/// A sidecar came back holding an attempt that is no longer current.
fn fence_stale_hand(core: &mut Core, worker: &str, held: &ReportedAttempt) {
    let key = (held.task.clone(), held.number);
    if core.model.attempts().get(&key).is_some_and(|a| a.state == AttemptState::Lost && a.token == held.token)
    {
        core.set_attempt_state(&held.task, held.number, AttemptState::Fenced);
    }
    core.fx.task_event(
        &held.task,
        held.number,
        worker,
        "attempt.fenced",
        format!(
            "{} (token {}) is no longer current; its sidecar was told to drop it",
            held.task.attempt(held.number),
            held.token
        ),
        serde_json::json!({ "token": held.token }),
    );
}

pub(super) fn disconnected(core: &mut Core, worker_id: &str, session: u64) {
    let Some(w) = core.model.workers().get(worker_id) else { return };
    if w.session.as_ref().map(|s| s.id) != Some(session) {
        return; // an older session, already replaced
    }
    let seen = w.session.as_ref().map(|s| s.last_seen.load(Ordering::Relaxed)).unwrap_or(0);
    core.edit_worker(worker_id, |w| {
        w.session = None;
        w.updated_at = now_ms();
    });
    let entry = core.lease_seen.entry(worker_id.to_string()).or_insert(seen);
    *entry = (*entry).max(seen);
    core.fx.event(
        "",
        "",
        0,
        worker_id,
        "worker.disconnected",
        format!("worker {worker_id} disconnected"),
        serde_json::json!({}),
    );
}

fn audit_summary(core: &mut Core, s: Summary) {
    let message = s.message();
    core.fx.event(
        "",
        "",
        0,
        &s.client.clone(),
        "audit.summary",
        message,
        serde_json::json!({ "kind": s.kind, "count": s.suppressed, "window_ms": s.window_ms }),
    );
}

/// What the worker holding `claim`'s attempt may read of its task: the
/// caller must hold that attempt, as for a pack. (Nothing is written.)
pub(super) fn task_context(model: &Model, claim: &PackClaim) -> Result<ContextView, SchedError> {
    authorize_pack(model, claim)?;
    let Some(attempt) = &claim.attempt else {
        return Err(SchedError::InvalidArgument { field: "attempt".into(), rule: "required".into() });
    };
    Ok(ContextView::of(model, &attempt.task))
}

/// May this caller move a pack? (Nothing is written.)
pub(super) fn authorize_pack(model: &Model, claim: &PackClaim) -> Result<(), SchedError> {
    let denied =
        |why: String| Err(SchedError::PermissionDenied(format!("pack for worker {}: {why}", claim.worker)));
    let Some(w) = model.workers().get(&claim.worker) else {
        return denied("no such worker".into());
    };
    if w.session.is_none() {
        // Its sidecar is reconnecting (a controller restart, a failover):
        // worth asking again once its Hello is back, unlike a refusal.
        return Err(SchedError::Unavailable(format!(
            "pack for worker {}: it has no live session yet; retry once it has reconnected",
            claim.worker
        )));
    }
    let same_identity = claim.principal.as_deref().is_some_and(|p| !p.is_empty() && p == w.principal);
    if !same_identity && !secrets_match(&claim.resume_secret, &w.resume_secret) {
        return denied(format!(
            "the caller did not prove it holds the session ({SECRET_HEADER} does not match)"
        ));
    }
    let Some(a) = &claim.attempt else { return Ok(()) };
    let held = w.attempt().is_some_and(|(k, n)| k == &a.task && *n == a.number);
    let live = model
        .attempts()
        .get(&(a.task.clone(), a.number))
        .is_some_and(|x| x.token == a.token && x.state.is_live());
    if held && live {
        Ok(())
    } else {
        denied(format!("{} (token {}) is not its live attempt", a.task.attempt(a.number), a.token))
    }
}

fn new_secret() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares in time independent of where they differ, so a peer cannot
/// find the secret byte by byte. An empty secret matches nothing.
fn secrets_match(presented: &str, expected: &str) -> bool {
    if presented.is_empty() || expected.is_empty() || presented.len() != expected.len() {
        return false;
    }
    presented.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_fresh_and_compared_exactly() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(secrets_match(&a, &a.clone()));
        assert!(!secrets_match(&a, &b));
        assert!(!secrets_match("", ""), "no secret proves nothing");
        assert!(!secrets_match(&a[..31], &a));
    }
}
