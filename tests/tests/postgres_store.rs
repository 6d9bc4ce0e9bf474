//! The controller on a PostgreSQL store, through the real binaries and a
//! real server: a DAG runs to MERGED; a second controller stands by and
//! names the leader; a leader whose lease is taken stops. Each test is
//! skipped, saying why, where no PostgreSQL is installed.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;
use std::time::Duration;

use swarm_proto::v1;
use swarm_tests::{
    ControllerProc, PlanBuilder, TempRepo, WAIT, create_swarm, merges_of, operator, poll, spawn_controller,
    spawn_sidecar, task, try_operator, wait_all_merged, worker_script,
};

/// A controller on `url`'s store that leads once it answers ListSwarms.
async fn leader(repo: &TempRepo, url: &str, lease_ms: &str) -> ControllerProc {
    let c =
        spawn_controller(repo.path(), &[&format!("--store={url}"), &format!("--leader-lease-ms={lease_ms}")]);
    wait_serving(&c.url()).await;
    c
}

async fn wait_serving(url: &str) {
    poll(&format!("{url} to lead"), WAIT, || async {
        let mut op = try_operator(url).await?;
        op.list_swarms(v1::ListSwarmsRequest::default()).await.ok().map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn dag_plan_reaches_merged_on_a_postgres_store() {
    let Some(db) = swarm_tests::postgres::database("dag_plan_reaches_merged_on_a_postgres_store") else {
        return;
    };
    let script = worker_script(&[("d", "cat a.txt b.txt c.txt > d.txt")]);
    let repo = TempRepo::with_files(&[("worker.sh", &script), ("README.md", "dag\n")]);
    let plan = PlanBuilder::new("dag")
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .task(task("e"))
        .build();
    let controller = leader(&repo, &db.url, "10000").await;
    let url = controller.url();
    let _sidecars: Vec<_> =
        (1..=2).map(|n| spawn_sidecar(&url, repo.path(), &format!("w{n}"), &[])).collect();
    create_swarm(&url, &plan).await;

    let tasks = wait_all_merged(&url, "dag").await;
    assert_eq!(tasks.len(), 5);
    let expected: BTreeMap<String, String> = [
        ("README.md", "dag\n"),
        ("worker.sh", script.as_str()),
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("d.txt", "a\nb\nc\n"),
        ("e.txt", "e\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(repo.tree("swarm/dag/integration"), expected);
    for id in ["a", "b", "c", "d", "e"] {
        assert_eq!(merges_of(&repo, "swarm/dag/integration", "dag", id), 1, "merges of {id}");
    }
    // The state is in Postgres, not in a SQLite file.
    assert_eq!(db.sql("SELECT count(*) FROM tasks WHERE state = 'MERGED'"), "5");
    assert!(!repo.path().join(".git/swarm/swarm.db").exists(), "no SQLite store was made");
    // GetTask reads its events from the same store.
    let detail = operator(&url).await.get_task(v1::GetTaskRequest { task_id: "dag/d".into() }).await.unwrap();
    assert!(!detail.into_inner().events.is_empty(), "GetTask returns the task's events");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_refuses_every_call_naming_the_leader() {
    let Some(db) = swarm_tests::postgres::database("a_standby_refuses_every_call_naming_the_leader") else {
        return;
    };
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let a = leader(&repo, &db.url, "10000").await;
    let b = spawn_controller(
        repo.path(),
        &[&format!("--store={}", db.url), "--advertise-url=http://b.invalid:1"],
    );

    let status = poll("the standby to name the leader", WAIT, || async {
        let mut op = try_operator(&b.url()).await?;
        let e = op.list_swarms(v1::ListSwarmsRequest::default()).await.err()?;
        e.metadata().get("swarm-leader").is_some().then_some(e)
    })
    .await;
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "not the leader");
    assert_eq!(status.metadata().get("swarm-leader").unwrap().to_str().unwrap(), a.url());
    // The leader advertised its bound address; the standby's own flag is
    // what it would advertise once it leads.
    assert_eq!(db.sql("SELECT url FROM swarm_leader"), a.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_lease_is_taken_stops_serving() {
    let Some(db) = swarm_tests::postgres::database("a_leader_whose_lease_is_taken_stops_serving") else {
        return;
    };
    let repo = TempRepo::with_files(&[("README.md", "x\n")]);
    let mut a = leader(&repo, &db.url, "1000").await;
    // Another controller's win, as the lease row records it.
    db.sql("UPDATE swarm_leader SET epoch = epoch + 1, holder = 'other', url = 'http://other:1'");
    let status = a.proc.wait_exit(Duration::from_secs(30)).expect("the deposed leader exits");
    assert!(!status.success(), "a deposed leader exits with an error: {status:?}");
    assert!(a.proc.log().contains("no longer the leader"), "{}", a.proc.log());
}
