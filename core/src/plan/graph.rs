//! The checks over the plan's task graph as a whole: unique ids, task
//! branches that collide with no other branch, no dependency cycle.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::{PlanError, err};
use super::raw::RawTask;
use super::spec::TaskSpec;
use super::subplan;
use crate::ids::TaskId;
use crate::names::check_id;

/// Every task id, checked and unique, to its position.
pub(super) fn index(raw_tasks: &[RawTask]) -> Result<HashMap<&str, usize>, PlanError> {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(raw_tasks.len());
    for (i, task) in raw_tasks.iter().enumerate() {
        check_id(&task.id).map_err(|rule| err(format!("tasks[{i}].id"), rule))?;
        if let Some(first) = index.insert(&task.id, i) {
            return Err(err(
                format!("tasks[{i}].id"),
                format!("duplicate task id {:?} (first at tasks[{first}])", task.id),
            ));
        }
    }
    Ok(index)
}

/// Task branches are `swarm/<swarm>/<task>`: none may be, or be a path
/// prefix of, a branch the swarm already uses (git refs cannot nest).
pub(super) fn check_branches(frame: &subplan::Frame, raw_tasks: &[RawTask]) -> Result<(), PlanError> {
    let namespace = subplan::swarm_namespace(&frame.swarm);
    let others = [
        ("base_branch", &frame.base_branch),
        ("integration_branch", &frame.integration_branch),
        ("target_branch", &frame.target_branch),
    ];
    // One buffer for every task's branch: a big plan has tens of
    // thousands of tasks, and this check runs on each.
    let mut branch = String::new();
    for (i, task) in raw_tasks.iter().enumerate() {
        branch.clear();
        branch.push_str(&namespace);
        branch.push_str(&task.id);
        for (field, other) in others {
            if *other == branch || ref_nests(other, &branch) || ref_nests(&branch, other) {
                return Err(err(
                    format!("tasks[{i}].id"),
                    format!("task branch {branch:?} collides with {field} {other:?}"),
                ));
            }
        }
    }
    Ok(())
}

/// `inner` lies under `outer` as a directory (`a/b/c` under `a/b`): git
/// cannot hold both refs.
fn ref_nests(inner: &str, outer: &str) -> bool {
    inner.len() > outer.len() && inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/'
}

/// The dependency cycle of a plan body, reported at its first task.
pub(super) fn check_cycles(tasks: &[Arc<TaskSpec>], index: &HashMap<&str, usize>) -> Result<(), PlanError> {
    if let Some(cycle) = find_cycle(tasks) {
        let first = index.get(cycle[0].as_str()).copied().unwrap_or(0);
        let names: Vec<&str> = cycle.iter().map(|t| t.as_str()).collect();
        return Err(err(format!("tasks[{first}].deps"), format!("dependency cycle: {}", names.join(" -> "))));
    }
    Ok(())
}

/// Returns one dependency cycle, first task repeated at the end.
fn find_cycle(tasks: &[Arc<TaskSpec>]) -> Option<Vec<TaskId>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnStack,
        Done,
    }
    let index: HashMap<&TaskId, usize> = tasks.iter().enumerate().map(|(i, t)| (&t.id, i)).collect();
    let mut marks = vec![Mark::New; tasks.len()];
    for root in 0..tasks.len() {
        if marks[root] != Mark::New {
            continue;
        }
        // Iterative DFS: (node, next dep to visit); the stack is the path.
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        marks[root] = Mark::OnStack;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(dep) = tasks[node].deps.get(*next) {
                *next += 1;
                let Some(&d) = index.get(dep) else { continue };
                match marks[d] {
                    Mark::New => {
                        marks[d] = Mark::OnStack;
                        stack.push((d, 0));
                    }
                    Mark::OnStack => {
                        let start = stack.iter().position(|(n, _)| *n == d).unwrap_or(0);
                        let mut cycle: Vec<TaskId> =
                            stack[start..].iter().map(|(n, _)| tasks[*n].id.clone()).collect();
                        cycle.push(tasks[d].id.clone());
                        return Some(cycle);
                    }
                    Mark::Done => {}
                }
            } else {
                marks[node] = Mark::Done;
                stack.pop();
            }
        }
    }
    None
}
