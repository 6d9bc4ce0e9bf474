//! A sidecar killed with `kill -9` while its worker runs re-adopts that
//! worker when it starts again: the worker runs once, its result merges once.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::Path;

use swarm_proto::v1::{Outcome, TaskState};
use swarm_tests::{
    Cluster, Gate, PlanBuilder, TempRepo, WAIT, attempts, create_swarm, merges_of, outcome_of, pid_alive,
    poll, spawn_sidecar, task, wait_task_state, worker_script,
};

/// A worker that notes its pid on start, waits for the gate, notes its pid
/// on finish and writes `t.txt`.
fn script(marks: &Path, gate: &Gate) -> String {
    let body = format!(
        "echo $$ >> '{m}/started'\n{wait}\necho $$ >> '{m}/finished'\necho \"attempt $SWARM_ATTEMPT\" > t.txt",
        m = marks.display(),
        wait = gate.wait_sh()
    );
    worker_script(&[("t", &body)])
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

async fn started_pid(marks: &Path) -> u32 {
    let started = marks.join("started");
    poll("the worker's pid", WAIT, || async { lines(&started).first()?.parse().ok() }).await
}

async fn assert_ran_once_and_merged(url: &str, repo: &TempRepo, swarm: &str, marks: &Path, pid: u32) {
    let t = wait_task_state(url, swarm, "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1, "the attempt was neither lost nor retried");
    let a = attempts(url, &format!("{swarm}/t")).await;
    assert_eq!(a.len(), 1);
    assert_eq!(outcome_of(&a[0]), Outcome::Success);
    assert_eq!(lines(&marks.join("started")), vec![pid.to_string()], "the worker started exactly once");
    assert_eq!(lines(&marks.join("finished")), vec![pid.to_string()], "the same process finished");
    assert_eq!(merges_of(repo, &format!("swarm/{swarm}/integration"), swarm, "t"), 1);
    assert_eq!(repo.tree(&format!("swarm/{swarm}/integration"))["t.txt"], "attempt 1\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn restarted_sidecar_readopts_its_running_worker() {
    let gate = Gate::new();
    let marks = tempfile::tempdir().unwrap();
    let repo = TempRepo::with_files(&[("worker.sh", &script(marks.path(), &gate))]);
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    // The worker leaves its marks outside its worktree: the plan says so.
    let plan = PlanBuilder::new("ra").sandbox(&[], &[marks.path()]).task(task("t")).build();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "ra", "t", TaskState::Running).await;
    let pid = started_pid(marks.path()).await;

    cluster.sidecars[0].kill9();
    assert!(pid_alive(pid), "the worker outlives its sidecar");
    let _w1 = spawn_sidecar(&url, repo.path(), "w1", &[]);
    // The new sidecar must have picked the worker up before it finishes:
    // its log says so once it is connected.
    poll("the restarted sidecar to re-adopt the worker", WAIT, || async {
        _w1.log().contains("re-adopted the worker").then_some(())
    })
    .await;
    assert!(pid_alive(pid), "re-adopting did not stop the worker");
    gate.open();
    assert_ran_once_and_merged(&url, &repo, "ra", marks.path(), pid).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_that_finished_while_its_sidecar_was_dead_is_reported_once() {
    let gate = Gate::new();
    let marks = tempfile::tempdir().unwrap();
    let repo = TempRepo::with_files(&[("worker.sh", &script(marks.path(), &gate))]);
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    let plan = PlanBuilder::new("rf").sandbox(&[], &[marks.path()]).task(task("t")).build();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "rf", "t", TaskState::Running).await;
    let pid = started_pid(marks.path()).await;

    cluster.sidecars[0].kill9();
    gate.open();
    poll("the worker to finish without its sidecar", WAIT, || async { (!pid_alive(pid)).then_some(()) })
        .await;
    let exit_file = repo.path().join(".git/workspaces/w1/.swarm/worker-exit.json");
    // The supervisor writes it (and syncs it) just after the worker's death.
    poll("the supervisor to record the exit", WAIT, || async { exit_file.exists().then_some(()) }).await;
    let _w1 = spawn_sidecar(&url, repo.path(), "w1", &[]);
    assert_ran_once_and_merged(&url, &repo, "rf", marks.path(), pid).await;
}
