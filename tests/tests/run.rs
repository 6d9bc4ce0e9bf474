//! `swarmctl run` (embedded controller + local sidecars) and `swarmctl demo`:
//! exit codes scripts can trust, Ctrl-C, and resume.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use swarm_tests::{
    Gate, PlanBuilder, TempRepo, binary, merges_of, state_home, stderr, stdout, swarmctl, task, wait_output,
    worker_script,
};

const NOWHERE: &str = "http://127.0.0.1:9";

fn write_plan(dir: &Path, plan: &str) -> String {
    let path = dir.join("plan.toml");
    std::fs::write(&path, plan).unwrap();
    path.display().to_string()
}

fn run(repo: &TempRepo, plan: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), plan);
    swarmctl(NOWHERE, &["run", &plan, "--workers", "2", "--repo", repo.path().to_str().unwrap()])
}

#[test]
fn run_exits_0_when_every_task_merges_and_prints_a_summary() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("ok").task(task("a")).task(task("b").deps(&["a"])).task(task("c")).build();
    let out = run(&repo, &plan);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("MERGE COMMIT"), "summary table:\n{text}");
    assert!(text.contains("all 3 tasks merged"), "{text}");
    assert!(text.contains("task.merged"), "plain event lines when stdout is not a terminal:\n{text}");
    for id in ["a", "b", "c"] {
        assert_eq!(merges_of(&repo, "swarm/ok/integration", "ok", id), 1);
    }
    // The controller's and sidecars' logs are plain text: no colour codes
    // when they do not go to a terminal.
    let logs = repo.path().join(".git/swarm/logs");
    let mut read = 0;
    for entry in std::fs::read_dir(&logs).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains('\u{1b}'), "escape codes in {}", path.display());
        read += 1;
    }
    assert!(read >= 3, "the controller's and both sidecars' logs are in {}", logs.display());

    // Again: the swarm exists, nothing to do, same verdict.
    let again = run(&repo, &plan);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stderr(&again).contains("resuming"), "{}", stderr(&again));
    assert_eq!(merges_of(&repo, "swarm/ok/integration", "ok", "a"), 1);
}

#[test]
fn run_exits_1_when_a_task_fails() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("bad", "exit 1")]))]);
    let plan = PlanBuilder::new("f")
        .default("retries", "1")
        .task(task("good"))
        .task(task("bad"))
        .task(task("after").deps(&["bad"]))
        .build();
    let out = run(&repo, &plan);
    assert_eq!(out.status.code(), Some(1), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("FAILED"), "{}", stdout(&out));
}

#[test]
fn run_exits_2_when_the_swarm_waits_on_the_operator() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("stuck", "exit 3")]))]);
    let plan = PlanBuilder::new("w").task(task("stuck")).task(task("fine")).build();
    let out = run(&repo, &plan);
    assert_eq!(out.status.code(), Some(2), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("BLOCKED"), "{}", stdout(&out));
}

#[test]
fn run_interrupted_exits_130_and_running_it_again_resumes() {
    let gate = Gate::new();
    let hold = format!("{}; echo held > held.txt", gate.wait_sh());
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("held", &hold)]))]);
    let plan = PlanBuilder::new("i").task(task("held")).task(task("next").deps(&["held"])).build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = write_plan(dir.path(), &plan);
    let repo_arg = repo.path().to_str().unwrap();

    let mut child = Command::new(binary("swarmctl"))
        .args(["run", &plan_path, "--workers", "1", "--repo", repo_arg])
        .env("XDG_STATE_HOME", state_home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait (bounded) for the held task's worker to start.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the held task never started");
        match lines.next() {
            Some(Ok(line)) if line.contains("i/held#1") && line.contains("attempt.started") => break,
            Some(Ok(_)) => {}
            _ => panic!("swarmctl run ended early"),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(130), "stderr:\n{}", stderr(&out));
    assert!(!repo.has("swarm/i/integration") || merges_of(&repo, "swarm/i/integration", "i", "held") == 0);

    gate.open();
    let out = swarmctl(NOWHERE, &["run", &plan_path, "--workers", "1", "--repo", repo_arg]);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("resuming"));
    assert_eq!(merges_of(&repo, "swarm/i/integration", "i", "held"), 1);
    assert_eq!(merges_of(&repo, "swarm/i/integration", "i", "next"), 1);
}

#[test]
fn demo_runs_every_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let repo_dir = dir.path().join("demo");
    let started = Instant::now();
    // How long the demo takes is a benchmark's business; the bound only
    // keeps a hung demo from hanging the suite.
    let demo = Command::new(binary("swarmctl"))
        .args(["demo", "--dir", repo_dir.to_str().unwrap(), "--plain"])
        .env("SWARM_CONTROLLER", NOWHERE)
        .env("XDG_STATE_HOME", state_home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(demo, Duration::from_secs(600));
    eprintln!("the demo took {:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for scenario in [
        "RUNNING -> READY: retry",    // exit 1, retried
        "CHECKPOINTED",               // exit 2, resumed from its WIP commit
        "task.answered",              // exit 4, answered through the Answer RPC
        "task.conflict",              // conflict handed back to its owner
        "dependency scaffold merged", // dependents start as deps merge
        "all 8 tasks merged",
        "git log --graph --oneline swarm/demo/integration",
    ] {
        assert!(text.contains(scenario), "demo output lacks {scenario:?}:\n{text}");
    }
    let git = |args: &[&str]| {
        let o = Command::new("git").arg("-C").arg(&repo_dir).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert_eq!(git(&["show", "swarm/demo/integration:src/config.sh"]).lines().last(), Some("PRECISION=4"));
    let merges = git(&["log", "--first-parent", "--merges", "--format=%s", "swarm/demo/integration"]);
    assert_eq!(merges.lines().count(), 8, "{merges}");
}

#[test]
fn run_labels_its_sidecars_and_a_task_no_sidecar_can_take_waits_on_the_operator() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("lab")
        .task(task("any"))
        .task(task("gpu").set("labels", r#"{ gpu = "yes" }"#))
        .build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = write_plan(dir.path(), &plan);
    let repo_arg = repo.path().to_str().unwrap();

    let out = swarmctl(NOWHERE, &["run", &plan_path, "--repo", repo_arg]);
    assert_eq!(out.status.code(), Some(2), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("task gpu needs labels the local sidecars lack (gpu=yes)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(merges_of(&repo, "swarm/lab/integration", "lab", "any"), 1);

    let out = swarmctl(NOWHERE, &["run", &plan_path, "--repo", repo_arg, "--label", "gpu=yes"]);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert_eq!(merges_of(&repo, "swarm/lab/integration", "lab", "gpu"), 1);

    let out = swarmctl(NOWHERE, &["run", &plan_path, "--repo", repo_arg, "--label", "no-equals"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}

#[test]
fn run_serves_the_embedded_controllers_metrics() {
    // A free port for --metrics-listen: bind, read it, release it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Task b scrapes the endpoint while it runs (a has merged by then) and
    // commits what it saw as b.txt.
    let scrape = format!(
        "python3 -c \"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/metrics').read().decode())\" > b.txt"
    );
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("b", &scrape)]))]);
    // The controller's ports are closed to workers unless a plan opens one.
    let plan =
        PlanBuilder::new("m").sandbox_with(&[], &[], &[port]).task(task("a")).task(task("b").deps(&["a"]));
    let plan = plan.build();
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &plan);
    let listen = format!("127.0.0.1:{port}");
    let out = swarmctl(
        NOWHERE,
        &[
            "run",
            &plan,
            "--workers",
            "1",
            "--repo",
            repo.path().to_str().unwrap(),
            "--metrics-listen",
            &listen,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    let seen = String::from_utf8(
        Command::new("git")
            .args(["show", "swarm/m/integration:b.txt"])
            .current_dir(repo.path())
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let line = seen
        .lines()
        .find(|l| l.contains("MERGED") && !l.starts_with('#'))
        .unwrap_or_else(|| panic!("no MERGED gauge in:\n{seen}"));
    assert!(line.trim_end().ends_with(" 1"), "a had merged when b ran: {line}");
}
