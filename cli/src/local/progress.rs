//! Live progress of a local run: an overall bar and a line per running task
//! on a terminal; one plain line per event otherwise.

use std::collections::HashMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use swarm_proto::v1;

use crate::output::{EventView, task_state};

pub enum Progress {
    Plain,
    Live(Live),
}

pub struct Live {
    multi: MultiProgress,
    overall: ProgressBar,
    running: HashMap<String, ProgressBar>,
    states: HashMap<String, i32>,
}

impl Progress {
    pub fn new(live: bool, total: usize) -> Progress {
        if !live {
            return Progress::Plain;
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let overall = multi.add(ProgressBar::new(total as u64));
        overall.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30.green/white}] {pos}/{len} merged  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        overall.enable_steady_tick(Duration::from_millis(200));
        Progress::Live(Live { multi, overall, running: HashMap::new(), states: HashMap::new() })
    }

    /// A new event from Watch.
    pub fn event(&mut self, event: &v1::Event) {
        let view = EventView::from(event);
        match self {
            Progress::Plain => println!("{}", view.line()),
            Progress::Live(live) => {
                // Only the events an operator must see go above the bars.
                if matches!(event.kind.as_str(), "question" | "task.question" | "conflict" | "task.conflict")
                    || event.kind.contains("fenced")
                {
                    let _ = live.multi.println(format!("  {}", view.line()));
                }
            }
        }
    }

    /// The current task list, polled.
    pub fn tasks(&mut self, tasks: &[v1::Task]) {
        let Progress::Live(live) = self else { return };
        let merged = tasks.iter().filter(|t| t.state == v1::TaskState::Merged as i32).count();
        live.overall.set_length(tasks.len() as u64);
        live.overall.set_position(merged as u64);
        let running = tasks.iter().filter(|t| t.state == v1::TaskState::Running as i32).count();
        live.overall.set_message(format!("{running} running"));
        for t in tasks {
            let previous = live.states.insert(t.id.clone(), t.state);
            if previous.is_some() && previous != Some(t.state) {
                let mark = match v1::TaskState::try_from(t.state) {
                    Ok(v1::TaskState::Merged) => "✓",
                    Ok(v1::TaskState::Failed | v1::TaskState::Cancelled) => "✗",
                    Ok(v1::TaskState::Blocked | v1::TaskState::Escalated | v1::TaskState::Conflict) => "!",
                    _ => "·",
                };
                let reason = if t.reason.is_empty() { String::new() } else { format!("  ({})", t.reason) };
                let _ = live.multi.println(format!("{mark} {:<16} {}{reason}", t.id, task_state(t.state)));
            }
            let is_running = t.state == v1::TaskState::Running as i32;
            match (is_running, live.running.get(&t.id)) {
                (true, Some(bar)) => bar.set_message(task_line(t)),
                (true, None) => {
                    let bar = live.multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("  {spinner} {msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bar.set_message(task_line(t));
                    live.running.insert(t.id.clone(), bar);
                }
                (false, Some(_)) => {
                    if let Some(bar) = live.running.remove(&t.id) {
                        bar.finish_and_clear();
                        live.multi.remove(&bar);
                    }
                }
                (false, None) => {}
            }
        }
    }

    /// A line of its own, above the bars on a terminal.
    pub fn note(&self, line: &str) {
        match self {
            Progress::Plain => println!("{line}"),
            Progress::Live(live) => {
                let _ = live.multi.println(line);
            }
        }
    }

    pub fn finish(self) {
        if let Progress::Live(live) = self {
            for bar in live.running.values() {
                bar.finish_and_clear();
            }
            live.overall.finish();
        }
    }
}

fn task_line(t: &v1::Task) -> String {
    let step = if t.step.is_empty() { "working".to_string() } else { t.step.clone() };
    format!("{:<16} #{:<2} {:>3}%  {}  [{}]", t.id, t.attempts, t.percent, step, t.worker_id)
}
