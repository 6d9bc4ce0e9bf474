//! Sub-plans: a task that carries its own plan runs it as a child swarm.
//!
//! The child of task `auth` in swarm `app` is swarm `app/auth`. Its base is
//! the parent's integration branch (its head when the task starts), and its
//! integration branch is the task's own branch, so the child's result is
//! what the parent merges for the task. A task's sub-plan is either inline
//! (`[[tasks.subtasks]]`, sharing the enclosing plan's defaults) or a
//! `subplan` table with defaults of its own, which is what swarmctl makes
//! of `plan = "sub/auth.toml"` (the controller receives plan text, never
//! files).
//!
//! Branches: git refs cannot nest (`swarm/app/auth` and
//! `swarm/app/auth/login` cannot both exist), so the child's task branches
//! live under `swarm/app/auth.sub/`; a task id never contains a `.`, so that
//! namespace collides with no task branch of the parent.

use std::sync::Arc;

use super::error::{PlanError, err};
use super::raw::{RawDefaults, RawTask};
use super::{Plan, task_branch, validate_body};
use crate::globs::OwnedGlobs;
use crate::ids::{SwarmId, TaskId};

/// How deep sub-plans may nest below the root plan unless the plan says
/// otherwise (`max_depth`).
pub const DEFAULT_MAX_DEPTH: u32 = 4;
/// The most a plan may ask for: every level adds a component to the child
/// swarm's id and its branches (at most 200 characters).
pub const MAX_DEPTH_LIMIT: u32 = 8;

/// The suffix that turns a task id into the namespace of its child swarm's
/// branches.
const CHILD_SUFFIX: &str = ".sub";

/// The suffix of a spawned child's integration branch: `swarm/app/auth.spawned`
/// beside the agent's `swarm/app/auth` (a task id never contains a `.`,
/// so it is no task's branch, and no namespace directory of one).
const SPAWNED_SUFFIX: &str = ".spawned";

/// Where a plan body sits: its swarm, branches and nesting depth.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    pub swarm: SwarmId,
    pub base_branch: String,
    pub integration_branch: String,
    pub target_branch: String,
    pub depth: u32,
    pub max_depth: u32,
}

/// The prefix of a swarm's task branches: `swarm/app/` for a root swarm,
/// `swarm/app/auth.sub/` for the child swarm of task `auth`.
pub fn swarm_namespace(swarm: &SwarmId) -> String {
    let mut ns = format!("swarm/{}/", swarm.root());
    for task in swarm.path_from_root() {
        ns.push_str(task);
        ns.push_str(CHILD_SUFFIX);
        ns.push('/');
    }
    ns
}

/// Validates task `i`'s sub-plan, if it has one, as the child swarm's plan.
pub(super) fn child(
    frame: &Frame,
    i: usize,
    task: &RawTask,
    defaults: &RawDefaults,
) -> Result<Option<Arc<Plan>>, PlanError> {
    let at = |field: &str| format!("tasks[{i}].{field}");
    if task.plan.is_some() {
        return Err(err(
            at("plan"),
            "a sub-plan file is read by swarmctl, which inlines it as `subplan`; submit this plan with \
             swarmctl create or run",
        ));
    }
    let (field, body_defaults, tasks) = match (&task.subtasks, &task.subplan) {
        (None, None) if task.spawned => {
            return Err(err(
                at("spawned"),
                "set by swarm on a task whose agent spawned subtasks; it has none",
            ));
        }
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => return Err(err(at("subplan"), "set subtasks or subplan, not both")),
        (Some(tasks), None) => ("subtasks", defaults, tasks),
        (None, Some(sub)) => ("subplan", sub.defaults.as_ref().unwrap_or(defaults), &sub.tasks),
    };
    if task.command.is_some() {
        return Err(err(at("command"), format!("a task with a sub-plan ({field}) runs no command")));
    }
    if task.agent.agent.is_some() {
        return Err(err(at("agent"), format!("a task with a sub-plan ({field}) runs no agent")));
    }
    if frame.depth + 1 > frame.max_depth {
        return Err(err(
            at(field),
            format!(
                "sub-plans nest at most {} deep (max_depth); this one would be level {}",
                frame.max_depth,
                frame.depth + 1
            ),
        ));
    }
    let id = TaskId::new(task.id.clone()).map_err(|rule| err(at("id"), rule))?;
    let integration_branch = match task.spawned {
        // The task's own branch is its agent's, whose worktree publishes
        // its commits there while the children run.
        true => format!("{}{SPAWNED_SUFFIX}", task_branch(&frame.swarm, id.as_str())),
        false => task_branch(&frame.swarm, id.as_str()),
    };
    let child = Frame {
        swarm: frame.swarm.child(&id),
        base_branch: frame.integration_branch.clone(),
        integration_branch,
        // A child swarm is never landed: its parent merges its result.
        target_branch: frame.integration_branch.clone(),
        depth: frame.depth + 1,
        max_depth: frame.max_depth,
    };
    let prefix = |path: String| match field {
        // `tasks[0].command` of the inline sub-plan is `tasks[i].subtasks[0].command`.
        "subtasks" if path.starts_with("tasks") => format!("tasks[{i}].sub{path}"),
        _ if path.is_empty() => at(field),
        _ => format!("tasks[{i}].{field}.{path}"),
    };
    let plan = validate_body(child, body_defaults, tasks).map_err(|e| err(prefix(e.path), e.rule))?;
    inside_parent(task, &plan).map_err(|e| err(prefix(e.path), e.rule))?;
    Ok(Some(Arc::new(plan)))
}

/// Every glob a sub-plan's task owns must lie inside its parent task's:
/// the child's merged work is the parent's result, which may change only
/// the parent's files, so a child owning more would fail its parent's
/// merge after all its work was done. (Invalid parent globs are reported
/// by the parent's own checks.)
fn inside_parent(parent: &RawTask, plan: &Plan) -> Result<(), PlanError> {
    let Ok(owned) = OwnedGlobs::new(&parent.files) else { return Ok(()) };
    for (j, task) in plan.tasks.iter().enumerate() {
        if let Some((k, glob)) = task.files.iter().enumerate().find(|(_, g)| !owned.covers(g)) {
            return Err(err(
                format!("tasks[{j}].files[{k}]"),
                format!(
                    "{glob:?} is not inside the files its parent task {:?} owns ({}); a sub-plan's tasks \
                     own parts of their parent's files",
                    parent.id,
                    parent.files.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

impl Plan {
    /// The plan of `swarm`, this plan's swarm or one of its descendants.
    pub fn descendant(self: &Arc<Plan>, swarm: &SwarmId) -> Option<Arc<Plan>> {
        if !self.swarm.contains(swarm.as_str()) {
            return None;
        }
        let skip = self.swarm.depth();
        let mut plan = self.clone();
        for task in swarm.path_from_root().skip(skip) {
            let next = plan.tasks.iter().find(|t| t.id.as_str() == task)?.subplan.clone()?;
            plan = next;
        }
        Some(plan)
    }
}

#[cfg(test)]
#[path = "subplan_tests.rs"]
mod tests;
