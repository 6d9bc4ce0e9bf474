//! A swarm: its state, its branches, its progress and its spending. The
//! controller's scheduler builds `SwarmView`; the `From` pair here is its
//! only wire conversion.

use std::collections::BTreeMap;

use serde::Serialize;
use swarm_proto::v1;

use crate::UsageView;
use crate::names::{state_number, swarm_state};

#[derive(Debug, Clone, PartialEq, Serialize)]
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
    /// With a `[forge]`: the branch pushed and its pull request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forge: Option<ForgeView>,
    /// When a planner wrote its plan: the goal and what planning cost
    /// (apart from `usage`, which is what the swarm's own agents spent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::OriginView>,
}

/// Where a swarm's work went on its remote.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ForgeView {
    pub provider: String,
    pub remote_branch: String,
    /// The commit last pushed (empty: none yet).
    pub pushed: String,
    /// 0: no pull request yet.
    pub pull_number: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pull_url: String,
    /// draft, open, closed or merged.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pull_state: String,
    pub synced_at_unix_ms: i64,
    /// Why the last sync failed (empty: it did not).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// When the last sync failed; on the wire, never in the JSON.
    #[serde(skip)]
    pub error_at_unix_ms: i64,
    /// When a failed sync is tried again; 0 with an error: it waits for you.
    pub retry_at_unix_ms: i64,
    /// The pushed commit's checks as last read.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub checks: String,
    /// Once the pull request merged: the commit its base branch got.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub merge_commit: String,
    /// Checks that failed, then passed on a re-run of the same commit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flaky: Vec<String>,
}

impl ForgeView {
    /// One line for `describe` and the report: the pull request, else the push.
    pub fn line(&self) -> String {
        let mut out = if self.pull_number > 0 {
            format!("#{} {} ({})", self.pull_number, self.pull_url, self.pull_state)
        } else if !self.pushed.is_empty() {
            format!("{} pushed to {}", crate::text::short_commit(&self.pushed), self.remote_branch)
        } else {
            format!("{} → {} (not pushed yet)", self.provider, self.remote_branch)
        };
        if !self.merge_commit.is_empty() {
            out.push_str(&format!(" as {}", crate::text::short_commit(&self.merge_commit)));
        }
        if !self.checks.is_empty() {
            out.push_str(&format!("; checks: {}", self.checks));
        }
        if !self.flaky.is_empty() {
            out.push_str(&format!("; flaky: {}", self.flaky.join(", ")));
        }
        if !self.error.is_empty() {
            let next = match self.retry_at_unix_ms {
                0 => "waits for you".to_string(),
                at => format!("retrying at {}", crate::text::clock(at)),
            };
            out.push_str(&format!("; last error ({next}): {}", self.error));
        }
        out
    }
}

impl From<&v1::Forge> for ForgeView {
    fn from(f: &v1::Forge) -> Self {
        ForgeView {
            provider: f.provider.clone(),
            remote_branch: f.remote_branch.clone(),
            pushed: f.pushed.clone(),
            pull_number: f.pull_number,
            pull_url: f.pull_url.clone(),
            pull_state: f.pull_state.clone(),
            synced_at_unix_ms: f.synced_at_unix_ms,
            error: f.error.clone(),
            error_at_unix_ms: f.error_at_unix_ms,
            retry_at_unix_ms: f.retry_at_unix_ms,
            checks: f.checks.clone(),
            merge_commit: f.merge_commit.clone(),
            flaky: f.flaky.clone(),
        }
    }
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
            forge: s.forge.as_ref().map(ForgeView::from),
            origin: s.origin.as_ref().map(crate::OriginView::from),
        }
    }
}

impl From<ForgeView> for v1::Forge {
    fn from(f: ForgeView) -> Self {
        v1::Forge {
            provider: f.provider,
            remote_branch: f.remote_branch,
            pushed: f.pushed,
            pull_number: f.pull_number,
            pull_url: f.pull_url,
            pull_state: f.pull_state,
            synced_at_unix_ms: f.synced_at_unix_ms,
            error: f.error,
            error_at_unix_ms: f.error_at_unix_ms,
            retry_at_unix_ms: f.retry_at_unix_ms,
            checks: f.checks,
            merge_commit: f.merge_commit,
            flaky: f.flaky,
        }
    }
}

impl From<SwarmView> for v1::Swarm {
    fn from(s: SwarmView) -> Self {
        v1::Swarm {
            state: state_number(&s.state, "SWARM_STATE_", |n| {
                v1::SwarmState::from_str_name(n).map(|s| s as i32)
            }),
            id: s.id,
            base_branch: s.base_branch,
            integration_branch: s.integration_branch,
            integration_head: s.integration_head,
            task_count: s.task_count,
            tasks_by_state: s.tasks_by_state.into_iter().collect(),
            created_at_unix_ms: s.created_at_unix_ms,
            stalled_reason: s.stalled_reason,
            stalled_tasks: s.stalled_tasks,
            usage: Some(v1::Usage::from(&s.usage)),
            paused_reason: s.paused_reason,
            budget: Some(v1::Budget { usd: s.budget_usd, tokens: s.budget_tokens }),
            max_usd_per_hour: s.max_usd_per_hour,
            usd_last_hour: s.usd_last_hour,
            forge: s.forge.map(v1::Forge::from),
            origin: s.origin.map(v1::SwarmOrigin::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swarm_goes_to_the_wire_and_back_unchanged() {
        let s = v1::Swarm {
            id: "app".into(),
            state: v1::SwarmState::Stalled as i32,
            tasks_by_state: [("MERGED".to_string(), 2)].into_iter().collect(),
            task_count: 2,
            stalled_reason: "waits".into(),
            stalled_tasks: vec!["api".into()],
            usage: Some(v1::Usage { output_tokens: 4, ..Default::default() }),
            budget: Some(v1::Budget { usd: 3.0, tokens: 0 }),
            forge: Some(v1::Forge {
                provider: "github".into(),
                error: "x".into(),
                error_at_unix_ms: 8,
                ..Default::default()
            }),
            origin: Some(v1::SwarmOrigin {
                goal: "g".into(),
                planner_usage: Some(v1::Usage::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(v1::Swarm::from(SwarmView::from(&s)), s);
    }
}
