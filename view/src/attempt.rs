//! An attempt at a task: who ran it, on what, how it ended, what its
//! verification tiers said.

use serde::Serialize;
use swarm_proto::v1;

use crate::UsageView;
use crate::names::{attempt_state, outcome};

#[derive(Debug, Serialize)]
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
    pub tiers: Vec<TierView>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    pub usage: UsageView,
}

/// One verification tier's result.
#[derive(Debug, Serialize)]
pub struct TierView {
    pub name: String,
    pub passed: bool,
    pub blocking: bool,
    pub exit_code: i32,
    pub duration_ms: u64,
    pub output_tail: String,
}

impl From<&v1::TierResult> for TierView {
    fn from(t: &v1::TierResult) -> Self {
        TierView {
            name: t.name.clone(),
            passed: t.passed,
            blocking: t.blocking,
            exit_code: t.exit_code,
            duration_ms: t.duration_ms,
            output_tail: t.output_tail.clone(),
        }
    }
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
            tiers: a.tiers.iter().map(TierView::from).collect(),
            agent: a.agent.clone(),
            session_id: a.session_id.clone(),
            usage: UsageView::from(a.usage.as_ref()),
        }
    }
}

impl AttemptView {
    /// How long it ran, when it has ended.
    pub fn duration_ms(&self) -> Option<u64> {
        (self.started_at_unix_ms > 0 && self.ended_at_unix_ms > self.started_at_unix_ms)
            .then(|| (self.ended_at_unix_ms - self.started_at_unix_ms) as u64)
    }
}
