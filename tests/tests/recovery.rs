//! Crashes: the controller killed mid-run, a sidecar killed or frozen
//! mid-attempt. The swarm still ends with the undisturbed tree, every task
//! merged exactly once, and stale reports fenced.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::collections::BTreeMap;

use swarm_proto::v1;
use swarm_proto::v1::TaskState;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use swarm_tests::{
    Cluster, FAST_LEASES, Gate, PlanBuilder, TempRepo, WAIT, attempts, create_swarm, events, merges_of,
    pid_alive, poll, spawn_controller, spawn_sidecar, task, wait_all_merged, wait_task_state, worker_script,
};

fn dag_plan(name: &str) -> String {
    PlanBuilder::new(name)
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .task(task("e"))
        .build()
}

/// What the DAG plan leaves when nothing goes wrong.
fn undisturbed_tree(script: &str) -> BTreeMap<String, String> {
    let repo = TempRepo::with_files(&[("worker.sh", script)]);
    let cluster = Cluster::start(&repo, 2, &[]);
    let rt = tokio::runtime::Handle::current();
    let url = cluster.url();
    tokio::task::block_in_place(|| {
        rt.block_on(async {
            create_swarm(&url, &dag_plan("r")).await;
            wait_all_merged(&url, "r").await;
        })
    });
    repo.tree("swarm/r/integration")
}

#[tokio::test(flavor = "multi_thread")]
async fn controller_kill9_mid_run_then_restart_gives_the_same_tree_and_no_double_merge() {
    let gate = Gate::new();
    // b and c hold until the gate opens; the controller dies while they run.
    let hold = format!("{}; echo \"$SWARM_TASK_ID\" > \"$SWARM_TASK_ID.txt\"", gate.wait_sh());
    let script = worker_script(&[("b", &hold), ("c", &hold), ("d", "cat a.txt b.txt c.txt > d.txt")]);
    let expected = {
        let g = Gate::new();
        g.open();
        undisturbed_tree(&script.replace(&gate.path.display().to_string(), &g.path.display().to_string()))
    };

    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let mut cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &dag_plan("r")).await;
    wait_task_state(&url, "r", "b", TaskState::Running).await;
    wait_task_state(&url, "r", "c", TaskState::Running).await;

    cluster.controller.restart_after_kill9();
    // The workers finish while the controller is restarting or just back.
    gate.open();

    let tasks = wait_all_merged(&url, "r").await;
    // Compare file contents, except worker.sh whose gate path differs.
    let mut tree = repo.tree("swarm/r/integration");
    let mut expected = expected;
    tree.remove("worker.sh");
    expected.remove("worker.sh");
    assert_eq!(tree, expected);
    for id in ["a", "b", "c", "d", "e"] {
        assert_eq!(merges_of(&repo, "swarm/r/integration", "r", id), 1, "{id} merged exactly once");
        assert!(repo.has(&tasks[id].merge_commit));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sidecar_kill9_task_is_reassigned_after_the_lease() {
    let gate = Gate::new();
    let pids = tempfile::tempdir().unwrap();
    let body = format!(
        "if [ \"$SWARM_ATTEMPT\" = 1 ]; then echo $$ > '{}/pid'; {}; fi\necho \"attempt $SWARM_ATTEMPT\" > t.txt",
        pids.path().display(),
        gate.wait_sh()
    );
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("t", &body)]))]);
    let mut cluster = Cluster::start(&repo, 1, FAST_LEASES);
    let url = cluster.url();
    let plan = PlanBuilder::new("k").sandbox(&[], &[pids.path()]).task(task("t")).build();
    create_swarm(&url, &plan).await;
    let running = wait_task_state(&url, "k", "t", TaskState::Running).await;
    assert_eq!(running.worker_id, "w1");
    let pid_file = pids.path().join("pid");
    let worker_pid: u32 = poll("the worker's pid", WAIT, || async {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    })
    .await;

    cluster.sidecars[0].kill9();
    let _w2 = spawn_sidecar(&url, repo.path(), "w2", &[]);
    let merged = wait_task_state(&url, "k", "t", TaskState::Merged).await;
    assert_eq!(merged.attempts, 2, "attempt 1 was lost, attempt 2 merged");
    assert_eq!(merges_of(&repo, "swarm/k/integration", "k", "t"), 1);
    assert_eq!(repo.tree("swarm/k/integration")["t.txt"], "attempt 2\n");

    // The killed sidecar comes back under its id: it stops the worker its
    // previous process left behind, and changes nothing.
    assert!(pid_alive(worker_pid), "the orphaned worker still runs");
    let _w1 = spawn_sidecar(&url, repo.path(), "w1", &[]);
    poll("the orphaned worker to be stopped", WAIT, || async { (!pid_alive(worker_pid)).then_some(()) })
        .await;
    let t = wait_task_state(&url, "k", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 2);
    assert_eq!(merges_of(&repo, "swarm/k/integration", "k", "t"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn frozen_sidecars_late_report_is_fenced() {
    let gate = Gate::new();
    let body = format!(
        "if [ \"$SWARM_ATTEMPT\" = 1 ]; then {}; fi\necho \"attempt $SWARM_ATTEMPT\" > t.txt",
        gate.wait_sh()
    );
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("t", &body)]))]);
    let cluster = Cluster::start(&repo, 1, FAST_LEASES);
    let url = cluster.url();
    create_swarm(&url, &PlanBuilder::new("f").task(task("t")).build()).await;
    // RUNNING comes with the assignment; wait for the worker itself, so w1
    // is frozen with its worker at the gate and not while it creates its
    // worktree.
    poll("attempt 1's worker to start", WAIT, || {
        let url = url.clone();
        async move { events(&url, "f", 0, 1).await.into_iter().find(|e| e.kind == "attempt.started") }
    })
    .await;

    // Freeze w1: no heartbeats, so the lease expires and w2 takes over.
    cluster.sidecars[0].signal("STOP");
    let _w2 = spawn_sidecar(&url, repo.path(), "w2", &[]);
    let merged = wait_task_state(&url, "f", "t", TaskState::Merged).await;
    assert_eq!(merged.attempts, 2);

    // Attempt 1's worker finishes, and w1 wakes up and reports it: too late.
    gate.open();
    cluster.sidecars[0].signal("CONT");
    let fenced = poll("a fenced report of attempt 1", WAIT, || {
        let url = url.clone();
        async move {
            let evs = events(&url, "f", 0, 1).await;
            evs.into_iter().find(|e| e.kind.contains("fenced") && e.attempt == 1)
        }
    })
    .await;
    assert_eq!(fenced.task_id, "t");

    let t = wait_task_state(&url, "f", "t", TaskState::Merged).await;
    assert_eq!(t.merge_commit, merged.merge_commit, "the fenced report changed nothing");
    assert_eq!(merges_of(&repo, "swarm/f/integration", "f", "t"), 1);
    assert_eq!(repo.tree("swarm/f/integration")["t.txt"], "attempt 2\n");
}

/// Says Hello as `worker` without a resume secret and reads the Welcome,
/// then drops the stream without keeping the secret: to the controller,
/// exactly a sidecar whose first Welcome was lost on the way.
async fn hello_and_lose_the_welcome(url: &str, worker: &str) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let hello =
        v1::Hello { worker_id: worker.into(), capacity: 1, shares_repository: true, ..Default::default() };
    tx.send(v1::SidecarMessage { seq: 0, body: Some(v1::sidecar_message::Body::Hello(hello)) })
        .await
        .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(url.to_string()).unwrap().connect().await.unwrap();
    let mut client = SidecarServiceClient::new(channel);
    let mut inbound =
        client.connect(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let first = tokio::time::timeout(WAIT, inbound.message()).await.unwrap().unwrap().unwrap();
    assert!(matches!(first.body, Some(v1::controller_message::Body::Welcome(_))), "{first:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_whose_first_welcome_was_lost_is_not_locked_out_after_a_controller_crash() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("t", "echo t > t.txt")]))]);
    // A lease no wait here outlasts: nothing may hinge on its expiry.
    let mut controller = spawn_controller(repo.path(), &["--lease-ttl-ms=600000"]);
    let url = controller.url();
    create_swarm(&url, &PlanBuilder::new("l").task(task("t")).build()).await;
    // w1's first Welcome is committed (with its resume secret) and lost;
    // then the controller dies.
    hello_and_lose_the_welcome(&url, "w1").await;
    controller.restart_after_kill9();

    // The real sidecar w1, which never had a secret, is let in at once
    // and runs the task.
    let _w1 = spawn_sidecar(&url, repo.path(), "w1", &[]);
    let merged = wait_task_state(&url, "l", "t", TaskState::Merged).await;
    assert_eq!(merged.attempts, 1, "no attempt went to the sidecar that lost its Welcome");
    assert_eq!(attempts(&url, "l/t").await[0].worker_id, "w1");
    assert_eq!(repo.tree("swarm/l/integration")["t.txt"], "t\n");
    let evs = events(&url, "", 0, 1).await;
    assert!(!evs.iter().any(|e| e.kind == "hello.refused"), "w1 was never refused: {evs:?}");
}

/// Retention across a crash: a swarm that completed longer ago than
/// `--forget-finished-after-secs` is forgotten (the controller answers
/// NotFound and its store holds no row or event of it), stays forgotten
/// after a kill -9 and restart, and its branch in the repository is left
/// as it was: retention drops the controller's records, not the work.
#[tokio::test(flavor = "multi_thread")]
async fn a_swarm_completed_longer_ago_than_the_retention_is_forgotten_for_good_and_its_branch_stays() {
    let script = worker_script(&[]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let mut cluster = Cluster::start(&repo, 1, &["--forget-finished-after-secs", "2"]);
    let url = cluster.url();
    create_swarm(&url, &dag_plan("old")).await;
    wait_all_merged(&url, "old").await;
    let tree = repo.tree("swarm/old/integration");
    let gone = |url: String| async move {
        let mut op = swarm_tests::operator(&url).await;
        match op.get_swarm(v1::GetSwarmRequest { swarm_id: "old".into() }).await {
            Err(s) if s.code() == tonic::Code::NotFound => Some(()),
            _ => None,
        }
    };
    poll("the completed swarm to be forgotten", WAIT, || gone(url.clone())).await;
    let db = repo.path().join(".git/swarm/swarm.db");
    let count = |sql: &str| -> i64 {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    };
    let rows = "SELECT (SELECT COUNT(*) FROM swarms) + (SELECT COUNT(*) FROM tasks)
                + (SELECT COUNT(*) FROM attempts) + (SELECT COUNT(*) FROM events WHERE swarm = 'old')";
    assert_eq!(count(rows), 0, "no row or event of the swarm is left in the store");
    assert_eq!(count("SELECT COUNT(*) FROM events WHERE kind = 'swarm.forgotten'"), 1);

    cluster.controller.restart_after_kill9();
    let mut op = swarm_tests::operator(&url).await;
    let after = op.get_swarm(v1::GetSwarmRequest { swarm_id: "old".into() }).await;
    assert_eq!(after.err().map(|s| s.code()), Some(tonic::Code::NotFound), "still forgotten after a restart");
    assert_eq!(repo.tree("swarm/old/integration"), tree, "the integration branch is untouched");
}
