//! A sidecar that cannot prepare an attempt hands it back as INFRA_FAILED:
//! the task's retries are not spent, and after three such failures in a row
//! the sidecar drains itself; a healthy sidecar then does the task.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_proto::v1::{Outcome, TaskState};
use swarm_tests::{
    PlanBuilder, TempRepo, attempts, create_swarm, outcome_of, poll, spawn_controller, spawn_sidecar, task,
    wait_task_state,
};

/// Kills the lock holder however the test ends.
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn infra_failures_spend_no_retries_and_drain_the_sidecar() {
    let repo = TempRepo::with_files(&[("worker.sh", &swarm_tests::worker_script(&[]))]);
    let controller = spawn_controller(repo.path(), &[]);
    let url = controller.url();
    create_swarm(&url, &PlanBuilder::new("i").default("retries", "0").task(task("t")).build()).await;

    // A live process holds the task branch's ref lock, as a running git
    // would: the sidecar must not break it, so it cannot prepare the attempt.
    let lock = repo.path().join(".git/refs/heads/swarm/i/t.lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    let holder = Holder(
        Command::new("sh")
            .args(["-c", "exec 3>>\"$1\"; exec sleep 300", "sh"])
            .arg(&lock)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    poll("the lock to exist", Duration::from_secs(10), || async { lock.exists().then_some(()) }).await;

    let mut w1 = spawn_sidecar(&url, repo.path(), "w1", &[]);
    poll("w1 to drain itself and exit", Duration::from_secs(150), || {
        let running = w1.is_running();
        async move { (!running).then_some(()) }
    })
    .await;
    assert!(w1.log().contains("draining this sidecar"), "{}", w1.log());
    let a = attempts(&url, "i/t").await;
    assert_eq!(a.len(), 3, "{a:?}");
    for x in &a {
        assert_eq!(outcome_of(x), Outcome::InfraFailed, "{x:?}");
        assert!(x.error.contains("t.lock") && x.error.contains(&holder.0.id().to_string()), "{}", x.error);
        assert!(!x.error.starts_with("exit"), "no worker exit is claimed: {}", x.error);
    }
    assert!(a[2].error.contains("draining itself"), "{}", a[2].error);
    assert!(lock.exists(), "the held lock was not broken");

    drop(holder);
    let _w2 = spawn_sidecar(&url, repo.path(), "w2", &[]);
    let t = wait_task_state(&url, "i", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 4);
    let a = attempts(&url, "i/t").await;
    assert_eq!(outcome_of(&a[3]), Outcome::Success, "retries = 0, yet the task was never failed");
}
