//! A task, and its whole record: prompt, attempts, events, branch report.
//!
//! `TaskView` is the one read shape of a task: the controller's scheduler
//! builds it from its model, `From<TaskView> for v1::Task` puts it on the
//! wire, and `From<&v1::Task>` reads it back for swarmctl, the dashboard
//! and the MCP tools.

use serde::Serialize;
use swarm_proto::v1;

use crate::names::{state_number, task_state};
use crate::{AttemptView, BranchReportView, EventView, UsageView};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    /// Whole id: `swarm/task`.
    pub id: String,
    pub swarm: String,
    /// The task's id within its swarm, as `deps` name tasks.
    pub task: String,
    pub title: String,
    pub state: String,
    pub deps: Vec<String>,
    /// The globs of the files it owns.
    pub files: Vec<String>,
    pub attempts: u32,
    pub retries_used: u32,
    pub worker: String,
    pub merge_commit: String,
    pub reason: String,
    pub percent: u32,
    pub step: String,
    pub pending_question: String,
    /// Choices offered with the pending question; the answer may be one of
    /// them or free text.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_options: Vec<String>,
    pub updated_at_unix_ms: i64,
    pub usage: UsageView,
    /// The branch report's merge recommendation once the work is done.
    pub recommendation: String,
    /// What the scheduler expects it to take (ms) and where that came
    /// from (the plan's estimate, or what was learned).
    pub expected_ms: u64,
    pub expected_source: String,
    /// When its first attempt started and its latest ended (0: not yet).
    /// On the wire so a summary needs no call per task; the JSON has
    /// never carried them, and keeps its shape.
    #[serde(skip)]
    pub first_started_at_unix_ms: i64,
    #[serde(skip)]
    pub last_ended_at_unix_ms: i64,
    /// Its latest work attempt's start and end (0: not yet), which
    /// `Timing` sets against `expected_ms`; a reviewer's attempt is not
    /// its work. `Timing` is what the JSON carries of them.
    #[serde(skip)]
    pub work_started_at_unix_ms: i64,
    #[serde(skip)]
    pub work_ended_at_unix_ms: i64,
    /// Its budget in force across its attempts (0: no cap); `budget`
    /// prints it, the JSON does not carry it.
    #[serde(skip)]
    pub budget_usd: f64,
    #[serde(skip)]
    pub budget_tokens: u64,
}

impl From<&v1::Task> for TaskView {
    fn from(t: &v1::Task) -> Self {
        TaskView {
            id: format!("{}/{}", t.swarm_id, t.id),
            swarm: t.swarm_id.clone(),
            task: t.id.clone(),
            title: t.title.clone(),
            state: task_state(t.state),
            deps: t.deps.clone(),
            files: t.owned_globs.clone(),
            attempts: t.attempts,
            retries_used: t.retries_used,
            worker: t.worker_id.clone(),
            merge_commit: t.merge_commit.clone(),
            reason: t.reason.clone(),
            percent: t.percent,
            step: t.step.clone(),
            pending_question: t.pending_question.clone(),
            pending_options: t.pending_options.clone(),
            updated_at_unix_ms: t.updated_at_unix_ms,
            usage: UsageView::from(t.usage.as_ref()),
            recommendation: t.recommendation.clone(),
            expected_ms: t.expected_ms,
            expected_source: t.expected_source.clone(),
            first_started_at_unix_ms: t.first_started_at_unix_ms,
            last_ended_at_unix_ms: t.last_ended_at_unix_ms,
            work_started_at_unix_ms: t.work_started_at_unix_ms,
            work_ended_at_unix_ms: t.work_ended_at_unix_ms,
            budget_usd: t.budget.as_ref().map(|b| b.usd).unwrap_or_default(),
            budget_tokens: t.budget.as_ref().map(|b| b.tokens).unwrap_or_default(),
        }
    }
}

impl From<TaskView> for v1::Task {
    fn from(t: TaskView) -> Self {
        v1::Task {
            state: state_number(&t.state, "TASK_STATE_", |n| {
                v1::TaskState::from_str_name(n).map(|s| s as i32)
            }),
            swarm_id: t.swarm,
            id: t.task,
            title: t.title,
            deps: t.deps,
            owned_globs: t.files,
            attempts: t.attempts,
            retries_used: t.retries_used,
            worker_id: t.worker,
            merge_commit: t.merge_commit,
            reason: t.reason,
            percent: t.percent,
            step: t.step,
            updated_at_unix_ms: t.updated_at_unix_ms,
            pending_question: t.pending_question,
            pending_options: t.pending_options,
            usage: Some(v1::Usage::from(&t.usage)),
            first_started_at_unix_ms: t.first_started_at_unix_ms,
            last_ended_at_unix_ms: t.last_ended_at_unix_ms,
            recommendation: t.recommendation,
            budget: Some(v1::Budget { usd: t.budget_usd, tokens: t.budget_tokens }),
            expected_ms: t.expected_ms,
            expected_source: t.expected_source,
            work_started_at_unix_ms: t.work_started_at_unix_ms,
            work_ended_at_unix_ms: t.work_ended_at_unix_ms,
        }
    }
}

/// Everything known of one task. The scheduler builds it (its events left
/// for the Operator API to read from the store); one `From` pair carries it
/// over the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskDetailView {
    pub task: TaskView,
    pub prompt: String,
    pub attempts: Vec<AttemptView>,
    pub events: Vec<EventView>,
    pub branch_report: Option<BranchReportView>,
}

impl From<&v1::TaskDetail> for TaskDetailView {
    fn from(d: &v1::TaskDetail) -> Self {
        TaskDetailView {
            task: TaskView::from(d.task.as_ref().unwrap_or(&v1::Task::default())),
            prompt: d.prompt.clone(),
            attempts: d.attempts.iter().map(AttemptView::from).collect(),
            events: d.events.iter().map(EventView::from).collect(),
            branch_report: d.branch_report.as_ref().map(BranchReportView::from),
        }
    }
}

impl From<TaskDetailView> for v1::TaskDetail {
    fn from(d: TaskDetailView) -> Self {
        v1::TaskDetail {
            task: Some(v1::Task::from(d.task)),
            prompt: d.prompt,
            attempts: d.attempts.into_iter().map(v1::Attempt::from).collect(),
            events: d.events.into_iter().map(v1::Event::from).collect(),
            branch_report: d.branch_report.map(v1::BranchReport::from),
        }
    }
}

impl TaskDetailView {
    /// The latest merge report (`task.merged` or `task.conflict`), if any.
    pub fn merge_report(&self) -> Option<&EventView> {
        self.events.iter().rev().find(|e| e.is_merge_report())
    }

    /// Keeps only the latest `keep` events; returns how many were dropped.
    pub fn keep_latest_events(&mut self, keep: usize) -> usize {
        let omitted = self.events.len().saturating_sub(keep);
        self.events.drain(..omitted);
        omitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_has_its_whole_id_and_its_parts() {
        let t = v1::Task { swarm_id: "app/auth".into(), id: "api".into(), ..Default::default() };
        let v = TaskView::from(&t);
        assert_eq!((v.id.as_str(), v.swarm.as_str(), v.task.as_str()), ("app/auth/api", "app/auth", "api"));
    }

    #[test]
    fn a_task_goes_to_the_wire_and_back_unchanged() {
        let t = v1::Task {
            swarm_id: "app".into(),
            id: "api".into(),
            state: v1::TaskState::Merged as i32,
            deps: vec!["db".into()],
            owned_globs: vec!["src/**".into()],
            first_started_at_unix_ms: 5,
            last_ended_at_unix_ms: 9,
            usage: Some(v1::Usage { input_tokens: 3, cost_usd: 0.5, ..Default::default() }),
            budget: Some(v1::Budget { usd: 2.0, tokens: 7 }),
            expected_ms: 60_000,
            expected_source: "estimate".into(),
            work_started_at_unix_ms: 6,
            work_ended_at_unix_ms: 8,
            ..Default::default()
        };
        assert_eq!(v1::Task::from(TaskView::from(&t)), t);
        // A state this build does not know keeps its number on the way back.
        let newer = v1::Task { state: 99, ..t };
        assert_eq!(v1::Task::from(TaskView::from(&newer)).state, 99);
    }

    #[test]
    fn a_detail_goes_to_the_wire_and_back_unchanged() {
        let d = v1::TaskDetail {
            task: Some(v1::Task { swarm_id: "app".into(), id: "api".into(), ..Default::default() }),
            prompt: "do it".into(),
            attempts: vec![v1::Attempt { number: 1, worker_id: "w".into(), ..Default::default() }],
            events: vec![v1::Event { id: 4, data: r#"{"a":1}"#.into(), ..Default::default() }],
            branch_report: Some(v1::BranchReport {
                branch: "swarm/app/api".into(),
                recommendation: "ready".into(),
                reviews: vec![v1::ReviewRecord {
                    decision: "approve".into(),
                    by: "op".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let mut back = v1::TaskDetail::from(TaskDetailView::from(&d));
        // A task, attempt and its usage come back with their empty parts set.
        back.task = d.task.clone();
        back.attempts[0].usage = None;
        assert_eq!(back, d);
    }

    #[test]
    fn detail_keeps_the_latest_events_and_finds_the_last_merge_report() {
        let ev = |id: u64, kind: &str| v1::Event { id, kind: kind.into(), ..Default::default() };
        let d = v1::TaskDetail {
            events: vec![ev(1, "task.merged"), ev(2, "a"), ev(3, "task.conflict"), ev(4, "b")],
            ..Default::default()
        };
        let mut view = TaskDetailView::from(&d);
        assert_eq!(view.merge_report().map(|e| e.id), Some(3));
        assert_eq!(view.keep_latest_events(2), 2);
        assert_eq!(view.events.iter().map(|e| e.id).collect::<Vec<_>>(), vec![3, 4]);
    }
}
