//! Observability across real processes: spans exported over OTLP/gRPC by
//! the controller and a sidecar to an in-process receiver, the trace
//! context crossing controller → sidecar → worker (`TRACEPARENT`), and the
//! Prometheus endpoint scraped during and after a run.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use swarm_tests::{
    Gate, PlanBuilder, TempRepo, WAIT, create_swarm, poll, spawn_controller_env, spawn_sidecar_env, task,
    wait_all_merged, worker_script,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const SWARM: &str = "tel";

/// Every span received, with its process's `service.name`.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<(String, Span)>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut all = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs.resource.as_ref().and_then(|r| attr(&r.attributes, "service.name"));
            for ss in rs.scope_spans {
                for span in ss.spans {
                    all.push((service.clone().unwrap_or_default(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn attr(attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    })
}

impl Collector {
    /// Names of the spans of `service` whose parent is `parent`.
    fn children(&self, service: &str, parent: &Span) -> Vec<String> {
        let all = self.0.lock().unwrap();
        let mut names: Vec<String> = all
            .iter()
            .filter(|(svc, s)| svc == service && s.parent_span_id == parent.span_id)
            .map(|(_, s)| s.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Every span of the trace `trace` (hex), with its service.
    fn in_trace(&self, trace: &str) -> Vec<(String, Span)> {
        let all = self.0.lock().unwrap();
        all.iter().filter(|(_, s)| hex(&s.trace_id) == trace).cloned().collect()
    }

    /// Trace ids (hex) of every span of `service` named `name`.
    fn traces_of(&self, service: &str, name: &str) -> Vec<String> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(svc, s)| svc == service && s.name == name)
            .map(|(_, s)| hex(&s.trace_id))
            .collect()
    }

    /// The span `name` of `service` whose `attempt` attribute is `attempt`.
    fn find(&self, service: &str, name: &str, attempt: &str) -> Option<Span> {
        let all = self.0.lock().unwrap();
        all.iter()
            .find(|(svc, s)| {
                svc == service && s.name == name && attr(&s.attributes, "attempt").as_deref() == Some(attempt)
            })
            .map(|(_, s)| s.clone())
    }
}

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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_context_crosses_processes_and_metrics_count_the_run() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
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
    // The integrator's merges (one per task) join the same trace.
    let merges = collector.traces_of("swarm-controller", "merge");
    assert_eq!(merges.len(), 2, "{merges:?}");
    assert!(merges.iter().all(|t| *t == hex(&assign.trace_id)), "{merges:?}");

    // A complete tree: every span of the finished swarm's trace names a
    // parent that was exported too, and exactly one (the swarm's) is a root.
    let trace = hex(&assign.trace_id);
    let spans = collector.in_trace(&trace);
    let ids: std::collections::HashSet<String> = spans.iter().map(|(_, s)| hex(&s.span_id)).collect();
    let orphans: Vec<String> = spans
        .iter()
        .filter(|(_, s)| !s.parent_span_id.is_empty() && !ids.contains(&hex(&s.parent_span_id)))
        .map(|(svc, s)| format!("{svc}: {} (parent {})", s.name, hex(&s.parent_span_id)))
        .collect();
    assert!(orphans.is_empty(), "spans whose parent was never exported: {orphans:?}");
    let roots: Vec<&str> =
        spans.iter().filter(|(_, s)| s.parent_span_id.is_empty()).map(|(_, s)| s.name.as_str()).collect();
    assert_eq!(roots, [format!("swarm {SWARM}")], "one root per swarm");
    let tasks: Vec<&str> =
        spans.iter().map(|(_, s)| s.name.as_str()).filter(|n| n.starts_with("task ")).collect();
    assert_eq!(tasks.len(), 2, "a span per task: {tasks:?}");
    server.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_merge_queue_verification_joins_its_swarms_trace() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
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

    let one_of = |service: &'static str, name: &'static str| {
        let collector = collector.clone();
        move || {
            let all = collector.0.lock().unwrap();
            let found = all.iter().find(|(svc, s)| svc == service && s.name == name).map(|(_, s)| s.clone());
            async move { found }
        }
    };
    let dispatch = poll(
        "the controller's verify dispatch span",
        WAIT,
        one_of("swarm-controller", "merge_queue.verify_dispatch"),
    )
    .await;
    let verify = poll("the sidecar's verify span", WAIT, one_of("swarm-sidecar", "merge_queue.verify")).await;
    let assign = poll("the attempt's assign span", WAIT, one_of("swarm-controller", "attempt.assign")).await;
    assert_eq!(hex(&dispatch.trace_id), hex(&assign.trace_id), "the swarm's one trace");
    assert_eq!(hex(&verify.trace_id), hex(&dispatch.trace_id), "one trace across the processes");
    assert_eq!(
        hex(&verify.parent_span_id),
        hex(&dispatch.span_id),
        "the sidecar's verification is the child"
    );
    let root = poll("the swarm's root span", WAIT, one_of("swarm-controller", "swarm mq")).await;
    assert_eq!(hex(&dispatch.parent_span_id), hex(&root.span_id), "under the swarm's root");
    server.abort();
}
