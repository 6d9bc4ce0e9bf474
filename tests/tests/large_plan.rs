//! A plan of 2,000 tasks runs to the end through `swarmctl run` with no
//! attempt failing. Its timing belongs to `swarm-bench e2e`, not here: the
//! assertions are that every task merged once and nothing was retried.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_tests::{TempRepo, binary, stderr, stdout, wait_output};

const TASKS: usize = 2_000;

#[test]
fn a_2000_task_plan_runs_to_the_end_without_a_failed_attempt() {
    let repo = TempRepo::with_files(&[("README", "x\n")]);
    // 40 chains of 50: dependents start as their dependencies merge, and
    // every worker writes its own file, so every task has a real commit.
    let mut plan = String::from("name = \"big\"\n[defaults]\nretries = 0\nidle_timeout_secs = 60\n");
    plan.push_str("command = \"mkdir -p out && echo $SWARM_TASK_ID > out/$SWARM_TASK_ID.txt\"\n");
    for i in 0..TASKS {
        let (chain, link) = (i % 40, i / 40);
        plan.push_str(&format!(
            "[[tasks]]\nid = \"c{chain}-{link}\"\nfiles = [\"out/c{chain}-{link}.txt\"]\n"
        ));
        if link > 0 {
            plan.push_str(&format!("deps = [\"c{chain}-{}\"]\n", link - 1));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.toml");
    std::fs::write(&path, plan).unwrap();
    // A bound, not a timing: 2,000 debug-built tasks on a loaded 2-core
    // machine take minutes; the shared 60 s wait was too short there.
    let run = Command::new(binary("swarmctl"))
        .env("XDG_STATE_HOME", swarm_tests::state_home())
        .args([
            "run",
            path.to_str().unwrap(),
            "--workers",
            "4",
            "--plain",
            "--repo",
            repo.path().to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(run, Duration::from_secs(600));
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("all {TASKS} tasks merged")),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );

    // Every task's file is on the integration branch, and no task needed
    // a second attempt.
    let files = repo.git(&["ls-tree", "-r", "--name-only", "swarm/big/integration", "out/"]);
    assert_eq!(files.lines().count(), TASKS);
    let summary_rows = text.lines().filter(|l| l.trim_start().starts_with('c') && l.contains("MERGED"));
    for row in summary_rows {
        let attempts: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(attempts.get(2), Some(&"1"), "a task took more than one attempt: {row}");
    }
}
