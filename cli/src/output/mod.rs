//! Output formats: `-o table|json|yaml`. What is printed is `swarm_view`'s
//! view of each object (the same the dashboard and the MCP tools show);
//! this module adds the tables and the `describe` text.

use std::io::Write as _;

use comfy_table::presets::NOTHING;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;
pub use swarm_view::names::{swarm_state, task_state};
pub use swarm_view::text::{age, clock, dash, duration_text, now_ms, short_commit};
pub use swarm_view::{EventView, SwarmView, TaskDetailView, TaskView, UsageView, WorkerView};

use crate::cli::Format;

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

impl Row for WorkerView {
    fn header() -> &'static [&'static str] {
        &["WORKER", "HOST", "STATUS", "ATTEMPT", "HEARTBEAT", "RATE LIMIT", "LABELS"]
    }
    fn cells(&self) -> Vec<String> {
        let labels: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        vec![
            self.id.clone(),
            dash(&self.host),
            self.status().into(),
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

/// `describe task`, kubectl style.
pub fn describe_text(detail: &TaskDetailView) -> String {
    let t = &detail.task;
    let mut out = String::new();
    // A multi-line value (a question with its options) stays in its column.
    let mut field = |k: &str, v: &str| {
        out.push_str(&format!("{:<17}{}\n", format!("{k}:"), dash(v).replace('\n', &format!("\n{:17}", ""))))
    };
    field("Task", &t.id);
    field("Title", &t.title);
    field("State", &t.state);
    field("Reason", &t.reason);
    field("Deps", &t.deps.join(", "));
    field("Files", &t.files.join(", "));
    field("Worker", &t.worker);
    field("Attempts", &format!("{} ({} retries used)", t.attempts, t.retries_used));
    let timing = swarm_view::Timing::of(t, now_ms());
    let expected = match (t.expected_source.is_empty(), timing.actual_ms) {
        (true, _) => String::new(),
        (false, None) => timing.expected_text(),
        (false, Some(_)) => format!("{}; took {}", timing.expected_text(), timing.actual_text()),
    };
    field("Expected", &expected);
    field("Progress", &if t.step.is_empty() { String::new() } else { format!("{}% {}", t.percent, t.step) });
    field("Question", &t.pending_question);
    field("Cost", &t.usage.text());
    field("Merge commit", &t.merge_commit);
    if !detail.prompt.is_empty() {
        out.push_str("Prompt:\n");
        for line in detail.prompt.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str("Attempts:\n");
    let mut table = plain_table();
    table.set_header(vec![
        "#", "STATE", "OUTCOME", "EXIT", "WORKER", "BASE", "RESULT", "TIME", "COST", "SUMMARY",
    ]);
    for a in &detail.attempts {
        let time = a.duration_ms().map(duration_text).unwrap_or_else(|| "-".into());
        let summary = if a.error.is_empty() { &a.summary } else { &a.error };
        table.add_row(vec![
            a.number.to_string(),
            a.state.clone(),
            dash(&a.outcome),
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
    for a in detail.attempts.iter().filter(|a| !a.session_id.is_empty()) {
        out.push_str(&format!("  #{} {} session {}\n", a.number, a.agent, a.session_id));
    }
    if let Some(r) = &detail.branch_report {
        out.push_str(&r.text());
    }
    out.push_str("\nEvents:\n");
    for e in &detail.events {
        out.push_str(&format!("  {}\n", e.line()));
    }
    out
}

/// `describe swarm`'s durations: the swarm's line, then each task's
/// expected and actual time.
pub fn durations_text(d: &swarm_view::Timings) -> String {
    let mut table = plain_table();
    table.set_header(vec!["TASK", "EXPECTED", "ACTUAL"]);
    for t in &d.tasks {
        table.add_row(vec![t.task.clone(), t.expected_text(), t.actual_text()]);
    }
    format!("Durations:   {}\n{}", d.line(), indent(&table.to_string()).trim_end())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}
