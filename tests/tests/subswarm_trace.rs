//! A child swarm's spans nest in its root swarm's trace: the child's root
//! span is a child of its parent task's span, and every span of the trace
//! names a parent that was exported (real controller and sidecar
//! exporting over OTLP/gRPC to an in-process receiver).
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_tests::otlp::{hex, receive};
use swarm_tests::{
    PlanBuilder, TempRepo, WAIT, create_swarm, poll, spawn_controller_env, spawn_sidecar_env, task,
    wait_all_merged, worker_script,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_child_swarms_root_span_nests_under_its_parent_tasks_span() {
    let receiver = receive().await;
    let (collector, otlp) = (&receiver.collector, &receiver.endpoint);
    let repo = TempRepo::with_files(&[(
        "worker.sh",
        &worker_script(&[("login", "mkdir -p auth && echo in > auth/login.txt")]),
    )]);
    let mut plan = PlanBuilder::new("tr").task(task("api")).build();
    plan.push_str("\n[[tasks]]\nid = \"auth\"\nfiles = [\"auth/**\"]\n[[tasks.subtasks]]\nid = \"login\"\nfiles = [\"auth/login.txt\"]\n");
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let mut controller = spawn_controller_env(repo.path(), &[], &env);
    let url = controller.url();
    let mut sidecar = spawn_sidecar_env(&url, repo.path(), "w1", &[], &env);
    create_swarm(&url, &plan).await;
    wait_all_merged(&url, "tr").await;
    wait_all_merged(&url, "tr/auth").await;
    // Both processes flush their spans when they stop.
    sidecar.terminate();
    controller.proc.terminate();

    let (root, child, parent_task) = poll("the swarms' and the parent task's spans", WAIT, || async {
        Some((
            collector.named("swarm tr")?,
            collector.named("swarm tr/auth")?,
            collector.named("task tr/auth")?,
        ))
    })
    .await;
    let trace = hex(&root.trace_id);
    assert_eq!(hex(&child.trace_id), trace, "the child swarm is part of its root's trace");
    assert_eq!(hex(&child.parent_span_id), hex(&parent_task.span_id), "under its parent task's span");
    let login = collector.named("task tr/auth/login").unwrap();
    assert_eq!(hex(&login.trace_id), trace);
    assert_eq!(hex(&login.parent_span_id), hex(&child.span_id), "the child's tasks under the child swarm");

    // A complete tree: every span of the trace names an exported parent,
    // and the root swarm's span is the only root.
    let orphans = collector.orphans(&trace);
    assert!(orphans.is_empty(), "spans whose parent was never exported: {orphans:?}");
    let roots = collector.roots(&trace);
    assert_eq!(roots, ["swarm tr"]);
}
