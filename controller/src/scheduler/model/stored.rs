//! What the operator and the review gate set on swarms and tasks, kept
//! inside their rows as JSON (a swarm's `control`, a task's notes), so that
//! it survives a restart with no table of its own; and why a swarm is
//! STALLED, which is derived.

use serde::{Deserialize, Serialize};
use swarm_core::plan::{Budget, SwarmBudget};

/// A task's budget as the operator set it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct TaskBudget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// A swarm's budget as the operator set it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct StoredSwarmBudget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_usd_per_hour: Option<f64>,
}

/// A change of budget asked for: `None` leaves a field as it is, `Some(0)`
/// removes that cap.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BudgetChange {
    pub usd: Option<f64>,
    pub tokens: Option<u64>,
    pub max_usd_per_hour: Option<f64>,
}

fn apply_usd(current: Option<f64>, change: Option<f64>) -> Option<f64> {
    match change {
        None => current,
        Some(v) if v <= 0.0 => None,
        Some(v) => Some(v),
    }
}

fn apply_tokens(current: Option<u64>, change: Option<u64>) -> Option<u64> {
    match change {
        None => current,
        Some(0) => None,
        Some(v) => Some(v),
    }
}

impl BudgetChange {
    pub fn task(&self, current: Budget) -> TaskBudget {
        TaskBudget {
            usd: apply_usd(current.usd, self.usd),
            tokens: apply_tokens(current.tokens, self.tokens),
        }
    }

    pub fn swarm(&self, current: SwarmBudget) -> StoredSwarmBudget {
        StoredSwarmBudget {
            usd: apply_usd(current.limit.usd, self.usd),
            tokens: apply_tokens(current.limit.tokens, self.tokens),
            max_usd_per_hour: apply_usd(current.max_usd_per_hour, self.max_usd_per_hour),
        }
    }
}

/// What the operator set on a swarm, stored with its state (JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SwarmControl {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Pause>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<StoredSwarmBudget>,
    /// What the pull request's CI and reviewers said, as the scheduler
    /// took it (the forge component never writes this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<Box<FeedbackState>>,
    /// Where its work went on the forge, as the forge component last
    /// reported it (boxed: most swarms have none, and every swarm carries
    /// the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<Box<ForgeState>>,
}

/// A swarm's branch on its remote and its pull request, as last synced.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ForgeState {
    /// The commit last pushed to the remote branch (empty: none yet).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pushed: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullRecord>,
    /// The last sync that succeeded, unix ms.
    #[serde(default)]
    pub synced_at: i64,
    /// Why the last sync failed (empty: it did not), and when.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    #[serde(default)]
    pub error_at: i64,
    /// When the failed sync is tried again, unix ms; 0 with an error: not
    /// by itself (a refusal waits for the operator).
    #[serde(default)]
    pub retry_at: i64,
    /// The pushed commit's checks as last read (`ci passed, lint failed`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checks: String,
    /// Checks that failed and then passed on a re-run of the same commit,
    /// latest last (at most [`MAX_FLAKY`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaky: Vec<String>,
}

/// The most flaky checks a swarm remembers.
pub const MAX_FLAKY: usize = 20;

/// Feedback taken from the forge: each item once, by the forge's own id,
/// and failed-check rounds bounded by the plan's `ci_retries`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FeedbackState {
    #[serde(default)]
    pub ci_rounds: u32,
    /// The forge's ids of what was taken (`check:<id>@<sha>`, `comment:<id>`).
    #[serde(default)]
    pub seen: std::collections::BTreeSet<String>,
    /// The threads handed to a task (`review-comment:<id>` to `api`): the
    /// only ones its agent may answer.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub threads: std::collections::BTreeMap<String, String>,
    /// Agents' answers waiting to be posted, oldest first (at most
    /// [`MAX_PENDING_REPLIES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replies: Vec<PendingReply>,
}

/// The most answers a swarm holds for the forge; more are refused.
pub const MAX_PENDING_REPLIES: usize = 50;
/// The most answers one attempt may post.
pub const MAX_REPLIES_PER_ATTEMPT: usize = 5;

/// An agent's answer on a pull request thread, until it is posted (then
/// its id is in [`FeedbackState::seen`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PendingReply {
    /// `reply:<task>#<attempt>.<n>`: once posted, never again.
    pub id: String,
    pub task: String,
    pub thread: String,
    pub text: String,
}

/// The pull request a swarm's branch is under review in.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PullRecord {
    pub number: u64,
    pub url: String,
    /// `draft`, `open`, `closed` or `merged`.
    pub state: String,
    /// Once merged: the commit the base branch got.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub merge_commit: String,
}

impl SwarmControl {
    pub fn to_json(&self) -> String {
        if *self == SwarmControl::default() {
            return String::new();
        }
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(s: &str) -> Result<SwarmControl, serde_json::Error> {
        if s.is_empty() { Ok(SwarmControl::default()) } else { serde_json::from_str(s) }
    }
}

/// The question category of the burn-rate breaker's question.
pub const BUDGET_CATEGORY: &str = "budget";

/// The question category of an agent's permission request.
pub const PERMISSION_CATEGORY: &str = "permission";

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Pause {
    pub reason: String,
    #[serde(default)]
    pub by: String,
    /// Running attempts were told to checkpoint.
    #[serde(default)]
    pub stop: bool,
    /// The breaker's question: the task it was asked on, and its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    RequestChanges,
    Reject,
}

impl Decision {
    /// The operator writes `request-changes`, a reviewer's file
    /// `request_changes`; both are accepted everywhere.
    pub fn parse(word: &str) -> Option<Decision> {
        match word.trim().to_ascii_lowercase().as_str() {
            "approve" | "approved" => Some(Decision::Approve),
            "request-changes" | "request_changes" | "changes_requested" => Some(Decision::RequestChanges),
            "reject" | "rejected" => Some(Decision::Reject),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::RequestChanges => "request_changes",
            Decision::Reject => "reject",
        }
    }
}

/// One decision, kept in the task's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewRecord {
    pub decision: Decision,
    #[serde(default)]
    pub message: String,
    /// `operator`, or the reviewer attempt's label.
    pub by: String,
    pub commit: String,
    pub at: i64,
}

/// What the controller remembers of a task's reviews (stored with its
/// notes, so a task in REVIEW survives a restart).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewNotes {
    /// The commit under review; decisions apply to it alone.
    #[serde(default)]
    pub commit: String,
    /// The attempt that made it.
    #[serde(default)]
    pub attempt: u32,
    /// The live reviewer attempt's number; 0 when none runs.
    #[serde(default)]
    pub reviewer: u32,
    /// Reviewer attempts of this commit that failed (crash, timeout, no
    /// decision): spent from the task's retries, like any attempt's.
    #[serde(default)]
    pub reviewer_failures: u32,
    /// Changes requested of the next attempt, cleared by its success.
    #[serde(default)]
    pub requested: Vec<String>,
    #[serde(default)]
    pub history: Vec<ReviewRecord>,
}

/// Why a swarm is STALLED, for GetSwarm, Watch and the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub reason: String,
    /// The tasks that need the operator (retry, answer, cancel), in plan
    /// order; their PENDING dependents are counted in the reason.
    pub tasks: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_is_stored_empty_when_nothing_is_set_and_read_back() {
        assert_eq!(SwarmControl::default().to_json(), "");
        assert_eq!(SwarmControl::from_json("").expect("empty"), SwarmControl::default());
        let c = SwarmControl {
            paused: Some(Pause { reason: "r".into(), ..Default::default() }),
            budget: Some(StoredSwarmBudget { usd: Some(3.0), ..Default::default() }),
            feedback: Some(Box::new(FeedbackState {
                ci_rounds: 1,
                seen: ["check:9@abc".to_string()].into(),
                threads: [("review-comment:4".to_string(), "a".to_string())].into(),
                replies: vec![PendingReply {
                    id: "reply:a#2.1".into(),
                    task: "a".into(),
                    thread: "review-comment:4".into(),
                    text: "done".into(),
                }],
            })),
            forge: Some(Box::new(ForgeState {
                pushed: "a".repeat(40),
                pull: Some(PullRecord {
                    number: 7,
                    url: "https://h/o/r/pull/7".into(),
                    state: "draft".into(),
                    merge_commit: String::new(),
                }),
                synced_at: 5,
                error: String::new(),
                error_at: 0,
                retry_at: 0,
                checks: "ci passed".into(),
                flaky: vec!["lint@abc".into()],
            })),
        };
        assert_eq!(SwarmControl::from_json(&c.to_json()).expect("json"), c);
    }
}
