//! Observability across real processes: spans exported over OTLP/gRPC by
//! the controller and a sidecar to an in-process receiver, the trace
//! context crossing controller → sidecar → worker (`TRACEPARENT`), and the
//! Prometheus endpoint scraped during and after a run.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;

use swarm_tests::otlp::{attr, hex, receive};
use swarm_tests::{
    Gate, PlanBuilder, TempRepo, WAIT, create_swarm, poll, spawn_controller_env, spawn_sidecar_env, task,
    wait_all_merged, worker_script,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SWARM: &str = "tel";

async fn scrape(addr: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: swarm\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.0 200 OK"), "scrape: {text}");
    text
}

/// `name value` lines of an OpenMetrics text, by name with labels.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("HTTP") && !l.contains(": "))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn sample(text: &str, name: &str) -> f64 {
    samples(text).get(name).copied().unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_context_crosses_processes_and_metrics_count_the_run() {
    let receiver = receive().await;
    let (collector, otlp) = (&receiver.collector, &receiver.endpoint);
    let metrics_addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().to_string()
    };

    let gate = Gate::new();
    let trace_file = tempfile::NamedTempFile::new().unwrap();
    let script = worker_script(&[
        (
            "traced",
            &format!(
                "{}\nprintf '%s\\n' \"$TRACEPARENT\" > '{}'\necho traced > traced.txt",
                gate.wait_sh(),
                trace_file.path().display()
            ),
        ),
        ("flaky", r#"if [ "$SWARM_ATTEMPT" = 1 ]; then exit 1; fi; echo ok > flaky.txt"#),
    ]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let plan = PlanBuilder::new(SWARM)
        .sandbox(&[], &[trace_file.path()])
        .task(task("traced").set("verify", r#"[{ name = "check", command = "test -s traced.txt" }]"#))
        .task(task("flaky").deps(&["traced"]))
        .build();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let mut controller =
        spawn_controller_env(repo.path(), &[&format!("--metrics-listen={metrics_addr}")], &env);
    let url = controller.url();
    let mut sidecar = spawn_sidecar_env(&url, repo.path(), "w1", &["--log-format=json"], &env);
    create_swarm(&url, &plan).await;

    // During the run: `traced` holds the only worker at the gate.
    let during = poll("traced RUNNING in the metrics", WAIT, || async {
        let text = scrape(&metrics_addr).await;
        (samples(&text).get("swarm_tasks{state=\"RUNNING\"}") == Some(&1.0)).then_some(text)
    })
    .await;
    assert_eq!(sample(&during, "swarm_tasks{state=\"PENDING\"}"), 1.0, "flaky waits for traced");
    assert_eq!(sample(&during, "swarm_workers_connected"), 1.0);
    gate.open();
    wait_all_merged(&url, SWARM).await;

    let after = scrape(&metrics_addr).await;
    assert_eq!(sample(&after, "swarm_tasks{state=\"MERGED\"}"), 2.0, "{after}");
    assert_eq!(sample(&after, "swarm_tasks{state=\"RUNNING\"}"), 0.0, "{after}");
    assert_eq!(sample(&after, "swarm_retries_total"), 1.0, "flaky retried once: {after}");
    assert_eq!(sample(&after, "swarm_fenced_reports_total"), 0.0);
    assert!(sample(&after, "swarm_merge_duration_seconds_count") >= 2.0, "{after}");
    assert!(sample(&after, "swarm_assignment_latency_seconds_count") >= 3.0, "{after}");
    assert!(sample(&after, "swarm_store_commit_seconds_count") >= 1.0, "{after}");
    assert!(sample(&after, "swarm_heartbeat_lag_seconds_count") >= 1.0, "{after}");

    // Both processes flush their spans when they stop.
    sidecar.terminate();
    controller.proc.terminate();
    let attempt = format!("{SWARM}/traced#1");
    let (assign, run) = poll("the assignment and attempt spans", WAIT, || async {
        Some((
            collector.find("swarm-controller", "attempt.assign", &attempt)?,
            collector.find("swarm-sidecar", "attempt", &attempt)?,
        ))
    })
    .await;
    assert_eq!(hex(&run.trace_id), hex(&assign.trace_id), "one trace across the processes");
    assert_eq!(hex(&run.parent_span_id), hex(&assign.span_id), "the sidecar's attempt is the child");
    assert_eq!(attr(&run.attributes, "worker").as_deref(), Some("w1"));
    assert!(attr(&run.attributes, "host").is_some_and(|h| !h.is_empty()), "host attribute");

    // JSON log lines carry the ids of the spans they are in.
    let log = sidecar.log();
    let started = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["fields"]["message"] == "worker started" && l["fields"]["restarts"] == 0)
        .unwrap_or_else(|| panic!("no JSON 'worker started' line in:\n{log}"));
    let attempt_span = started["spans"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "attempt"))
        .unwrap_or_else(|| panic!("no attempt span in {started}"));
    assert_eq!(attempt_span["task"], format!("{SWARM}/traced"), "{started}");
    assert_eq!(attempt_span["worker"], "w1", "{started}");

    let traceparent = std::fs::read_to_string(trace_file.path()).unwrap();
    let parts: Vec<&str> = traceparent.trim().split('-').collect();
    assert_eq!(parts.len(), 4, "TRACEPARENT {traceparent:?}");
    assert_eq!(parts[1], hex(&assign.trace_id), "the worker continues the swarm's trace");
    assert_eq!(parts[2], hex(&run.span_id), "the worker's parent is the sidecar's attempt span");

    // The sidecar's steps are children of its attempt span.
    assert_eq!(collector.children("swarm-sidecar", &run), ["commit", "prepare", "run", "verify"]);

    // One swarm, one trace: the retried task's attempts and every state
    // change share it.
    let transitions = collector.traces_of("swarm-controller", "task.transition");
    assert!(transitions.len() >= 8, "{transitions:?}");
    assert!(transitions.iter().all(|t| *t == hex(&assign.trace_id)), "{transitions:?}");
    let flaky = collector.find("swarm-controller", "attempt.assign", &format!("{SWARM}/flaky#2")).unwrap();
    assert_eq!(hex(&flaky.trace_id), hex(&assign.trace_id));
    // The merger's merges (one per task) join the same trace.
    let merges = collector.traces_of("swarm-controller", "merge");
    assert_eq!(merges.len(), 2, "{merges:?}");
    assert!(merges.iter().all(|t| *t == hex(&assign.trace_id)), "{merges:?}");

    // A complete tree: every span of the finished swarm's trace names a
    // parent that was exported too, and exactly one (the swarm's) is a root.
    let trace = hex(&assign.trace_id);
    let orphans = collector.orphans(&trace);
    assert!(orphans.is_empty(), "spans whose parent was never exported: {orphans:?}");
    let roots = collector.roots(&trace);
    assert_eq!(roots, [format!("swarm {SWARM}")], "one root per swarm");
    let spans = collector.in_trace(&trace);
    let tasks: Vec<&str> =
        spans.iter().map(|(_, s)| s.name.as_str()).filter(|n| n.starts_with("task ")).collect();
    assert_eq!(tasks.len(), 2, "a span per task: {tasks:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_merge_queue_verification_joins_its_swarms_trace() {
    let receiver = receive().await;
    let (collector, otlp) = (&receiver.collector, &receiver.endpoint);
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("mq")
        .tables("[[integration_verify]]\nname = \"integration\"\ncommand = 'test -s one.txt'\n")
        .task(task("one"))
        .build();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let mut controller = spawn_controller_env(repo.path(), &[], &env);
    let url = controller.url();
    let mut sidecar = spawn_sidecar_env(&url, repo.path(), "w1", &[], &env);
    create_swarm(&url, &plan).await;
    wait_all_merged(&url, "mq").await;
    sidecar.terminate();
    controller.proc.terminate();

    let span = |service: &'static str, name: &'static str| {
        let collector = collector.clone();
        move || {
            let found = collector.of(service, name);
            async move { found }
        }
    };
    let dispatch =
        poll("the verify dispatch span", WAIT, span("swarm-controller", "merge_queue.verify_dispatch")).await;
    let verify = poll("the sidecar's verify span", WAIT, span("swarm-sidecar", "merge_queue.verify")).await;
    let assign = poll("the attempt's assign span", WAIT, span("swarm-controller", "attempt.assign")).await;
    assert_eq!(hex(&dispatch.trace_id), hex(&assign.trace_id), "the swarm's one trace");
    assert_eq!(hex(&verify.trace_id), hex(&dispatch.trace_id), "one trace across the processes");
    assert_eq!(
        hex(&verify.parent_span_id),
        hex(&dispatch.span_id),
        "the sidecar's verification is the child"
    );
    let root = poll("the swarm's root span", WAIT, span("swarm-controller", "swarm mq")).await;
    assert_eq!(hex(&dispatch.parent_span_id), hex(&root.span_id), "under the swarm's root");
}
