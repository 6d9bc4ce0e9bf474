//! The dashboard's JSON: `swarm_view`'s views (the ones `swarmctl -o json`
//! prints and the MCP tools return), plus what only the task page shows —
//! the worker log's tail and how many older events it left out.

use serde::Serialize;
use swarm_proto::v1;
pub use swarm_view::{EventView as Event, SwarmView as Swarm, TaskView as Task, WorkerView as Worker};

/// A swarm's durations worded as `describe swarm` and the report word
/// them, so the page says the same: the swarm's line, and each task's
/// expected and actual time by task id.
#[derive(Debug, Serialize)]
pub struct DurationsText {
    pub line: String,
    pub expected: std::collections::BTreeMap<String, String>,
    pub actual: std::collections::BTreeMap<String, String>,
}

impl From<&swarm_view::Timings> for DurationsText {
    fn from(d: &swarm_view::Timings) -> DurationsText {
        DurationsText {
            line: d.line(),
            expected: d.tasks.iter().map(|t| (t.task.clone(), t.expected_text())).collect(),
            actual: d.tasks.iter().map(|t| (t.task.clone(), t.actual_text())).collect(),
        }
    }
}

/// The end of the latest attempt's worker log, read from its sidecar.
#[derive(Debug, Serialize)]
pub struct LogTail {
    pub attempt: u32,
    pub worker: String,
    /// Bytes of the log before the tail, not shown.
    pub skipped: u64,
    /// The tail as text (a byte that is not UTF-8 shows as U+FFFD).
    pub text: String,
}

impl From<crate::api::logs::Tail> for LogTail {
    fn from(t: crate::api::logs::Tail) -> LogTail {
        LogTail {
            attempt: t.attempt,
            worker: t.worker,
            skipped: t.skipped,
            text: String::from_utf8_lossy(&t.data).into_owned(),
        }
    }
}

/// A task's page: its detail with the latest events (at most
/// [`super::api::DETAIL_EVENTS`]), its last merge report and its log.
#[derive(Debug, Serialize)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub detail: swarm_view::TaskDetailView,
    /// How many older events were left out.
    pub events_omitted: usize,
    /// The `task.merged` or `task.conflict` event's report, the latest one
    /// (kept even when its event is older than the events shown).
    pub merge_report: Option<Event>,
    /// The worker log's tail; when it cannot be read, `log` says why.
    pub log_tail: Option<LogTail>,
    pub log: String,
}

impl TaskDetail {
    pub fn new(d: &v1::TaskDetail, keep: usize) -> TaskDetail {
        let mut detail = swarm_view::TaskDetailView::from(d);
        let merge_report = detail.merge_report().cloned();
        let events_omitted = detail.keep_latest_events(keep);
        TaskDetail { detail, events_omitted, merge_report, log_tail: None, log: String::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_keeps_the_last_merge_report_even_when_its_event_is_left_out() {
        let ev = |id: u64, kind: &str| v1::Event { id, kind: kind.into(), ..Default::default() };
        let d = v1::TaskDetail {
            events: vec![ev(1, "a"), ev(2, "task.merged"), ev(3, "b"), ev(4, "c")],
            ..Default::default()
        };
        let page = TaskDetail::new(&d, 2);
        assert_eq!(page.detail.events.iter().map(|e| e.id).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(page.events_omitted, 2);
        assert_eq!(page.merge_report.map(|e| e.id), Some(2));
        let json = serde_json::to_value(TaskDetail::new(&d, 10)).expect("json");
        assert!(json["task"].is_object() && json["attempts"].is_array() && json["events_omitted"] == 0);
    }
}
