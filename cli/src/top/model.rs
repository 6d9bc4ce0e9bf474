//! What `top` knows about the controller: the lists it last fetched, made
//! current by the events that arrived since, and the rows each pane shows.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use swarm_proto::v1;

use super::filter::Filter;
use super::graph::critical_path;

/// Events kept for the events pane; older ones are in `swarmctl watch`.
pub const EVENTS_KEPT: usize = 500;

/// One fetch of the list RPCs.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub swarms: Vec<v1::Swarm>,
    pub tasks: Vec<v1::Task>,
    pub workers: Vec<v1::Worker>,
}

/// A cheap fetch between two snapshots: the swarms (with their counts by
/// state), the workers, and only the RUNNING tasks, whose progress, step
/// and cost move without an event. Its size grows with the fleet, not with
/// the swarm.
#[derive(Debug, Default)]
pub struct Delta {
    pub swarms: Vec<v1::Swarm>,
    pub running: Vec<v1::Task>,
    pub workers: Vec<v1::Worker>,
}

/// The Watch stream's state, shown in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Connecting,
    Live,
    /// Lost; reconnecting in `in_ms`, to resume after the last event seen.
    Retrying {
        reason: String,
        in_ms: u64,
    },
}

type Key = (String, String);

pub struct Model {
    pub swarms: Vec<v1::Swarm>,
    pub tasks: Vec<v1::Task>,
    index: HashMap<Key, usize>,
    pub workers: Vec<v1::Worker>,
    /// When the workers were fetched: their heartbeat ages count from here.
    workers_at: Instant,
    pub events: VecDeque<v1::Event>,
    pub last_event: u64,
    pub link: Link,
    /// Whether a snapshot arrived yet (before it the panes say "loading").
    pub loaded: bool,
    /// The latest error of a list fetch, cleared by the next success.
    pub list_error: Option<String>,
    /// When each task last became RUNNING, from its events: a task's own
    /// fields only say when its first attempt started.
    running_since: HashMap<Key, i64>,
    asked_at: HashMap<Key, i64>,
    critical: HashMap<String, Vec<String>>,
    graph_stale: bool,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            swarms: Vec::new(),
            tasks: Vec::new(),
            index: HashMap::new(),
            workers: Vec::new(),
            workers_at: Instant::now(),
            events: VecDeque::new(),
            last_event: 0,
            link: Link::Connecting,
            loaded: false,
            list_error: None,
            running_since: HashMap::new(),
            asked_at: HashMap::new(),
            critical: HashMap::new(),
            graph_stale: false,
        }
    }
}

fn key(swarm: &str, task: &str) -> Key {
    (swarm.to_string(), task.to_string())
}

fn state_from_name(name: &str) -> Option<i32> {
    v1::TaskState::from_str_name(&format!("TASK_STATE_{name}")).map(|s| s as i32)
}

impl Model {
    pub fn apply_snapshot(&mut self, s: Snapshot) {
        self.swarms = s.swarms;
        self.tasks = s.tasks;
        self.index = self.tasks.iter().enumerate().map(|(i, t)| (key(&t.swarm_id, &t.id), i)).collect();
        self.workers = s.workers;
        self.workers_at = Instant::now();
        self.loaded = true;
        self.list_error = None;
        self.graph_stale = true;
    }

    /// Takes a delta's fresh fields. A task's state and reason stay as the
    /// events left them: a delta fetched just before an event arrives must
    /// not turn the task back, and no later delta lists it again once
    /// it stopped running. Tasks the model does not know wait for the next
    /// snapshot.
    pub fn apply_delta(&mut self, d: Delta) {
        self.swarms = d.swarms;
        for fresh in d.running {
            if let Some(&i) = self.index.get(&key(&fresh.swarm_id, &fresh.id)) {
                let t = &mut self.tasks[i];
                let (state, reason, question, options) = (
                    t.state,
                    std::mem::take(&mut t.reason),
                    std::mem::take(&mut t.pending_question),
                    std::mem::take(&mut t.pending_options),
                );
                *t =
                    v1::Task { state, reason, pending_question: question, pending_options: options, ..fresh };
            }
        }
        self.workers = d.workers;
        self.workers_at = Instant::now();
        self.list_error = None;
    }

    /// Applies what an event says at once, so the screen moves with the
    /// stream rather than with the next list fetch.
    pub fn apply_event(&mut self, e: v1::Event) {
        self.last_event = self.last_event.max(e.id);
        let k = key(&e.swarm_id, &e.task_id);
        let data: serde_json::Value = serde_json::from_str(&e.data).unwrap_or_default();
        let text = |field: &str| data.get(field).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        match e.kind.as_str() {
            "task.state" => {
                let to = text("to");
                if to == "RUNNING" {
                    self.running_since.insert(k.clone(), e.at_unix_ms);
                }
                if let (Some(state), Some(&i)) = (state_from_name(&to), self.index.get(&k)) {
                    let t = &mut self.tasks[i];
                    t.state = state;
                    t.reason = text("reason");
                    t.updated_at_unix_ms = e.at_unix_ms;
                    self.graph_stale = true;
                }
            }
            "task.question" => {
                self.asked_at.insert(k.clone(), e.at_unix_ms);
                if let Some(&i) = self.index.get(&k) {
                    self.tasks[i].pending_question = text("text");
                    self.tasks[i].pending_options = data
                        .get("options")
                        .and_then(|o| o.as_array())
                        .map(|o| o.iter().filter_map(|v| v.as_str().map(String::from)).collect())
                        .unwrap_or_default();
                }
            }
            "task.answered" => {
                if let Some(&i) = self.index.get(&k) {
                    self.tasks[i].pending_question.clear();
                    self.tasks[i].pending_options.clear();
                }
            }
            // PAUSED and back show at once, as task states do.
            "swarm.state" | "swarm.stalled" | "swarm.paused" | "swarm.resumed" => {
                let state = v1::SwarmState::from_str_name(&format!("SWARM_STATE_{}", text("state")));
                if let (Some(state), Some(s)) = (state, self.swarms.iter_mut().find(|s| s.id == e.swarm_id)) {
                    s.state = state as i32;
                    if state != v1::SwarmState::Paused {
                        s.paused_reason.clear();
                    } else {
                        s.paused_reason = text("reason");
                    }
                }
            }
            _ => {}
        }
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// Recomputes what depends on many tasks at once; called before a
    /// frame rather than after every event.
    pub fn refresh(&mut self) {
        if !self.graph_stale {
            return;
        }
        self.graph_stale = false;
        self.critical = self
            .swarms
            .iter()
            .map(|s| (s.id.clone(), critical_path(self.tasks.iter().filter(|t| t.swarm_id == s.id))))
            .collect();
    }

    pub fn critical_path(&self, swarm: &str) -> &[String] {
        self.critical.get(swarm).map(Vec::as_slice).unwrap_or_default()
    }

    /// When the task's current run started: its last RUNNING transition
    /// seen, else its first attempt's start.
    pub fn running_since(&self, t: &v1::Task) -> i64 {
        self.running_since.get(&key(&t.swarm_id, &t.id)).copied().unwrap_or(t.first_started_at_unix_ms)
    }

    pub fn asked_at(&self, t: &v1::Task) -> i64 {
        self.asked_at.get(&key(&t.swarm_id, &t.id)).copied().unwrap_or(t.updated_at_unix_ms)
    }

    /// The heartbeat age now: as fetched, plus the time since the fetch.
    pub fn heartbeat_age_ms(&self, w: &v1::Worker) -> u64 {
        w.heartbeat_age_ms.saturating_add(self.workers_at.elapsed().as_millis() as u64)
    }

    pub fn swarm_rows(&self, f: &Filter) -> Vec<&v1::Swarm> {
        self.swarms.iter().filter(|s| f.swarm_matches(&s.id)).collect()
    }

    /// Tasks that match, those needing attention first: running, then
    /// waiting on the operator, then on their way, then done; plan order
    /// within each group.
    pub fn task_rows(&self, f: &Filter) -> Vec<&v1::Task> {
        let mut rows: Vec<&v1::Task> = self.tasks.iter().filter(|t| task_matches(f, t)).collect();
        rows.sort_by_key(|t| urgency(t.state));
        rows
    }

    pub fn question_rows(&self, f: &Filter) -> Vec<&v1::Task> {
        let mut rows: Vec<&v1::Task> =
            self.tasks.iter().filter(|t| !t.pending_question.is_empty() && task_matches(f, t)).collect();
        rows.sort_by_key(|t| self.asked_at(t));
        rows
    }

    pub fn worker_rows(&self, f: &Filter) -> Vec<&v1::Worker> {
        self.workers
            .iter()
            .filter(|w| f.words_match(&[&w.id, &w.host, &w.attempt, worker_state(w)]))
            .collect()
    }

    pub fn event_rows(&self, f: &Filter) -> Vec<&v1::Event> {
        self.events
            .iter()
            .filter(|e| {
                f.swarm_matches(&e.swarm_id)
                    && f.words_match(&[&e.swarm_id, &e.task_id, &e.worker_id, &e.kind, &e.message])
            })
            .collect()
    }
}

fn task_matches(f: &Filter, t: &v1::Task) -> bool {
    // Most frames have no filter: no text is built for a big swarm's rows.
    if f.is_empty() {
        return true;
    }
    let state = crate::output::task_state(t.state);
    let id = format!("{}/{}", t.swarm_id, t.id);
    f.swarm_matches(&t.swarm_id)
        && f.state_matches(&state)
        && f.words_match(&[&id, &t.title, &t.worker_id, &t.step, &state, &t.pending_question])
}

fn urgency(state: i32) -> u8 {
    use v1::TaskState as S;
    match S::try_from(state) {
        Ok(S::Running) => 0,
        Ok(S::Escalated | S::Blocked | S::Conflict | S::Failed | S::Review | S::Rejected) => 1,
        Ok(S::Succeeded | S::Merging) => 2,
        Ok(S::Ready) => 3,
        Ok(S::Pending) => 4,
        _ => 5,
    }
}

/// One word for what a worker is doing.
pub fn worker_state(w: &v1::Worker) -> &'static str {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    match () {
        () if !w.connected => "disconnected",
        () if w.rate_limited_until_unix_ms > now => "rate-limited",
        () if w.draining => "draining",
        () if !w.attempt.is_empty() => "busy",
        () => "idle",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: u64, task: &str, kind: &str, data: serde_json::Value) -> v1::Event {
        v1::Event {
            id,
            at_unix_ms: 1_000 * id as i64,
            swarm_id: "s".into(),
            task_id: task.into(),
            kind: kind.into(),
            data: data.to_string(),
            ..Default::default()
        }
    }

    fn loaded() -> Model {
        let mut m = Model::default();
        let task = |id: &str| v1::Task {
            swarm_id: "s".into(),
            id: id.into(),
            state: v1::TaskState::Ready as i32,
            ..Default::default()
        };
        m.apply_snapshot(Snapshot {
            swarms: vec![v1::Swarm { id: "s".into(), ..Default::default() }],
            tasks: vec![task("a"), task("b")],
            workers: Vec::new(),
        });
        m
    }

    #[test]
    fn events_move_tasks_and_questions_before_the_next_fetch() {
        let mut m = loaded();
        m.apply_event(event(7, "b", "task.state", serde_json::json!({"from": "READY", "to": "RUNNING"})));
        let rows = m.task_rows(&Filter::default());
        assert_eq!(rows[0].id, "b", "running first");
        assert_eq!(m.running_since(rows[0]), 7_000);
        m.apply_event(event(8, "b", "task.question", serde_json::json!({"text": "which?"})));
        assert_eq!(m.question_rows(&Filter::default())[0].pending_question, "which?");
        m.apply_event(event(9, "b", "task.answered", serde_json::json!({})));
        assert!(m.question_rows(&Filter::default()).is_empty());
        assert_eq!(m.last_event, 9);
    }

    #[test]
    fn a_delta_moves_progress_but_not_a_state_an_event_set() {
        let mut m = loaded();
        m.apply_event(event(7, "a", "task.state", serde_json::json!({"to": "RUNNING"})));
        // Fetched before the task merged, arriving after the event said so.
        m.apply_event(event(8, "a", "task.state", serde_json::json!({"to": "MERGED", "reason": "merged"})));
        let running = |id: &str, percent| v1::Task {
            swarm_id: "s".into(),
            id: id.into(),
            state: v1::TaskState::Running as i32,
            percent,
            step: "testing".into(),
            ..Default::default()
        };
        let swarms = vec![v1::Swarm { id: "s".into(), task_count: 2, ..Default::default() }];
        let workers = vec![v1::Worker { id: "w1".into(), ..Default::default() }];
        m.apply_delta(Delta { swarms, running: vec![running("a", 40), running("new", 10)], workers });
        let a = &m.tasks[0];
        assert_eq!((a.state, a.reason.as_str()), (v1::TaskState::Merged as i32, "merged"));
        assert_eq!((a.percent, a.step.as_str()), (40, "testing"));
        assert_eq!(m.tasks.len(), 2, "an unknown task waits for the next snapshot");
        assert_eq!(m.tasks[1].percent, 0, "b was not in the delta");
        assert_eq!((m.swarms[0].task_count, m.workers.len()), (2, 1));
    }

    #[test]
    fn garbage_event_data_and_unknown_tasks_change_nothing() {
        let mut m = loaded();
        let mut e = event(3, "zzz", "task.state", serde_json::json!({"to": "MERGED"}));
        m.apply_event(e.clone());
        e.task_id = "a".into();
        e.data = "not json".into();
        m.apply_event(e);
        assert!(m.tasks.iter().all(|t| t.state == v1::TaskState::Ready as i32));
        assert_eq!(m.events.len(), 2);
    }

    #[test]
    fn the_event_buffer_is_bounded() {
        let mut m = Model::default();
        for id in 1..=(EVENTS_KEPT as u64 + 10) {
            m.apply_event(event(id, "", "x", serde_json::json!({})));
        }
        assert_eq!(m.events.len(), EVENTS_KEPT);
        assert_eq!(m.events.front().map(|e| e.id), Some(11));
    }
}
