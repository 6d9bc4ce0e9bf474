//! A swarm's progress report, for people (markdown) and scripts (JSON): the swarm at the root, one branch per task with its
//! status, progress and health, a checklist per task, and the integration
//! queue. A task that runs a sub-plan is reported with its child swarm's
//! report nested under it (`children`), down to the deepest level.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;
use swarm_proto::v1;

use crate::UsageView;
use crate::names::{swarm_state, task_state};
use crate::text::short_commit;

/// A running task whose worker was silent this long is at risk (yellow);
/// the controller's default lease is 10 s, so silence past it means the
/// worker is being lost (red).
const SILENT_YELLOW_MS: u64 = 5_000;
const SILENT_RED_MS: u64 = 10_000;
/// A task running longer than this is worth a look (yellow).
const LONG_RUNNING_MS: i64 = 30 * 60 * 1000;

#[derive(Debug, Serialize)]
pub struct Report {
    pub swarm: String,
    pub state: String,
    /// When PAUSED: why.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub paused_reason: String,
    pub health: Health,
    /// Tasks MERGED, of all.
    pub done: usize,
    pub total: usize,
    pub integration_branch: String,
    pub integration_head: String,
    /// With a `[forge]`: the branch pushed and its pull request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forge: Option<crate::ForgeView>,
    /// What the swarm's own agents spent (planning is not in it).
    pub usage: UsageView,
    /// When a planner wrote its plan: the goal, the planner's session and
    /// what planning cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::OriginView>,
    pub branches: Vec<Branch>,
    /// What each branch's task was expected to take against what it took
    /// (in the branches' order), and how far off the swarm's expectations were.
    pub durations: crate::Timings,
    /// Tasks that succeeded and wait to land, oldest first.
    pub integration_queue: Vec<String>,
    /// What each queued task is doing, in the same order (its state's
    /// reason: queued for integration verify, or verifying on which
    /// sidecar).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub integration_status: Vec<String>,
    /// The child swarms of this swarm's sub-plan tasks (`app/auth` for task
    /// `auth` of `app`), each with its own report.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Report>,
}

#[derive(Debug, Serialize)]
pub struct Branch {
    pub task: String,
    pub branch: String,
    pub state: String,
    pub health: Health,
    /// Why, when not green.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub health_reason: String,
    pub percent: u32,
    pub step: String,
    pub worker: String,
    pub attempts: u32,
    /// The branch report's merge recommendation (ready, needs_review,
    /// blocked); absent while the task works.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub recommendation: String,
    pub checklist: Vec<Check>,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub item: &'static str,
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Green,
    Yellow,
    Red,
}

impl Health {
    fn mark(self) -> &'static str {
        match self {
            Health::Green => "🟢 green",
            Health::Yellow => "🟡 yellow",
            Health::Red => "🔴 red",
        }
    }
}

/// Nests each report under its parent's (a child swarm `app/auth` under
/// `app`), down to the deepest level, and returns the report of `root`.
/// `reports` holds `root`'s and those of its descendants, in any order.
pub fn nest(root: &str, mut reports: Vec<Report>) -> Option<Report> {
    // Deepest first, so that each child is whole before it moves into its parent.
    reports.sort_by_key(|r| std::cmp::Reverse(r.swarm.matches('/').count()));
    let mut done: Vec<Report> = Vec::new();
    for mut report in reports {
        let (mine, rest): (Vec<Report>, Vec<Report>) = done
            .into_iter()
            .partition(|r| r.swarm.rsplit_once('/').is_some_and(|(parent, _)| parent == report.swarm));
        report.children = mine;
        report.children.sort_by(|a, b| a.swarm.cmp(&b.swarm));
        done = rest;
        done.push(report);
    }
    done.into_iter().find(|r| r.swarm == root)
}

/// The report of one swarm from its tasks and the fleet's workers (whose
/// heartbeats say whether a running task is at risk); `now` in unix ms.
pub fn build(swarm: &v1::Swarm, tasks: &[v1::Task], workers: &[v1::Worker], now: i64) -> Report {
    let heartbeat: HashMap<&str, &v1::Worker> = workers.iter().map(|w| (w.id.as_str(), w)).collect();
    let branches: Vec<Branch> = tasks.iter().map(|t| branch(swarm, t, &heartbeat, now)).collect();
    let done = tasks.iter().filter(|t| t.state == v1::TaskState::Merged as i32).count();
    let mut queue: Vec<&v1::Task> = tasks
        .iter()
        .filter(|t| {
            matches!(v1::TaskState::try_from(t.state), Ok(v1::TaskState::Succeeded | v1::TaskState::Merging))
        })
        .collect();
    queue.sort_by_key(|t| t.updated_at_unix_ms);
    let health = branches.iter().map(|b| b.health).max().unwrap_or(Health::Green);
    let views: Vec<crate::TaskView> = tasks.iter().map(crate::TaskView::from).collect();
    Report {
        swarm: swarm.id.clone(),
        state: swarm_state(swarm.state),
        paused_reason: swarm.paused_reason.clone(),
        health,
        done,
        total: tasks.len(),
        integration_branch: swarm.integration_branch.clone(),
        integration_head: swarm.integration_head.clone(),
        forge: swarm.forge.as_ref().map(crate::ForgeView::from),
        usage: UsageView::from(swarm.usage.as_ref()),
        origin: swarm.origin.as_ref().map(crate::OriginView::from),
        branches,
        durations: crate::Timings::of(&views, now),
        integration_queue: queue.iter().map(|t| t.id.clone()).collect(),
        integration_status: queue.iter().map(|t| t.reason.clone()).collect(),
        children: Vec::new(),
    }
}

fn branch(swarm: &v1::Swarm, t: &v1::Task, workers: &HashMap<&str, &v1::Worker>, now: i64) -> Branch {
    use v1::TaskState as S;
    let state = S::try_from(t.state).unwrap_or(S::Unspecified);
    let (health, health_reason) = match state {
        S::Failed | S::Conflict | S::Blocked | S::Escalated | S::Rejected => (Health::Red, t.reason.clone()),
        S::Review => (Health::Yellow, t.reason.clone()),
        S::Running => running_health(t, workers, now),
        _ if t.retries_used > 0 && state != S::Merged => {
            (Health::Yellow, format!("{} retries used", t.retries_used))
        }
        _ => (Health::Green, String::new()),
    };
    let reached = |s: S| state_rank(state) >= state_rank(s);
    let checklist = vec![
        Check { item: "dependencies merged", done: reached(S::Ready) },
        Check { item: "assigned to a worker", done: reached(S::Running) },
        Check { item: "worker succeeded and verified", done: reached(S::Succeeded) },
        Check { item: "merged into the integration branch", done: state == S::Merged },
    ];
    Branch {
        task: t.id.clone(),
        branch: branch_name(&swarm.id, &t.id),
        state: task_state(t.state),
        health,
        health_reason,
        percent: if state == S::Merged { 100 } else { t.percent },
        step: t.step.clone(),
        worker: t.worker_id.clone(),
        attempts: t.attempts,
        recommendation: t.recommendation.clone(),
        checklist,
    }
}

/// The task's branch (a child swarm's tasks' lie under their parent's).
fn branch_name(swarm: &str, task: &str) -> String {
    match swarm_core::SwarmId::new(swarm) {
        Ok(id) => swarm_core::plan::task_branch(&id, task),
        Err(_) => format!("swarm/{swarm}/{task}"),
    }
}

/// How far along the lifecycle a state is (branches that stopped rank
/// where they stopped).
fn state_rank(s: v1::TaskState) -> u8 {
    use v1::TaskState as S;
    match s {
        S::Unspecified | S::Pending => 0,
        S::Ready | S::Cancelled | S::Failed => 1,
        S::Running | S::Blocked | S::Escalated => 2,
        S::Succeeded | S::Merging | S::Conflict | S::Review | S::Rejected => 3,
        S::Merged => 4,
    }
}

fn running_health(t: &v1::Task, workers: &HashMap<&str, &v1::Worker>, now: i64) -> (Health, String) {
    let silent = workers.get(t.worker_id.as_str()).map(|w| (w.connected, w.heartbeat_age_ms));
    match silent {
        Some((false, _)) | None => return (Health::Red, format!("worker {} is not connected", t.worker_id)),
        Some((true, age)) if age >= SILENT_RED_MS => {
            return (Health::Red, format!("no heartbeat from {} for {} s", t.worker_id, age / 1000));
        }
        Some((true, age)) if age >= SILENT_YELLOW_MS => {
            return (Health::Yellow, format!("no heartbeat from {} for {} s", t.worker_id, age / 1000));
        }
        _ => {}
    }
    if !t.pending_question.is_empty() {
        return (Health::Yellow, format!("waiting for an answer: {}", t.pending_question));
    }
    let running_for = now - t.first_started_at_unix_ms.max(t.updated_at_unix_ms);
    if t.updated_at_unix_ms > 0 && running_for > LONG_RUNNING_MS {
        return (Health::Yellow, format!("running for {} min", running_for / 60_000));
    }
    (Health::Green, String::new())
}

pub fn markdown(r: &Report) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Swarm {} — {}", r.swarm, r.state);
    let _ = writeln!(md);
    if let Some(o) = &r.origin {
        // A goal of several lines stays inside its list item.
        let _ = writeln!(md, "- Goal: {}", o.goal_lines("  "));
        let _ = writeln!(md, "- Planned by: {}", o.planned_by());
        if !o.issue_url.is_empty() {
            let _ = writeln!(md, "- Issue: {}", o.issue_url);
        }
    }
    if !r.paused_reason.is_empty() {
        let _ = writeln!(md, "- Paused: {}", r.paused_reason);
    }
    let _ = writeln!(md, "- Health: {}", r.health.mark());
    let _ = writeln!(md, "- Progress: {}/{} merged", r.done, r.total);
    let _ =
        writeln!(md, "- Integration: `{}` at `{}`", r.integration_branch, short_commit(&r.integration_head));
    if let Some(forge) = &r.forge {
        let _ = writeln!(md, "- Pull request: {}", forge.line());
    }
    let cost = r.usage.text();
    if !cost.is_empty() {
        let _ = match &r.origin {
            Some(_) => writeln!(md, "- Cost: {cost} ({})", crate::origin::PLANNING_EXCLUDED),
            None => writeln!(md, "- Cost: {cost}"),
        };
    }
    let _ = writeln!(md, "- Durations: {}", r.durations.line());
    branches_table(&mut md, r);
    let _ = writeln!(md, "\n## Checklists\n");
    for b in &r.branches {
        let _ = writeln!(md, "### {} (`{}`)\n", b.task, b.branch);
        for c in &b.checklist {
            let _ = writeln!(md, "- [{}] {}", if c.done { "x" } else { " " }, c.item);
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "## Integration queue\n");
    if r.integration_queue.is_empty() {
        let _ = writeln!(md, "(empty)");
    }
    for (i, t) in r.integration_queue.iter().enumerate() {
        match r.integration_status.get(i).filter(|s| !s.is_empty()) {
            Some(status) => writeln!(md, "{}. {t}: {status}", i + 1),
            None => writeln!(md, "{}. {t}", i + 1),
        }
        .ok();
    }
    for child in &r.children {
        // One heading level deeper per level of nesting.
        let _ = writeln!(md, "\n---\n");
        for line in markdown(child).lines() {
            let deeper = if line.starts_with('#') { "#" } else { "" };
            let _ = writeln!(md, "{deeper}{line}");
        }
    }
    md
}

/// The report's table of branches, one row a task, with what it was
/// expected to take and took.
fn branches_table(md: &mut String, r: &Report) {
    let _ = writeln!(md, "\n## Branches\n");
    let _ =
        writeln!(md, "| task | state | progress | health | worker | attempts | merge | expected | actual |");
    let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (i, b) in r.branches.iter().enumerate() {
        let (expected, actual) = r
            .durations
            .tasks
            .get(i)
            .map_or_else(|| ("-".to_string(), "-".to_string()), |t| (t.expected_text(), t.actual_text()));
        let progress =
            if b.step.is_empty() { format!("{}%", b.percent) } else { format!("{}% {}", b.percent, b.step) };
        let health = if b.health_reason.is_empty() {
            b.health.mark().to_string()
        } else {
            format!("{} ({})", b.health.mark(), b.health_reason.replace('|', "/"))
        };
        let worker = if b.worker.is_empty() { "-" } else { &b.worker };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {expected} | {actual} |",
            b.task,
            b.state,
            progress,
            health,
            worker,
            b.attempts,
            if b.recommendation.is_empty() { "-" } else { &b.recommendation }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, state: v1::TaskState, worker: &str) -> v1::Task {
        v1::Task { id: id.into(), state: state as i32, worker_id: worker.into(), ..Default::default() }
    }

    #[test]
    fn health_comes_from_state_heartbeat_and_questions() {
        let swarm = v1::Swarm { id: "s".into(), ..Default::default() };
        let mut asking = task("q", v1::TaskState::Running, "w1");
        asking.pending_question = "Which colour?".into();
        let tasks = vec![
            task("a", v1::TaskState::Merged, ""),
            task("b", v1::TaskState::Running, "w1"),
            task("c", v1::TaskState::Running, "w2"),
            task("d", v1::TaskState::Failed, ""),
            task("e", v1::TaskState::Succeeded, ""),
            asking,
        ];
        let workers = vec![
            v1::Worker { id: "w1".into(), connected: true, heartbeat_age_ms: 100, ..Default::default() },
            v1::Worker { id: "w2".into(), connected: true, heartbeat_age_ms: 20_000, ..Default::default() },
        ];
        let r = build(&swarm, &tasks, &workers, 0);
        let health: Vec<Health> = r.branches.iter().map(|b| b.health).collect();
        use Health::*;
        assert_eq!(health, vec![Green, Green, Red, Red, Green, Yellow]);
        assert_eq!((r.done, r.total, r.health), (1, 6, Red));
        assert_eq!(r.integration_queue, vec!["e"]);
        assert!(r.branches[0].checklist.iter().all(|c| c.done));
        assert!(!r.branches[4].checklist[3].done && r.branches[4].checklist[2].done);
        let md = markdown(&r);
        assert!(md.contains("- Progress: 1/6 merged") && md.contains("## Integration queue\n\n1. e"), "{md}");
        assert!(md.contains("- [x] merged into the integration branch"), "{md}");
    }

    #[test]
    fn a_planned_swarm_reports_its_goal_and_planning_cost_apart_from_its_own() {
        let swarm = v1::Swarm {
            id: "s".into(),
            usage: Some(v1::Usage { output_tokens: 5, cost_usd: 1.0, ..Default::default() }),
            origin: Some(v1::SwarmOrigin {
                goal: "first line\nsecond line".into(),
                planner_agent: "claude".into(),
                planner_session: "sess-1".into(),
                planner_usage: Some(v1::Usage { input_tokens: 3, cost_usd: 0.25, ..Default::default() }),
                issue_url: "https://github.com/o/r/issues/1".into(),
            }),
            ..Default::default()
        };
        let md = markdown(&build(&swarm, &[], &[], 0));
        assert!(md.contains("- Goal: first line\n  second line\n"), "{md}");
        assert!(md.contains("- Planned by: claude session sess-1 cost $0.2500 (3 in,"), "{md}");
        assert!(md.contains("- Issue: https://github.com/o/r/issues/1"), "{md}");
        assert!(
            md.contains("- Cost: $1.0000 (0 in, 5 out, 0 cache read, 0 cache write) (its agents only"),
            "{md}"
        );
        let plain = markdown(&build(&v1::Swarm { id: "h".into(), ..Default::default() }, &[], &[], 0));
        assert!(!plain.contains("Goal:") && !plain.contains("Planned by"), "{plain}");
    }

    #[test]
    fn each_branch_shows_what_was_expected_of_it_and_what_it_took() {
        let swarm = v1::Swarm { id: "s".into(), ..Default::default() };
        let timed = |id: &str, state, expected: (u64, &str), work: (i64, i64)| v1::Task {
            expected_ms: expected.0,
            expected_source: expected.1.into(),
            work_started_at_unix_ms: work.0,
            work_ended_at_unix_ms: work.1,
            ..task(id, state, "")
        };
        let tasks = vec![
            timed("est", v1::TaskState::Merged, (60_000, "estimate"), (1_000, 91_000)),
            timed("learned", v1::TaskState::Merged, (10_000, "earlier run"), (1_000, 31_000)),
            timed("new", v1::TaskState::Pending, (1_000, "guess"), (0, 0)),
        ];
        let r = build(&swarm, &tasks, &[], 100_000);
        let md = markdown(&r);
        let row = |name: &str| md.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap_or_default();
        assert!(row("est").ends_with("| 60s (estimate) | 90s (1.5×) |"), "{md}");
        assert!(row("learned").ends_with("| 10s (earlier run) | 30s (3.0×) ⚠ far over |"), "{md}");
        assert!(row("new").ends_with("| 1.0s (guess) | - |"), "{md}");
        assert!(md.contains("- Durations: 2 finished tasks expected 70s, took 2m; actual/expected median 2.2×; far over (>2×): learned"), "{md}");
        let html = crate::timeline_html::page(&r, &[]);
        assert!(
            html.contains("<td>10s (earlier run)</td><td class=\"red over\">30s (3.0×) ⚠ far over</td>"),
            "{html}"
        );
        assert!(html.contains("<li>Durations: 2 finished tasks"), "{html}");
    }

    #[test]
    fn children_nest_under_their_parents_at_every_depth() {
        let report = |id: &str| build(&v1::Swarm { id: id.into(), ..Default::default() }, &[], &[], 0);
        let all = ["app/b", "app", "app/a/x", "app/a", "other"].map(report).into_iter().collect();
        let root = nest("app", all).expect("the root's report");
        let names = |r: &Report| r.children.iter().map(|c| c.swarm.clone()).collect::<Vec<_>>();
        assert_eq!(names(&root), vec!["app/a", "app/b"]);
        assert_eq!(names(&root.children[0]), vec!["app/a/x"]);
        assert!(nest("missing", Vec::new()).is_none());
    }
}
