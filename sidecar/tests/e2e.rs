//! End to end against the real `swarm-controller` binary (build it first:
//! `cargo build --workspace`); skipped with a message when it is missing.
//! The sidecar runs in-process through `swarm_sidecar::run`, or as its own
//! binary when the test kills it.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{TempRepo, script};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_sidecar::Config;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

fn controller_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("swarm-controller");
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("SKIPPED: {} not built; run `cargo build --workspace` first", path.display());
        None
    }
}

struct Controller {
    child: Child,
    url: String,
    _log: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_controller(bin: &Path, repo: &Path) -> Controller {
    let log = repo.join(".git/controller.log");
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--repo"])
        .arg(repo)
        .args(["--heartbeat-interval-ms", "200", "--lease-ttl-ms", "3000", "--lost-grace-ms", "100"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start controller");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("controller prints its address");
    let addr =
        line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected line {line:?}"));
    Controller { child, url: format!("http://{addr}"), _log: log }
}

async fn operator(url: &str) -> OperatorServiceClient<Channel> {
    let channel = Endpoint::from_shared(url.to_string()).expect("url").connect().await.expect("connect");
    OperatorServiceClient::new(channel)
}

async fn task_until(
    op: &mut OperatorServiceClient<Channel>,
    id: &str,
    what: &str,
    done: impl Fn(&v1::TaskDetail) -> bool,
) -> v1::TaskDetail {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = op.get_task(v1::GetTaskRequest { task_id: id.into() }).await.expect("get task").into_inner();
        if done(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {d:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn state(d: &v1::TaskDetail) -> v1::TaskState {
    d.task.as_ref().map(|t| t.state()).unwrap_or_default()
}

fn plan(task: &str, worker: &Path, retries: u32) -> String {
    format!(
        "name = \"e2e\"\nbase_branch = \"main\"\n\n[[tasks]]\nid = \"{task}\"\ntitle = \"Say hi\"\n\
         prompt = \"say hi\"\ncommand = [\"{}\"]\nfiles = [\"hello.txt\"]\nretries = {retries}\n",
        worker.display()
    )
}

#[tokio::test]
async fn task_runs_to_success_through_the_real_controller() {
    let Some(bin) = controller_binary() else { return };
    let repo = TempRepo::new();
    repo.commit(&[("README", Some("hi"))], "base");
    let worker = script(
        repo.path(),
        "w.sh",
        r#"grep -q 'say hi' "$SWARM_TASK_FILE" || exit 1
echo hi > hello.txt
echo '{"status":"done","message":"said hi"}' > "$SWARM_STATUS_FILE""#,
    );
    let ctl = start_controller(&bin, repo.path());
    let mut op = operator(&ctl.url).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan("hello", &worker, 0) }).await.expect("create");

    let mut cfg = Config::new(ctl.url.clone(), repo.path());
    cfg.worker_id = Some("w1".into());
    let shutdown = CancellationToken::new();
    let sidecar = tokio::spawn(swarm_sidecar::run(cfg, shutdown.clone()));

    let d = task_until(&mut op, "e2e/hello", "success", |d| {
        matches!(state(d), v1::TaskState::Succeeded | v1::TaskState::Merging | v1::TaskState::Merged)
    })
    .await;
    let a = &d.attempts[0];
    assert_eq!(a.outcome(), v1::Outcome::Success, "{a:?}");
    assert_eq!(a.summary, "said hi");
    let commit = repo.repo.find_commit(git2::Oid::from_str(&a.result_commit).expect("oid")).expect("commit");
    assert!(commit.tree().expect("tree").get_name("hello.txt").is_some());
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), sidecar)
        .await
        .expect("sidecar stops")
        .expect("join")
        .expect("ok");
}

#[tokio::test]
async fn sidecar_killed_mid_attempt_reports_the_worker_lost_after_restart() {
    let Some(bin) = controller_binary() else { return };
    let repo = TempRepo::new();
    repo.commit(&[("README", Some("hi"))], "base");
    let marker = repo.path().join(".git/first-run");
    let worker = script(
        repo.path(),
        "w.sh",
        &format!(
            "if [ ! -e '{m}' ]; then touch '{m}'; exec sleep 60; fi\necho hi > hello.txt",
            m = marker.display()
        ),
    );
    let ctl = start_controller(&bin, repo.path());
    let mut op = operator(&ctl.url).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan("hello", &worker, 2) }).await.expect("create");

    let sidecar_bin = env!("CARGO_BIN_EXE_swarm-sidecar");
    let spawn = || {
        Command::new(sidecar_bin)
            .args(["--controller", &ctl.url, "--worker-id", "w1", "--repo"])
            .arg(repo.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sidecar")
    };
    let mut first = spawn();
    support::eventually(30, "first worker running", || marker.exists().then_some(())).await;
    first.kill().expect("kill -9 sidecar");
    first.wait().expect("reap");

    let mut second = spawn();
    let d = task_until(&mut op, "e2e/hello", "a successful second attempt", |d| {
        matches!(state(d), v1::TaskState::Succeeded | v1::TaskState::Merging | v1::TaskState::Merged)
    })
    .await;
    assert_eq!(d.attempts[0].error, "sidecar restarted; worker lost", "{:?}", d.attempts[0]);
    assert_eq!(d.attempts[0].outcome(), v1::Outcome::Error);
    assert_eq!(d.attempts.last().expect("attempt").outcome(), v1::Outcome::Success);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(second.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("sigterm");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = second.try_wait().expect("try_wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "sidecar did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
}
