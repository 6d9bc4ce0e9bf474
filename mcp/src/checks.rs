//! Each tool's arguments checked, as the Operator API request the tool
//! then sends: an error names the argument and the rule, and nothing is
//! sent. The tools call these, and so does [`crate::check_arguments`],
//! which the fuzzer feeds every tool's arguments through without a session
//! or a controller. It imports only the arguments, so the tools and `wait`
//! both build on it and nothing here reaches back to them.

use swarm_core::TaskKey;
use swarm_core::plan::Plan;
use swarm_proto::v1;

use crate::args::{CancelArgs, LandArgs, ListTasksArgs, PlanArgs, ReviewArgs, SwarmArgs, TaskArgs, TextArgs};

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
        Ok(v1::CreateSwarmRequest { plan_toml: self.plan_toml, origin: None })
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
            .map(|(i, s)| task_state(s).map(|s| s as i32).map_err(|rule| format!("states[{i}]: {rule}")))
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

pub(crate) fn parse_each<T>(
    names: &[String],
    parse: fn(&str) -> Result<T, String>,
) -> Result<Vec<i32>, String>
where
    T: Into<i32>,
{
    names
        .iter()
        .enumerate()
        .map(|(i, n)| parse(n).map(Into::into).map_err(|rule| format!("states[{i}]: {rule}")))
        .collect()
}

/// A task state by its plain name (`MERGED`), as the views print it.
pub(crate) fn task_state(name: &str) -> Result<v1::TaskState, String> {
    let upper = name.trim().to_ascii_uppercase();
    match v1::TaskState::from_str_name(&format!("TASK_STATE_{upper}")) {
        Some(v1::TaskState::Unspecified) | None => Err(format!(
            "{name:?} is not a task state (PENDING, READY, RUNNING, SUCCEEDED, MERGING, MERGED, FAILED, \
             CONFLICT, BLOCKED, ESCALATED, CANCELLED, REVIEW, REJECTED)"
        )),
        Some(s) => Ok(s),
    }
}

pub(crate) fn swarm_state(name: &str) -> Result<v1::SwarmState, String> {
    let upper = name.trim().to_ascii_uppercase();
    match v1::SwarmState::from_str_name(&format!("SWARM_STATE_{upper}")) {
        Some(v1::SwarmState::Unspecified) | None => Err(format!(
            "{name:?} is not a swarm state (ACTIVE, STALLED, PAUSED, LANDING, COMPLETED, FAILED, CANCELLED)"
        )),
        Some(s) => Ok(s),
    }
}
