//! The critical path of a plan's task graph: what the scheduler ranks
//! READY tasks by, and what a planner shows of the plan it wrote.

use std::collections::HashMap;
use std::sync::Arc;

use super::TaskSpec;
use crate::TaskId;

/// The remaining critical path below each task of a swarm (in the order
/// of `specs`): its weight plus the heaviest path among the tasks that
/// depend on it. The plan was checked acyclic; a dep not among `specs`
/// is left out.
pub fn critical_paths(specs: &[Arc<TaskSpec>], unknown_ms: u64) -> Vec<u64> {
    let weights: Vec<u64> = specs.iter().map(|s| s.estimate_ms.unwrap_or(unknown_ms)).collect();
    critical_paths_weighted(specs, &weights)
}

/// As [`critical_paths`], with each task's weight given (`weights[i]` for
/// `specs[i]`; a missing one weighs nothing): the controller weighs a task
/// without an estimate by what it learned.
pub fn critical_paths_weighted(specs: &[Arc<TaskSpec>], weights: &[u64]) -> Vec<u64> {
    let index: HashMap<&TaskId, usize> = specs.iter().enumerate().map(|(i, s)| (&s.id, i)).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); specs.len()];
    let mut waiting: Vec<usize> = vec![0; specs.len()];
    for (i, s) in specs.iter().enumerate() {
        for d in &s.deps {
            if let Some(&j) = index.get(d) {
                dependents[j].push(i);
                waiting[i] += 1;
            }
        }
    }
    // Kahn's order: every task after its dependencies.
    let mut topo: Vec<usize> = (0..specs.len()).filter(|&i| waiting[i] == 0).collect();
    let mut at = 0;
    while at < topo.len() {
        let i = topo[at];
        at += 1;
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                topo.push(j);
            }
        }
    }
    let mut path = vec![0u64; specs.len()];
    for &i in topo.iter().rev() {
        let below = dependents[i].iter().map(|&j| path[j]).max().unwrap_or(0);
        path[i] = weights.get(i).copied().unwrap_or(0).saturating_add(below);
    }
    path
}
