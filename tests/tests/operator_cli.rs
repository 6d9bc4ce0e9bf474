//! `swarmctl` against a running controller: reads in every format, cancel,
//! the documented exit codes of gRPC errors, and bad input that creates nothing.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_proto::v1::{self, TaskState};
use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, binary, create_swarm, operator, spawn_controller, stderr, stdout,
    swarmctl, task, wait_task_state, worker_script,
};

/// A worker that runs until cancelled (bounded: 60 s).
const SLOW: &str = r#"i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"#;

#[tokio::test(flavor = "multi_thread")]
async fn cancel_get_describe_and_logs_through_swarmctl() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("slow", SLOW)]))]);
    // One task with an estimate, one whose expectation is learned (from
    // quick, which owns a file in the same directory).
    let plan =
        PlanBuilder::new("ops").task(task("quick").set("estimate", "\"30s\"")).task(task("slow")).build();
    let cluster = Cluster::start(&repo, 2, &["--cancel-grace-ms=500"]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "ops", "quick", TaskState::Merged).await;
    wait_task_state(&url, "ops", "slow", TaskState::Running).await;

    // `logs -f` follows the task while it is cancelled.
    let mut follow = std::process::Command::new(binary("swarmctl"))
        .args(["logs", "ops/slow", "-f", "-o", "json"])
        .env("SWARM_CONTROLLER", &url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(follow.stdout.take().unwrap()));
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    // The progress report, while one task merged and one runs.
    let out = swarmctl(&url, &["report", "ops"]);
    assert_eq!(out.status.code(), Some(0), "report: {}", stderr(&out));
    let md = stdout(&out);
    assert!(md.contains("- Progress: 1/2 merged"), "{md}");
    assert!(md.contains("| slow | RUNNING |") && md.contains("green"), "{md}");
    assert!(md.contains("## Checklists") && md.contains("## Integration queue"), "{md}");
    let out = swarmctl(&url, &["report", "ops", "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["branches"].as_array().unwrap().len(), 2, "{report}");
    assert_eq!(report["branches"][0]["health"], "green", "{report}");
    assert_eq!(report["branches"][0]["checklist"][3]["done"], true, "quick is merged: {report}");
    assert_expected_and_actual(&md, &report["durations"]);
    let out = swarmctl(&url, &["describe", "swarm", "ops"]);
    let text = stdout(&out);
    assert!(text.contains("Durations:   1 finished task expected 30s, took"), "{text}");
    let row =
        |name: &str| text.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or_default().to_string();
    assert!(row("quick").contains("30s (estimate)") && row("slow").contains("(directory)"), "{text}");
    let out = swarmctl(&url, &["describe", "swarm", "ops", "-o", "json"]);
    let described: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_expected_and_actual(&md, &described["durations"]);

    let out = swarmctl(&url, &["cancel", "ops/slow", "--reason", "not needed"]);
    assert_eq!(out.status.code(), Some(0), "cancel: {}", stderr(&out));
    let t = wait_task_state(&url, "ops", "slow", TaskState::Cancelled).await;
    assert_eq!(t.merge_commit, "");

    let followed = loop {
        let line = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("logs -f saw no cancellation");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(event["task"], "slow", "only the task's events: {line}");
        if line.contains("CANCELLED") {
            break event;
        }
    };
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(followed["swarm"], "ops");

    // Reads, in each format.
    let out = swarmctl(&url, &["get", "tasks", "--swarm", "ops", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<(String, String)> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string()))
        .collect();
    assert!(states.contains(&("ops/quick".into(), "MERGED".into())), "{states:?}");
    assert!(states.contains(&("ops/slow".into(), "CANCELLED".into())), "{states:?}");

    // Without --swarm: every swarm's tasks.
    let out = swarmctl(&url, &["get", "tasks", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = json.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"ops/quick") && ids.contains(&"ops/slow"), "{ids:?}");

    let out = swarmctl(&url, &["get", "swarms"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("SWARM") && stdout(&out).contains("ops"), "{}", stdout(&out));

    let out = swarmctl(&url, &["get", "workers", "-o", "yaml"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("id: w1") && stdout(&out).contains("id: w2"), "{}", stdout(&out));

    let out = swarmctl(&url, &["describe", "task", "ops/quick"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("State:") && stdout(&out).contains("MERGED"), "{}", stdout(&out));

    let out = swarmctl(&url, &["logs", "ops/slow", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let kinds: Vec<String> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].as_str().unwrap().to_string())
        .collect();
    assert!(!kinds.is_empty());
    assert!(stdout(&out).contains("CANCELLED"), "{}", stdout(&out));
}

/// The report's rows and a `durations` JSON (the report's or `describe
/// swarm`'s) while quick (estimated) merged and slow (learned) runs.
fn assert_expected_and_actual(md: &str, durations: &serde_json::Value) {
    let row = |name: &str| md.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap_or_default();
    assert!(row("quick").contains("| 30s (estimate) |"), "{md}");
    assert!(row("slow").contains("(directory) |") && row("slow").contains(" so far"), "{md}");
    assert!(md.contains("- Durations: 1 finished task expected 30s, took "), "{md}");
    let tasks = durations["tasks"].as_array().unwrap();
    let of = |name: &str| tasks.iter().find(|t| t["task"] == name).unwrap();
    assert_eq!(
        (&of("quick")["expected_source"], &of("quick")["running"]),
        (&"estimate".into(), &false.into())
    );
    assert_eq!(of("quick")["expected_ms"], 30_000, "{durations}");
    assert!(of("quick")["actual_ms"].as_u64().is_some_and(|ms| ms > 0), "{durations}");
    assert!(of("quick")["ratio"].as_f64().is_some(), "{durations}");
    assert_eq!((&of("slow")["expected_source"], &of("slow")["running"]), (&"directory".into(), &true.into()));
    assert_eq!(durations["compared"], 1, "{durations}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_errors_map_to_documented_exit_codes() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &PlanBuilder::new("codes").task(task("a")).build()).await;
    wait_task_state(&url, "codes", "a", TaskState::Merged).await;

    let out = swarmctl(&url, &["describe", "task", "codes/missing"]);
    assert_eq!(out.status.code(), Some(4), "NotFound: {}", stderr(&out));
    assert!(stderr(&out).starts_with("error: "));

    let out = swarmctl(&url, &["retry", "codes/a"]);
    assert_eq!(out.status.code(), Some(5), "FailedPrecondition: {}", stderr(&out));

    let out = swarmctl(&url, &["answer", "codes/a", "   "]);
    assert_eq!(out.status.code(), Some(3), "empty answer: {}", stderr(&out));

    let out = swarmctl(&url, &["drain", "w1", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "drain: {}", stderr(&out));
    let worker: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(worker["draining"], serde_json::Value::Bool(true), "{worker}");

    let out = swarmctl(&url, &["drain", "nobody"]);
    assert_eq!(out.status.code(), Some(4), "drain unknown worker: {}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn land_moves_the_target_branch_to_the_integration_head() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &PlanBuilder::new("l").task(task("a")).task(task("b").deps(&["a"])).build()).await;
    wait_task_state(&url, "l", "b", TaskState::Merged).await;
    let head = repo.git(&["rev-parse", "swarm/l/integration"]).trim().to_string();

    let out = swarmctl(&url, &["land", "l", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "land: {}", stderr(&out));
    let landed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(landed["new_commit"].as_str(), Some(head.as_str()), "{landed}");
    assert_eq!(repo.git(&["rev-parse", "main"]).trim(), head);
    assert_eq!(repo.tree("main")["b.txt"], "b\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_plans_name_the_field_and_rule_and_create_nothing() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let dir = tempfile::tempdir().unwrap();

    let cases = [
        (
            PlanBuilder::new("bad").task(task("a").deps(&["db"])).build(),
            r#"tasks[0].deps[0]: unknown task "db""#,
        ),
        (
            PlanBuilder::new("bad").task(task("a").deps(&["b"])).task(task("b").deps(&["a"])).build(),
            "dependency cycle",
        ),
        (PlanBuilder::new("bad").task(task("a").set("files", "[]")).build(), "tasks[0].files"),
        (PlanBuilder::new("Bad Name").task(task("a")).build(), "name"),
        (PlanBuilder::new("bad").task(task("a").set("env", r#"{ SWARM_X = "1" }"#)).build(), "tasks[0].env"),
    ];
    let mut op = operator(&url).await;
    for (plan, expected) in &cases {
        // Through swarmctl: refused before the controller is asked.
        let path = dir.path().join("plan.toml");
        std::fs::write(&path, plan).unwrap();
        let out = swarmctl(&url, &["create", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(3), "{expected}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "want {expected:?} in {}", stderr(&out));

        // Straight to the API: InvalidArgument naming the same field.
        let err = op
            .create_swarm(v1::CreateSwarmRequest { plan_toml: plan.clone(), origin: None })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{expected}");
        assert!(err.message().contains(expected), "want {expected:?} in {}", err.message());
    }
    let swarms = op.list_swarms(v1::ListSwarmsRequest::default()).await.unwrap().into_inner().swarms;
    assert!(swarms.is_empty(), "nothing created: {swarms:?}");
    assert!(!repo.has("swarm/bad/integration"));

    // Bad ids on the wire are refused with the field named.
    let err = op.get_task(v1::GetTaskRequest { task_id: "Not A Task".into() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("task_id"), "{}", err.message());
}
