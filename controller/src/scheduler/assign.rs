//! Matching READY tasks to idle workers, best first (priority, critical
//! path, fair share between swarms, each swarm's `max_parallel`: the
//! model's ready queue gives that order): labels, and exclusive file
//! ownership between live attempts.

use swarm_core::plan::task_branch;
use swarm_core::{AttemptState, Outcome, TaskKey};

use super::core::Core;
use super::limits::RateLimits;
use super::model::{Attempt, Model, Task, Transition};
use super::outbound::{AgentAssign, AssignSpec, AttemptHandle, Outbound};
use super::{budget, now_ms, review, task_text};

/// Gives READY tasks to idle workers until one side runs out.
///
/// A worker whose scan of the ready set found nothing is not scanned
/// again until something could change the answer: a task became READY
/// or left RUNNING, a worker (re)connected, or a skipped task's backoff
/// ran out. So an idle fleet facing tasks it cannot take costs nothing
/// per tick, however many tasks wait.
pub(super) fn schedule(core: &mut Core, limits: &RateLimits) {
    if core.model.nothing_ready() {
        return;
    }
    // Critical paths wait for a swarm's tasks to be all added; ranking
    // changes what a scan finds.
    if core.model.ranks_stale() {
        let _span = tracing::debug_span!("rank_ready").entered();
        core.model.apply(Transition::RankReady);
        core.scan.changed();
    }
    let now = now_ms();
    if now >= core.scan.due_ms {
        core.scan.found_nothing.clear();
        core.scan.due_ms = i64::MAX;
    }
    let epoch = core.scan.epoch;
    let mut idle: Vec<String> = core
        .model
        .workers()
        .values()
        .filter(|w| w.is_idle() && core.scan.found_nothing.get(&w.id) != Some(&epoch))
        .map(|w| w.id.clone())
        .collect();
    if idle.is_empty() {
        return;
    }
    idle.sort();
    // READY agent tasks a budget holds: BLOCKED after the scan.
    let mut over_budget: Vec<(TaskKey, String)> = Vec::new();
    for worker_id in idle {
        let Some(worker) = core.model.workers().get(&worker_id) else { continue };
        core.scan.full_scans += 1;
        let mut chosen = None;
        for key in core.model.ready() {
            let Some(task) = core.model.tasks().get(key) else { continue };
            if task.not_before > now {
                core.scan.due_ms = core.scan.due_ms.min(task.not_before);
                continue;
            }
            if !worker.satisfies(&task.spec.labels) || core.model.is_paused(&key.swarm) {
                continue;
            }
            if task.spec.agent.is_some() {
                if let Some(why) = budget::over_budget(core.model, key) {
                    if !over_budget.iter().any(|(k, _)| k == key) {
                        over_budget.push((key.clone(), why));
                    }
                    continue;
                }
                if let Some(until) = limits.limited_until(worker, now) {
                    core.scan.due_ms = core.scan.due_ms.min(until);
                    continue;
                }
                if waits_for_its_session(core.model, task, &worker_id) {
                    continue;
                }
            }
            if core.model.running().conflicts_for(key, &task.ownership()) {
                continue;
            }
            chosen = Some(key.clone());
            break;
        }
        let Some(key) = chosen else {
            core.scan.found_nothing.insert(worker_id, epoch);
            if core.model.nothing_ready() {
                break;
            }
            continue;
        };
        assign(core, &worker_id, &key);
    }
    for (key, why) in over_budget {
        budget::block(core, &key, &why);
    }
}

/// Creates the next attempt of `key` on `worker_id`.
fn assign(core: &mut Core, worker_id: &str, key: &TaskKey) {
    let Some(task) = core.model.tasks().get(key) else { return };
    let number = task.attempts + 1;
    let base = if task.resume_commit.is_empty() {
        core.model.swarms().get(&key.swarm).map(|s| s.integration_head.clone()).unwrap_or_default()
    } else {
        task.resume_commit.clone()
    };
    let kind = task.spec.agent.as_ref().map(|a| a.kind.as_str().to_string()).unwrap_or_default();
    let _span = tracing::info_span!("assign", swarm = %key.swarm, task = %key, attempt = %key.attempt(number), worker = worker_id)
        .entered();
    core.edit_task(key, |task| {
        task.attempts = number;
        task.percent = 0;
        task.step.clear();
    });
    core.begin_attempt(key, number, worker_id, base, kind);
    core.to_running(key, &format!("attempt {number} assigned to {worker_id}"));
    if let Some(spec) = assign_spec(core.model, key, number) {
        core.send(worker_id, Outbound::Assign(Box::new(spec)));
    }
}

/// The Assign message for an existing attempt (also re-sent when its
/// sidecar reconnects without it).
pub(super) fn assign_spec(model: &Model, key: &TaskKey, number: u32) -> Option<AssignSpec> {
    if model.is_reviewer(key, number) {
        return review::assign_spec(model, key, number);
    }
    let task = model.tasks().get(key)?;
    let attempt = model.attempts().get(&(key.clone(), number))?;
    let deps: Vec<(String, String)> = task
        .spec
        .deps
        .iter()
        .filter_map(|d| model.tasks().get(&TaskKey::new(key.swarm.clone(), d.clone())))
        .map(|t| (t.key.task.to_string(), t.notes.summary.clone()))
        .collect();
    Some(AssignSpec {
        attempt: AttemptHandle { task: key.clone(), number, token: attempt.token },
        base_commit: attempt.base_commit.clone(),
        branch: task_branch(&key.swarm, key.task.as_str()),
        title: task.spec.title.clone(),
        task_text: task_text::render(task, number, &deps),
        command: task.spec.command.to_vec(),
        env: task.spec.env.clone(),
        owned_globs: task.spec.files.clone(),
        verify: task.spec.verify.clone(),
        idle_timeout_secs: task.spec.idle_timeout_secs,
        max_restarts: task.spec.max_restarts,
        setup: task.spec.setup.clone(),
        setup_every_attempt: task.spec.setup_on == swarm_core::plan::SetupOn::Attempt,
        traceparent: String::new(),
        agent: task.spec.agent.as_ref().map(|spec| AgentAssign {
            spec: (**spec).clone(),
            resume_session: resumable_session(model, task, number)
                .filter(|a| a.worker == attempt.worker)
                .map(|a| a.agent.session_id.clone())
                .unwrap_or_default(),
            prices: model.prices(&key.swarm),
        }),
        review_diff_base: None,
        sandbox: task.spec.sandbox.clone(),
        secrets: task.spec.secrets.clone(),
        // An attempt after the one that spawned must take the child's
        // work too, whether or not its agent asks for it again.
        spawned_child: Some(key.swarm.child(&key.task))
            .filter(|c| task.spec.subplan.is_none() && model.swarms().contains_key(c))
            .map(|c| c.to_string())
            .unwrap_or_default(),
    })
}

/// The attempt before `number` if its agent session can be continued:
/// it stopped with its work kept (checkpoint, usage limit, interrupt,
/// lost worker, an escalation with a WIP commit) rather than failing,
/// and it named its session. Only its
/// own worker can resume it: the session and the worktree holding its
/// work live there.
pub(super) fn resumable_session<'m>(model: &'m Model, task: &Task, number: u32) -> Option<&'m Attempt> {
    let before = number.checked_sub(1)?;
    let previous = model.attempts().get(&(task.key.clone(), before))?;
    let kept = matches!(
        previous.state,
        AttemptState::Checkpointed
            | AttemptState::RateLimited
            | AttemptState::Cancelled
            | AttemptState::Lost
    ) || (previous.outcome == Some(Outcome::Escalation) && !previous.result_commit.is_empty())
        // A merged task its pull request's CI or reviewers reopened: the
        // session that wrote the code takes the feedback.
        || (previous.outcome == Some(Outcome::Success)
            && !task.notes.feedback.is_empty()
            && !model.is_reviewer(&task.key, before));
    (kept && !previous.agent.session_id.is_empty()).then_some(previous)
}

/// Whether `task` should wait for the worker that holds its session
/// rather than start afresh on `worker_id`: while that worker is
/// connected it will come back for it.
fn waits_for_its_session(model: &Model, task: &Task, worker_id: &str) -> bool {
    let Some(previous) = resumable_session(model, task, task.attempts + 1) else { return false };
    previous.worker != worker_id
        && model.workers().get(&previous.worker).is_some_and(|w| w.session.is_some() && !w.draining)
}
