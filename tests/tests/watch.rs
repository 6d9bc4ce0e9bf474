//! Watch: a live stream and a replay `--since` an event id agree, with no
//! gap and no duplicate; a cursor is only ever a cursor (beyond the newest
//! event it is refused, or waits when asked), and from now is a flag.
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

/// A controller with one swarm's events stored, and the newest event id.
async fn controller_with_events() -> (TempRepo, swarm_tests::ControllerProc, u64) {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    // No sidecars: the tasks wait READY, and the test makes the events.
    let controller = swarm_tests::spawn_controller(repo.path(), &[]);
    let url = controller.url();
    create_swarm(&url, &PlanBuilder::new("old").task(task("a")).build()).await;
    let newest = events(&url, "", 0, 1).await.last().unwrap().id;
    (repo, controller, newest)
}

/// New events: a swarm of two tasks is created, which commits several.
async fn more_events(url: &str, swarm: &str) {
    create_swarm(url, &PlanBuilder::new(swarm).task(task("a")).task(task("b")).build()).await;
}

async fn next_event(stream: &mut tonic::Streaming<swarm_proto::v1::Event>) -> swarm_proto::v1::Event {
    use tokio_stream::StreamExt as _;
    let next = tokio::time::timeout(swarm_tests::WAIT, stream.next()).await;
    next.expect("an event within the wait").expect("the stream is open").expect("an event, not an error")
}

fn watch_request(after: u64) -> swarm_proto::v1::WatchRequest {
    swarm_proto::v1::WatchRequest { after_event_id: after, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_at_the_newest_event_replays_nothing_and_gets_the_next_one() {
    let (_repo, controller, newest) = controller_with_events().await;
    let url = controller.url();
    let after = newest.to_string();
    let mut watch = Follower::start(&url, &["watch", "--after", &after, "-o", "json"]);
    more_events(&url, "next").await;
    watch.until("the events after the cursor", |seen| !seen.is_empty());
    assert_eq!(watch.ids()[0], newest + 1, "nothing replayed, the next event first: {:?}", watch.ids());
    assert!(watch.seen.iter().all(|e| e["swarm"] == "next"), "only the new swarm's events: {:?}", watch.seen);
}

/// The refusal of a cursor the store has not reached, over gRPC and as
/// `swarmctl watch` prints it.
async fn assert_beyond_the_newest(url: &str, after: u64, newest: u64) {
    let refused = swarm_tests::operator(url).await.watch(watch_request(after)).await.expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused}");
    let m = refused.message();
    assert!(m.contains("after_event_id") && m.contains(&format!("event {after} ")), "the cursor: {m}");
    assert!(m.contains(&format!("newest committed event {newest} ")), "the newest id: {m}");
    assert!(m.contains(&format!("--after {newest}")) && m.contains("--from-now"), "how to resume: {m}");

    let out = swarmctl(url, &["watch", "--after", &after.to_string(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(3), "a usage error, not a retry loop: {}", stderr(&out));
    assert!(out.stdout.is_empty(), "no event printed: {}", String::from_utf8_lossy(&out.stdout));
    let err = stderr(&out);
    assert!(
        err.contains("after_event_id") && err.contains(&format!("newest committed event {newest} ")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_beyond_the_newest_event_is_out_of_range() {
    let (_repo, controller, newest) = controller_with_events().await;
    assert_beyond_the_newest(&controller.url(), newest + 1000, newest).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_largest_cursor_is_a_cursor_not_from_now() {
    let (_repo, controller, newest) = controller_with_events().await;
    assert_beyond_the_newest(&controller.url(), u64::MAX, newest).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_beyond_the_newest_event_that_asks_to_wait_gets_only_later_events() {
    let (_repo, controller, newest) = controller_with_events().await;
    let url = controller.url();
    let req = swarm_proto::v1::WatchRequest { wait_for_after: true, ..watch_request(newest + 1) };
    let mut stream = swarm_tests::operator(&url).await.watch(req).await.expect("Watch waits").into_inner();
    more_events(&url, "next").await;
    assert_eq!(next_event(&mut stream).await.id, newest + 2, "the first event after the cursor");
}

#[tokio::test(flavor = "multi_thread")]
async fn from_now_gets_only_events_made_afterwards() {
    let (_repo, controller, newest) = controller_with_events().await;
    let url = controller.url();
    let req = swarm_proto::v1::WatchRequest { from_now: true, ..Default::default() };
    let response = swarm_tests::operator(&url).await.watch(req).await.expect("Watch");
    let starts = response.metadata().get("swarm-watch-after").and_then(|v| v.to_str().ok());
    assert_eq!(starts, Some(newest.to_string().as_str()), "the header names where the stream starts");
    let mut stream = response.into_inner();
    more_events(&url, "next").await;
    let first = next_event(&mut stream).await;
    assert_eq!((first.id, first.swarm_id.as_str()), (newest + 1, "next"), "no replay: {first:?}");

    // `swarmctl watch --from-now`: whenever it connected, what it prints
    // was made after it started.
    let before = events(&url, "", newest, 1).await.last().unwrap().id;
    let mut watch = Follower::start(&url, &["watch", "--from-now", "-o", "json"]);
    for i in 0..50 {
        more_events(&url, &format!("later{i}")).await;
        if let Ok(line) = watch.lines.recv_timeout(Duration::from_millis(200)) {
            watch.seen.push(serde_json::from_str(&line).unwrap());
            break;
        }
    }
    assert!(!watch.seen.is_empty(), "swarmctl watch --from-now printed the events made after it started");
    assert!(
        watch.ids()[0] > before,
        "only events made after it started: {:?} (newest before: {before})",
        watch.ids()
    );
}
