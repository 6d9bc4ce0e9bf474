//! Agent usage limits. An agent that hits its provider's usage limit ends
//! its attempt RATE_LIMITED with the reset time; every worker sharing that
//! limit (the same `account` label, or the worker itself without one) then
//! gets no agent task until the reset plus jitter, so a fleet on one
//! subscription does not burn attempts against a wall. Plain command tasks
//! are not held back. Limits live in memory: after a controller restart the
//! first agent to hit the limit again reinstates it.

use rand::Rng as _;

use super::core::Effects;
use super::model::{HashMap, Model, Worker, now_ms};
use crate::metrics::Metrics;

/// The worker label naming the agent account a limit belongs to.
pub const ACCOUNT_LABEL: &str = "account";
/// How long to wait when the agent did not say when its limit resets.
pub const UNKNOWN_RESET_WAIT_MS: i64 = 60_000;
/// Most a reset may lie ahead: a bigger claim is a broken or hostile peer.
const MAX_RESET_AHEAD_MS: i64 = 7 * 24 * 3_600_000;
/// Jitter after the reset, so that the workers of one account do not all
/// start again in the same instant.
const RESET_JITTER_MS: i64 = 2_000;

/// The limits in force, by limit key, as unix ms until which they hold.
#[derive(Debug, Default)]
pub(super) struct RateLimits {
    until: HashMap<String, i64>,
}

/// The limit a worker's agents share.
pub fn limit_key(w: &Worker) -> String {
    match w.labels.get(ACCOUNT_LABEL) {
        Some(account) => format!("{ACCOUNT_LABEL}={account}"),
        None => format!("worker={}", w.id),
    }
}

impl RateLimits {
    /// When the limit holding `key` ends, if one holds at `now`.
    pub fn holds(&self, key: &str, now: i64) -> Option<i64> {
        self.until.get(key).copied().filter(|u| *u > now)
    }

    /// Records a limit reported to reset at `reset_ms` (0: unknown) and
    /// returns when assignment may resume.
    fn hit(&mut self, key: &str, reset_ms: u64, now: i64) -> i64 {
        let reset = i64::try_from(reset_ms).unwrap_or(i64::MAX);
        let reset =
            if reset <= now { now + UNKNOWN_RESET_WAIT_MS } else { reset.min(now + MAX_RESET_AHEAD_MS) };
        let until = reset + rand::rng().random_range(0..=RESET_JITTER_MS);
        let entry = self.until.entry(key.to_string()).or_insert(until);
        *entry = (*entry).max(until);
        *entry
    }

    /// Forgets the limits that ended by `now`, returning their keys.
    fn expire(&mut self, now: i64) -> Vec<String> {
        let ended: Vec<String> =
            self.until.iter().filter(|(_, u)| **u <= now).map(|(k, _)| k.clone()).collect();
        for k in &ended {
            self.until.remove(k);
        }
        ended
    }

    pub fn len(&self) -> usize {
        self.until.len()
    }
}

/// The component's side of the turn: it reads the model, records what it
/// did in the turn's effects, and imports no other component.
impl RateLimits {
    /// `worker_id`'s agent hit its usage limit: hold back agent tasks on
    /// every worker sharing it; returns when they may start again.
    pub(super) fn on_rate_limited(
        &mut self,
        model: &Model,
        metrics: &Metrics,
        worker_id: &str,
        reset_ms: u64,
        kind: &str,
        fx: &mut Effects,
    ) -> i64 {
        let now = now_ms();
        let key =
            model.workers().get(worker_id).map(limit_key).unwrap_or_else(|| format!("worker={worker_id}"));
        let until = self.hit(&key, reset_ms, now);
        metrics.rate_limits_active.set(self.len() as i64);
        metrics.rate_limited_attempts.inc();
        let wait_s = (until - now) / 1000;
        tracing::warn!(worker = worker_id, limit = %key, kind, until, "agent usage limit; holding agent tasks back");
        fx.event(
            "",
            "",
            0,
            worker_id,
            "worker.rate_limited",
            format!("usage limit {key} ({}) reached; agent tasks resume in {wait_s} s", or_unknown(kind)),
            serde_json::json!({ "limit": key, "kind": kind, "until_unix_ms": until, "reset_unix_ms": reset_ms }),
        );
        until
    }

    /// Lifts the limits whose time has come (called every tick); whether
    /// any was lifted (idle workers may then find agent tasks again).
    pub(super) fn lift(&mut self, metrics: &Metrics, fx: &mut Effects) -> bool {
        let ended = self.expire(now_ms());
        if ended.is_empty() {
            return false;
        }
        metrics.rate_limits_active.set(self.len() as i64);
        for key in ended {
            tracing::info!(limit = %key, "agent usage limit lifted");
            fx.event(
                "",
                "",
                0,
                "",
                "rate_limit.lifted",
                format!("usage limit {key} lifted; agent tasks resume"),
                serde_json::json!({ "limit": key }),
            );
        }
        true
    }

    /// When `worker` may take agent tasks again, if a limit holds it back.
    pub(super) fn limited_until(&self, worker: &Worker, now: i64) -> Option<i64> {
        if self.len() == 0 {
            return None;
        }
        self.holds(&limit_key(worker), now)
    }
}

fn or_unknown(kind: &str) -> &str {
    if kind.is_empty() { "unknown kind" } else { kind }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_holds_until_its_reset_and_an_unknown_reset_waits_the_default() {
        let mut l = RateLimits::default();
        let now = 1_000_000;
        let until = l.hit("account=a", (now + 5_000) as u64, now);
        assert!((now + 5_000..=now + 5_000 + RESET_JITTER_MS).contains(&until));
        assert_eq!(l.holds("account=a", now), Some(until));
        assert_eq!(l.holds("account=b", now), None);
        let unknown = l.hit("worker=w", 0, now);
        assert!(unknown >= now + UNKNOWN_RESET_WAIT_MS);
        let absurd = l.hit("worker=x", u64::MAX, now);
        assert!(absurd <= now + MAX_RESET_AHEAD_MS + RESET_JITTER_MS);
        assert!(l.expire(now).is_empty());
        assert_eq!(l.expire(until), vec!["account=a".to_string()]);
        assert_eq!(l.holds("account=a", now), None);
    }
}
