//! An event of the log: what happened, to what, with its data.

use serde::Serialize;
use swarm_proto::v1;

use crate::text::clock;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventView {
    pub id: u64,
    pub at_unix_ms: i64,
    pub swarm: String,
    pub task: String,
    pub attempt: u32,
    pub worker: String,
    pub kind: String,
    pub message: String,
    /// The event's JSON payload, parsed; `null` when it has none, and the
    /// text itself when it is not JSON.
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

/// The event's data goes back as JSON text (nothing when `null`, the text
/// itself when it was not JSON): the same value, though not always the
/// same bytes as the store's, which the Operator API sends as they are.
impl From<EventView> for v1::Event {
    fn from(e: EventView) -> Self {
        let data = match e.data {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) if serde_json::from_str::<serde_json::Value>(&s).is_err() => s,
            v => v.to_string(),
        };
        v1::Event {
            id: e.id,
            at_unix_ms: e.at_unix_ms,
            swarm_id: e.swarm,
            task_id: e.task,
            attempt: e.attempt,
            worker_id: e.worker,
            kind: e.kind,
            message: e.message,
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

    /// A merge's report: the `task.merged` or `task.conflict` event.
    pub fn is_merge_report(&self) -> bool {
        self.kind == "task.merged" || self.kind == "task.conflict"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_that_is_not_json_is_kept_as_text() {
        let e = EventView::from(&v1::Event { data: "not json".into(), ..Default::default() });
        assert_eq!(e.data, serde_json::Value::String("not json".into()));
        let e = EventView::from(&v1::Event { data: r#"{"a":1}"#.into(), ..Default::default() });
        assert_eq!(e.data["a"], 1);
    }

    #[test]
    fn an_event_goes_to_the_wire_and_back_with_its_data() {
        for data in ["", "not json", r#"{"a":1}"#] {
            let e = v1::Event { id: 3, kind: "task.merged".into(), data: data.into(), ..Default::default() };
            assert_eq!(v1::Event::from(EventView::from(&e)), e, "{data:?}");
        }
    }

    #[test]
    fn a_line_names_the_attempt() {
        let e = EventView::from(&v1::Event {
            id: 42,
            swarm_id: "demo".into(),
            task_id: "api".into(),
            attempt: 2,
            kind: "task.running".into(),
            ..Default::default()
        });
        assert!(e.line().starts_with("#42    00:00:00.000 demo/api#2"), "{}", e.line());
    }
}
