//! A swarm's own state: ACTIVE, STALLED, LANDING and its end states,
//! derived from its tasks' state counts and its pull request after every
//! turn that touched it.

use std::time::SystemTime;

use swarm_core::{SwarmId, TaskState};

use super::core::{Core, unix_time};
use super::model::{self, SwarmState, Transition};
use super::{forge, stall};

/// Moves a swarm between ACTIVE, STALLED, LANDING and its end states,
/// from its state counts (a task walk only to describe a stall) and
/// its pull request.
pub(super) fn refresh(core: &mut Core<'_>, id: &SwarmId) {
    let Some(swarm) = core.model.swarms().get(id) else { return };
    if !swarm.state.is_live() {
        return;
    }
    let total = swarm.tasks.len() as u32;
    let count = |s: TaskState| swarm.count(s);
    let terminal: u32 = TaskState::ALL.iter().filter(|s| s.is_terminal()).map(|s| count(*s)).sum();
    let next = if count(TaskState::Merged) == total {
        if forge::waits_on_pull(swarm) { SwarmState::Landing } else { SwarmState::Completed }
    } else if terminal == total {
        SwarmState::Failed
    } else if stall::nothing_moves(swarm.counts(), swarm.waits_on_operator().len()) {
        SwarmState::Stalled
    } else {
        SwarmState::Active
    };
    let from = swarm.state;
    // A paused swarm stays paused until resumed, unless it has ended.
    if from == SwarmState::Paused && !matches!(next, SwarmState::Completed | SwarmState::Failed) {
        return;
    }
    let stall = (next == SwarmState::Stalled).then(|| stall::describe(swarm, core.model.tasks()));
    let described = stall.clone();
    let edit = |swarm: &mut model::Swarm| swarm.stall = described;
    core.model.apply(Transition::Swarm { id, edit: Box::new(edit) });
    if next == from {
        return;
    }
    let edit = |swarm: &mut model::Swarm| {
        swarm.state = next;
        swarm.control.paused = None;
    };
    core.transition(Transition::Swarm { id, edit: Box::new(edit) });
    let created_at = core.model.swarms().get(id).map(|s| s.created_at).unwrap_or(0);
    if matches!(next, SwarmState::Completed | SwarmState::Failed | SwarmState::Cancelled) {
        // The root of the swarm's trace, which its tasks' spans name.
        swarm_telemetry::export_swarm_span(
            id.as_str(),
            unix_time(created_at),
            SystemTime::now(),
            next.as_str(),
        );
    }
    let _span =
        tracing::info_span!("swarm.transition", swarm = %id, from = from.as_str(), to = next.as_str())
            .entered();
    match stall {
        Some(stall) => {
            tracing::warn!(reason = %stall.reason, tasks = ?stall.tasks, "swarm stalled");
            core.fx.event(
                id.as_str(),
                "",
                0,
                "",
                "swarm.stalled",
                format!("swarm {id} STALLED: {}", stall.reason),
                serde_json::json!({ "state": next.as_str(), "reason": stall.reason, "tasks": stall.tasks }),
            );
        }
        None => {
            core.fx.event(
                id.as_str(),
                "",
                0,
                "",
                "swarm.state",
                format!("swarm {id} {}", next.as_str()),
                serde_json::json!({ "state": next.as_str(), "from": from.as_str() }),
            );
        }
    }
}
