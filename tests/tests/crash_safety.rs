//! Crash safety of the controller: a stale integration-ref lock left by a
//! killed controller, an integration ref a power loss left empty, a store
//! that runs out of disk, a swarm that cannot move (STALLED).
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};
use std::process::Command;

use swarm_proto::v1::{self, TaskState};
use swarm_tests::{
    Cluster, Gate, Needs, PlanBuilder, TempRepo, WAIT, binary, create_swarm, events, operator, poll,
    skip_for, spawn_controller, spawn_sidecar, task, wait_all_merged, wait_output, wait_task_state,
    worker_script,
};

fn dag_plan(name: &str) -> String {
    PlanBuilder::new(name)
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("c").deps(&["a"]))
        .task(task("d").deps(&["b", "c"]))
        .task(task("e"))
        .build()
}

/// What a writer killed in the middle of a ref update leaves behind.
fn plant_lock(repo: &TempRepo, branch: &str) -> PathBuf {
    let lock = repo.path().join(".git/refs/heads").join(format!("{branch}.lock"));
    let head = repo.git(&["rev-parse", branch]);
    std::fs::write(&lock, format!("{}\n", head.trim())).unwrap();
    lock
}

/// A two-sidecar cluster running [`dag_plan`], whose tasks b and c wait
/// for `gate`.
struct Held {
    gate: Gate,
    repo: TempRepo,
    cluster: Cluster,
    url: String,
}

async fn dag_held_at_b_and_c(swarm: &str) -> Held {
    let gate = Gate::new();
    let hold = format!("{}; echo \"$SWARM_TASK_ID\" > \"$SWARM_TASK_ID.txt\"", gate.wait_sh());
    let script = worker_script(&[("b", &hold), ("c", &hold)]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &dag_plan(swarm)).await;
    Held { gate, repo, cluster, url }
}

fn backdate(path: &Path) {
    let ok = Command::new("touch").args(["-d", "1 minute ago"]).arg(path).status().unwrap();
    assert!(ok.success(), "touch -d");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_integration_lock_left_by_a_killed_controller_is_removed_and_every_task_merges() {
    let Held { gate, repo, mut cluster, url } = dag_held_at_b_and_c("r").await;
    wait_task_state(&url, "r", "b", TaskState::Running).await;
    wait_task_state(&url, "r", "c", TaskState::Running).await;

    // Killed while moving the integration ref: its lock stays behind.
    cluster.controller.proc.kill9();
    let lock = plant_lock(&repo, "swarm/r/integration");
    backdate(&lock);
    // A lock on a ref the controller does not own is never broken.
    let main_lock = plant_lock(&repo, "main");
    backdate(&main_lock);
    cluster.controller.restart_after_kill9();

    // Recovery clears the stale lock before any merge.
    poll("the stale lock to be removed at start", WAIT, || async { (!lock.exists()).then_some(()) }).await;
    // A young lock (as if planted by a writer that died just now) on the
    // integration ref: the merges wait until it is provably stale.
    let young = plant_lock(&repo, "swarm/r/integration");
    gate.open();
    let tasks = wait_all_merged(&url, "r").await;
    assert!(tasks.values().all(|t| t.state == TaskState::Merged as i32));
    assert!(!young.exists());
    assert!(main_lock.exists(), "the lock on main is not the controller's to remove");

    let removed: Vec<v1::Event> =
        events(&url, "r", 0, 1).await.into_iter().filter(|e| e.kind == "integration.lock_removed").collect();
    assert_eq!(removed.len(), 2, "both removals are in the audit log: {removed:?}");
    assert!(removed.iter().all(|e| e.message.contains("integration.lock")), "{removed:?}");
    let failed =
        events(&url, "r", 0, 1).await.into_iter().filter(|e| e.message.contains("-> FAILED")).count();
    assert_eq!(failed, 0, "no task ever FAILED");
    let log = cluster.controller.proc.log();
    assert!(log.contains("removed a stale lock on the integration ref"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_integration_ref_left_empty_by_a_power_loss_is_put_back_at_the_stores_head_and_every_task_merges()
{
    let Held { gate, repo, mut cluster, url } = dag_held_at_b_and_c("p").await;
    for merged in ["a", "e"] {
        wait_task_state(&url, "p", merged, TaskState::Merged).await;
    }
    wait_task_state(&url, "p", "b", TaskState::Running).await;
    wait_task_state(&url, "p", "c", TaskState::Running).await;
    let recorded = repo.head("swarm/p/integration");

    // The ref is moved by exchange, whose new data a power loss can lose
    // (a kill -9 cannot: the page cache survives it); ext4 then shows an
    // empty file. The store's fsynced record of the head survives.
    cluster.controller.proc.kill9();
    let ref_file = repo.path().join(".git/refs/heads/swarm/p/integration");
    std::fs::write(&ref_file, "").unwrap();
    cluster.controller.restart_after_kill9();

    poll("the integration ref to be put back", WAIT, || async {
        std::fs::read_to_string(&ref_file).ok().filter(|s| s.trim() == recorded).map(|_| ())
    })
    .await;
    gate.open();
    wait_all_merged(&url, "p").await;
    let all = events(&url, "p", 0, 1).await;
    let repaired: Vec<&v1::Event> = all.iter().filter(|e| e.kind == "integration.ref_repaired").collect();
    assert_eq!(repaired.len(), 1, "the repair is in the audit log: {repaired:?}");
    assert!(repaired[0].message.contains(&recorded), "{repaired:?}");
    assert_eq!(all.iter().filter(|e| e.message.contains("-> FAILED")).count(), 0, "no task ever FAILED");
    let tree = repo.git(&["ls-tree", "--name-only", "swarm/p/integration"]);
    for task in ["a", "b", "c", "d", "e"] {
        assert!(tree.lines().any(|l| l == format!("{task}.txt")), "{task}.txt landed: {tree}");
    }
    let fsck = repo.git(&["fsck", "--no-dangling"]);
    assert!(!fsck.contains("error"), "{fsck}");
}

/// A tmpfs of `size` at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }

    /// Writes `filler` until the filesystem is full (bounded by its size).
    fn fill(&self) -> PathBuf {
        use std::io::Write as _;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        for _ in 0..10_000 {
            if f.write_all(&block).and_then(|_| f.flush()).is_err() {
                break;
            }
        }
        // Small tail pieces too, so not even a page is left.
        for _ in 0..10_000 {
            if f.write_all(&block[..512]).and_then(|_| f.flush()).is_err() {
                break;
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_out_of_disk_exits_non_zero_with_the_reason_and_resumes_after_a_restart() {
    let scratch = tempfile::tempdir().unwrap();
    let fs = match Tmpfs::mount(&scratch.path().join("db"), "4m") {
        Ok(fs) => fs,
        Err(reason) => {
            return skip_for(
                "a_controller_out_of_disk_exits_non_zero_with_the_reason_and_resumes_after_a_restart",
                Needs::Root,
                &format!("cannot mount a tmpfs ({reason})"),
            );
        }
    };
    let db = fs.0.join("swarm.db");
    let db_arg = format!("--db={}", db.display());
    let gate = Gate::new();
    let hold = format!("{}; echo \"$SWARM_TASK_ID\" > \"$SWARM_TASK_ID.txt\"", gate.wait_sh());
    let script = worker_script(&[("b", &hold), ("c", &hold)]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let mut controller = spawn_controller(repo.path(), &[&db_arg]);
    let url = controller.url();
    let _sidecars: Vec<_> =
        (1..=2).map(|n| spawn_sidecar(&url, repo.path(), &format!("w{n}"), &[])).collect();
    create_swarm(&url, &dag_plan("r")).await;
    wait_task_state(&url, "r", "b", TaskState::Running).await;
    wait_task_state(&url, "r", "c", TaskState::Running).await;

    let filler = fs.fill();
    gate.open();
    let status = controller.proc.wait_exit(WAIT).expect("the controller exits when its store is full");
    assert!(!status.success(), "exit status {status:?}");
    let log = controller.proc.log();
    assert!(log.contains("SQLITE_FULL") && log.contains("disk is full"), "{log}");
    assert!(log.contains(&db.display().to_string()), "the message names the store: {log}");
    assert!(log.contains("controller stopped: the scheduler thread failed"), "{log}");

    std::fs::remove_file(&filler).unwrap();
    controller.restart_after_kill9();
    let url = controller.url();
    let tasks = wait_all_merged(&url, "r").await;
    assert_eq!(tasks.len(), 5);
}

#[test]
fn swarmctl_run_reports_an_embedded_controller_that_stopped_on_its_own() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;
    let gate = Gate::new();
    let hold = format!("{}; echo held > held.txt", gate.wait_sh());
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("held", &hold)]))]);
    // The store (<repo>/.git/swarm/swarm.db) on a small tmpfs; the logs
    // beside it stay on a disk that does not fill.
    let swarm_dir = repo.path().join(".git/swarm");
    let fs = match Tmpfs::mount(&swarm_dir, "4m") {
        Ok(fs) => fs,
        Err(reason) => {
            return skip_for(
                "swarmctl_run_reports_an_embedded_controller_that_stopped_on_its_own",
                Needs::Root,
                &format!("cannot mount a tmpfs ({reason})"),
            );
        }
    };
    let logs = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(logs.path(), swarm_dir.join("logs")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, PlanBuilder::new("full").task(task("held")).build()).unwrap();

    let mut child = Command::new(binary("swarmctl"))
        .arg("run")
        .arg(&plan_path)
        .args(["--workers", "1", "--repo"])
        .arg(repo.path())
        .env("XDG_STATE_HOME", swarm_tests::state_home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        assert!(std::time::Instant::now() < deadline, "the held task never started");
        match lines.next() {
            Some(Ok(line)) if line.contains("full/held#1") && line.contains("attempt.started") => break,
            Some(Ok(_)) => {}
            _ => panic!("swarmctl run ended early"),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let _filler = fs.fill();
    gate.open();
    let out = wait_output(child, WAIT);
    let err = swarm_tests::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{err}");
    assert!(err.contains("controller stopped") && err.contains("SQLITE_FULL"), "stderr:\n{err}");
    drop(fs);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_task_with_pending_dependents_stalls_the_swarm_until_it_is_retried() {
    let flag = tempfile::tempdir().unwrap();
    let marker = flag.path().join("fixed");
    // b fails until the operator "fixes" it (the marker file exists).
    let b = format!("test -e '{}' || exit 1; echo b > b.txt", marker.display());
    let script = worker_script(&[("b", &b)]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let plan = PlanBuilder::new("st")
        .default("retries", "0")
        .task(task("a"))
        .task(task("b").deps(&["a"]))
        .task(task("d").deps(&["b"]))
        .build();
    let metrics_addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().to_string()
    };
    let cluster = Cluster::start(&repo, 1, &[&format!("--metrics-listen={metrics_addr}")]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "st", "b", TaskState::Failed).await;

    let mut op = operator(&url).await;
    let swarm = poll("the swarm to be STALLED", WAIT, || {
        let mut op = op.clone();
        async move {
            let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: "st".into() }).await.ok()?.into_inner();
            (s.state == v1::SwarmState::Stalled as i32).then_some(s)
        }
    })
    .await;
    assert_eq!(swarm.stalled_tasks, vec!["b".to_string()]);
    assert!(
        swarm.stalled_reason.contains("1 FAILED") && swarm.stalled_reason.contains("1 PENDING"),
        "{swarm:?}"
    );
    let stalled: Vec<v1::Event> =
        events(&url, "st", 0, 1).await.into_iter().filter(|e| e.kind == "swarm.stalled").collect();
    assert_eq!(stalled.len(), 1, "{stalled:?}");
    assert_eq!(stalled_gauge(&metrics_addr).await, 1.0);

    let out = swarm_tests::swarmctl(&url, &["get", "swarms"]);
    assert!(swarm_tests::stdout(&out).contains("STALLED"), "{}", swarm_tests::stdout(&out));
    let out = swarm_tests::swarmctl(&url, &["describe", "swarm", "st"]);
    let text = swarm_tests::stdout(&out);
    assert!(text.contains("Stalled:") && text.contains("Needs you:   b"), "{text}");

    std::fs::write(&marker, "").unwrap();
    op.retry_task(v1::RetryTaskRequest { task_id: "st/b".into() }).await.unwrap();
    wait_all_merged(&url, "st").await;
    let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: "st".into() }).await.unwrap().into_inner();
    assert_eq!(s.state, v1::SwarmState::Completed as i32);
    assert!(s.stalled_reason.is_empty() && s.stalled_tasks.is_empty());
    assert_eq!(stalled_gauge(&metrics_addr).await, 0.0);
    let states: Vec<String> = events(&url, "st", 0, 1)
        .await
        .into_iter()
        .filter(|e| e.kind == "swarm.state")
        .map(|e| e.message)
        .collect();
    assert!(states.iter().any(|m| m.ends_with("ACTIVE")), "it left STALLED when retried: {states:?}");
}

/// `swarm_swarms_stalled` from `GET /metrics`.
async fn stalled_gauge(addr: &str) -> f64 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: swarm\r\n\r\n").await.unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).await.unwrap();
    let line =
        text.lines().find(|l| l.starts_with("swarm_swarms_stalled ")).unwrap_or_else(|| panic!("{text}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
