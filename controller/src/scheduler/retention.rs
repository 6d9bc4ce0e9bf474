//! Retention: a swarm that ended (COMPLETED, FAILED or CANCELLED) longer
//! ago than `forget_finished_after` is forgotten with its child swarms:
//! the model drops them and the store deletes their rows and events. The
//! fleet's own events (workers connecting, forgotten, refused) older than
//! the same window go too. So a controller that runs for months holds, in
//! memory and on disk, the swarms of the window and the live ones, not
//! every swarm it ever ran (Nomad's job GC, Temporal's namespace
//! retention).
//!
//! Only a whole tree goes: a child swarm is forgotten with its root, and a
//! tree is kept while any task of it is not terminal or any attempt of it
//! is live (a cancelled swarm whose worker has not stopped yet), so no
//! report, merge or worker can still refer to what was dropped. A retried
//! task makes its swarm ACTIVE again, which restarts the clock.

use std::collections::VecDeque;
use std::time::Duration;

use swarm_core::{SwarmId, TaskState};

use super::core::Core;
use super::model::{Model, Swarm, Transition, now_ms};

/// How often the swarms are looked over.
const SWEEP_MS: u64 = 1_000;

/// Tasks forgotten in one sweep at most (past the first tree): each is
/// deleted in the turn's commit, which the next turns wait behind.
const TASKS_PER_SWEEP: usize = 20_000;

/// How far apart the marks of the event ids are taken: fleet events are
/// forgotten at most this much later than the window says.
const MARK_EVERY_MS: i64 = 60_000;

pub(super) struct Retention {
    last_sweep_ms: Option<u64>,
    sweep_every_ms: u64,
    /// (unix ms, the next event id then), oldest first: the events of a
    /// time are those below its mark's id, found without reading them.
    marks: VecDeque<(i64, u64)>,
    /// Fleet events below this id were deleted.
    fleet_forgotten_before: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            last_sweep_ms: None,
            sweep_every_ms: SWEEP_MS,
            marks: VecDeque::new(),
            fleet_forgotten_before: 0,
        }
    }
}

impl Retention {
    /// Every turn, for tests.
    #[cfg(test)]
    pub fn sweep_every_turn(&mut self) {
        self.sweep_every_ms = 0;
    }

    /// Forgets what the window has passed; returns the swarms forgotten,
    /// for the components that keep something of a swarm.
    pub fn sweep(&mut self, core: &mut Core) -> Vec<SwarmId> {
        let Some(window) = core.timing.forget_finished_after else { return Vec::new() };
        let mono = core.mono_ms();
        if self.last_sweep_ms.is_some_and(|last| mono.saturating_sub(last) < self.sweep_every_ms) {
            return Vec::new();
        }
        self.last_sweep_ms = Some(mono);
        let now = now_ms();
        let cutoff = now.saturating_sub(window.as_millis() as i64);
        self.forget_fleet_events(core, now, cutoff);
        let mut forgotten = Vec::new();
        let mut tasks = 0;
        for root in ended_roots(core.model) {
            if tasks >= TASKS_PER_SWEEP {
                break;
            }
            let Some(ended_at) = ended_at(core, &root) else { continue };
            if ended_at > cutoff {
                continue;
            }
            let Some(tree) = settled_tree(core.model, &root) else { continue };
            tasks += tree_tasks(core.model, &tree);
            forget_tree(core, &root, &tree, ended_at, window);
            forgotten.extend(tree);
        }
        forgotten
    }

    /// Deletes the fleet's events older than the window, by the id the
    /// newest mark before the cutoff took. The newest event is never one
    /// of them (the store's last id is where a restarted controller counts
    /// on from).
    fn forget_fleet_events(&mut self, core: &mut Core, now: i64, cutoff: i64) {
        if self.marks.back().is_none_or(|&(at, _)| now - at >= MARK_EVERY_MS) {
            self.marks.push_back((now, core.fx.next_event_id));
        }
        let mut before = None;
        while let Some(&(at, id)) = self.marks.front() {
            if at > cutoff {
                break;
            }
            before = Some(id);
            self.marks.pop_front();
        }
        let Some(before) = before.map(|id| id.min(core.fx.next_event_id.saturating_sub(1))) else { return };
        if before > self.fleet_forgotten_before {
            core.fx.batch.forget_fleet_events_before(before);
            self.fleet_forgotten_before = before;
        }
    }
}

/// Root swarms that have ended.
fn ended_roots(model: &Model) -> Vec<SwarmId> {
    model
        .swarms()
        .values()
        .filter(|s| s.id.parent().is_none() && s.has_ended())
        .map(|s| s.id.clone())
        .collect()
}

/// When `id` ended; after a restart the model does not know, and its
/// tasks' last change is taken (and kept).
fn ended_at(core: &mut Core, id: &SwarmId) -> Option<i64> {
    let swarm = core.model.swarms().get(id)?;
    if let Some(at) = swarm.ended_at() {
        return Some(at);
    }
    let tasks = core.model.tasks();
    let last = swarm.tasks.iter().filter_map(|k| tasks.get(k)).map(|t| t.updated_at).max();
    let at = last.unwrap_or(0).max(swarm.created_at);
    core.model.apply(Transition::SwarmEndedAt { id, at });
    Some(at)
}

/// `root` and every swarm below it, if all their tasks are terminal and
/// no attempt of them is live; `None` while anything of the tree moves.
fn settled_tree(model: &Model, root: &SwarmId) -> Option<Vec<SwarmId>> {
    let mut tree = vec![root.clone()];
    let mut next = 0;
    while let Some(id) = tree.get(next).cloned() {
        next += 1;
        let swarm = model.swarms().get(&id)?;
        if !settled(model, swarm) {
            return None;
        }
        let children = swarm.tasks.iter().map(|k| id.child(&k.task));
        tree.extend(children.filter(|child| model.swarms().contains_key(child)));
    }
    Some(tree)
}

fn settled(model: &Model, swarm: &Swarm) -> bool {
    let terminal: u32 = TaskState::ALL.iter().filter(|s| s.is_terminal()).map(|s| swarm.count(*s)).sum();
    terminal as usize == swarm.tasks.len()
        && swarm.tasks.iter().all(|key| {
            let attempts = model.tasks().get(key).map_or(0, |t| t.attempts);
            (1..=attempts).all(|n| model.attempts().get(&(key.clone(), n)).is_none_or(|a| !a.state.is_live()))
        })
}

fn forget_tree(core: &mut Core, root: &SwarmId, tree: &[SwarmId], ended_at: i64, window: Duration) {
    let Some(swarm) = core.model.swarms().get(root) else { return };
    let (state, tasks) = (swarm.state.as_str(), tree_tasks(core.model, tree));
    let _span = tracing::info_span!("swarm.forget", swarm = %root, state, tasks).entered();
    for id in tree.iter().rev() {
        // What its tasks took outlives it: the next run of its plan starts there.
        for d in core.model.learned_durations(id) {
            let (plan, task, ms, samples) = (d.plan, d.task, d.ms, d.samples);
            core.fx.batch.duration(crate::store::DurationRow {
                plan,
                task,
                ms,
                samples,
                updated_at: now_ms(),
            });
        }
        core.model.apply(Transition::SwarmForgotten(id));
        core.fx.dirty_tasks.retain(|k| k.swarm != *id);
        core.fx.dirty_attempts.retain(|(k, _)| k.swarm != *id);
        core.fx.touched_swarms.remove(id);
        core.fx.batch.forget_swarm(id.as_str());
    }
    let ago = Duration::from_millis(now_ms().saturating_sub(ended_at).max(0) as u64);
    tracing::info!(ago_secs = ago.as_secs(), "swarm forgotten");
    // A fleet event: the swarm's own events are deleted with it.
    core.fx.event(
        "",
        "",
        0,
        "",
        "swarm.forgotten",
        format!(
            "swarm {root} forgotten: {state} for {}s, longer than the retention of {}s; its {tasks} tasks, \
             their attempts and events are deleted",
            ago.as_secs(),
            window.as_secs()
        ),
        serde_json::json!({ "swarm": root.as_str(), "state": state, "swarms": tree.len(), "tasks": tasks }),
    );
}

fn tree_tasks(model: &Model, tree: &[SwarmId]) -> usize {
    tree.iter().filter_map(|id| model.swarms().get(id)).map(|s| s.tasks.len()).sum()
}
