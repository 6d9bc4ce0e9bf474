//! swarmctl's usage errors, exit codes and help, without a controller.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_tests::{PlanBuilder, stderr, stdout, swarmctl, task};

/// Nothing listens here (port 9 is discard, never bound in tests).
const NOWHERE: &str = "http://127.0.0.1:9";

#[test]
fn bad_plan_is_refused_naming_the_field_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let plan = PlanBuilder::new("bad").task(task("a")).task(task("b").deps(&["db"])).build();
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, plan).unwrap();
    let out = swarmctl(NOWHERE, &["create", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains(r#"tasks[1].deps[0]: unknown task "db""#), "stderr: {}", stderr(&out));
}

#[test]
fn plan_with_unknown_key_names_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.toml");
    let plan = PlanBuilder::new("bad").task(task("a").set("retires", "3")).build();
    std::fs::write(&path, plan).unwrap();
    let out = swarmctl(NOWHERE, &["run", path.to_str().unwrap(), "--repo", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("tasks[0]"), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("retires"), "stderr: {}", stderr(&out));
}

#[test]
fn missing_plan_file_is_a_usage_error() {
    let out = swarmctl(NOWHERE, &["create", "/nonexistent/plan.toml"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).starts_with("error: cannot read plan /nonexistent/plan.toml"), "{}", stderr(&out));
}

#[test]
fn unknown_flag_is_a_usage_error_not_clap_exit_2() {
    let out = swarmctl(NOWHERE, &["get", "tasks", "--bogus"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("--bogus"));
}

#[test]
fn malformed_task_id_is_refused_before_any_rpc() {
    // `a/b/c` is well formed (task c of the child swarm a/b); an empty
    // level is not.
    for bad in ["nope", "a/B", "a//c", "a/b/", "/x"] {
        let out = swarmctl(NOWHERE, &["retry", bad]);
        assert_eq!(out.status.code(), Some(3), "{bad}: {}", stderr(&out));
        assert!(stderr(&out).starts_with("error: task "), "{bad}: {}", stderr(&out));
    }
}

#[test]
fn unreachable_controller_exits_69() {
    let out = swarmctl(NOWHERE, &["get", "swarms"]);
    assert_eq!(out.status.code(), Some(69), "stderr: {}", stderr(&out));
    assert!(stderr(&out).starts_with("error: cannot reach the controller at http://127.0.0.1:9"));
}

#[test]
fn run_outside_a_git_repository_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, PlanBuilder::new("ok").task(task("a")).build()).unwrap();
    let out = swarmctl(NOWHERE, &["run", path.to_str().unwrap(), "--repo", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("not a git repository"));
}

#[test]
fn help_documents_the_exit_codes() {
    let out = swarmctl(NOWHERE, &["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    for line in ["0 ", "1 ", "2 ", "3 ", "69 ", "130 "] {
        assert!(stdout(&out).contains(&format!("  {line}")), "missing exit code {line}");
    }
}

#[test]
fn completions_are_generated() {
    let out = swarmctl(NOWHERE, &["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("swarmctl"));
    assert!(stdout(&out).contains("describe"));
}

#[test]
fn deploy_example_plans_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if let Err(e) = swarm_core::plan::Plan::parse(&text) {
                panic!("{}: {e}", path.display());
            }
            seen += 1;
        }
    }
    assert!(seen >= 2, "expected at least two example plans in {}", dir.display());
}
