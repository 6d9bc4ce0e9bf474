//! Where a swarm's time went: one row per sidecar with a bar per phase of
//! each attempt it ran (setup, work, verify, operator wait) and per merge
//! queue car it verified, a row of tasks waiting in the merge queue, a row
//! of questions waiting for the operator between attempts, the critical
//! path as it happened, and the spans a sidecar sat idle.
//!
//! Everything comes from what the controller already keeps: the attempts'
//! start and end times and verify tiers' durations, and the event log
//! (`attempt.started` ends setup, `task.question`/`task.answered` bound an
//! operator wait, `merge_queue.*` bound queue waits and cars). Verify
//! starts where the tiers' summed durations before the attempt's end say
//! it did: the sidecar runs them one after another just before it reports.
//! [`crate::timeline_svg`] draws it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use swarm_proto::v1;

/// What a bar's span was spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BarKind {
    /// Assigned until the worker process started: worktree, checkout, caches.
    Setup,
    Work,
    /// The attempt's own verify tiers.
    Verify,
    /// Succeeded, waiting in the merge queue for its car to be verified.
    Queue,
    /// A question waiting for the operator's answer.
    OperatorWait,
    /// A merge queue car: a batch's integration verify on a verifier.
    MergeCar,
}

impl BarKind {
    pub const ALL: [BarKind; 6] = [
        BarKind::Setup,
        BarKind::Work,
        BarKind::Verify,
        BarKind::Queue,
        BarKind::OperatorWait,
        BarKind::MergeCar,
    ];

    /// The kind's name, as JSON and the SVG's `data-kind` spell it.
    pub fn name(self) -> &'static str {
        match self {
            BarKind::Setup => "setup",
            BarKind::Work => "work",
            BarKind::Verify => "verify",
            BarKind::Queue => "queue",
            BarKind::OperatorWait => "operator-wait",
            BarKind::MergeCar => "merge-car",
        }
    }
}

/// Whose row it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RowKind {
    /// A sidecar that ran attempts (and perhaps cars too).
    Worker,
    /// A sidecar that only verified merge queue cars.
    Verifier,
    /// Tasks waiting in the merge queue.
    Queue,
    /// Questions waiting for the operator while no attempt ran.
    Operator,
}

/// One span of time on a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bar {
    pub kind: BarKind,
    /// The task (empty for a car, whose tasks are in `label`).
    pub task: String,
    /// The attempt number; 0 for a car.
    pub attempt: u32,
    pub start_ms: i64,
    pub end_ms: i64,
    /// The task is on the critical path.
    pub critical: bool,
    /// Still going: `end_ms` is the timeline's end.
    pub open: bool,
    /// What a hover over the bar says.
    pub label: String,
}

/// A span with nothing on a sidecar's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    pub start_ms: i64,
    pub end_ms: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub id: String,
    pub kind: RowKind,
    pub bars: Vec<Bar>,
    /// For sidecars: when the row had no bar.
    pub idle: Vec<Span>,
}

/// How much time each kind took, summed over bars (bars overlap, so this
/// is time spent, not wall-clock time).
#[derive(Debug, Clone, Serialize)]
pub struct Total {
    pub kind: BarKind,
    pub ms: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub swarm: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub rows: Vec<Row>,
    /// The chain of tasks that set the swarm's end, first task first: the
    /// task that finished last, the dependency of it that finished last,
    /// and so on.
    pub critical_path: Vec<String>,
    pub totals: Vec<Total>,
    /// Sidecar time with nothing to do, summed over rows.
    pub idle_ms: i64,
}

/// What the timeline is made of: the Operator API's messages of one swarm.
pub struct Source<'a> {
    pub swarm: &'a v1::Swarm,
    pub tasks: &'a [v1::Task],
    /// Every attempt of the swarm, with its task's id within the swarm.
    pub attempts: &'a [(String, v1::Attempt)],
    /// The swarm's events, oldest first (other swarms' are skipped).
    pub events: &'a [v1::Event],
    /// The fleet: a sidecar that ran nothing is a row of idle time.
    pub workers: &'a [v1::Worker],
    /// Unix ms: where open spans end.
    pub now: i64,
}

const QUEUE_ROW: &str = "merge queue";
const OPERATOR_ROW: &str = "operator";

/// The timeline of `src.swarm`.
pub fn build(src: &Source) -> Timeline {
    let events: Vec<&v1::Event> = src.events.iter().filter(|e| e.swarm_id == src.swarm.id).collect();
    let end = timeline_end(src, &events);
    let mut rows: BTreeMap<(RowKind, String), Vec<Bar>> = BTreeMap::new();
    let waits = operator_waits(&events, src.tasks, end);
    let mut loose_waits = Vec::new();
    for (task, a) in src.attempts {
        let mine: Vec<&Wait> = waits.iter().filter(|w| &w.task == task && w.attempt == a.number).collect();
        let (bars, after) = attempt_bars(task, a, &events, &mine, end);
        loose_waits.extend(after);
        rows.entry((RowKind::Worker, a.worker_id.clone())).or_default().extend(bars);
    }
    // A question of no attempt the swarm still lists.
    for w in &waits {
        if !src.attempts.iter().any(|(t, a)| t == &w.task && a.number == w.attempt) {
            loose_waits.push(w.bar());
        }
    }
    rows.entry((RowKind::Operator, OPERATOR_ROW.into())).or_default().extend(loose_waits);
    for bar in queue_bars(&events, end) {
        rows.entry((RowKind::Queue, QUEUE_ROW.into())).or_default().push(bar);
    }
    for (worker, bar) in car_bars(&events, end) {
        let kind = if rows.contains_key(&(RowKind::Worker, worker.clone())) {
            RowKind::Worker
        } else {
            RowKind::Verifier
        };
        rows.entry((kind, worker)).or_default().push(bar);
    }
    for w in src.workers {
        let known =
            rows.keys().any(|(k, id)| matches!(k, RowKind::Worker | RowKind::Verifier) && id == &w.id);
        if !known {
            rows.insert((RowKind::Worker, w.id.clone()), Vec::new());
        }
    }
    let start = timeline_start(src, &rows, end);
    let critical_path = critical_path(src.tasks, &events, &rows);
    let mut out: Vec<Row> = rows
        .into_iter()
        .map(|((kind, id), mut bars)| {
            bars.sort_by_key(|b| (b.start_ms, b.end_ms));
            for b in &mut bars {
                b.critical = critical_path.contains(&b.task);
            }
            let idle = match kind {
                RowKind::Worker | RowKind::Verifier => idle_spans(&id, &bars, &events, start, end),
                RowKind::Queue | RowKind::Operator => Vec::new(),
            };
            Row { id, kind, bars, idle }
        })
        .collect();
    out.retain(|r| match r.kind {
        RowKind::Queue | RowKind::Operator => !r.bars.is_empty(),
        RowKind::Worker | RowKind::Verifier => !r.id.is_empty(),
    });
    let totals = BarKind::ALL
        .iter()
        .map(|&kind| Total {
            kind,
            ms: out
                .iter()
                .flat_map(|r| &r.bars)
                .filter(|b| b.kind == kind)
                .map(|b| b.end_ms - b.start_ms)
                .sum(),
        })
        .collect();
    let idle_ms = out.iter().flat_map(|r| &r.idle).map(|s| s.end_ms - s.start_ms).sum();
    Timeline {
        swarm: src.swarm.id.clone(),
        start_ms: start,
        end_ms: end,
        rows: out,
        critical_path,
        totals,
        idle_ms,
    }
}

/// Now while the swarm runs; when it has ended, its last event.
fn timeline_end(src: &Source, events: &[&v1::Event]) -> i64 {
    let last_event = events.iter().map(|e| e.at_unix_ms).max().unwrap_or(0);
    let last_attempt = src.attempts.iter().map(|(_, a)| a.ended_at_unix_ms.max(a.started_at_unix_ms)).max();
    let ended = matches!(
        v1::SwarmState::try_from(src.swarm.state),
        Ok(v1::SwarmState::Completed | v1::SwarmState::Failed | v1::SwarmState::Cancelled)
    );
    let last = last_event.max(last_attempt.unwrap_or(0)).max(src.swarm.created_at_unix_ms);
    if ended || src.now <= last { last } else { src.now }
}

fn timeline_start(src: &Source, rows: &BTreeMap<(RowKind, String), Vec<Bar>>, end: i64) -> i64 {
    let first_bar = rows.values().flatten().map(|b| b.start_ms).min();
    let created = Some(src.swarm.created_at_unix_ms).filter(|&c| c > 0);
    [first_bar, created].into_iter().flatten().min().unwrap_or(end).min(end)
}

/// A question and when it was answered.
struct Wait {
    task: String,
    attempt: u32,
    start: i64,
    end: i64,
    open: bool,
    text: String,
}

impl Wait {
    fn bar(&self) -> Bar {
        Bar {
            kind: BarKind::OperatorWait,
            task: self.task.clone(),
            attempt: self.attempt,
            start_ms: self.start,
            end_ms: self.end,
            critical: false,
            open: self.open,
            label: format!("{}#{} waiting for the operator: {}", self.task, self.attempt, self.text),
        }
    }
}

/// Each `task.question` with the `task.answered` that answered it (by
/// question id, else the task's next answer); one still pending runs to
/// `end`, one never answered and no longer pending is left out.
fn operator_waits(events: &[&v1::Event], tasks: &[v1::Task], end: i64) -> Vec<Wait> {
    let mut waits = Vec::new();
    for (i, q) in events.iter().enumerate().filter(|(_, e)| e.kind == "task.question") {
        let qid = data(q, "question_id");
        let answer = events[i + 1..].iter().find(|e| {
            e.kind == "task.answered"
                && e.task_id == q.task_id
                && (qid.is_empty() || data(e, "question_id") == qid)
        });
        let pending = tasks.iter().any(|t| t.id == q.task_id && !t.pending_question.is_empty());
        let (stop, open) = match answer {
            Some(a) => (a.at_unix_ms, false),
            None if pending => (end, true),
            None => continue,
        };
        waits.push(Wait {
            task: q.task_id.clone(),
            attempt: q.attempt,
            start: q.at_unix_ms,
            end: stop.max(q.at_unix_ms),
            open,
            text: data(q, "text"),
        });
    }
    waits
}

/// An attempt's phases, with the operator waits that fell while its work
/// ran cut out of the work; and what of its waits outlived it (an
/// escalation waits for the answer after its attempt ended), for the
/// operator's row.
fn attempt_bars(
    task: &str,
    a: &v1::Attempt,
    events: &[&v1::Event],
    waits: &[&Wait],
    end: i64,
) -> (Vec<Bar>, Vec<Bar>) {
    let start = a.started_at_unix_ms;
    let open = a.ended_at_unix_ms <= 0;
    let stop = if open { end } else { a.ended_at_unix_ms }.max(start);
    let started = events
        .iter()
        .filter(|e| e.kind == "attempt.started" && e.task_id == task && e.attempt == a.number)
        .map(|e| e.at_unix_ms)
        .min()
        .map(|at| at.clamp(start, stop));
    let verify_ms: i64 = a.tiers.iter().map(|t| t.duration_ms as i64).sum();
    let outcome = crate::names::outcome(a.outcome);
    let bar = |kind: BarKind, s: i64, e: i64, last: bool| {
        let how = if outcome.is_empty() { String::new() } else { format!(" ({outcome})") };
        Bar {
            kind,
            task: task.to_string(),
            attempt: a.number,
            start_ms: s,
            end_ms: e,
            critical: false,
            open: open && last,
            label: format!("{task}#{} {} on {}{how}", a.number, kind.name(), a.worker_id),
        }
    };
    let after: Vec<Bar> = waits
        .iter()
        .filter(|w| !open && w.end > stop)
        .map(|w| {
            let mut b = w.bar();
            b.start_ms = w.start.max(stop);
            b
        })
        .collect();
    let Some(work_start) = started else {
        return (vec![bar(BarKind::Setup, start, stop, true)], after);
    };
    let verify_start = if open || verify_ms == 0 { stop } else { (stop - verify_ms).max(work_start) };
    let mut bars = vec![bar(BarKind::Setup, start, work_start, false)];
    let mut cursor = work_start;
    for w in waits {
        let (ws, we) = (w.start.max(cursor), w.end.min(verify_start));
        if ws >= we {
            continue;
        }
        if ws > cursor {
            bars.push(bar(BarKind::Work, cursor, ws, false));
        }
        let mut b = w.bar();
        (b.start_ms, b.end_ms, b.open) = (ws, we, w.open && open && we == verify_start);
        bars.push(b);
        cursor = we;
    }
    if verify_start > cursor || (open && verify_start == cursor) {
        bars.push(bar(BarKind::Work, cursor, verify_start, verify_start == stop));
    }
    if verify_start < stop {
        bars.push(bar(BarKind::Verify, verify_start, stop, true));
    }
    bars.retain(|b| b.end_ms > b.start_ms || b.open);
    (bars, after)
}

/// The merge queue's cars: which tasks each job carries.
fn car_tasks(events: &[&v1::Event]) -> HashMap<u64, Vec<String>> {
    let mut jobs = HashMap::new();
    for e in events.iter().filter(|e| e.kind == "merge_queue.batch") {
        if let Some(job) = job_of(e) {
            jobs.insert(job, strings(e, "tasks"));
        }
    }
    jobs
}

/// From `merge_queue.queued` until the task's car starts verifying (or the
/// task leaves the queue some other way: merged, back to its owner).
fn queue_bars(events: &[&v1::Event], end: i64) -> Vec<Bar> {
    let jobs = car_tasks(events);
    let mut bars = Vec::new();
    for (i, q) in events.iter().enumerate().filter(|(_, e)| e.kind == "merge_queue.queued") {
        let task = q.task_id.as_str();
        let left = events[i + 1..].iter().find(|e| match e.kind.as_str() {
            "merge_queue.verifying" => {
                job_of(e).and_then(|j| jobs.get(&j)).is_some_and(|ts| ts.iter().any(|t| t == task))
            }
            "task.state" => e.task_id == task && data(e, "from") == "MERGING",
            _ => false,
        });
        let (stop, open) = left.map_or((end, true), |e| (e.at_unix_ms, false));
        bars.push(Bar {
            kind: BarKind::Queue,
            task: task.to_string(),
            attempt: q.attempt,
            start_ms: q.at_unix_ms,
            end_ms: stop.max(q.at_unix_ms),
            critical: false,
            open,
            label: format!("{task}#{} waiting in the merge queue", q.attempt),
        });
    }
    bars
}

/// `merge_queue.verifying` until that job's verdict on that verifier (or
/// its loss, or an error), as (verifier, bar).
fn car_bars(events: &[&v1::Event], end: i64) -> Vec<(String, Bar)> {
    let jobs = car_tasks(events);
    let mut cars = Vec::new();
    for (i, v) in events.iter().enumerate().filter(|(_, e)| e.kind == "merge_queue.verifying") {
        let Some(job) = job_of(v) else { continue };
        let verdict = events[i + 1..].iter().find(|e| {
            matches!(
                e.kind.as_str(),
                "merge_queue.passed"
                    | "merge_queue.failed"
                    | "merge_queue.verifier_error"
                    | "merge_queue.verifier_lost"
            ) && job_of(e) == Some(job)
                && e.worker_id == v.worker_id
        });
        let (stop, open, how) = match verdict {
            Some(e) => (e.at_unix_ms, false, e.kind.trim_start_matches("merge_queue.").to_string()),
            None => (end, true, "verifying".to_string()),
        };
        let tasks = jobs.get(&job).map(|t| t.join(", ")).unwrap_or_default();
        cars.push((
            v.worker_id.clone(),
            Bar {
                kind: BarKind::MergeCar,
                task: String::new(),
                attempt: 0,
                start_ms: v.at_unix_ms,
                end_ms: stop.max(v.at_unix_ms),
                critical: false,
                open,
                label: format!("merge queue car {job} ({tasks}) on {}: {how}", v.worker_id),
            },
        ));
    }
    cars
}

/// The gaps between a sidecar's bars while it was connected within
/// `[start, end]` (connected from its first `worker.connected` event, or
/// from the start; until a later `worker.disconnected`, or the end).
fn idle_spans(worker: &str, bars: &[Bar], events: &[&v1::Event], start: i64, end: i64) -> Vec<Span> {
    let mine = |kind: &'static str| {
        events.iter().filter(move |e| e.kind == kind && e.worker_id == worker).map(|e| e.at_unix_ms)
    };
    let from = mine("worker.connected").min().unwrap_or(start).clamp(start, end);
    let last_bar = bars.iter().map(|b| b.end_ms).max().unwrap_or(from);
    let to = mine("worker.disconnected").filter(|&at| at >= last_bar).min().unwrap_or(end).clamp(from, end);
    let mut busy: Vec<(i64, i64)> = bars.iter().map(|b| (b.start_ms, b.end_ms)).collect();
    busy.sort();
    let mut idle = Vec::new();
    let mut cursor = from;
    for (s, e) in busy {
        if s > cursor && s <= to {
            idle.push(Span { start_ms: cursor, end_ms: s });
        }
        cursor = cursor.max(e);
    }
    if to > cursor {
        idle.push(Span { start_ms: cursor, end_ms: to });
    }
    idle
}

/// The chain that set the end: the task that finished last (merged, or
/// its last bar), then, again and again, its dependency that finished last.
fn critical_path(
    tasks: &[v1::Task],
    events: &[&v1::Event],
    rows: &BTreeMap<(RowKind, String), Vec<Bar>>,
) -> Vec<String> {
    let mut finished: HashMap<&str, i64> = HashMap::new();
    for b in rows.values().flatten().filter(|b| !b.task.is_empty()) {
        let at = finished.entry(b.task.as_str()).or_insert(b.end_ms);
        *at = (*at).max(b.end_ms);
    }
    for e in events.iter().filter(|e| e.kind == "task.state" && data(e, "to") == "MERGED") {
        let at = finished.entry(e.task_id.as_str()).or_insert(e.at_unix_ms);
        *at = (*at).max(e.at_unix_ms);
    }
    let by_id: HashMap<&str, &v1::Task> = tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let last = finished
        .iter()
        .filter(|(t, _)| by_id.contains_key(*t))
        .max_by_key(|(t, at)| (**at, std::cmp::Reverse(**t)));
    let mut path = Vec::new();
    let mut cur = last.map(|(t, _)| *t);
    // Bounded by the task count: a dependency cycle (refused at create) cannot loop.
    while let Some(t) = cur.filter(|_| path.len() < tasks.len()) {
        path.push(t.to_string());
        cur = by_id.get(t).and_then(|task| {
            task.deps
                .iter()
                .filter_map(|d| Some((d.as_str(), *finished.get(d.as_str())?)))
                .max_by_key(|(d, at)| (*at, std::cmp::Reverse(*d)))
                .map(|(d, _)| d)
        });
    }
    path.reverse();
    path
}

fn data(e: &v1::Event, field: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(&e.data).unwrap_or(serde_json::Value::Null);
    match &v[field] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn job_of(e: &v1::Event) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(&e.data).ok()?;
    v["job"].as_u64()
}

fn strings(e: &v1::Event, field: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&e.data).unwrap_or(serde_json::Value::Null);
    v[field]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
