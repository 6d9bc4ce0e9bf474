//! How a swarm was made, when a planning agent wrote its plan (`swarmctl
//! run --goal`): the goal, the planner's session and what planning cost.
//! Checked at the API's edge (`api::origin`), stored beside the plan as
//! JSON and never changed afterwards. The planner's usage stays apart from
//! the swarm's: the swarm's budget counts only its own attempts.

use serde::{Deserialize, Serialize};
use swarm_core::Usage;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Origin {
    pub goal: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub planner_agent: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub planner_session: String,
    #[serde(default)]
    pub planner_usage: Usage,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub issue_url: String,
}

impl Origin {
    /// The stored form; empty for none, as a plan written by hand has.
    pub fn to_json(origin: Option<&Origin>) -> String {
        // Serializing plain strings and numbers cannot fail.
        origin.and_then(|o| serde_json::to_string(o).ok()).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<Option<Origin>, serde_json::Error> {
        if text.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(text).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_stored_as_nothing_and_an_origin_reads_back_whole() {
        assert_eq!(Origin::to_json(None), "");
        assert_eq!(Origin::from_json("").expect("empty"), None);
        let o = Origin {
            goal: "add a --json flag\nand document it".into(),
            planner_agent: "claude".into(),
            planner_session: "abc-123".into(),
            planner_usage: Usage { input_tokens: 10, output_tokens: 5, cost_usd: 0.25, ..Usage::default() },
            issue_url: "https://github.com/o/r/issues/7".into(),
        };
        assert_eq!(Origin::from_json(&Origin::to_json(Some(&o))).expect("json"), Some(o));
        assert!(Origin::from_json("{").is_err());
    }
}
