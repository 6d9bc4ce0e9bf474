//! Clients given several controller URLs (a leader and its standbys,
//! comma-separated) use the one that answers: a dead URL listed first
//! stops neither swarmctl nor a sidecar, in local or remote mode, and the
//! remote sidecar's packs go to the controller its session is with.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::process::Command;

use serde_json::Value;
use swarm_tests::{
    PlanBuilder, TempRepo, spawn_controller, spawn_sidecar, stderr, stdout, swarmctl, task, wait_all_merged,
    worker_script,
};

/// A URL nothing listens on: a port bound and released.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread")]
async fn swarmctl_and_sidecars_skip_a_dead_controller_url() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let controller = spawn_controller(repo.path(), &[]);
    let urls = format!("{},{}", dead_url(), controller.url());

    // Each task runs where its label says, so both sidecars must work.
    let plan = PlanBuilder::new("urls")
        .task(task("near").set("labels", r#"{ where = "near" }"#))
        .task(task("far").set("labels", r#"{ where = "far" }"#))
        .build();
    let plan_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(plan_file.path(), plan).unwrap();
    let out = swarmctl(&urls, &["create", plan_file.path().to_str().unwrap()]);
    assert!(out.status.success(), "swarmctl create through the list: {}", stderr(&out));

    let clones = tempfile::tempdir().unwrap();
    let clone = clones.path().join("far");
    let st = Command::new("git").args(["clone", "-q"]).arg(repo.path()).arg(&clone).status().unwrap();
    assert!(st.success(), "git clone");
    let _near = spawn_sidecar(&urls, repo.path(), "near-1", &["--label", "where=near"]);
    let _far = spawn_sidecar(&urls, &clone, "far-1", &["--remote", "--label", "where=far"]);

    wait_all_merged(&controller.url(), "urls").await;
    let out = swarmctl(&urls, &["get", "workers", "-o", "json"]);
    assert!(out.status.success(), "swarmctl get workers: {}", stderr(&out));
    let workers: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let text = workers.to_string();
    assert!(text.contains("near-1") && text.contains("far-1"), "both sidecars registered: {text}");
    assert_eq!(repo.file("swarm/urls/integration", "far.txt").as_deref(), Some("far\n"));
}

#[test]
fn swarmctl_names_every_url_when_none_answers() {
    let (a, b) = (dead_url(), dead_url());
    let out = swarmctl(&format!("{a},{b}"), &["get", "swarms"]);
    assert_eq!(out.status.code(), Some(69), "unavailable: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&a) && err.contains(&b), "the error names both URLs: {err}");
}

#[test]
fn a_malformed_controller_list_is_a_usage_error() {
    let out = swarmctl("http://127.0.0.1:1,,http://127.0.0.1:2", &["get", "swarms"]);
    assert_eq!(out.status.code(), Some(3), "usage: {}", stderr(&out));
    assert!(stderr(&out).contains("URL 2 \"\": is empty"), "{}", stderr(&out));
}
