//! The compose swarm of deploy/compose/: a leading controller and a standby
//! over PostgreSQL and three sidecar hosts with their own clones, in
//! containers on a private network. A DAG runs while the leader's
//! container is killed; the standby takes over and every task merges
//! exactly once. Needs a Docker Engine, docker-compose and a controller
//! with `--store` (high availability); prints why it skipped otherwise.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use swarm_tests::docker::{docker_unavailable, postgres_image, repo_root, swarm_image};
use swarm_tests::{Needs, skip_for, wait_output};

const TASKS: &[(&str, &[&str])] = &[
    ("a", &[]),
    ("b", &["a"]),
    ("c", &["a"]),
    ("d", &["a"]),
    ("e", &["b", "c"]),
    ("f", &["c", "d"]),
    ("g", &["e", "f"]),
    ("h", &["g"]),
];
const CONTROLLERS: [&str; 2] = ["controller-a", "controller-b"];

/// One compose project, torn down (with its volumes) on drop.
struct Compose {
    project: String,
    file: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl Compose {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("docker-compose");
        cmd.arg("-p").arg(&self.project).arg("-f").arg(&self.file).args(args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd
    }

    fn run(&self, args: &[&str], limit: Duration) -> Output {
        let child = self.command(args).stdin(Stdio::null()).spawn().expect("docker-compose");
        wait_output(child, limit)
    }

    /// `exec -T SERVICE ARGV`, with `input` on stdin.
    fn exec(&self, service: &str, argv: &[&str], input: &str) -> Output {
        let mut args = vec!["exec", "-T", service];
        args.extend_from_slice(argv);
        let mut child = self.command(&args).stdin(Stdio::piped()).spawn().expect("docker-compose exec");
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        wait_output(child, Duration::from_secs(60))
    }

    fn swarmctl(&self, args: &[&str]) -> Output {
        let mut argv = vec!["swarmctl"];
        argv.extend_from_slice(args);
        self.exec("operator", &argv, "")
    }

    fn json(&self, args: &[&str]) -> Option<Value> {
        let out = self.swarmctl(args);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.run(&["logs", "--no-color", "--tail", "40"], Duration::from_secs(60));
            eprintln!("----- compose logs -----\n{}", String::from_utf8_lossy(&logs.stdout));
        }
        let _ = self.run(&["down", "-v", "--remove-orphans", "--timeout", "5"], Duration::from_secs(180));
    }
}

fn skip_reason() -> Option<(Needs, String)> {
    if let Some(why) = docker_unavailable() {
        return Some((Needs::Docker, why));
    }
    if Command::new("docker-compose").arg("version").output().is_err() {
        return Some((Needs::Program("docker-compose"), "no docker-compose command".into()));
    }
    None
}

fn plan() -> String {
    let mut plan = String::from(
        "name = \"dag\"\n[defaults]\n\
         command = [\"sh\", \"-c\", \"sleep 1; echo $SWARM_TASK_ID > $SWARM_TASK_ID.txt\"]\n\
         retries = 5\nbackoff_initial_ms = 200\nbackoff_max_ms = 1000\n",
    );
    for (id, deps) in TASKS {
        let deps: Vec<String> = deps.iter().map(|d| format!("\"{d}\"")).collect();
        plan.push_str(&format!(
            "\n[[tasks]]\nid = \"{id}\"\nfiles = [\"{id}.txt\"]\ndeps = [{}]\n",
            deps.join(", ")
        ));
        if !deps.is_empty() {
            // The tasks after the first take long enough (four levels of
            // 8 s) that the leader is surely killed mid-swarm, however
            // slowly a loaded machine answers the test's polls (each a
            // `docker compose exec`; 4 s levels were once not enough
            // while a build ran beside the suite).
            plan.push_str(
                "command = [\"sh\", \"-c\", \"sleep 8; echo $SWARM_TASK_ID > $SWARM_TASK_ID.txt\"]\n",
            );
        }
    }
    plan
}

/// Polls `f` every half second until it returns Some, for at most `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn states(c: &Compose) -> Option<Vec<String>> {
    let tasks = c.json(&["get", "tasks", "--swarm", "dag", "-o", "json"])?;
    Some(tasks.as_array()?.iter().map(|t| t["state"].as_str().unwrap_or("").to_string()).collect())
}

/// The controller that answers as the leader.
fn leader(c: &Compose) -> Option<&'static str> {
    CONTROLLERS.into_iter().find(|name| {
        let url = format!("--controller=http://{name}:7420");
        c.swarmctl(&[&url, "get", "swarms"]).status.success()
    })
}

#[test]
fn a_dag_merges_once_across_a_leader_failover() {
    if let Some((needs, why)) = skip_reason() {
        return skip_for("a_dag_merges_once_across_a_leader_failover", needs, &why);
    }
    let image = swarm_image().unwrap_or_else(|e| panic!("building the swarm image: {e}"));
    let postgres = postgres_image().unwrap_or_else(|e| panic!("building the postgres image: {e}"));
    let c = Compose {
        project: format!("swarmtest{}", std::process::id()),
        file: repo_root().join("deploy/compose/docker-compose.yml"),
        env: vec![
            ("SWARM_IMAGE", image.to_string()),
            ("SWARM_POSTGRES_IMAGE", postgres.to_string()),
            ("SWARM_LEADER_LEASE_MS", "3000".into()),
        ],
    };
    let up = c.run(&["up", "-d"], Duration::from_secs(300));
    assert!(up.status.success(), "compose up: {}", String::from_utf8_lossy(&up.stderr));

    wait_for("three connected sidecar hosts", Duration::from_secs(180), || {
        let workers = c.json(&["get", "workers", "-o", "json"])?;
        let connected = workers.as_array()?.iter().filter(|w| w["connected"] == true).count();
        (connected == 3).then_some(())
    });
    let out =
        c.exec("operator", &["sh", "-c", "cat > /tmp/plan.toml && swarmctl create /tmp/plan.toml"], &plan());
    assert!(out.status.success(), "create: {}", String::from_utf8_lossy(&out.stderr));

    // Mid-swarm: some tasks merged, not all.
    wait_for("the first merges", Duration::from_secs(180), || {
        let merged = states(&c)?.iter().filter(|s| *s == "MERGED").count();
        (merged >= 1).then_some(())
    });
    let old = leader(&c).expect("one controller leads");
    let merged_before = states(&c).unwrap().iter().filter(|s| *s == "MERGED").count();
    assert!(merged_before < TASKS.len(), "the leader is killed mid-swarm");
    let kill = c.run(&["kill", old], Duration::from_secs(60));
    assert!(kill.status.success(), "kill {old}");

    wait_for("every task MERGED after the failover", Duration::from_secs(300), || {
        states(&c).filter(|s| s.len() == TASKS.len() && s.iter().all(|s| s == "MERGED"))
    });
    let new = leader(&c).expect("a controller leads after the failover");
    assert_ne!(new, old, "the standby took over");

    let log = c.exec(
        new,
        &[
            "git",
            "-C",
            "/var/lib/swarm/data/repo",
            "log",
            "--first-parent",
            "--format=%s",
            "swarm/dag/integration",
        ],
        "",
    );
    assert!(log.status.success(), "git log: {}", String::from_utf8_lossy(&log.stderr));
    let subjects = String::from_utf8_lossy(&log.stdout).into_owned();
    for (id, _) in TASKS {
        let merges = subjects.lines().filter(|l| l.contains(&format!("(dag/{id}#"))).count();
        assert_eq!(merges, 1, "task {id} merged once:\n{subjects}");
    }
}
