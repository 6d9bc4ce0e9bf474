//! The critical path left in a swarm: the longest chain of unfinished
//! tasks linked by dependencies. It bounds how many more merges, one after
//! another, the swarm needs however many workers it gets, which is what an
//! operator watching a long swarm wants to know.

use std::collections::{HashMap, VecDeque};

use swarm_proto::v1;

/// The longest chain of tasks of one swarm not yet MERGED, first task
/// first. MERGED dependencies drop out of the chain: they are done. A
/// CANCELLED or FAILED task stays in it, since its dependents cannot merge
/// until the operator retries it. Computed in topological order without
/// recursion, so a 50,000-task chain cannot exhaust the stack; tasks on a
/// dependency cycle (the controller refuses such plans) are left out
/// rather than looped on.
pub fn critical_path<'a>(tasks: impl Iterator<Item = &'a v1::Task>) -> Vec<String> {
    let open: Vec<&v1::Task> = tasks.filter(|t| t.state != v1::TaskState::Merged as i32).collect();
    let index: HashMap<&str, usize> = open.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
    // Edges from a dependency to its dependents, both unfinished.
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); open.len()];
    let mut waiting_on: Vec<usize> = vec![0; open.len()];
    for (i, t) in open.iter().enumerate() {
        for dep in &t.deps {
            if let Some(&d) = index.get(dep.as_str()) {
                dependents[d].push(i);
                waiting_on[i] += 1;
            }
        }
    }
    // length[i]: the longest chain ending at i; before[i]: its previous task.
    let mut length = vec![1usize; open.len()];
    let mut before: Vec<Option<usize>> = vec![None; open.len()];
    let mut queue: VecDeque<usize> = (0..open.len()).filter(|&i| waiting_on[i] == 0).collect();
    let mut best: Option<usize> = None;
    while let Some(i) = queue.pop_front() {
        if best.is_none_or(|b| length[i] > length[b]) {
            best = Some(i);
        }
        for &next in &dependents[i] {
            if length[i] + 1 > length[next] {
                length[next] = length[i] + 1;
                before[next] = Some(i);
            }
            waiting_on[next] -= 1;
            if waiting_on[next] == 0 {
                queue.push_back(next);
            }
        }
    }
    let mut path = Vec::new();
    let mut cur = best;
    while let Some(i) = cur {
        path.push(open[i].id.clone());
        cur = before[i];
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, state: v1::TaskState, deps: &[&str]) -> v1::Task {
        v1::Task {
            id: id.into(),
            state: state as i32,
            deps: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_longest_unfinished_chain_skips_merged_tasks() {
        use v1::TaskState::{Merged, Pending, Ready, Running};
        let tasks = [
            task("a", Merged, &[]),
            task("b", Running, &["a"]),
            task("c", Pending, &["b"]),
            task("d", Pending, &["c", "x"]),
            task("x", Ready, &[]),
        ];
        assert_eq!(critical_path(tasks.iter()), ["b", "c", "d"]);
    }

    #[test]
    fn a_finished_swarm_has_no_path_and_a_cycle_does_not_hang() {
        use v1::TaskState::{Merged, Pending};
        assert!(critical_path([task("a", Merged, &[])].iter()).is_empty());
        let cycle = [task("a", Pending, &["b"]), task("b", Pending, &["a"])];
        assert!(critical_path(cycle.iter()).is_empty());
    }

    #[test]
    fn a_long_chain_needs_no_recursion() {
        let n = 50_000;
        let tasks: Vec<v1::Task> = (0..n)
            .map(|i| {
                let deps = if i == 0 { vec![] } else { vec![format!("t{}", i - 1)] };
                v1::Task {
                    id: format!("t{i}"),
                    deps,
                    state: v1::TaskState::Pending as i32,
                    ..Default::default()
                }
            })
            .collect();
        assert_eq!(critical_path(tasks.iter().rev()).len(), n);
    }
}
