//! An attempt at a task: who ran it, on what, how it ended, what its
//! verification tiers said.
//!
//! `AttemptView` is the one read shape of an attempt: the controller's
//! scheduler builds it from its record, `From<AttemptView> for v1::Attempt`
//! puts it on the wire and `From<&v1::Attempt>` reads it back. Its tiers are
//! core's `TierOutcome`, whose JSON is the same as the stored form.

use serde::Serialize;
use swarm_core::TierOutcome;
use swarm_proto::v1;

use crate::UsageView;
use crate::names::{attempt_state, outcome, state_number};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub number: u32,
    pub state: String,
    pub worker: String,
    pub fencing_token: u64,
    pub base_commit: String,
    pub result_commit: String,
    /// How it ended (`SUCCESS`, `CHECKPOINT`, …); empty while it runs.
    pub outcome: String,
    pub exit_code: i32,
    pub summary: String,
    pub error: String,
    pub started_at_unix_ms: i64,
    pub ended_at_unix_ms: i64,
    pub tiers: Vec<TierOutcome>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    pub usage: UsageView,
}

impl From<&v1::Attempt> for AttemptView {
    fn from(a: &v1::Attempt) -> Self {
        AttemptView {
            number: a.number,
            state: attempt_state(a.state),
            worker: a.worker_id.clone(),
            fencing_token: a.fencing_token,
            base_commit: a.base_commit.clone(),
            result_commit: a.result_commit.clone(),
            outcome: outcome(a.outcome),
            exit_code: a.exit_code,
            summary: a.summary.clone(),
            error: a.error.clone(),
            started_at_unix_ms: a.started_at_unix_ms,
            ended_at_unix_ms: a.ended_at_unix_ms,
            tiers: a.tiers.iter().map(TierOutcome::from).collect(),
            agent: a.agent.clone(),
            session_id: a.session_id.clone(),
            usage: UsageView::from(a.usage.as_ref()),
        }
    }
}

impl From<AttemptView> for v1::Attempt {
    fn from(a: AttemptView) -> Self {
        v1::Attempt {
            number: a.number,
            state: state_number(&a.state, "ATTEMPT_STATE_", |n| {
                v1::AttemptState::from_str_name(n).map(|s| s as i32)
            }),
            worker_id: a.worker,
            fencing_token: a.fencing_token,
            base_commit: a.base_commit,
            result_commit: a.result_commit,
            // Empty (none yet) is the wire's unspecified, 0.
            outcome: state_number(&a.outcome, "OUTCOME_", |n| {
                v1::Outcome::from_str_name(n).map(|o| o as i32)
            }),
            exit_code: a.exit_code,
            summary: a.summary,
            error: a.error,
            started_at_unix_ms: a.started_at_unix_ms,
            ended_at_unix_ms: a.ended_at_unix_ms,
            tiers: a.tiers.iter().map(v1::TierResult::from).collect(),
            agent: a.agent,
            session_id: a.session_id,
            usage: Some(v1::Usage::from(&a.usage)),
        }
    }
}

impl AttemptView {
    /// The attempt still holds its task (core's `AttemptState::is_live`):
    /// it is assigned or running.
    pub fn is_live(&self) -> bool {
        matches!(self.state.as_str(), "ASSIGNED" | "RUNNING")
    }

    /// How long it ran, when it has ended.
    pub fn duration_ms(&self) -> Option<u64> {
        (self.started_at_unix_ms > 0 && self.ended_at_unix_ms > self.started_at_unix_ms)
            .then(|| (self.ended_at_unix_ms - self.started_at_unix_ms) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_goes_to_the_wire_and_back_unchanged() {
        let a = v1::Attempt {
            number: 2,
            state: v1::AttemptState::Succeeded as i32,
            worker_id: "w".into(),
            fencing_token: 7,
            outcome: v1::Outcome::Checkpoint as i32,
            tiers: vec![v1::TierResult {
                name: "build".into(),
                passed: true,
                exit_code: -1,
                ..Default::default()
            }],
            agent: "claude".into(),
            usage: Some(v1::Usage { input_tokens: 3, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(v1::Attempt::from(AttemptView::from(&a)), a);
        assert!(!AttemptView::from(&a).is_live());
        let running = v1::Attempt { state: v1::AttemptState::Running as i32, ..Default::default() };
        assert!(AttemptView::from(&running).is_live());
        let none_yet = v1::Attempt { outcome: 0, state: 99, ..a };
        assert_eq!(v1::Attempt::from(AttemptView::from(&none_yet)), none_yet);
    }
}
