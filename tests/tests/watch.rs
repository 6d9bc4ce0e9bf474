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
