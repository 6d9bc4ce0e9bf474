//! STALLED: a swarm in which nothing can move without the operator.
//!
//! Decided from the per-swarm state counts (no task walk): a swarm that is
//! not finished and has no task READY, RUNNING, SUCCEEDED, MERGING or REVIEW
//! cannot move, since a PENDING task only waits for its dependencies. What
//! is left is FAILED or CANCELLED tasks and their dependents, or tasks
//! waiting on the operator (BLOCKED, ESCALATED, CONFLICT held). A task in a
//! moving state that only the operator can move (REVIEW by the operator, a
//! sub-swarm task whose child is STALLED) is kept in the swarm's
//! `waits_on_operator` set and does not count as moving. Only describing a
//! stall (its reason and tasks) walks the swarm's tasks, when it is stalled.

use swarm_core::TaskState;

pub use super::model::Stall;
use super::model::{Swarm, Tasks, state_index};

/// States in which a task may still move on its own: a reviewer attempt
/// decides a REVIEW, a child swarm moves a RUNNING sub-swarm task.
const MOVING: [TaskState; 5] =
    [TaskState::Ready, TaskState::Running, TaskState::Succeeded, TaskState::Merging, TaskState::Review];

/// States in which a task waits for the operator.
const NEEDS_OPERATOR: [TaskState; 5] =
    [TaskState::Failed, TaskState::Cancelled, TaskState::Blocked, TaskState::Escalated, TaskState::Conflict];

/// True when no task can move: none is moving (beyond the `waits_on_operator`
/// tasks of a moving state) and not all are finished.
pub fn nothing_moves(counts: &[u32; TaskState::ALL.len()], waits_on_operator: usize) -> bool {
    let moving: u32 = MOVING.iter().map(|s| counts[state_index(*s)]).sum();
    let moving = moving.saturating_sub(u32::try_from(waits_on_operator).unwrap_or(u32::MAX));
    let unfinished: u32 =
        TaskState::ALL.iter().filter(|s| !s.is_terminal()).map(|s| counts[state_index(*s)]).sum();
    moving == 0 && unfinished > 0
}

pub fn describe(swarm: &Swarm, tasks: &Tasks) -> Stall {
    let stuck: Vec<String> = swarm
        .tasks
        .iter()
        .filter(|k| {
            swarm.waits_on_operator().contains(*k)
                || tasks.get(*k).is_some_and(|t| NEEDS_OPERATOR.contains(&t.state()))
        })
        .map(|k| k.task.to_string())
        .collect();
    let mut parts: Vec<String> = NEEDS_OPERATOR
        .iter()
        .filter(|s| swarm.counts()[state_index(**s)] > 0)
        .map(|s| format!("{} {}", swarm.counts()[state_index(*s)], s.as_str()))
        .collect();
    for (state, what) in
        [(TaskState::Review, "REVIEW by the operator"), (TaskState::Running, "sub-swarm STALLED")]
    {
        let n = swarm
            .waits_on_operator()
            .iter()
            .filter(|k| tasks.get(*k).is_some_and(|t| t.state() == state))
            .count();
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    if parts.is_empty() {
        parts.push("no task needs the operator".into());
    }
    let pending = swarm.counts()[state_index(TaskState::Pending)];
    let mut reason = format!("nothing can move without the operator: {}", parts.join(", "));
    if pending > 0 {
        reason.push_str(&format!("; {pending} PENDING behind them"));
    }
    Stall { reason, tasks: stuck }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(of: &[(TaskState, u32)]) -> [u32; TaskState::ALL.len()] {
        let mut c = [0; TaskState::ALL.len()];
        for (s, n) in of {
            c[state_index(*s)] = *n;
        }
        c
    }

    #[test]
    fn tasks_waiting_on_the_operator_do_not_count_as_moving() {
        use TaskState::*;
        assert!(
            nothing_moves(&counts(&[(Review, 1), (Pending, 2)]), 1),
            "the one REVIEW waits on the operator"
        );
        assert!(!nothing_moves(&counts(&[(Review, 2), (Pending, 2)]), 1), "one REVIEW has a reviewer");
        assert!(
            nothing_moves(&counts(&[(Running, 1), (Merged, 3)]), 1),
            "a sub-swarm task whose child stalled"
        );
        assert!(!nothing_moves(&counts(&[(Running, 2)]), 1), "the other one runs");
        assert!(!nothing_moves(&counts(&[(Merged, 2)]), 0), "finished, not stalled");
    }

    #[test]
    fn a_swarm_stalls_only_when_nothing_moves_and_it_is_not_finished() {
        use TaskState::*;
        assert!(nothing_moves(&counts(&[(Failed, 1), (Pending, 3), (Merged, 2)]), 0));
        assert!(nothing_moves(&counts(&[(Blocked, 1), (Merged, 2)]), 0));
        assert!(nothing_moves(&counts(&[(Escalated, 1)]), 0));
        assert!(nothing_moves(&counts(&[(Conflict, 1), (Pending, 1)]), 0));
        assert!(!nothing_moves(&counts(&[(Failed, 1), (Running, 1), (Pending, 3)]), 0), "one still runs");
        assert!(!nothing_moves(&counts(&[(Blocked, 1), (Ready, 1)]), 0), "one is ready");
        assert!(!nothing_moves(&counts(&[(Escalated, 1), (Merging, 1)]), 0), "one is merging");
        assert!(!nothing_moves(&counts(&[(Merged, 3)]), 0), "finished, not stalled");
        assert!(!nothing_moves(&counts(&[(Failed, 2), (Merged, 1)]), 0), "all terminal: FAILED, not stalled");
    }
}
