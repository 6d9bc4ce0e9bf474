//! A scripted swarm's record, the timeline made of it and its drawing.

use super::*;
use crate::timeline_svg;

fn ev(at: i64, kind: &str, task: &str, attempt: u32, worker: &str, data: serde_json::Value) -> v1::Event {
    v1::Event {
        at_unix_ms: at,
        swarm_id: "s".into(),
        task_id: task.into(),
        attempt,
        worker_id: worker.into(),
        kind: kind.into(),
        data: data.to_string(),
        ..Default::default()
    }
}

fn attempt(n: u32, worker: &str, start: i64, end: i64, verify_ms: u64) -> v1::Attempt {
    let tiers = if verify_ms > 0 {
        vec![v1::TierResult {
            name: "own".into(),
            duration_ms: verify_ms,
            passed: true,
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    v1::Attempt {
        number: n,
        worker_id: worker.into(),
        started_at_unix_ms: start,
        ended_at_unix_ms: end,
        tiers,
        ..Default::default()
    }
}

fn task(id: &str, deps: &[&str]) -> v1::Task {
    v1::Task {
        swarm_id: "s".into(),
        id: id.into(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        ..Default::default()
    }
}

/// `a` fails on w1 and is retried on w2, then goes through the merge queue
/// (a car on verifier v1); `b` follows `a`; `c` asks a question while it
/// runs; `q` escalates a question that is answered two seconds later;
/// `w3` never gets anything.
fn scripted() -> Timeline {
    use serde_json::json;
    let swarm = v1::Swarm {
        id: "s".into(),
        state: v1::SwarmState::Completed as i32,
        created_at_unix_ms: 1000,
        ..Default::default()
    };
    let tasks = vec![task("a", &[]), task("b", &["a"]), task("c", &[]), task("q", &[])];
    let attempts = vec![
        ("a".to_string(), attempt(1, "w1", 1000, 3000, 0)),
        ("a".to_string(), attempt(2, "w2", 3500, 6000, 1000)),
        ("b".to_string(), attempt(1, "w1", 8000, 10_000, 0)),
        ("c".to_string(), attempt(1, "w1", 3100, 6000, 0)),
        ("q".to_string(), attempt(1, "w2", 6500, 7000, 0)),
        ("q".to_string(), attempt(2, "w2", 9100, 9500, 0)),
    ];
    let none = json!(null);
    let mut events = vec![
        ev(1200, "attempt.started", "a", 1, "w1", none.clone()),
        ev(3200, "attempt.started", "c", 1, "w1", none.clone()),
        ev(3500, "task.question", "c", 1, "w1", json!({ "question_id": "c1", "text": "which?" })),
        ev(3700, "attempt.started", "a", 2, "w2", none.clone()),
        ev(4500, "task.answered", "c", 1, "", json!({ "question_id": "c1", "text": "this" })),
        ev(6000, "merge_queue.queued", "a", 2, "", json!({ "waiting": 1 })),
        ev(6100, "merge_queue.batch", "", 0, "", json!({ "job": 1, "tasks": ["a"] })),
        ev(6200, "merge_queue.verifying", "", 0, "v1", json!({ "job": 1, "attempts": ["s/a#2"] })),
        ev(6600, "attempt.started", "q", 1, "w2", none.clone()),
        ev(6900, "task.question", "q", 1, "w2", json!({ "question_id": "q1", "text": "Which <answer>?" })),
        ev(7500, "merge_queue.passed", "", 0, "v1", json!({ "job": 1, "tasks": ["a"] })),
        ev(7600, "task.state", "a", 2, "", json!({ "from": "MERGING", "to": "MERGED" })),
        ev(8100, "attempt.started", "b", 1, "w1", none.clone()),
        ev(9000, "task.answered", "q", 1, "", json!({ "question_id": "q1", "text": "42" })),
        ev(9200, "attempt.started", "q", 2, "w2", none.clone()),
        ev(9600, "task.state", "q", 2, "", json!({ "from": "SUCCEEDED", "to": "MERGED" })),
        ev(10_100, "task.state", "b", 1, "", json!({ "from": "SUCCEEDED", "to": "MERGED" })),
    ];
    // Another swarm's events are not this one's.
    let mut other = ev(20_000, "attempt.started", "a", 1, "w1", none);
    other.swarm_id = "other".into();
    events.push(other);
    let workers: Vec<v1::Worker> = ["w1", "w2", "w3", "v1"]
        .iter()
        .map(|w| v1::Worker { id: w.to_string(), ..Default::default() })
        .collect();
    build(&Source {
        swarm: &swarm,
        tasks: &tasks,
        attempts: &attempts,
        events: &events,
        workers: &workers,
        now: 50_000,
    })
}

fn row<'a>(t: &'a Timeline, id: &str) -> &'a Row {
    t.rows.iter().find(|r| r.id == id).unwrap_or_else(|| panic!("no row {id}: {t:#?}"))
}

fn spans(r: &Row, task: &str, attempt: u32) -> Vec<(BarKind, i64, i64)> {
    r.bars
        .iter()
        .filter(|b| b.task == task && b.attempt == attempt)
        .map(|b| (b.kind, b.start_ms, b.end_ms))
        .collect()
}

#[test]
fn a_retry_is_two_attempts_on_the_rows_of_the_workers_that_ran_them() {
    let t = scripted();
    assert_eq!((t.start_ms, t.end_ms), (1000, 10_100), "from creation to the last event of this swarm");
    assert_eq!(spans(row(&t, "w1"), "a", 1), vec![(BarKind::Setup, 1000, 1200), (BarKind::Work, 1200, 3000)]);
    // Verify is the tiers' time before the end; setup ends at attempt.started.
    assert_eq!(
        spans(row(&t, "w2"), "a", 2),
        vec![(BarKind::Setup, 3500, 3700), (BarKind::Work, 3700, 5000), (BarKind::Verify, 5000, 6000)]
    );
    assert_eq!(row(&t, "w1").kind, RowKind::Worker);
}

#[test]
fn a_queue_car_is_on_its_verifiers_row_and_the_wait_for_it_on_the_queue_row() {
    let t = scripted();
    let v1 = row(&t, "v1");
    assert_eq!(v1.kind, RowKind::Verifier);
    let car = &v1.bars[0];
    assert_eq!((car.kind, car.start_ms, car.end_ms), (BarKind::MergeCar, 6200, 7500));
    assert!(car.label.contains("car 1 (a)") && car.label.ends_with("passed"), "{}", car.label);
    let queue = row(&t, "merge queue");
    assert_eq!(queue.kind, RowKind::Queue);
    assert_eq!(spans(queue, "a", 2), vec![(BarKind::Queue, 6000, 6200)]);
}

#[test]
fn operator_waits_cut_the_work_they_stopped_or_follow_the_attempt_that_escalated() {
    let t = scripted();
    assert_eq!(
        spans(row(&t, "w1"), "c", 1),
        vec![
            (BarKind::Setup, 3100, 3200),
            (BarKind::Work, 3200, 3500),
            (BarKind::OperatorWait, 3500, 4500),
            (BarKind::Work, 4500, 6000)
        ]
    );
    let q1 = spans(row(&t, "w2"), "q", 1);
    assert_eq!(q1.last(), Some(&(BarKind::OperatorWait, 6900, 7000)), "{q1:?}");
    let operator = row(&t, "operator");
    assert_eq!(operator.kind, RowKind::Operator);
    assert_eq!(spans(operator, "q", 1), vec![(BarKind::OperatorWait, 7000, 9000)]);
    let waited = t.totals.iter().find(|x| x.kind == BarKind::OperatorWait).map(|x| x.ms);
    assert_eq!(waited, Some(1000 + 100 + 2000));
}

#[test]
fn the_critical_path_is_the_chain_that_finished_last_and_idle_spans_are_the_gaps() {
    let t = scripted();
    assert_eq!(t.critical_path, vec!["a", "b"]);
    let w1 = row(&t, "w1");
    assert!(w1.bars.iter().filter(|b| b.task == "b").all(|b| b.critical));
    assert!(w1.bars.iter().filter(|b| b.task == "c").all(|b| !b.critical));
    let idle: Vec<(i64, i64)> = w1.idle.iter().map(|s| (s.start_ms, s.end_ms)).collect();
    assert_eq!(idle, vec![(3000, 3100), (6000, 8000), (10_000, 10_100)]);
    let w3 = row(&t, "w3");
    assert!(w3.bars.is_empty());
    assert_eq!(
        w3.idle,
        vec![Span { start_ms: 1000, end_ms: 10_100 }],
        "a sidecar that ran nothing is idle throughout"
    );
    assert!(t.idle_ms >= 9100 + 2100);
}

#[test]
fn a_running_attempt_is_open_to_now() {
    let swarm = v1::Swarm {
        id: "s".into(),
        state: v1::SwarmState::Active as i32,
        created_at_unix_ms: 0,
        ..Default::default()
    };
    let attempts = vec![("a".to_string(), attempt(1, "w1", 100, 0, 0))];
    let events = vec![ev(200, "attempt.started", "a", 1, "w1", serde_json::Value::Null)];
    let tasks = vec![task("a", &[])];
    let t = build(&Source {
        swarm: &swarm,
        tasks: &tasks,
        attempts: &attempts,
        events: &events,
        workers: &[],
        now: 900,
    });
    assert_eq!(t.end_ms, 900);
    let last = row(&t, "w1").bars.last().cloned().expect("a bar");
    assert_eq!((last.kind, last.start_ms, last.end_ms, last.open), (BarKind::Work, 200, 900, true));
}

/// Well-formed XML: tags nest and close, attributes are quoted, and `<`
/// and `&` appear only as markup and entities. No XML parser is among the
/// workspace's dependencies; this is the part of one the SVG needs.
fn assert_well_formed(xml: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(open) = rest.find('<') {
        check_text(&rest[..open]);
        let close =
            rest[open..].find('>').map(|i| open + i).unwrap_or_else(|| panic!("unclosed tag at {rest:.80}"));
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "closing {name}");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let (name, mut attrs) = body.split_once(' ').unwrap_or((body, ""));
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "tag {name:?}"
        );
        while !attrs.trim().is_empty() {
            let (key, after) =
                attrs.trim_start().split_once("=\"").unwrap_or_else(|| panic!("attribute in {tag}"));
            assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':'), "key {key:?}");
            let (value, after) = after.split_once('"').unwrap_or_else(|| panic!("unquoted in {tag}"));
            check_text(value);
            attrs = after;
        }
        if !self_closing {
            stack.push(name.to_string());
        }
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

fn check_text(text: &str) {
    assert!(!text.contains('<') && !text.contains('>'), "raw markup in {text:?}");
    for (i, _) in text.match_indices('&') {
        let entity = &text[i..text[i..].find(';').map_or(text.len(), |j| i + j + 1)];
        assert!(["&lt;", "&gt;", "&amp;", "&quot;", "&#39;"].contains(&entity), "entity {entity:?}");
    }
}

#[test]
fn the_svg_is_well_formed_with_a_bar_per_span_a_legend_and_an_axis() {
    let mut t = scripted();
    t.rows[0].id = "w<&>\"'1".into();
    let svg = timeline_svg::render(&t);
    assert_well_formed(&svg);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{svg:.100}");
    let bars: usize = t.rows.iter().map(|r| r.bars.len()).sum();
    assert_eq!(svg.matches("<rect class=\"bar\"").count(), bars);
    for kind in BarKind::ALL {
        assert!(svg.contains(&format!("data-kind=\"{}\"", kind.name())), "{} drawn", kind.name());
        assert!(svg.contains(&format!("data-legend=\"{}\"", kind.name())), "{} in the legend", kind.name());
    }
    assert!(svg.contains("data-legend=\"critical\"") && svg.contains("data-critical=\"true\""));
    assert!(svg.contains("class=\"idle\""));
    assert!(svg.contains(">+1.0 s</text>"), "the axis is labelled");
    assert!(svg.contains("w&lt;&amp;&gt;&quot;&#39;1"), "names are escaped");
    assert!(
        svg.contains("<title>q#1 waiting for the operator: Which &lt;answer&gt;?: 2.0 s</title>"),
        "{svg}"
    );
    assert!(!svg.contains("style="), "no inline style: the dashboard's CSP forbids it");
}

#[test]
fn the_html_page_is_self_contained() {
    let t = scripted();
    let swarm = v1::Swarm { id: "s".into(), ..Default::default() };
    let report = crate::report::build(&swarm, &[task("a", &[])], &[], 0);
    let html = crate::timeline_html::page(&report, &[t]);
    assert!(html.starts_with("<!doctype html>") && html.contains("<svg") && html.contains("<style>"));
    for external in ["src=", "href=", "<script", "<link", "url("] {
        assert!(!html.contains(external), "{external} in the page");
    }
    assert!(html.contains("critical path a → b"), "the summary names the path");
}
