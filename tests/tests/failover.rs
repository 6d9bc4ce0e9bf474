//! Two controllers on one PostgreSQL store: the leader is killed with
//! `kill -9` mid-swarm, the standby takes the lease and serves, the
//! running worker is kept (same attempt, same token, same process), and
//! the swarm ends with the tree an undisturbed run makes, every task merged
//! exactly once. Skipped, saying why, where no PostgreSQL is installed.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use swarm_proto::v1::{self, TaskState};
use swarm_tests::{
    Gate, PlanBuilder, TempRepo, WAIT, attempts, create_swarm, merges_of, poll, spawn_controller,
    spawn_sidecar, task, try_operator, wait_all_merged, wait_task_state, worker_script,
};

/// Lease TTL of the test's controllers: a dead leader blocks the standby
/// at most this long.
const LEASE_MS: &str = "2000";

async fn serving(url: &str) -> bool {
    let Some(mut op) = try_operator(url).await else { return false };
    op.list_swarms(v1::ListSwarmsRequest::default()).await.is_ok()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_standby_takes_over_when_the_leader_is_killed_and_the_swarm_finishes_once() {
    let Some(db) = swarm_tests::postgres::database(
        "the_standby_takes_over_when_the_leader_is_killed_and_the_swarm_finishes_once",
    ) else {
        return;
    };
    // a ─► b ─┐
    //   └─► c ─┼─► d
    //      g ──┘      (g runs across the failover, held by the gate)
    let gate = Gate::new();
    let marks = tempfile::tempdir().unwrap();
    let g = format!(
        "echo $$ >> '{m}/started'\n{wait}\necho $$ >> '{m}/finished'\necho g > g.txt",
        m = marks.path().display(),
        wait = gate.wait_sh()
    );
    let script = worker_script(&[("g", &g), ("d", "cat a.txt b.txt c.txt g.txt > d.txt")]);
    let repo = TempRepo::with_files(&[("worker.sh", &script), ("README.md", "failover\n")]);
    let plan = PlanBuilder::new("fo")
        // g leaves its marks outside its worktree: the plan says so.
        .sandbox(&[], &[marks.path()])
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("g"))
        .task(task("d").deps(&["b", "c", "g"]))
        .build();

    let store = format!("--store={}", db.url);
    let lease = format!("--leader-lease-ms={LEASE_MS}");
    let mut first = spawn_controller(repo.path(), &[&store, &lease]);
    poll("the first controller to lead", WAIT, || async { serving(&first.url()).await.then_some(()) }).await;
    let second = spawn_controller(repo.path(), &[&store, &lease]);
    assert!(!serving(&second.url()).await, "the second controller stands by");
    let urls = format!("{},{}", first.url(), second.url());
    let _sidecars: Vec<_> =
        (1..=3).map(|n| spawn_sidecar(&urls, repo.path(), &format!("w{n}"), &[])).collect();
    create_swarm(&first.url(), &plan).await;

    // Mid-swarm: a merged, g running.
    wait_task_state(&first.url(), "fo", "a", TaskState::Merged).await;
    wait_task_state(&first.url(), "fo", "g", TaskState::Running).await;
    let pid: u32 =
        poll("g's worker pid", WAIT, || async { lines(&marks.path().join("started")).first()?.parse().ok() })
            .await;
    let before = attempts(&first.url(), "fo/g").await;
    assert_eq!(before.len(), 1);

    first.proc.kill9();
    let killed = Instant::now();
    poll("the standby to serve", WAIT, || async { serving(&second.url()).await.then_some(()) }).await;
    let took = killed.elapsed();
    eprintln!("the standby served {took:?} after the leader was killed (lease {LEASE_MS} ms)");
    assert!(took < Duration::from_secs(30), "the standby served only after {took:?}");

    let url = second.url();
    // The worker is the same attempt: the new leader kept it running.
    let g_now = wait_task_state(&url, "fo", "g", TaskState::Running).await;
    assert_eq!(g_now.attempts, 1, "g was not restarted");
    gate.open();
    let tasks = wait_all_merged(&url, "fo").await;
    assert_eq!(tasks.len(), 5);

    let after = attempts(&url, "fo/g").await;
    assert_eq!(after.len(), 1, "g ran one attempt");
    assert_eq!(
        (after[0].number, after[0].fencing_token, after[0].worker_id.as_str()),
        (before[0].number, before[0].fencing_token, before[0].worker_id.as_str()),
        "g's attempt kept its number, token and worker"
    );
    assert_eq!(lines(&marks.path().join("started")), vec![pid.to_string()], "g's worker started once");
    assert_eq!(lines(&marks.path().join("finished")), vec![pid.to_string()], "the same process finished");

    let expected: BTreeMap<String, String> = [
        ("README.md", "failover\n"),
        ("worker.sh", script.as_str()),
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        ("c.txt", "c\n"),
        ("g.txt", "g\n"),
        ("d.txt", "a\nb\nc\ng\n"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(repo.tree("swarm/fo/integration"), expected, "the tree an undisturbed run makes");
    for id in ["a", "b", "c", "g", "d"] {
        assert_eq!(merges_of(&repo, "swarm/fo/integration", "fo", id), 1, "merges of {id}");
        assert_eq!(tasks[id].attempts, 1, "{id} ran once");
    }
    // The new leader holds a later epoch than the one it deposed.
    let epoch: i64 = db.sql("SELECT epoch FROM swarm_leader").parse().unwrap();
    assert_eq!(epoch, 2, "two leaders in turn");
    assert_eq!(db.sql("SELECT url FROM swarm_leader"), url);
}
