//! The Operator API's reads: views of the model, a page at a time, answered
//! without waiting for a commit when nothing in the turn has changed yet.

use swarm_core::{TaskKey, TaskState};

use super::budget::Budgets;
use super::core::{find_swarm, find_task};
use super::limits::RateLimits;
use super::model::{Model, now_ms};
use super::page::{Page, bad_token};
use super::views::{self, SwarmView, TaskDetailView, TaskView, WorkerView};
use crate::error::SchedError;

pub(super) fn swarm_view(model: &Model, budgets: &Budgets, id: &str) -> Result<SwarmView, SchedError> {
    find_swarm(model, id).map(|s| views::swarm_view(s, budgets.burn_rate(&s.id)))
}

pub(super) fn task_view(model: &Model, key: &TaskKey) -> Result<TaskView, SchedError> {
    find_task(model, key).map(|t| views::task_view(t, holder(model, key), model))
}

/// The worker running `key`'s current attempt, while it runs.
fn holder<'m>(model: &'m Model, key: &TaskKey) -> Option<&'m str> {
    let t = model.tasks().get(key)?;
    if t.state() != TaskState::Running {
        return None;
    }
    model.attempts().get(&(key.clone(), t.attempts)).map(|a| a.worker.as_str())
}

pub(super) fn list_swarms(model: &Model, budgets: &Budgets, page: &Page) -> (Vec<SwarmView>, String) {
    // Zero-padded so that text order is (created, id) order.
    let keyed = model
        .swarms()
        .values()
        .map(|s| {
            (format!("{:020}/{}", s.created_at.max(0), s.id), views::swarm_view(s, budgets.burn_rate(&s.id)))
        })
        .collect();
    page.take(keyed)
}

/// `mono` is the scheduler's monotonic clock, which leases are read on.
pub(super) fn list_workers(
    model: &Model,
    limits: &RateLimits,
    mono: u64,
    page: &Page,
) -> (Vec<WorkerView>, String) {
    let now = now_ms();
    let keyed = model
        .workers()
        .values()
        .map(|w| (w.id.clone(), views::worker_view(w, mono, limits.limited_until(w, now))))
        .collect();
    page.take(keyed)
}

/// A swarm's tasks in plan order. The token is the plan position of the
/// last task returned, so a page costs what it returns plus the tasks
/// its state filter skips.
pub(super) fn list_tasks(
    model: &Model,
    swarm_id: &str,
    states: &[TaskState],
    page: &Page,
) -> Result<(Vec<TaskView>, String), SchedError> {
    let s = find_swarm(model, swarm_id)?;
    let start = match page.token.as_str() {
        "" => 0,
        t => t.parse::<usize>().ok().filter(|i| *i < s.tasks.len()).map(|i| i + 1).ok_or_else(bad_token)?,
    };
    let mut views = Vec::new();
    let mut next = String::new();
    let mut last = 0;
    for (i, key) in s.tasks.iter().enumerate().skip(start) {
        let Some(t) = model.tasks().get(key) else { continue };
        if !states.is_empty() && !states.contains(&t.state()) {
            continue;
        }
        if views.len() == page.size {
            next = last.to_string();
            break;
        }
        views.push(views::task_view(t, holder(model, key), model));
        last = i;
    }
    Ok((views, next))
}

pub(super) fn task_detail(model: &Model, key: &TaskKey) -> Result<TaskDetailView, SchedError> {
    let t = find_task(model, key)?;
    Ok(views::task_detail_view(t, holder(model, key), model))
}
