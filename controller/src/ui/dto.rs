//! The dashboard's JSON: serde views of the Operator API's messages, so
//! prost types stay at this edge too and the browser sees plain names
//! (`"MERGED"`, not `TASK_STATE_MERGED` or 7).

use std::collections::BTreeMap;

use serde::Serialize;
use swarm_proto::v1;

/// An enum's wire name without its type prefix: `TASK_STATE_MERGED` → `MERGED`.
fn name(wire: Option<&str>, prefix: &str) -> String {
    match wire {
        Some(n) => n.strip_prefix(prefix).unwrap_or(n).to_string(),
        None => "UNKNOWN".to_string(),
    }
}

fn task_state(raw: i32) -> String {
    name(v1::TaskState::try_from(raw).ok().map(|s| s.as_str_name()), "TASK_STATE_")
}

#[derive(Debug, Serialize, Default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    pub cost_usd: f64,
}

impl From<Option<v1::Usage>> for Usage {
    fn from(u: Option<v1::Usage>) -> Usage {
        let u = u.unwrap_or_default();
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Swarm {
    pub id: String,
    pub state: String,
    pub base_branch: String,
    pub integration_branch: String,
    pub integration_head: String,
    pub tasks_by_state: BTreeMap<String, u32>,
    pub created_at_unix_ms: i64,
    pub task_count: u32,
    pub stalled_reason: String,
    pub stalled_tasks: Vec<String>,
    pub usage: Usage,
    pub paused_reason: String,
    /// The swarm's caps (0: none) and the breaker's view of the last hour.
    pub budget_usd: f64,
    pub budget_tokens: u64,
    pub max_usd_per_hour: f64,
    pub usd_last_hour: f64,
}

impl From<v1::Swarm> for Swarm {
    fn from(s: v1::Swarm) -> Swarm {
        Swarm {
            state: name(v1::SwarmState::try_from(s.state).ok().map(|v| v.as_str_name()), "SWARM_STATE_"),
            id: s.id,
            base_branch: s.base_branch,
            integration_branch: s.integration_branch,
            integration_head: s.integration_head,
            tasks_by_state: s.tasks_by_state.into_iter().collect(),
            created_at_unix_ms: s.created_at_unix_ms,
            task_count: s.task_count,
            stalled_reason: s.stalled_reason,
            stalled_tasks: s.stalled_tasks,
            usage: s.usage.into(),
            paused_reason: s.paused_reason,
            budget_usd: s.budget.as_ref().map(|b| b.usd).unwrap_or_default(),
            budget_tokens: s.budget.as_ref().map(|b| b.tokens).unwrap_or_default(),
            max_usd_per_hour: s.max_usd_per_hour,
            usd_last_hour: s.usd_last_hour,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Task {
    pub swarm_id: String,
    pub id: String,
    pub title: String,
    pub state: String,
    pub deps: Vec<String>,
    pub owned_globs: Vec<String>,
    pub attempts: u32,
    pub retries_used: u32,
    pub worker_id: String,
    pub merge_commit: String,
    pub reason: String,
    pub percent: u32,
    pub step: String,
    pub updated_at_unix_ms: i64,
    pub pending_question: String,
    /// Choices offered with the pending question; the answer may be one of
    /// them or free text.
    pub pending_options: Vec<String>,
    pub usage: Usage,
}

impl From<v1::Task> for Task {
    fn from(t: v1::Task) -> Task {
        Task {
            state: task_state(t.state),
            swarm_id: t.swarm_id,
            id: t.id,
            title: t.title,
            deps: t.deps,
            owned_globs: t.owned_globs,
            attempts: t.attempts,
            retries_used: t.retries_used,
            worker_id: t.worker_id,
            merge_commit: t.merge_commit,
            reason: t.reason,
            percent: t.percent,
            step: t.step,
            updated_at_unix_ms: t.updated_at_unix_ms,
            pending_question: t.pending_question,
            pending_options: t.pending_options,
            usage: t.usage.into(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Tier {
    pub name: String,
    pub passed: bool,
    pub blocking: bool,
    pub exit_code: i32,
    pub duration_ms: u64,
    pub output_tail: String,
}

#[derive(Debug, Serialize)]
pub struct Attempt {
    pub number: u32,
    pub state: String,
    pub worker_id: String,
    pub base_commit: String,
    pub result_commit: String,
    pub outcome: String,
    pub exit_code: i32,
    pub summary: String,
    pub error: String,
    pub started_at_unix_ms: i64,
    pub ended_at_unix_ms: i64,
    pub tiers: Vec<Tier>,
    pub agent: String,
    pub usage: Usage,
}

impl From<v1::Attempt> for Attempt {
    fn from(a: v1::Attempt) -> Attempt {
        let outcome = match v1::Outcome::try_from(a.outcome) {
            Ok(v1::Outcome::Unspecified) => String::new(),
            Ok(o) => name(Some(o.as_str_name()), "OUTCOME_"),
            Err(_) => "UNKNOWN".into(),
        };
        Attempt {
            number: a.number,
            state: name(v1::AttemptState::try_from(a.state).ok().map(|s| s.as_str_name()), "ATTEMPT_STATE_"),
            worker_id: a.worker_id,
            base_commit: a.base_commit,
            result_commit: a.result_commit,
            outcome,
            exit_code: a.exit_code,
            summary: a.summary,
            error: a.error,
            started_at_unix_ms: a.started_at_unix_ms,
            ended_at_unix_ms: a.ended_at_unix_ms,
            tiers: a
                .tiers
                .into_iter()
                .map(|t| Tier {
                    name: t.name,
                    passed: t.passed,
                    blocking: t.blocking,
                    exit_code: t.exit_code,
                    duration_ms: t.duration_ms,
                    output_tail: t.output_tail,
                })
                .collect(),
            agent: a.agent,
            usage: a.usage.into(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Event {
    pub id: u64,
    pub at_unix_ms: i64,
    pub swarm_id: String,
    pub task_id: String,
    pub attempt: u32,
    pub worker_id: String,
    pub kind: String,
    pub message: String,
    /// The event's JSON payload, parsed; `null` when it has none.
    pub data: serde_json::Value,
}

impl From<v1::Event> for Event {
    fn from(e: v1::Event) -> Event {
        // A payload that is not JSON is still shown, as a string.
        let data = if e.data.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&e.data).unwrap_or(serde_json::Value::String(e.data))
        };
        Event {
            id: e.id,
            at_unix_ms: e.at_unix_ms,
            swarm_id: e.swarm_id,
            task_id: e.task_id,
            attempt: e.attempt,
            worker_id: e.worker_id,
            kind: e.kind,
            message: e.message,
            data,
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

#[derive(Debug, Serialize)]
pub struct TaskDetail {
    pub task: Option<Task>,
    pub prompt: String,
    pub attempts: Vec<Attempt>,
    /// The latest events (at most [`super::api::DETAIL_EVENTS`]).
    pub events: Vec<Event>,
    /// How many older events were left out.
    pub events_omitted: usize,
    /// The `task.merged` or `task.conflict` event's report, the latest one.
    pub merge_report: Option<Event>,
    /// The worker log's tail; when it cannot be read, `log` says why.
    pub log_tail: Option<LogTail>,
    pub log: String,
}

impl TaskDetail {
    pub fn new(d: v1::TaskDetail, keep: usize) -> TaskDetail {
        let mut events = d.events;
        let omitted = events.len().saturating_sub(keep);
        let merge_report = events
            .iter()
            .rev()
            .find(|e| e.kind == "task.merged" || e.kind == "task.conflict")
            .cloned()
            .map(Event::from);
        TaskDetail {
            task: d.task.map(Task::from),
            prompt: d.prompt,
            attempts: d.attempts.into_iter().map(Attempt::from).collect(),
            events: events.drain(omitted..).map(Event::from).collect(),
            events_omitted: omitted,
            merge_report,
            log_tail: None,
            log: String::new(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Worker {
    pub id: String,
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub connected: bool,
    pub draining: bool,
    pub attempt: String,
    pub heartbeat_age_ms: u64,
    pub rate_limit_key: String,
    pub rate_limited_until_unix_ms: i64,
}

impl From<v1::Worker> for Worker {
    fn from(w: v1::Worker) -> Worker {
        Worker {
            id: w.id,
            host: w.host,
            labels: w.labels.into_iter().collect(),
            connected: w.connected,
            draining: w.draining,
            attempt: w.attempt,
            heartbeat_age_ms: w.heartbeat_age_ms,
            rate_limit_key: w.rate_limit_key,
            rate_limited_until_unix_ms: w.rate_limited_until_unix_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_lose_their_prefix_and_unknown_values_say_so() {
        assert_eq!(task_state(v1::TaskState::Merged as i32), "MERGED");
        assert_eq!(task_state(9999), "UNKNOWN");
        let e = Event::from(v1::Event { data: "not json".into(), ..Default::default() });
        assert_eq!(e.data, serde_json::Value::String("not json".into()));
    }

    #[test]
    fn detail_keeps_the_latest_events_and_the_last_merge_report() {
        let ev = |id: u64, kind: &str| v1::Event { id, kind: kind.into(), ..Default::default() };
        let d = v1::TaskDetail {
            events: vec![ev(1, "task.merged"), ev(2, "a"), ev(3, "task.conflict"), ev(4, "b")],
            ..Default::default()
        };
        let view = TaskDetail::new(d, 2);
        assert_eq!(view.events.iter().map(|e| e.id).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(view.events_omitted, 2);
        assert_eq!(view.merge_report.map(|e| e.id), Some(3));
    }
}
