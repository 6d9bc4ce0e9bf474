//! Watch: a live stream and a replay `--since` an event id agree, with no
//! gap and no duplicate.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, binary, create_swarm, events, stderr, swarmctl, task, wait_all_merged,
    worker_script,
};

fn ids(json_lines: &str) -> Vec<u64> {
    json_lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_since_resumes_without_gaps() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let plan = PlanBuilder::new("w")
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .build();
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();

    // A live watcher, started before the swarm exists.
    let mut live = Command::new(binary("swarmctl"))
        .args(["watch", "--swarm", "w", "-o", "json"])
        .env("SWARM_CONTROLLER", &url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = live.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The watcher is connected once the first event reaches it.
    create_swarm(&url, &plan).await;
    wait_all_merged(&url, "w").await;

    let stored = events(&url, "w", 0, 1).await;
    let stored_ids: Vec<u64> = stored.iter().map(|e| e.id).collect();
    assert!(stored_ids.len() > 10, "a run leaves a trail: {stored_ids:?}");
    assert!(stored_ids.windows(2).all(|w| w[0] < w[1]), "ascending: {stored_ids:?}");

    // The live watcher saw exactly the stored events, in order.
    let mut live_ids = Vec::new();
    while live_ids.len() < stored_ids.len() {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("live watcher fell behind");
        live_ids.extend(ids(&line));
    }
    let _ = live.kill();
    let _ = live.wait();
    assert_eq!(live_ids, stored_ids, "live stream == stored events");

    // Replays from every cut point give exactly the rest.
    for cut in [0, stored_ids[0], stored_ids[stored_ids.len() / 2], *stored_ids.last().unwrap() - 1] {
        let rest: Vec<u64> = stored_ids.iter().copied().filter(|id| *id > cut).collect();
        let limit = rest.len().to_string();
        let since = cut.to_string();
        let out =
            swarmctl(&url, &["watch", "--swarm", "w", "--since", &since, "--limit", &limit, "-o", "json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(ids(&String::from_utf8_lossy(&out.stdout)), rest, "since {cut}");
    }
}

/// A `swarmctl` follower whose stdout lines are collected on a thread.
struct Follower {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<serde_json::Value>,
}

impl Follower {
    fn start(url: &str, args: &[&str]) -> Follower {
        let mut child = Command::new(binary("swarmctl"))
            .args(args)
            .env("SWARM_CONTROLLER", url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower { child, lines, seen: Vec::new() }
    }

    /// Reads until `done` holds for what was printed, or panics after 30 s.
    fn until(&mut self, what: &str, done: impl Fn(&[serde_json::Value]) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(serde_json::from_str(&line).unwrap()),
                Err(_) => panic!("{what}: printed so far {:?}", self.ids()),
            }
        }
    }

    fn ids(&self) -> Vec<u64> {
        self.seen.iter().map(|e| e["id"].as_u64().unwrap()).collect()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_and_logs_follow_across_a_controller_kill9_with_no_gap_and_no_duplicate() {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    // No sidecars: the tasks wait READY, and the operator makes the events.
    let mut controller = swarm_tests::spawn_controller(repo.path(), &[]);
    let url = controller.url();
    let mut watch = Follower::start(&url, &["watch", "-o", "json"]);
    create_swarm(&url, &PlanBuilder::new("k").task(task("a")).task(task("b")).build()).await;
    let before = events(&url, "k", 0, 1).await.len();
    watch.until("events of the first swarm", |seen| seen.len() >= before);
    let mut logs = Follower::start(&url, &["logs", "k/a", "-f", "-o", "json"]);
    logs.until("the task's stored events", |seen| !seen.is_empty());

    controller.restart_after_kill9();
    let url = controller.url();
    // Made after the restart: only a follower that reconnected sees them.
    swarmctl(&url, &["cancel", "k/a"]);
    create_swarm(&url, &PlanBuilder::new("l").task(task("a")).build()).await;

    let all: Vec<u64> = events(&url, "", 0, before + 2).await.iter().map(|e| e.id).collect();
    watch.until("every stored event", |seen| seen.len() >= all.len());
    assert_eq!(watch.ids(), all, "watch printed every event once, in order, across the restart");
    let cancelled = |seen: &[serde_json::Value]| {
        seen.iter()
            .any(|e| e["kind"] == "task.state" && e["message"].as_str().unwrap_or("").contains("CANCELLED"))
    };
    logs.until("the task's cancellation, made after the restart", cancelled);
    let ids = logs.ids();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "logs -f printed no event twice: {ids:?}");
    assert!(logs.seen.iter().all(|e| e["task"] == "a" && e["swarm"] == "k"), "only k/a's events");
}
