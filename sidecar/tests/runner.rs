//! The process runner against real shell processes.

use std::time::Duration;

use nix::sys::signal::Signal;
use swarm_core::Outcome;
use swarm_sidecar::runner::{SpawnSpec, Worker, group_alive};
use swarm_tests::poll;

fn sh(cmd: &str) -> SpawnSpec {
    SpawnSpec {
        argv: vec!["sh".into(), "-c".into(), cmd.into()],
        cwd: std::env::temp_dir(),
        env: vec![("GREETING".into(), "hi".into())],
        confinement: None,
    }
}

#[tokio::test]
async fn exit_codes_map_to_outcomes() {
    for (code, outcome) in [
        (0, Outcome::Success),
        (1, Outcome::Error),
        (2, Outcome::Checkpoint),
        (3, Outcome::Blocked),
        (4, Outcome::Escalation),
        (130, Outcome::Interrupted),
        (77, Outcome::Error),
    ] {
        let mut w = Worker::spawn(&sh(&format!("exit {code}"))).expect("spawn");
        let exit = w.wait().await;
        assert_eq!(exit.code, Some(code));
        assert_eq!(exit.outcome(), outcome, "exit {code}");
    }
}

#[tokio::test]
async fn death_by_signal_is_signaled_not_interrupted() {
    let mut w = Worker::spawn(&sh("kill -INT $$; sleep 5")).expect("spawn");
    let exit = w.wait().await;
    assert_eq!(exit.signal, Some(Signal::SIGINT as i32));
    assert_eq!(exit.outcome(), Outcome::Signaled);
}

#[tokio::test]
async fn output_arrives_line_by_line_with_env() {
    let mut w = Worker::spawn(&sh("echo \"$GREETING\"; echo err >&2; printf tail")).expect("spawn");
    w.wait().await;
    let mut lines = w.drain_lines(Duration::from_secs(2)).await;
    lines.sort();
    assert_eq!(lines, vec!["err", "hi", "tail"]);
}

#[tokio::test]
async fn stop_escalates_to_sigterm_when_sigint_is_trapped() {
    let mut w = Worker::spawn(&sh(
        "trap 'echo got-int' INT; trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done",
    ))
    .expect("spawn");
    assert_eq!(w.lines.recv().await.as_deref(), Some("ready"));
    let pgid = w.pgid();
    let exit = w.stop(Duration::from_millis(300)).await;
    assert_eq!(exit.code, Some(7), "{exit:?}");
    poll("group gone", Duration::from_secs(5), || async { (!group_alive(pgid)).then_some(()) }).await;
}

#[tokio::test]
async fn stop_kills_a_worker_that_ignores_int_and_term() {
    let mut w = Worker::spawn(&sh(
        "trap '' INT TERM; (trap '' INT TERM; sleep 30) & echo ready; while :; do sleep 0.05; done",
    ))
    .expect("spawn");
    assert_eq!(w.lines.recv().await.as_deref(), Some("ready"));
    let pgid = w.pgid();
    let exit = w.stop(Duration::from_millis(200)).await;
    assert_eq!(exit.signal, Some(Signal::SIGKILL as i32), "{exit:?}");
    poll("no process of the group survives", Duration::from_secs(5), || async {
        match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None) {
            Err(nix::errno::Errno::ESRCH) => Some(()),
            _ if !group_alive(pgid) => Some(()), // only unreaped zombies left
            _ => None,
        }
    })
    .await;
}

#[tokio::test]
async fn missing_program_is_a_spawn_error() {
    let spec = SpawnSpec {
        argv: vec!["/nonexistent/worker".into()],
        cwd: std::env::temp_dir(),
        env: vec![],
        confinement: None,
    };
    assert!(Worker::spawn(&spec).is_err());
}
