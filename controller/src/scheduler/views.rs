//! Read-only snapshots handed to the Operator API.

use std::collections::BTreeMap;

use std::sync::Arc;

use swarm_core::plan::{ForgeSpec, Plan};
use swarm_core::{SwarmId, TaskState};
use swarm_proto::v1;
pub use swarm_view::{AttemptView, SwarmView, TaskDetailView, TaskView, WorkerView};
use swarm_view::{ForgeView, OriginView, UsageView};

pub use super::model::task_usage;
use super::model::{Attempt, ForgeState, Model, PendingReply, Swarm, SwarmState, Task, Worker};

/// A swarm as every client reads it (`swarm_view::SwarmView`), with what
/// its agents spent in the last hour as the breaker counts it.
pub fn swarm_view(swarm: &Swarm, usd_last_hour: f64) -> SwarmView {
    let tasks_by_state: BTreeMap<String, u32> = TaskState::ALL
        .iter()
        .zip(*swarm.counts())
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (s.as_str().to_string(), n))
        .collect();
    // A stalled swarm cancelled keeps its last description; only STALLED
    // shows one.
    let stall = swarm.stall.clone().filter(|_| swarm.state == SwarmState::Stalled);
    let (stalled_reason, stalled_tasks) = stall.map(|s| (s.reason, s.tasks)).unwrap_or_default();
    let budget = super::model::swarm_budget(swarm);
    SwarmView {
        id: swarm.id.to_string(),
        state: swarm.state.as_str().to_string(),
        base_branch: swarm.plan.base_branch.clone(),
        integration_branch: swarm.plan.integration_branch.clone(),
        integration_head: swarm.integration_head.clone(),
        task_count: swarm.tasks.len() as u32,
        tasks_by_state,
        created_at_unix_ms: swarm.created_at,
        stalled_reason,
        stalled_tasks,
        usage: UsageView::from(swarm.usage()),
        paused_reason: match (&swarm.control.paused, swarm.state) {
            (Some(p), SwarmState::Paused) => format!("{} (by the {})", p.reason, p.by),
            _ => String::new(),
        },
        budget_usd: budget.limit.usd.unwrap_or(0.0),
        budget_tokens: budget.limit.tokens.unwrap_or(0),
        max_usd_per_hour: budget.max_usd_per_hour.unwrap_or(0.0),
        usd_last_hour,
        forge: swarm.plan.forge.as_ref().map(|spec| {
            let remote_branch = spec.branch.clone().unwrap_or_else(|| swarm.plan.integration_branch.clone());
            forge_view(
                spec.provider.as_str(),
                remote_branch,
                swarm.control.forge.as_deref().cloned().unwrap_or_default(),
            )
        }),
        origin: swarm.origin.as_deref().map(origin_view),
    }
}

/// How a planned swarm was made, as every client reads it.
pub fn origin_view(o: &super::model::Origin) -> OriginView {
    OriginView {
        goal: o.goal.clone(),
        planner_agent: o.planner_agent.clone(),
        planner_session: o.planner_session.clone(),
        planner_usage: UsageView::from(&o.planner_usage),
        issue_url: o.issue_url.clone(),
    }
}

/// A swarm's `[forge]` and what its last sync did.
fn forge_view(provider: &str, remote_branch: String, state: ForgeState) -> ForgeView {
    let pull = state.pull.unwrap_or_default();
    ForgeView {
        provider: provider.to_string(),
        remote_branch,
        pushed: state.pushed,
        pull_number: pull.number,
        pull_url: pull.url,
        pull_state: pull.state,
        synced_at_unix_ms: state.synced_at,
        error: state.error,
        error_at_unix_ms: state.error_at,
        retry_at_unix_ms: state.retry_at,
        checks: state.checks,
        merge_commit: pull.merge_commit,
        flaky: state.flaky,
    }
}

/// A swarm with a `[forge]`, as the forge component needs it.
#[derive(Debug, Clone)]
pub struct ForgeTarget {
    pub swarm: SwarmId,
    pub spec: Arc<ForgeSpec>,
    /// Its plan: whose files a failure names.
    pub plan: Arc<Plan>,
    pub state: SwarmState,
    pub integration_branch: String,
    pub target_branch: String,
    pub integration_head: String,
    /// Tasks MERGED, of all.
    pub merged: u32,
    pub total: u32,
    pub forge: ForgeState,
    /// Agents' answers waiting to be posted.
    pub replies: Vec<PendingReply>,
}

impl ForgeTarget {
    /// Every swarm with a `[forge]` (only `one`, when given).
    pub fn all(model: &Model, one: Option<&SwarmId>) -> Vec<ForgeTarget> {
        let of = |swarm: &Swarm| {
            let spec = swarm.plan.forge.clone()?;
            Some(ForgeTarget {
                swarm: swarm.id.clone(),
                spec,
                plan: swarm.plan.clone(),
                state: swarm.state,
                integration_branch: swarm.plan.integration_branch.clone(),
                target_branch: swarm.plan.target_branch.clone(),
                integration_head: swarm.integration_head.clone(),
                merged: swarm.count(TaskState::Merged),
                total: swarm.tasks.len() as u32,
                forge: swarm.control.forge.as_deref().cloned().unwrap_or_default(),
                replies: swarm.control.feedback.as_deref().map(|f| f.replies.clone()).unwrap_or_default(),
            })
        };
        match one {
            Some(id) => model.swarms().get(id).and_then(of).into_iter().collect(),
            None => model.swarms().values().filter_map(of).collect(),
        }
    }
}

/// A task as every client reads it: the same `swarm_view::TaskView` the
/// wire carries and swarmctl, the dashboard and the MCP tools show, with
/// what the scheduler expects it to take (`Model::expected`).
pub fn task_view(task: &Task, worker: Option<&str>, model: &Model) -> TaskView {
    let attempts = model.attempts();
    let question = task.notes.pending_question.as_ref();
    let budget = super::model::task_budget(task);
    // Its latest work attempt (a reviewer's is not its work); once that
    // succeeded, what was expected of it leaves out what it took.
    let work = (1..=task.attempts)
        .rev()
        .filter(|n| !model.is_reviewer(&task.key, *n))
        .find_map(|n| attempts.get(&(task.key.clone(), n)));
    let took = work
        .filter(|a| {
            a.state == swarm_core::AttemptState::Succeeded && a.ended_at > a.started_at && a.started_at > 0
        })
        .map(|a| (a.ended_at - a.started_at) as u64);
    let expected = match took {
        Some(ms) => model.expected_before(&task.key, ms),
        None => model.expected(&task.key),
    };
    let (expected_ms, expected_source) =
        expected.map(|(ms, source)| (ms, source.as_str())).unwrap_or((0, ""));
    TaskView {
        id: task.key.to_string(),
        swarm: task.key.swarm.to_string(),
        task: task.key.task.to_string(),
        title: task.spec.title.clone(),
        state: swarm_view::names::task_state(v1::TaskState::from(task.state()) as i32),
        deps: task.spec.deps.iter().map(|d| d.to_string()).collect(),
        files: task.spec.files.clone(),
        attempts: task.attempts,
        retries_used: task.retries_used,
        worker: worker.unwrap_or_default().to_string(),
        merge_commit: task.merge_commit.clone(),
        reason: task.reason.clone(),
        percent: task.percent,
        step: task.step.clone(),
        pending_question: question.map(|q| q.text.clone()).unwrap_or_default(),
        pending_options: question.map(|q| q.options.clone()).unwrap_or_default(),
        updated_at_unix_ms: task.updated_at,
        usage: UsageView::from(&task_usage(task, attempts)),
        recommendation: super::branch_report::recommendation(task).to_string(),
        expected_ms,
        expected_source: expected_source.to_string(),
        first_started_at_unix_ms: attempts.get(&(task.key.clone(), 1)).map(|a| a.started_at).unwrap_or(0),
        last_ended_at_unix_ms: attempts
            .get(&(task.key.clone(), task.attempts))
            .map(|a| a.ended_at)
            .unwrap_or(0),
        budget_usd: budget.usd.unwrap_or(0.0),
        budget_tokens: budget.tokens.unwrap_or(0),
        work_started_at_unix_ms: work.map_or(0, |a| a.started_at),
        work_ended_at_unix_ms: work.map_or(0, |a| a.ended_at),
    }
}

/// Everything the scheduler knows of a task: its view, prompt, attempts
/// and branch report. Its events are the Operator API's to read from the
/// store (the scheduler keeps no event history in memory).
pub fn task_detail_view(task: &Task, worker: Option<&str>, model: &Model) -> TaskDetailView {
    let attempts = model.attempts();
    TaskDetailView {
        task: task_view(task, worker, model),
        prompt: task.spec.prompt.clone(),
        attempts: (1..=task.attempts)
            .filter_map(|n| attempts.get(&(task.key.clone(), n)))
            .map(attempt_view)
            .collect(),
        events: Vec::new(),
        branch_report: Some(super::branch_report::branch_report(task, attempts)),
    }
}

/// An attempt as every client reads it (`swarm_view::AttemptView`).
pub fn attempt_view(a: &Attempt) -> AttemptView {
    AttemptView {
        number: a.number,
        state: swarm_view::names::attempt_state(v1::AttemptState::from(a.state) as i32),
        worker: a.worker.clone(),
        fencing_token: a.token,
        base_commit: a.base_commit.clone(),
        result_commit: a.result_commit.clone(),
        outcome: swarm_view::names::outcome(a.outcome.map(|o| v1::Outcome::from(o) as i32).unwrap_or(0)),
        exit_code: a.exit_code,
        summary: a.summary.clone(),
        error: a.error.clone(),
        started_at_unix_ms: a.started_at,
        ended_at_unix_ms: a.ended_at,
        tiers: a.tiers.clone(),
        agent: a.agent.kind.clone(),
        session_id: a.agent.session_id.clone(),
        usage: UsageView::from(&a.agent.usage),
    }
}

/// A worker as every client reads it (`swarm_view::WorkerView`).
pub fn worker_view(w: &Worker, now_ms: u64, limited_until: Option<i64>) -> WorkerView {
    let last_seen =
        w.session.as_ref().map(|s| s.last_seen.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(0);
    WorkerView {
        id: w.id.clone(),
        host: w.host.clone(),
        labels: w.labels.clone(),
        connected: w.session.is_some(),
        draining: w.draining,
        attempt: w.attempt().map(|(k, n)| k.attempt(*n).to_string()).unwrap_or_default(),
        heartbeat_age_ms: if w.session.is_some() { now_ms.saturating_sub(last_seen) } else { 0 },
        last_applied_seq: w.last_applied_seq,
        rate_limit_key: super::limits::limit_key(w),
        rate_limited_until_unix_ms: limited_until.unwrap_or(0),
    }
}

/// What a running attempt's agent may know of its task's surroundings:
/// the tasks it depends on and the other tasks of its swarm.
#[derive(Debug, Clone, Default)]
pub struct ContextView {
    pub dependencies: Vec<ContextTask>,
    pub siblings: Vec<ContextTask>,
}

#[derive(Debug, Clone)]
pub struct ContextTask {
    pub id: String,
    pub title: String,
    pub state: TaskState,
    pub reason: String,
    pub summary: String,
    pub owned_globs: Vec<String>,
}

impl ContextTask {
    fn of(task: &Task) -> ContextTask {
        ContextTask {
            id: task.key.task.to_string(),
            title: task.spec.title.clone(),
            state: task.state(),
            reason: task.reason.clone(),
            summary: task.notes.summary.clone(),
            owned_globs: task.spec.files.clone(),
        }
    }
}

impl ContextView {
    pub fn of(model: &super::model::Model, key: &swarm_core::TaskKey) -> ContextView {
        let Some(task) = model.tasks().get(key) else { return ContextView::default() };
        let of_swarm = |id: &swarm_core::TaskId| swarm_core::TaskKey::new(key.swarm.clone(), id.clone());
        let dependencies = task
            .spec
            .deps
            .iter()
            .filter_map(|d| model.tasks().get(&of_swarm(d)))
            .map(ContextTask::of)
            .collect();
        let siblings = model
            .swarms()
            .get(&key.swarm)
            .map(|s| s.tasks.iter().filter(|k| *k != key).filter_map(|k| model.tasks().get(k)))
            .into_iter()
            .flatten()
            .map(ContextTask::of)
            .collect();
        ContextView { dependencies, siblings }
    }
}

/// A spawned child swarm as its parent's agent sees it (`wait_children`).
#[derive(Debug, Clone, Default)]
pub struct ChildrenView {
    /// Empty when the task has no child.
    pub swarm: String,
    pub state: String,
    pub integration_head: String,
    pub tasks: Vec<ChildTaskView>,
    pub stalled: String,
}

#[derive(Debug, Clone)]
pub struct ChildTaskView {
    pub id: String,
    pub state: TaskState,
    pub reason: String,
    pub summary: String,
    pub merge_commit: String,
}

impl ChildrenView {
    pub fn of(model: &super::model::Model, child: &swarm_core::SwarmId) -> ChildrenView {
        let Some(swarm) = model.swarms().get(child) else { return ChildrenView::default() };
        let tasks = swarm
            .tasks
            .iter()
            .filter_map(|k| model.tasks().get(k))
            .map(|t| ChildTaskView {
                id: t.key.task.to_string(),
                state: t.state(),
                reason: t.reason.clone(),
                summary: t.notes.summary.clone(),
                merge_commit: t.merge_commit.clone(),
            })
            .collect();
        ChildrenView {
            swarm: child.to_string(),
            state: swarm.state.as_str().to_string(),
            integration_head: swarm.integration_head.clone(),
            tasks,
            stalled: swarm.stall.as_ref().map(|s| s.reason.clone()).unwrap_or_default(),
        }
    }
}
