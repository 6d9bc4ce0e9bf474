//! `swarmctl logs TASK --worker-output`: the worker's output, fetched by the
//! controller from the sidecar that ran the attempt over that sidecar's own
//! stream. The sidecar here is remote (its own clone, packs over gRPC), so
//! the log is only on its side, never on the controller's disk.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_proto::v1::TaskState;
use swarm_tests::{
    Gate, PlanBuilder, TempRepo, binary, create_swarm, poll, spawn_controller, spawn_sidecar, stderr, stdout,
    swarmctl, task, wait_output, wait_task_state, worker_script,
};

#[tokio::test(flavor = "multi_thread")]
async fn worker_output_comes_from_a_remote_sidecar_and_follows_the_attempt() {
    let gate = Gate::new();
    let talk = format!(
        "echo 'hello from the worker'\n{}\necho 'after the gate'; echo talk > talk.txt",
        gate.wait_sh()
    );
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("talk", &talk)]))]);
    let mut controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let clones = tempfile::tempdir().unwrap();
    let clone = clones.path().join("far");
    let st = Command::new("git").args(["clone", "-q"]).arg(repo.path()).arg(&clone).status().unwrap();
    assert!(st.success(), "git clone");
    let mut far = spawn_sidecar(&url, &clone, "far-1", &["--remote"]);
    create_swarm(&url, &PlanBuilder::new("lg").task(task("talk")).build()).await;
    wait_task_state(&url, "lg", "talk", TaskState::Running).await;

    // The log is in the remote sidecar's worktree and nowhere under the
    // controller's repository.
    let far_log = clone.join(".git/workspaces/far-1/.swarm/logs/lg.talk-1.log");
    let near_log = repo.path().join(".git/workspaces/far-1/.swarm/logs/lg.talk-1.log");
    poll("the remote worker's first line", Duration::from_secs(30), || async {
        let out = swarmctl(&url, &["logs", "lg/talk", "--worker-output"]);
        (out.status.success() && stdout(&out) == "hello from the worker\n").then_some(())
    })
    .await;
    assert!(far_log.is_file() && !near_log.exists(), "{} / {}", far_log.display(), near_log.display());

    // -f prints what there is, then what the worker writes next, across a
    // kill -9 of the controller (resuming at the next byte), and ends when
    // the attempt does.
    let mut follower = Command::new(binary("swarmctl"))
        .args(["logs", "lg/talk", "--worker-output", "-f"])
        .env("SWARM_CONTROLLER", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 22];
    follower.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"hello from the worker\n");
    controller.restart_after_kill9();
    gate.open();
    wait_task_state(&url, "lg", "talk", TaskState::Merged).await;
    let out = wait_output(follower, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "logs -f: {}", stderr(&out));
    assert_eq!(stdout(&out), "after the gate\n", "-f prints each byte once, after the first read");
    assert!(stderr(&out).contains("reconnecting"), "the follower lost the controller: {}", stderr(&out));

    // JSON names the attempt and the sidecar it came from.
    let out = swarmctl(&url, &["logs", "lg/talk", "--worker-output", "--attempt", "1", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let chunk: serde_json::Value = serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    assert_eq!((chunk["attempt"].as_u64(), chunk["worker"].as_str()), (Some(1), Some("far-1")), "{chunk}");
    assert_eq!(chunk["data"], "hello from the worker\nafter the gate\n");

    // An attempt that does not exist, a removed log and a sidecar that is
    // gone are clear errors with their exit codes.
    let out = swarmctl(&url, &["logs", "lg/talk", "--worker-output", "--attempt", "5"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no attempt 5 (it has 1)"), "{}", stderr(&out));
    std::fs::remove_file(&far_log).unwrap();
    let out = swarmctl(&url, &["logs", "lg/talk", "--worker-output"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not on sidecar far-1 (never written, or removed)"), "{}", stderr(&out));
    far.kill9();
    let out = poll("the sidecar's stream to end", Duration::from_secs(30), || async {
        let out = swarmctl(&url, &["logs", "lg/talk", "--worker-output"]);
        (out.status.code() == Some(69)).then_some(out)
    })
    .await;
    assert!(
        stderr(&out).contains("sidecar far-1, which ran lg/talk#1, is not connected"),
        "{}",
        stderr(&out)
    );
}
