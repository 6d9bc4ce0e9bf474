//! How a swarm was made, when a planning agent wrote its plan: the goal,
//! the planner's session and what planning cost. Planning is not one of
//! the swarm's attempts, so its cost stays here, apart from the swarm's
//! `usage` (and its budget), and every place that shows both says so.

use serde::Serialize;
use swarm_proto::v1;

use crate::UsageView;

/// Said beside a planned swarm's own cost, which leaves planning out.
pub const PLANNING_EXCLUDED: &str = "its agents only; planning is shown apart";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OriginView {
    pub goal: String,
    pub planner_agent: String,
    pub planner_session: String,
    pub planner_usage: UsageView,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub issue_url: String,
}

impl From<&v1::SwarmOrigin> for OriginView {
    fn from(o: &v1::SwarmOrigin) -> Self {
        // The controller refuses control characters; a terminal is still
        // not handed one from a controller that did not.
        OriginView {
            goal: printable(&o.goal, true),
            planner_agent: printable(&o.planner_agent, false),
            planner_session: printable(&o.planner_session, false),
            planner_usage: UsageView::from(o.planner_usage.as_ref()),
            issue_url: printable(&o.issue_url, false),
        }
    }
}

impl From<OriginView> for v1::SwarmOrigin {
    fn from(o: OriginView) -> Self {
        v1::SwarmOrigin {
            goal: o.goal,
            planner_agent: o.planner_agent,
            planner_session: o.planner_session,
            planner_usage: Some(v1::Usage::from(&o.planner_usage)),
            issue_url: o.issue_url,
        }
    }
}

impl OriginView {
    /// `claude session 5f0c… cost $0.1234 (… in, … out, …)`.
    pub fn planned_by(&self) -> String {
        let mut out =
            if self.planner_agent.is_empty() { "a planner".to_string() } else { self.planner_agent.clone() };
        if !self.planner_session.is_empty() {
            out.push_str(&format!(" session {}", self.planner_session));
        }
        match self.planner_usage.text() {
            cost if cost.is_empty() => out.push_str(" cost $0.00"),
            cost => out.push_str(&format!(" cost {cost}")),
        }
        out
    }

    /// The goal's lines, each after the first indented by `indent`.
    pub fn goal_lines(&self, indent: &str) -> String {
        self.goal.trim_end().lines().collect::<Vec<_>>().join(&format!("\n{indent}"))
    }
}

/// Control characters shown as U+FFFD (newlines and tabs kept in text of
/// several lines).
fn printable(s: &str, lines: bool) -> String {
    s.chars()
        .map(|c| if c.is_control() && !(lines && matches!(c, '\n' | '\t')) { '\u{fffd}' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planner_line_names_agent_session_and_cost_and_escapes_are_defused() {
        let o = OriginView::from(&v1::SwarmOrigin {
            goal: "add a flag\nand docs\x1b[2J".into(),
            planner_agent: "claude".into(),
            planner_session: "s-1".into(),
            planner_usage: Some(v1::Usage {
                input_tokens: 10,
                output_tokens: 2,
                cost_usd: 0.5,
                ..Default::default()
            }),
            issue_url: String::new(),
        });
        assert_eq!(o.goal, "add a flag\nand docs\u{fffd}[2J");
        assert_eq!(o.goal_lines("  "), "add a flag\n  and docs\u{fffd}[2J");
        assert_eq!(
            o.planned_by(),
            "claude session s-1 cost $0.5000 (10 in, 2 out, 0 cache read, 0 cache write)"
        );
        let free = OriginView::from(&v1::SwarmOrigin { goal: "g".into(), ..Default::default() });
        assert_eq!(free.planned_by(), "a planner cost $0.00");
    }
}
