//! Output formats: `-o table|json|yaml`. Prost types stay at the edge:
//! every object is turned into a serde view here, then rendered.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use comfy_table::presets::NOTHING;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;
use swarm_proto::v1;

use crate::cli::Format;

mod branch_report;
mod usage;
pub use usage::UsageView;

/// An object that can be listed as table rows.
pub trait Row: Serialize {
    fn header() -> &'static [&'static str];
    fn cells(&self) -> Vec<String>;
}

/// Prints a list in `format`.
pub fn print_list<T: Row>(items: &[T], format: Format) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            let mut table = plain_table();
            table.set_header(T::header().to_vec());
            for item in items {
                table.add_row(item.cells());
            }
            println!("{table}");
        }
        Format::Json => println!("{}", serde_json::to_string_pretty(items)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(items)?),
    }
    Ok(())
}

/// Prints one object; the table format shows it as a one-row table.
pub fn print_one<T: Row>(item: &T, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Table => print_list(std::slice::from_ref(item), format),
        Format::Json => {
            println!("{}", serde_json::to_string_pretty(item)?);
            Ok(())
        }
        Format::Yaml => {
            print!("{}", serde_yaml::to_string(item)?);
            Ok(())
        }
    }
}

/// Prints any serializable value; `table` is the text used for the table format.
pub fn print_value<T: Serialize>(
    item: &T,
    format: Format,
    table: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    match format {
        Format::Table => println!("{}", table()),
        Format::Json => println!("{}", serde_json::to_string_pretty(item)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(item)?),
    }
    Ok(())
}

/// Prints one event as a line (table), a JSON line, or a YAML document.
pub fn print_event(event: &EventView, format: Format) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(out, "{}", event.line())?,
        Format::Json => writeln!(out, "{}", serde_json::to_string(event)?)?,
        Format::Yaml => write!(out, "---\n{}", serde_yaml::to_string(event)?)?,
    }
    out.flush()?;
    Ok(())
}

pub fn plain_table() -> Table {
    let mut table = Table::new();
    table.load_preset(NOTHING).set_content_arrangement(ContentArrangement::Disabled);
    table
}

/// `TASK_STATE_MERGED` → `MERGED`.
pub fn task_state(state: i32) -> String {
    enum_name(v1::TaskState::try_from(state).map(|s| s.as_str_name()), "TASK_STATE_", state)
}

pub fn attempt_state(state: i32) -> String {
    enum_name(v1::AttemptState::try_from(state).map(|s| s.as_str_name()), "ATTEMPT_STATE_", state)
}

pub fn outcome(o: i32) -> String {
    enum_name(v1::Outcome::try_from(o).map(|s| s.as_str_name()), "OUTCOME_", o)
}

pub fn swarm_state(state: i32) -> String {
    enum_name(v1::SwarmState::try_from(state).map(|s| s.as_str_name()), "SWARM_STATE_", state)
}

fn enum_name<E>(name: Result<&'static str, E>, prefix: &str, raw: i32) -> String {
    match name {
        Ok(n) => n.strip_prefix(prefix).unwrap_or(n).to_string(),
        Err(_) => format!("UNKNOWN({raw})"),
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A coarse age, kubectl style: `5s`, `3m`, `2h`, `4d`.
pub fn age(at_unix_ms: i64) -> String {
    if at_unix_ms <= 0 {
        return "-".into();
    }
    duration_text(now_ms().saturating_sub(at_unix_ms).max(0) as u64)
}

pub fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 if ms < 10_000 => format!("{:.1}s", ms as f64 / 1000.0),
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `HH:MM:SS.mmm` in UTC, for event lines.
pub fn clock(at_unix_ms: i64) -> String {
    let ms = at_unix_ms.rem_euclid(86_400_000);
    format!("{:02}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

pub fn short_commit(c: &str) -> String {
    if c.is_empty() { "-".into() } else { c.chars().take(10).collect() }
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_string() }
}

#[derive(Debug, Serialize)]
pub struct SwarmView {
    pub id: String,
    pub state: String,
    pub base_branch: String,
    pub integration_branch: String,
    pub integration_head: String,
    pub task_count: u32,
    pub tasks_by_state: BTreeMap<String, u32>,
    pub created_at_unix_ms: i64,
    /// When STALLED: why, and the tasks that need the operator.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stalled_reason: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalled_tasks: Vec<String>,
    pub usage: UsageView,
    /// When PAUSED: why.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub paused_reason: String,
    /// The swarm's caps (0: none), the breaker, and its last hour.
    pub budget_usd: f64,
    pub budget_tokens: u64,
    pub max_usd_per_hour: f64,
    pub usd_last_hour: f64,
}

impl From<&v1::Swarm> for SwarmView {
    fn from(s: &v1::Swarm) -> Self {
        SwarmView {
            id: s.id.clone(),
            state: swarm_state(s.state),
            base_branch: s.base_branch.clone(),
            integration_branch: s.integration_branch.clone(),
            integration_head: s.integration_head.clone(),
            task_count: s.task_count,
            tasks_by_state: s.tasks_by_state.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            created_at_unix_ms: s.created_at_unix_ms,
            stalled_reason: s.stalled_reason.clone(),
            stalled_tasks: s.stalled_tasks.clone(),
            usage: UsageView::from(s.usage.as_ref()),
            paused_reason: s.paused_reason.clone(),
            budget_usd: s.budget.as_ref().map(|b| b.usd).unwrap_or_default(),
            budget_tokens: s.budget.as_ref().map(|b| b.tokens).unwrap_or_default(),
            max_usd_per_hour: s.max_usd_per_hour,
            usd_last_hour: s.usd_last_hour,
        }
    }
}

impl Row for SwarmView {
    fn header() -> &'static [&'static str] {
        &["SWARM", "STATE", "TASKS", "PROGRESS", "INTEGRATION", "HEAD", "COST", "AGE"]
    }
    fn cells(&self) -> Vec<String> {
        let progress: Vec<String> =
            self.tasks_by_state.iter().filter(|(_, n)| **n > 0).map(|(s, n)| format!("{s}={n}")).collect();
        vec![
            self.id.clone(),
            self.state.clone(),
            self.task_count.to_string(),
            dash(&progress.join(",")),
            self.integration_branch.clone(),
            short_commit(&self.integration_head),
            self.usage.cost(),
            age(self.created_at_unix_ms),
        ]
    }
}

#[derive(Debug, Serialize)]
pub struct TaskView {
    /// Full id: `swarm/task`.
    pub id: String,
    pub title: String,
    pub state: String,
    pub deps: Vec<String>,
    pub files: Vec<String>,
    pub attempts: u32,
    pub retries_used: u32,
    pub worker: String,
    pub merge_commit: String,
    pub reason: String,
    pub percent: u32,
    pub step: String,
    pub pending_question: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_options: Vec<String>,
    pub updated_at_unix_ms: i64,
    pub usage: UsageView,
    /// The branch report's merge recommendation once the work is done.
    pub recommendation: String,
}

impl From<&v1::Task> for TaskView {
    fn from(t: &v1::Task) -> Self {
        TaskView {
            id: format!("{}/{}", t.swarm_id, t.id),
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
        }
    }
}

impl Row for TaskView {
    fn header() -> &'static [&'static str] {
        &["TASK", "STATE", "ATTEMPTS", "WORKER", "DEPS", "MERGE", "COST", "AGE", "REASON"]
    }
    fn cells(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.state.clone(),
            self.attempts.to_string(),
            dash(&self.worker),
            dash(&self.deps.join(",")),
            short_commit(&self.merge_commit),
            self.usage.cost(),
            age(self.updated_at_unix_ms),
            dash(swarm_core::names::truncate(&self.reason, 60)),
        ]
    }
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub connected: bool,
    pub draining: bool,
    pub attempt: String,
    pub heartbeat_age_ms: u64,
    pub last_applied_seq: u64,
    /// The agent usage limit it shares, and until when it holds (0: none).
    pub rate_limit_key: String,
    pub rate_limited_until_unix_ms: i64,
}

impl From<&v1::Worker> for WorkerView {
    fn from(w: &v1::Worker) -> Self {
        WorkerView {
            id: w.id.clone(),
            host: w.host.clone(),
            labels: w.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            connected: w.connected,
            draining: w.draining,
            attempt: w.attempt.clone(),
            heartbeat_age_ms: w.heartbeat_age_ms,
            last_applied_seq: w.last_applied_seq,
            rate_limit_key: w.rate_limit_key.clone(),
            rate_limited_until_unix_ms: w.rate_limited_until_unix_ms,
        }
    }
}

impl Row for WorkerView {
    fn header() -> &'static [&'static str] {
        &["WORKER", "HOST", "STATUS", "ATTEMPT", "HEARTBEAT", "RATE LIMIT", "LABELS"]
    }
    fn cells(&self) -> Vec<String> {
        let status = match (self.connected, self.draining) {
            (true, false) => "connected",
            (true, true) => "draining",
            (false, _) => "disconnected",
        };
        let labels: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        vec![
            self.id.clone(),
            dash(&self.host),
            status.into(),
            dash(&self.attempt),
            duration_text(self.heartbeat_age_ms),
            if self.rate_limited_until_unix_ms > now_ms() {
                format!("until {}", clock(self.rate_limited_until_unix_ms))
            } else {
                "-".into()
            },
            dash(&labels.join(",")),
        ]
    }
}

#[derive(Debug, Serialize)]
pub struct EventView {
    pub id: u64,
    pub at_unix_ms: i64,
    pub swarm: String,
    pub task: String,
    pub attempt: u32,
    pub worker: String,
    pub kind: String,
    pub message: String,
    pub data: serde_json::Value,
}

impl From<&v1::Event> for EventView {
    fn from(e: &v1::Event) -> Self {
        let data = if e.data.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&e.data).unwrap_or_else(|_| serde_json::Value::String(e.data.clone()))
        };
        EventView {
            id: e.id,
            at_unix_ms: e.at_unix_ms,
            swarm: e.swarm_id.clone(),
            task: e.task_id.clone(),
            attempt: e.attempt,
            worker: e.worker_id.clone(),
            kind: e.kind.clone(),
            message: e.message.clone(),
            data,
        }
    }
}

impl EventView {
    /// `#42 12:00:01.123 demo/api#2 task.running  assigned to local-1`
    pub fn line(&self) -> String {
        let mut subject = self.swarm.clone();
        if !self.task.is_empty() {
            subject = format!("{subject}/{}", self.task);
        }
        if self.attempt > 0 {
            subject = format!("{subject}#{}", self.attempt);
        }
        format!(
            "#{:<5} {} {:<22} {:<20} {}",
            self.id,
            clock(self.at_unix_ms),
            subject,
            self.kind,
            self.message
        )
    }
}

impl Row for EventView {
    fn header() -> &'static [&'static str] {
        &["ID", "TIME", "TASK", "ATTEMPT", "KIND", "MESSAGE"]
    }
    fn cells(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            clock(self.at_unix_ms),
            format!("{}/{}", self.swarm, self.task),
            self.attempt.to_string(),
            self.kind.clone(),
            self.message.clone(),
        ]
    }
}

#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub number: u32,
    pub state: String,
    pub worker: String,
    pub fencing_token: u64,
    pub base_commit: String,
    pub result_commit: String,
    pub outcome: String,
    pub exit_code: i32,
    pub summary: String,
    pub error: String,
    pub started_at_unix_ms: i64,
    pub ended_at_unix_ms: i64,
    pub tiers: Vec<TierView>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    pub usage: UsageView,
}

#[derive(Debug, Serialize)]
pub struct TierView {
    pub name: String,
    pub passed: bool,
    pub blocking: bool,
    pub exit_code: i32,
    pub duration_ms: u64,
    pub output_tail: String,
}

impl From<&v1::Attempt> for AttemptView {
    fn from(a: &v1::Attempt) -> Self {
        AttemptView {
            number: a.number,
            state: attempt_state(a.state),
            worker: a.worker_id.clone(),
            fencing_token: a.fencing_token,
            base_commit: a.base_commit.clone(),
            result_commit: a.result_commit.clone(),
            outcome: outcome(a.outcome),
            exit_code: a.exit_code,
            summary: a.summary.clone(),
            error: a.error.clone(),
            started_at_unix_ms: a.started_at_unix_ms,
            ended_at_unix_ms: a.ended_at_unix_ms,
            tiers: a
                .tiers
                .iter()
                .map(|t| TierView {
                    name: t.name.clone(),
                    passed: t.passed,
                    blocking: t.blocking,
                    exit_code: t.exit_code,
                    duration_ms: t.duration_ms,
                    output_tail: t.output_tail.clone(),
                })
                .collect(),
            agent: a.agent.clone(),
            session_id: a.session_id.clone(),
            usage: UsageView::from(a.usage.as_ref()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TaskDetailView {
    pub task: TaskView,
    pub prompt: String,
    pub attempts: Vec<AttemptView>,
    pub events: Vec<EventView>,
    pub branch_report: Option<branch_report::BranchReportView>,
}

impl From<&v1::TaskDetail> for TaskDetailView {
    fn from(d: &v1::TaskDetail) -> Self {
        TaskDetailView {
            task: d.task.as_ref().map(TaskView::from).unwrap_or_else(|| TaskView::from(&v1::Task::default())),
            prompt: d.prompt.clone(),
            attempts: d.attempts.iter().map(AttemptView::from).collect(),
            events: d.events.iter().map(EventView::from).collect(),
            branch_report: d.branch_report.as_ref().map(branch_report::BranchReportView::from),
        }
    }
}

impl TaskDetailView {
    /// kubectl-describe style text.
    pub fn text(&self) -> String {
        let t = &self.task;
        let mut out = String::new();
        // A multi-line value (a question with its options) stays in its column.
        let mut field = |k: &str, v: &str| {
            out.push_str(&format!(
                "{:<17}{}\n",
                format!("{k}:"),
                dash(v).replace('\n', &format!("\n{:17}", ""))
            ))
        };
        field("Task", &t.id);
        field("Title", &t.title);
        field("State", &t.state);
        field("Reason", &t.reason);
        field("Deps", &t.deps.join(", "));
        field("Files", &t.files.join(", "));
        field("Worker", &t.worker);
        field("Attempts", &format!("{} ({} retries used)", t.attempts, t.retries_used));
        field(
            "Progress",
            &if t.step.is_empty() { String::new() } else { format!("{}% {}", t.percent, t.step) },
        );
        field("Question", &t.pending_question);
        field("Cost", &t.usage.text());
        field("Merge commit", &t.merge_commit);
        if !self.prompt.is_empty() {
            out.push_str("Prompt:\n");
            for line in self.prompt.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out.push_str("Attempts:\n");
        let mut table = plain_table();
        table.set_header(vec![
            "#", "STATE", "OUTCOME", "EXIT", "WORKER", "BASE", "RESULT", "TIME", "COST", "SUMMARY",
        ]);
        for a in &self.attempts {
            let time = if a.ended_at_unix_ms > a.started_at_unix_ms && a.started_at_unix_ms > 0 {
                duration_text((a.ended_at_unix_ms - a.started_at_unix_ms) as u64)
            } else {
                "-".into()
            };
            let summary = if a.error.is_empty() { &a.summary } else { &a.error };
            table.add_row(vec![
                a.number.to_string(),
                a.state.clone(),
                a.outcome.clone(),
                a.exit_code.to_string(),
                dash(&a.worker),
                short_commit(&a.base_commit),
                short_commit(&a.result_commit),
                time,
                a.usage.cost(),
                dash(swarm_core::names::truncate(summary, 60)),
            ]);
        }
        out.push_str(&indent(&table.to_string()));
        for a in self.attempts.iter().filter(|a| !a.session_id.is_empty()) {
            out.push_str(&format!("  #{} {} session {}\n", a.number, a.agent, a.session_id));
        }
        if let Some(r) = &self.branch_report {
            out.push_str(&r.text());
        }
        out.push_str("\nEvents:\n");
        for e in &self.events {
            out.push_str(&format!("  {}\n", e.line()));
        }
        out
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_lose_their_prefix() {
        assert_eq!(task_state(v1::TaskState::Merged as i32), "MERGED");
        assert_eq!(task_state(99), "UNKNOWN(99)");
        assert_eq!(outcome(v1::Outcome::Checkpoint as i32), "CHECKPOINT");
    }

    #[test]
    fn durations_are_coarse() {
        assert_eq!(duration_text(1500), "1.5s");
        assert_eq!(duration_text(30_000), "30s");
        assert_eq!(duration_text(600_000), "10m");
        assert_eq!(clock(3_723_004), "01:02:03.004");
    }
}
