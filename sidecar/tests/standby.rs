//! The standby supervisor: started while the sidecar is idle, handed the
//! next worker's command, and indistinguishable from a supervisor started
//! for that worker (output, exit, environment, working directory, adoption).

use std::path::{Path, PathBuf};
use std::time::Duration;

use swarm_sidecar::runner::SpawnSpec;
use swarm_sidecar::supervisor::{StandbySlot, is_supervisor, read_exit};
use swarm_tests::poll;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_swarm-sidecar"))
}

fn sh(cwd: &Path, cmd: &str) -> SpawnSpec {
    SpawnSpec {
        argv: vec!["sh".into(), "-c".into(), cmd.into()],
        cwd: cwd.to_path_buf(),
        env: vec![("GREETING".into(), "hi there".into()), ("EMPTY".into(), String::new())],
        confinement: None,
    }
}

/// Alive and not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string)))
        .is_some_and(|state| state != "Z" && state != "X")
}

#[tokio::test]
async fn the_standby_runs_the_next_worker_with_its_env_cwd_output_and_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exit_file, log) = (dir.path().join("exit.json"), dir.path().join("a.log"));
    let work = dir.path().join("work dir");
    std::fs::create_dir(&work).expect("mkdir");
    let slot = StandbySlot::default();
    assert_eq!(slot.ready_pid(), None, "nothing to refill before a first start");
    slot.refill(&exe());
    assert_eq!(slot.ready_pid(), None, "no exit file known yet");

    // The first start makes its own supervisor; the refill after it waits.
    let mut first = slot.start(&exe(), &sh(&work, "exit 0"), &exit_file, &log).await.expect("first start");
    assert_eq!(first.wait().await.code, Some(0));
    slot.refill(&exe());
    let standby = slot.ready_pid().expect("a standby waits");
    // Once its exec is done, a restarted sidecar would adopt it by its command line.
    poll("the standby to show as the supervisor", Duration::from_secs(10), || async {
        is_supervisor(standby, &exit_file).then_some(())
    })
    .await;

    let log2 = dir.path().join("b.log");
    let spec = sh(&work, "echo \"$GREETING\"; echo \"[$EMPTY]\"; pwd; echo err >&2; exit 3");
    let mut w = slot.start(&exe(), &spec, &exit_file, &log2).await.expect("start on the standby");
    assert_eq!(w.pid(), standby, "the standby took the worker");
    assert_eq!(slot.ready_pid(), None, "taken");
    let exit = w.wait().await;
    assert_eq!(exit.code, Some(3));
    assert_eq!(read_exit(&exit_file).map(|r| r.code), Some(Some(3)), "the exit file is written");
    let mut lines = w.drain_lines(Duration::from_secs(2)).await;
    lines.sort();
    let mut want =
        vec!["hi there".to_string(), "[]".into(), work.canonicalize().expect("canon").display().to_string()];
    want.push("err".into());
    want.sort();
    assert_eq!(lines, want);
}

#[tokio::test]
async fn a_standby_that_cannot_start_its_worker_records_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exit_file, log) = (dir.path().join("exit.json"), dir.path().join("a.log"));
    let slot = StandbySlot::default();
    let mut first = slot.start(&exe(), &sh(dir.path(), "true"), &exit_file, &log).await.expect("first");
    first.wait().await;
    slot.refill(&exe());
    let spec = SpawnSpec {
        argv: vec!["/nonexistent/worker".into()],
        cwd: dir.path().to_path_buf(),
        env: Vec::new(),
        confinement: None,
    };
    let mut w = slot.start(&exe(), &spec, &exit_file, &log).await.expect("handed");
    w.wait().await;
    let err = w.spawn_error().expect("a spawn error").to_string();
    assert!(err.contains("/nonexistent/worker"), "{err}");
}

#[tokio::test]
async fn a_standby_never_handed_a_command_leaves_without_an_exit_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (exit_file, log) = (dir.path().join("exit.json"), dir.path().join("a.log"));
    let slot = StandbySlot::default();
    let mut first = slot.start(&exe(), &sh(dir.path(), "true"), &exit_file, &log).await.expect("first");
    first.wait().await;
    std::fs::remove_file(&exit_file).expect("remove the first exit file");
    slot.refill(&exe());
    let pid = slot.ready_pid().expect("standby");
    assert!(running(pid));
    // The sidecar goes away (its end of the pipe closes).
    drop(slot);
    poll("the standby to leave", Duration::from_secs(10), || async { (!running(pid)).then_some(()) }).await;
    assert!(!exit_file.exists(), "nothing ran, so no exit is recorded");
}
