//! Each tool's arguments checked, as the Operator API request the tool
//! then sends: an error names the argument and the rule, and nothing is
//! sent. The tools call these, and so does [`check_arguments`], which the
//! fuzzer feeds every tool's arguments through without a session or a
//! controller.

use swarm_core::TaskKey;
use swarm_core::plan::Plan;
use swarm_proto::v1;

use crate::args::{
    CancelArgs, LandArgs, ListTasksArgs, PlanArgs, ReviewArgs, SwarmArgs, TaskArgs, TextArgs, WaitArgs,
};
use crate::wait::{self, Wait};

/// The tools' names, as a model calls them.
pub const TOOL_NAMES: &[&str] = &[
    "check_plan",
    "create_swarm",
    "report",
    "list_tasks",
    "describe_task",
    "answer",
    "review",
    "message",
    "cancel",
    "retry",
    "land",
    "wait",
];

/// Reads `arguments` (a tool call's JSON) as the tool `name`'s input
/// schema says and checks them as the tool does, sending nothing.
pub fn check_arguments(name: &str, arguments: serde_json::Value) -> Result<(), String> {
    fn read<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, String> {
        serde_json::from_value(v).map_err(|e| format!("arguments: {e}"))
    }
    match name {
        "check_plan" => read::<PlanArgs>(arguments).map(|a| drop(a.check())),
        "create_swarm" => read::<PlanArgs>(arguments)?.create().map(drop),
        "report" => read::<SwarmArgs>(arguments)?.swarm_id().map(drop),
        "list_tasks" => read::<ListTasksArgs>(arguments)?.request().map(drop),
        "describe_task" | "retry" => read::<TaskArgs>(arguments)?.task_id().map(drop),
        "answer" => read::<TextArgs>(arguments)?.answer().map(drop),
        "message" => read::<TextArgs>(arguments)?.message().map(drop),
        "review" => read::<ReviewArgs>(arguments)?.request().map(drop),
        "cancel" => read::<CancelArgs>(arguments)?.request().map(drop),
        "land" => read::<LandArgs>(arguments)?.request().map(drop),
        "wait" => Wait::from_args(read::<WaitArgs>(arguments)?).map(drop),
        other => Err(format!("name: no tool {other:?}")),
    }
}

impl PlanArgs {
    /// What `check_plan` answers: the plan's swarm and size, or the field
    /// and rule it breaks.
    pub(crate) fn check(&self) -> serde_json::Value {
        match Plan::parse(&self.plan_toml) {
            Ok(plan) => serde_json::json!({
                "valid": true,
                "swarm": plan.swarm.as_str(),
                "tasks": plan.tasks.len(),
            }),
            Err(e) => serde_json::json!({ "valid": false, "error": { "path": e.path, "rule": e.rule } }),
        }
    }

    pub(crate) fn create(self) -> Result<v1::CreateSwarmRequest, String> {
        Plan::parse(&self.plan_toml).map_err(|e| format!("plan_toml: {e}"))?;
        Ok(v1::CreateSwarmRequest { plan_toml: self.plan_toml })
    }
}

impl SwarmArgs {
    pub(crate) fn swarm_id(&self) -> Result<String, String> {
        swarm_arg("swarm", &self.swarm)
    }
}

impl TaskArgs {
    pub(crate) fn task_id(&self) -> Result<String, String> {
        task_arg("task", &self.task)
    }
}

impl ListTasksArgs {
    /// The swarm and the wanted states (empty: all).
    pub(crate) fn request(&self) -> Result<(String, Vec<i32>), String> {
        let swarm_id = swarm_arg("swarm", &self.swarm)?;
        let states = self
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                wait::task_state(s).map(|s| s as i32).map_err(|rule| format!("states[{i}]: {rule}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((swarm_id, states))
    }
}

impl TextArgs {
    pub(crate) fn answer(self) -> Result<v1::AnswerRequest, String> {
        let task_id = task_arg("task", &self.task)?;
        let text = non_empty("text", self.text)?;
        Ok(v1::AnswerRequest { task_id, text, ..Default::default() })
    }

    pub(crate) fn message(self) -> Result<v1::SendMessageRequest, String> {
        let task_id = task_arg("task", &self.task)?;
        let text = non_empty("text", self.text)?;
        Ok(v1::SendMessageRequest { task_id, text })
    }
}

impl ReviewArgs {
    pub(crate) fn request(self) -> Result<v1::ReviewTaskRequest, String> {
        let task_id = task_arg("task", &self.task)?;
        if !matches!(self.decision.as_str(), "approve" | "request-changes" | "reject") {
            return Err(format!(
                "decision: must be approve, request-changes or reject, not {:?}",
                self.decision
            ));
        }
        if self.decision == "request-changes" && self.message.trim().is_empty() {
            return Err("message: required with request-changes: say what to change".into());
        }
        Ok(v1::ReviewTaskRequest { task_id, decision: self.decision, message: self.message })
    }
}

/// What `cancel` cancels.
pub(crate) enum Cancel {
    Task(v1::CancelTaskRequest),
    Swarm(v1::CancelSwarmRequest),
}

impl CancelArgs {
    pub(crate) fn request(self) -> Result<Cancel, String> {
        match (self.task, self.swarm) {
            (Some(task), None) => {
                let task_id = task_arg("task", &task)?;
                Ok(Cancel::Task(v1::CancelTaskRequest { task_id, reason: self.reason }))
            }
            (None, Some(swarm)) => {
                let swarm_id = swarm_arg("swarm", &swarm)?;
                Ok(Cancel::Swarm(v1::CancelSwarmRequest { swarm_id, reason: self.reason }))
            }
            _ => Err("task, swarm: give exactly one of them".into()),
        }
    }
}

impl LandArgs {
    pub(crate) fn request(self) -> Result<v1::LandRequest, String> {
        let swarm_id = swarm_arg("swarm", &self.swarm)?;
        Ok(v1::LandRequest { swarm_id, target_branch: self.target_branch })
    }
}

fn non_empty(field: &str, text: String) -> Result<String, String> {
    if text.trim().is_empty() { Err(format!("{field}: must not be empty")) } else { Ok(text) }
}

pub(crate) fn task_arg(field: &str, task: &str) -> Result<String, String> {
    TaskKey::parse(task)
        .map(|k| k.to_string())
        .map_err(|rule| format!("{field}: {rule} (expected SWARM/TASK)"))
}

pub(crate) fn swarm_arg(field: &str, swarm: &str) -> Result<String, String> {
    swarm_core::SwarmId::new(swarm).map(|s| s.to_string()).map_err(|rule| format!("{field}: {rule}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_tool_the_server_lists_is_checked_here() {
        let mut listed = crate::tools::listed();
        listed.sort_unstable();
        let mut names: Vec<&str> = TOOL_NAMES.to_vec();
        names.sort_unstable();
        assert_eq!(listed, names);
    }

    #[test]
    fn bad_arguments_are_refused_naming_the_argument_and_the_rule() {
        let huge = format!("name = \"big\"\n# {}\n", "x".repeat(2 << 20));
        let refusals = [
            ("describe_task", json!({"task": "m"}), "task: "),
            ("cancel", json!({"task": "m/a", "swarm": "m"}), "task, swarm: give exactly one"),
            ("cancel", json!({}), "task, swarm: give exactly one"),
            (
                "list_tasks",
                json!({"swarm": "m", "states": ["DONE"]}),
                "states[0]: \"DONE\" is not a task state",
            ),
            ("review", json!({"task": "m/a", "decision": "maybe"}), "decision: must be approve"),
            ("review", json!({"task": "m/a", "decision": "request-changes"}), "message: required"),
            ("answer", json!({"task": "m/a", "text": " "}), "text: must not be empty"),
            ("message", json!({"task": "m/../a", "text": "hi"}), "task: "),
            ("land", json!({"swarm": "M A"}), "swarm: "),
            ("report", json!({"swarm": ""}), "swarm: "),
            ("wait", json!({"task": "m/a", "timeout_secs": 0}), "timeout_secs: must be at least 1"),
            ("wait", json!({"swarm": "m", "timeout_secs": 7200}), "timeout_secs: must be at most 3600"),
            ("wait", json!({"swarm": "m", "sleep": 1}), "unknown field `sleep`"),
            ("create_swarm", json!({"plan_toml": huge}), "plan_toml: "),
            ("retry", json!({"task": 7}), "arguments: "),
            ("nope", json!({}), "name: no tool"),
        ];
        for (tool, args, expected) in refusals {
            let text = check_arguments(tool, args).expect_err(tool);
            assert!(text.contains(expected), "{tool}: {text:?} should say {expected:?}");
        }
        assert_eq!(
            check_arguments("check_plan", json!({"plan_toml": "not toml ["})),
            Ok(()),
            "a finding, not an error"
        );
        assert_eq!(check_arguments("wait", json!({"task": "m/a", "states": ["merged"]})), Ok(()));
    }
}
