//! The notifications' names and which scheduler event is which.
//!
//! The scheduler's event kinds are its own vocabulary (`task.state`,
//! `task.branch_report`, ...) and change with it; these names are the
//! webhook's contract with receivers, so they say what waits for the
//! operator and stay put when the scheduler's events are reshaped.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::scheduler::{BUDGET_CATEGORY, BY_BREAKER, PERMISSION_CATEGORY};
use crate::store::EventRow;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A worker or agent asked a question, or exited 4: the task waits for an answer.
    TaskQuestion,
    /// An agent's tool call that the plan's policy leaves to the operator.
    TaskPermission,
    /// A task in REVIEW whose plan names the operator as its reviewer.
    TaskReview,
    /// A task's attempt was stopped at its budget.
    TaskBudget,
    SwarmStalled,
    /// Paused by the operator or an agent's usage limit (the breaker has its own name).
    SwarmPaused,
    SwarmCompleted,
    SwarmFailed,
    SwarmBudget,
    /// The burn-rate breaker paused the swarm.
    BreakerTripped,
    /// Its pull request was opened or changed state (draft, open, merged, closed).
    PullRequest,
    /// A push or a forge call failed in a way that needs the operator.
    ForgeError,
    /// A failed check or a review no task could take (none named, or
    /// `ci_retries` spent): the operator decides.
    FeedbackUnrouted,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::TaskQuestion,
        Kind::TaskPermission,
        Kind::TaskReview,
        Kind::TaskBudget,
        Kind::SwarmStalled,
        Kind::SwarmPaused,
        Kind::SwarmCompleted,
        Kind::SwarmFailed,
        Kind::SwarmBudget,
        Kind::BreakerTripped,
        Kind::PullRequest,
        Kind::ForgeError,
        Kind::FeedbackUnrouted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::TaskQuestion => "task.question",
            Kind::TaskPermission => "task.permission",
            Kind::TaskReview => "task.review",
            Kind::TaskBudget => "task.budget",
            Kind::SwarmStalled => "swarm.stalled",
            Kind::SwarmPaused => "swarm.paused",
            Kind::SwarmCompleted => "swarm.completed",
            Kind::SwarmFailed => "swarm.failed",
            Kind::SwarmBudget => "swarm.budget",
            Kind::BreakerTripped => "breaker.tripped",
            Kind::PullRequest => "swarm.pull_request",
            Kind::ForgeError => "swarm.forge_error",
            Kind::FeedbackUnrouted => "swarm.feedback_unrouted",
        }
    }

    fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `--notify-events`: names separated by commas, `all`, or a
/// prefix such as `swarm.*`. The rule broken, when one is.
pub fn parse_filter(list: &str) -> Result<BTreeSet<Kind>, String> {
    let mut kinds = BTreeSet::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "all" || name == "*" {
            kinds.extend(Kind::ALL);
        } else if let Some(prefix) = name.strip_suffix(".*") {
            let matched: Vec<Kind> =
                Kind::ALL.into_iter().filter(|k| k.as_str().split('.').next() == Some(prefix)).collect();
            if matched.is_empty() {
                return Err(format!("{name:?} matches no event; {}", known()));
            }
            kinds.extend(matched);
        } else {
            kinds.insert(Kind::parse(name).ok_or_else(|| format!("unknown event {name:?}; {}", known()))?);
        }
    }
    if kinds.is_empty() {
        return Err(format!("names no event; {}", known()));
    }
    Ok(kinds)
}

fn known() -> String {
    let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
    format!("the events are {} (or `all`, or a prefix such as `swarm.*`)", names.join(", "))
}

/// Which notification a committed event is, if any.
pub fn classify(e: &EventRow) -> Option<Kind> {
    let data = || serde_json::from_str::<Value>(&e.data).unwrap_or(Value::Null);
    let field = |d: &Value, k: &str| d.get(k).and_then(Value::as_str).map(str::to_owned).unwrap_or_default();
    match e.kind.as_str() {
        "task.question" => match field(&data(), "category").as_str() {
            PERMISSION_CATEGORY => Some(Kind::TaskPermission),
            // The breaker's question: `breaker.tripped` already told of it.
            BUDGET_CATEGORY => None,
            _ => Some(Kind::TaskQuestion),
        },
        // Exit 4 parks the task with its question but emits no question
        // event. Every transition is a `task.state`, so the message is
        // looked at before the JSON is parsed.
        "task.state" if e.message.contains("-> ESCALATED") => {
            (field(&data(), "to") == "ESCALATED").then_some(Kind::TaskQuestion)
        }
        "task.branch_report" => {
            let d = data();
            let operator =
                field(&d, "recommendation") == "needs_review" && field(&d, "reviewer") == "operator";
            operator.then_some(Kind::TaskReview)
        }
        "task.budget_reached" => Some(Kind::TaskBudget),
        "swarm.stalled" => Some(Kind::SwarmStalled),
        "swarm.paused" if field(&data(), "by") == BY_BREAKER => Some(Kind::BreakerTripped),
        "swarm.paused" => Some(Kind::SwarmPaused),
        "swarm.state" => match field(&data(), "state").as_str() {
            "COMPLETED" => Some(Kind::SwarmCompleted),
            "FAILED" => Some(Kind::SwarmFailed),
            _ => None,
        },
        "swarm.budget_reached" => Some(Kind::SwarmBudget),
        "swarm.pull_request" => Some(Kind::PullRequest),
        "swarm.forge_error" => Some(Kind::ForgeError),
        "swarm.feedback_unrouted" => Some(Kind::FeedbackUnrouted),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn event(kind: &str, message: &str, data: Value) -> EventRow {
        EventRow {
            swarm: "auth".into(),
            task: "api".into(),
            kind: kind.into(),
            message: message.into(),
            data: data.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn each_waiting_event_has_its_name() {
        let q = |category: &str| event("task.question", "", serde_json::json!({ "category": category }));
        assert_eq!(classify(&q("design")), Some(Kind::TaskQuestion));
        assert_eq!(classify(&q("")), Some(Kind::TaskQuestion));
        assert_eq!(classify(&q("permission")), Some(Kind::TaskPermission));
        assert_eq!(classify(&q("budget")), None, "the breaker's own question");
        let escalated = event(
            "task.state",
            "RUNNING -> ESCALATED: design: which?",
            serde_json::json!({ "from": "RUNNING", "to": "ESCALATED", "reason": "design: which?" }),
        );
        assert_eq!(classify(&escalated), Some(Kind::TaskQuestion));
        let running = event("task.state", "READY -> RUNNING", serde_json::json!({ "to": "RUNNING" }));
        assert_eq!(classify(&running), None);
        let review = |reviewer: &str| {
            event(
                "task.branch_report",
                "",
                serde_json::json!({ "recommendation": "needs_review", "reviewer": reviewer }),
            )
        };
        assert_eq!(classify(&review("operator")), Some(Kind::TaskReview));
        assert_eq!(classify(&review("command")), None, "a reviewer attempt decides, not the operator");
        let paused = |by: &str| event("swarm.paused", "", serde_json::json!({ "by": by }));
        assert_eq!(classify(&paused("operator")), Some(Kind::SwarmPaused));
        assert_eq!(classify(&paused("breaker")), Some(Kind::BreakerTripped));
        let state = |s: &str| event("swarm.state", "", serde_json::json!({ "state": s }));
        assert_eq!(classify(&state("COMPLETED")), Some(Kind::SwarmCompleted));
        assert_eq!(classify(&state("FAILED")), Some(Kind::SwarmFailed));
        assert_eq!(classify(&state("ACTIVE")), None);
        assert_eq!(classify(&event("swarm.stalled", "", Value::Null)), Some(Kind::SwarmStalled));
        assert_eq!(classify(&event("swarm.budget_reached", "", Value::Null)), Some(Kind::SwarmBudget));
        assert_eq!(classify(&event("task.budget_reached", "", Value::Null)), Some(Kind::TaskBudget));
        assert_eq!(classify(&event("task.merged", "", Value::Null)), None);
    }

    #[test]
    fn a_filter_takes_names_all_and_prefixes() {
        let f = parse_filter("task.question, swarm.completed").unwrap();
        assert_eq!(f.into_iter().collect::<Vec<_>>(), vec![Kind::TaskQuestion, Kind::SwarmCompleted]);
        assert_eq!(parse_filter("all").unwrap().len(), Kind::ALL.len());
        let swarm = parse_filter("swarm.*").unwrap();
        assert!(swarm.iter().all(|k| k.as_str().starts_with("swarm.")), "{swarm:?}");
        assert_eq!(
            swarm.len(),
            8,
            "stalled, paused, completed, failed, budget, pull_request, forge_error, feedback_unrouted"
        );
    }

    #[test]
    fn the_forge_events_are_notifications() {
        let data = serde_json::json!({ "number": 7, "url": "https://h/o/r/pull/7", "state": "open" });
        assert_eq!(classify(&event("swarm.pull_request", "opened", data)), Some(Kind::PullRequest));
        assert_eq!(classify(&event("swarm.forge_error", "x", Value::Null)), Some(Kind::ForgeError));
        assert_eq!(
            classify(&event("swarm.feedback_unrouted", "x", Value::Null)),
            Some(Kind::FeedbackUnrouted)
        );
        assert_eq!(classify(&event("swarm.pushed", "x", Value::Null)), None, "a push alone waits for nobody");
    }

    #[test]
    fn a_filter_refuses_what_it_does_not_know() {
        let e = parse_filter("task.question,task.answerd").unwrap_err();
        assert!(e.contains("unknown event \"task.answerd\"") && e.contains("swarm.completed"), "{e}");
        assert!(parse_filter("nothing.*").unwrap_err().contains("matches no event"));
        assert!(parse_filter(" , ").unwrap_err().contains("names no event"));
    }
}
