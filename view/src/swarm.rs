//! A swarm: its state, its branches, its progress and its spending.

use std::collections::BTreeMap;

use serde::Serialize;
use swarm_proto::v1;

use crate::UsageView;
use crate::names::swarm_state;

#[derive(Debug, Serialize)]
pub struct SwarmView {
    pub id: String,
    pub state: String,
    pub base_branch: String,
    pub integration_branch: String,
    pub integration_head: String,
    pub task_count: u32,
    pub tasks_by_state: BTreeMap<String, u32>,
    pub created_at_unix_ms: i64,
    /// When STALLED: why, and the tasks that need the operator.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stalled_reason: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalled_tasks: Vec<String>,
    pub usage: UsageView,
    /// When PAUSED: why.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub paused_reason: String,
    /// The swarm's caps (0: none), the breaker, and its last hour.
    pub budget_usd: f64,
    pub budget_tokens: u64,
    pub max_usd_per_hour: f64,
    pub usd_last_hour: f64,
}

impl From<&v1::Swarm> for SwarmView {
    fn from(s: &v1::Swarm) -> Self {
        SwarmView {
            id: s.id.clone(),
            state: swarm_state(s.state),
            base_branch: s.base_branch.clone(),
            integration_branch: s.integration_branch.clone(),
            integration_head: s.integration_head.clone(),
            task_count: s.task_count,
            tasks_by_state: s.tasks_by_state.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            created_at_unix_ms: s.created_at_unix_ms,
            stalled_reason: s.stalled_reason.clone(),
            stalled_tasks: s.stalled_tasks.clone(),
            usage: UsageView::from(s.usage.as_ref()),
            paused_reason: s.paused_reason.clone(),
            budget_usd: s.budget.as_ref().map(|b| b.usd).unwrap_or_default(),
            budget_tokens: s.budget.as_ref().map(|b| b.tokens).unwrap_or_default(),
            max_usd_per_hour: s.max_usd_per_hour,
            usd_last_hour: s.usd_last_hour,
        }
    }
}
