//! Sub-swarms an agent starts while it runs (its `spawn` tool).
//!
//! A spawned child is a sub-plan like any declared one, so that everything
//! that knows sub-swarms (ids, branches, recovery, cancel, retry) knows it
//! too. Its stored plan text is its parent swarm's stored text with the
//! calling task's entry turned into a sub-plan task: the entry keeps what
//! describes the task (id, title, files, deps, ...) and gets the fragment's
//! tasks as `subtasks`, which share the enclosing plan's defaults; what
//! said how the caller ran (its agent, model, sandbox, verify, ...) moves
//! onto each child that does not say otherwise; `spawned = true` gives the
//! child an integration branch of its own beside the task's branch
//! (`swarm/app/auth.spawned`), which the agent's worktree keeps publishing
//! to. The parent swarm's own stored text is left alone: there the task is
//! still the worker it was.

use std::sync::Arc;

use toml::{Table, Value};

use super::Plan;
use super::error::{PlanError, err};
use crate::ids::{SwarmId, TaskId};

/// The most tasks one `spawn` may start: a model splitting its task into
/// thousands of agents is a runaway, not a plan.
pub const MAX_SPAWNED_TASKS: usize = 100;

/// The largest fragment: a hundred tasks with long prompts fit.
pub const MAX_FRAGMENT_BYTES: usize = 256 << 10;

/// How a task runs: a child that chooses its own command or agent takes
/// none of these from its parent (they only make sense together).
const RUN_KEYS: &[&str] = &[
    "command",
    "agent",
    "agent_path",
    "agent_command",
    "model",
    "max_turns",
    "max_budget_usd",
    "allowed_tools",
    "permission_mode",
    "append_system_prompt",
    "agent_instructions",
    "extra_args",
    "permissions",
    "on_empty",
];

/// The rest of how the caller ran, which each child takes unless it sets
/// the key itself.
const INHERITED_KEYS: &[&str] = &[
    "sandbox",
    "limits",
    "secrets",
    "env",
    "setup",
    "setup_on",
    "verify",
    "idle_timeout_secs",
    "max_restarts",
    "strategy",
    "on_conflict",
    "ownership",
    "retries",
];

/// A child swarm to create: its stored text and its plan.
#[derive(Debug, Clone)]
pub struct Spawned {
    pub text: String,
    pub plan: Arc<Plan>,
}

/// The child swarm that task `task` of swarm `parent` (whose stored plan
/// text is `stored`) spawns with the tasks of `fragment` (TOML holding only
/// `[[tasks]]`). Errors name the fragment's own fields (`tasks[1].files[0]`).
pub fn spawned(stored: &str, parent: &SwarmId, task: &TaskId, fragment: &str) -> Result<Spawned, PlanError> {
    let children = fragment_tasks(fragment)?;
    let mut root: Table = toml::from_str(stored).map_err(|e| err("", format!("the stored plan: {e}")))?;
    let path: Vec<&str> = parent.path_from_root().collect();
    let mut location = String::new();
    let tasks = tasks_of(&mut root, &path, &mut location)?;
    let (i, entry) = find(tasks, task.as_str()).ok_or_else(|| {
        err("task", format!("task {:?} is not in swarm {parent}'s stored plan", task.as_str()))
    })?;
    if entry.contains_key("subtasks") || entry.contains_key("subplan") {
        return Err(err(
            "task",
            format!("task {:?} runs a sub-plan; only a worker task spawns", task.as_str()),
        ));
    }
    let subtasks = location.clone() + &format!("tasks[{i}].subtasks");
    let children = children.into_iter().map(|child| inherit(entry, child)).collect();
    for key in RUN_KEYS.iter().chain(INHERITED_KEYS) {
        entry.remove(*key);
    }
    entry.insert("subtasks".into(), Value::Array(children));
    entry.insert("spawned".into(), Value::Boolean(true));
    let text = toml::to_string(&root).map_err(|e| err("tasks", format!("cannot be written as TOML: {e}")))?;
    let in_fragment = |e: PlanError| match e.path.strip_prefix(&subtasks) {
        Some(rest) => err(format!("tasks{rest}"), e.rule),
        None => err("tasks", format!("{}: {}", e.path, e.rule)),
    };
    let root_plan = Arc::new(Plan::parse(&text).map_err(in_fragment)?);
    let plan = root_plan.descendant(&parent.child(task)).ok_or_else(|| {
        err("task", format!("the child swarm of {:?} is not in the composed plan", task.as_str()))
    })?;
    Ok(Spawned { text, plan })
}

/// The fragment's tables, checked for shape (the plan parser checks the rest).
fn fragment_tasks(fragment: &str) -> Result<Vec<Value>, PlanError> {
    if fragment.len() > MAX_FRAGMENT_BYTES {
        return Err(err("plan_toml", format!("at most {MAX_FRAGMENT_BYTES} bytes, got {}", fragment.len())));
    }
    let mut table: Table =
        toml::from_str(fragment).map_err(|e| err("plan_toml", e.message().trim().to_string()))?;
    if let Some(key) = table.keys().find(|k| *k != "tasks") {
        return Err(err(
            key.clone(),
            "only tasks may be given: the children run with the plan's defaults and the calling task's settings",
        ));
    }
    let Some(Value::Array(tasks)) = table.remove("tasks") else {
        return Err(err("tasks", "give at least one task ([[tasks]] with id, files and prompt)"));
    };
    if tasks.is_empty() {
        return Err(err("tasks", "give at least one task"));
    }
    if tasks.len() > MAX_SPAWNED_TASKS {
        return Err(err("tasks", format!("at most {MAX_SPAWNED_TASKS} tasks at once, got {}", tasks.len())));
    }
    if let Some(i) = tasks.iter().position(|t| !t.is_table()) {
        return Err(err(format!("tasks[{i}]"), "must be a table (id, files, prompt, ...)"));
    }
    Ok(tasks)
}

/// The task list of swarm `path` (task ids from the root) inside the
/// stored plan; `location` gets its field path (`tasks[2].subtasks[0].sub`).
fn tasks_of<'a>(
    root: &'a mut Table,
    path: &[&str],
    location: &mut String,
) -> Result<&'a mut Vec<Value>, PlanError> {
    let missing = || err("task", "the stored plan does not hold the calling task's swarm");
    let mut tasks = root.get_mut("tasks").and_then(Value::as_array_mut).ok_or_else(missing)?;
    for id in path {
        let (i, entry) = find(tasks, id).ok_or_else(missing)?;
        if entry.contains_key("subtasks") {
            location.push_str(&format!("tasks[{i}].sub"));
            tasks = entry.get_mut("subtasks").and_then(Value::as_array_mut).ok_or_else(missing)?;
        } else {
            location.push_str(&format!("tasks[{i}].subplan."));
            let sub = entry.get_mut("subplan").and_then(Value::as_table_mut).ok_or_else(missing)?;
            tasks = sub.get_mut("tasks").and_then(Value::as_array_mut).ok_or_else(missing)?;
        }
    }
    Ok(tasks)
}

fn find<'a>(tasks: &'a mut [Value], id: &str) -> Option<(usize, &'a mut Table)> {
    tasks
        .iter_mut()
        .enumerate()
        .filter_map(|(i, t)| t.as_table_mut().map(|t| (i, t)))
        .find(|(_, t)| t.get("id").and_then(Value::as_str) == Some(id))
}

/// `child` with the caller's way of running where it sets none of its own.
fn inherit(caller: &Table, child: Value) -> Value {
    let Value::Table(mut child) = child else { return child };
    let chooses_its_own = child.contains_key("command") || child.contains_key("agent");
    let keys = INHERITED_KEYS.iter().chain(RUN_KEYS.iter().filter(|_| !chooses_its_own));
    for key in keys {
        if let (false, Some(value)) = (child.contains_key(*key), caller.get(*key)) {
            child.insert(key.to_string(), value.clone());
        }
    }
    Value::Table(child)
}

#[cfg(test)]
#[path = "spawn_tests.rs"]
mod tests;
