//! The scheduler's one way into its model: every change goes through
//! `Model::apply`, and what it changed (rows, the swarm to refresh, idle
//! workers to rescan) is noted in the turn's effects here.

use swarm_core::{SwarmId, TaskKey};

use super::model::{self, Applied, Attempt, Transition};
use super::{Effects, Scheduler};

impl Scheduler {
    /// Applies `t` to the model and notes what it changed in the turn's
    /// effects: its rows are written (a swarm's at once, the others once
    /// at the end of the turn), its swarm refreshed, idle workers
    /// rescanned. A change that is not stored (live progress, a session)
    /// goes to `self.model.apply` directly.
    pub(super) fn transition(&mut self, t: Transition<'_>, fx: &mut Effects) -> Applied {
        let applied = self.model.apply(t);
        if let Some(k) = &applied.task {
            fx.dirty_tasks.insert(k.clone());
        }
        if let Some(a) = &applied.attempt {
            fx.dirty_attempts.insert(a.clone());
        }
        if let Some(w) = &applied.worker {
            fx.dirty_workers.insert(w.clone());
        }
        if let Some(sw) = applied.swarm.as_ref().and_then(|id| self.model.swarms().get(id)) {
            fx.batch.swarm(sw.row());
        }
        if let Some(id) = &applied.touched {
            fx.touched_swarms.insert(id.clone());
        }
        if applied.frees_work {
            self.scan.changed();
        }
        applied
    }

    /// Changes fields of a task that no index reads; the row is written.
    pub(super) fn edit_task<'a>(
        &mut self,
        key: &'a TaskKey,
        fx: &mut Effects,
        edit: impl FnOnce(&mut model::Task) + 'a,
    ) {
        self.transition(Transition::Task { key, edit: Box::new(edit) }, fx);
    }

    /// A task's live progress, which is not stored: it is reported again.
    pub(super) fn edit_task_unstored<'a>(
        &mut self,
        key: &'a TaskKey,
        edit: impl FnOnce(&mut model::Task) + 'a,
    ) {
        self.model.apply(Transition::Task { key, edit: Box::new(edit) });
    }

    pub(super) fn edit_attempt<'a>(
        &mut self,
        key: &'a TaskKey,
        number: u32,
        fx: &mut Effects,
        edit: impl FnOnce(&mut Attempt) + 'a,
    ) {
        self.transition(Transition::Attempt { key, number, edit: Box::new(edit) }, fx);
    }

    pub(super) fn edit_worker<'a>(
        &mut self,
        id: &'a str,
        fx: &mut Effects,
        edit: impl FnOnce(&mut model::Worker) + 'a,
    ) {
        self.transition(Transition::Worker { id, edit: Box::new(edit) }, fx);
    }

    /// What a worker's row does not hold: its session, what it verifies.
    pub(super) fn edit_worker_unstored<'a>(
        &mut self,
        id: &'a str,
        edit: impl FnOnce(&mut model::Worker) + 'a,
    ) {
        self.model.apply(Transition::Worker { id, edit: Box::new(edit) });
    }

    /// Changes a swarm; its row is written.
    pub(super) fn edit_swarm<'a>(
        &mut self,
        id: &'a SwarmId,
        fx: &mut Effects,
        edit: impl FnOnce(&mut model::Swarm) + 'a,
    ) {
        self.transition(Transition::Swarm { id, edit: Box::new(edit) }, fx);
    }
}
