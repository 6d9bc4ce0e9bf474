//! End to end against the real `swarm-controller` binary, started (and
//! built first, when needed) by the launcher every end-to-end test uses.
//! The sidecar runs in-process through `swarm_sidecar::run`, or as its own
//! binary when the test kills it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_sidecar::Config;
use swarm_tests::{ControllerProc, TempRepo, poll, script, spawn_controller};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

/// The real controller with short heartbeats and leases, through the
/// launcher every end-to-end test uses (it builds the binaries first).
fn start_controller(repo: &Path) -> ControllerProc {
    start_controller_at(repo, "127.0.0.1:0")
}

fn start_controller_at(repo: &Path, listen: &str) -> ControllerProc {
    let listen = format!("--listen={listen}");
    spawn_controller(
        repo,
        &[
            &listen,
            "--heartbeat-interval-ms=200",
            "--lease-ttl-ms=5000",
            "--lost-grace-ms=100",
            "--cancel-grace-ms=200",
        ],
    )
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

/// The sandbox table that lets workers read their scripts beside the
/// repository (and write `marks`, where they leave markers for the test).
fn sandbox(scripts: &Path, marks: &Path) -> String {
    format!("sandbox = {{ read = [\"{}\"], write = [\"{}\"] }}\n", scripts.display(), marks.display())
}

fn plan(task: &str, worker: &Path, retries: u32) -> String {
    let dir = worker.parent().expect("script dir");
    format!(
        "name = \"e2e\"\nbase_branch = \"main\"\n\n[[tasks]]\nid = \"{task}\"\ntitle = \"Say hi\"\n\
         prompt = \"say hi\"\ncommand = [\"{}\"]\nfiles = [\"hello.txt\"]\nretries = {retries}\n{}",
        worker.display(),
        sandbox(dir, dir)
    )
}

#[tokio::test]
async fn task_runs_to_success_through_the_real_controller() {
    let repo = TempRepo::new();
    repo.commit_on_branch("main", &[("README", Some("hi"))], "base");
    let worker = script(
        repo.path(),
        "w.sh",
        r#"grep -q 'say hi' "$SWARM_TASK_FILE" || exit 1
echo hi > hello.txt
echo '{"status":"done","message":"said hi"}' > "$SWARM_STATUS_FILE""#,
    );
    let ctl = start_controller(repo.path());
    let mut op = operator(&ctl.url()).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan("hello", &worker, 0), origin: None })
        .await
        .expect("create");

    let mut cfg = Config::new(ctl.url(), repo.path());
    cfg.worker_id = Some("w1".into());
    cfg.supervisor = Some(env!("CARGO_BIN_EXE_swarm-sidecar").into());
    let shutdown = CancellationToken::new();
    let sidecar = tokio::spawn(swarm_sidecar::run(cfg, shutdown.clone()));

    let d = task_until(&mut op, "e2e/hello", "success", |d| {
        matches!(state(d), v1::TaskState::Succeeded | v1::TaskState::Merging | v1::TaskState::Merged)
    })
    .await;
    let a = &d.attempts[0];
    assert_eq!(a.outcome(), v1::Outcome::Success, "{a:?}");
    assert_eq!(a.summary, "said hi");
    let git = repo.git2();
    let commit = git.find_commit(git2::Oid::from_str(&a.result_commit).expect("oid")).expect("commit");
    assert!(commit.tree().expect("tree").get_name("hello.txt").is_some());
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), sidecar)
        .await
        .expect("sidecar stops")
        .expect("join")
        .expect("ok");
}

#[tokio::test]
async fn sidecar_killed_with_its_worker_reports_the_worker_lost_after_restart() {
    let repo = TempRepo::new();
    repo.commit_on_branch("main", &[("README", Some("hi"))], "base");
    let marker = repo.path().join(".git/first-run");
    let worker = script(
        repo.path(),
        "w.sh",
        &format!(
            "if [ ! -e '{m}' ]; then echo $$ > '{m}'; exec sleep 60; fi\necho hi > hello.txt",
            m = marker.display()
        ),
    );
    let ctl = start_controller(repo.path());
    let mut op = operator(&ctl.url()).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan("hello", &worker, 2), origin: None })
        .await
        .expect("create");

    let sidecar_bin = env!("CARGO_BIN_EXE_swarm-sidecar");
    let spawn = || {
        Command::new(sidecar_bin)
            .args(["--controller", &ctl.url(), "--worker-id", "w1", "--repo"])
            .arg(repo.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sidecar")
    };
    let mut first = spawn();
    let pid: i32 = poll("first worker running", Duration::from_secs(30), || async {
        std::fs::read_to_string(&marker).ok()?.trim().parse().ok()
    })
    .await;
    first.kill().expect("kill -9 sidecar");
    first.wait().expect("reap");
    // The worker would survive its sidecar under its supervisor; kill the
    // whole group too (supervisor and worker), so nothing is left to re-adopt.
    let group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).expect("worker's group");
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).expect("kill the worker's group");

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

fn sidecar_config(url: &str, repo: &Path) -> Config {
    let mut cfg = Config::new(url.to_string(), repo);
    cfg.worker_id = Some("w1".into());
    cfg.supervisor = Some(env!("CARGO_BIN_EXE_swarm-sidecar").into());
    cfg.stop_grace_ms = 200;
    cfg.reconnect_max_ms = 300;
    cfg
}

fn finished(d: &v1::TaskDetail) -> bool {
    matches!(state(d), v1::TaskState::Succeeded | v1::TaskState::Merging | v1::TaskState::Merged)
}

#[tokio::test]
async fn answers_reach_the_worker_cancel_stops_it_and_drain_ends_the_sidecar() {
    let repo = TempRepo::new();
    repo.commit_on_branch("main", &[("README", Some("hi"))], "base");
    let ask = script(
        repo.path(),
        "ask.sh",
        r#"echo '{"status":"question","message":"need input","question":{"id":"q1","text":"A or B?","category":"ambiguous_spec"}}' > "$SWARM_STATUS_FILE"
A="$(dirname "$SWARM_TASK_FILE")/answers/q1.md"
i=0; while [ ! -e "$A" ]; do i=$((i+1)); [ $i -gt 400 ] && exit 1; sleep 0.05; done
cp "$A" answer.txt
grep -q '## Answers' "$SWARM_TASK_FILE" || exit 1"#,
    );
    let marks = tempfile::tempdir().expect("marks");
    let marker = marks.path().join("hang-started");
    let hang = script(
        repo.path(),
        "hang.sh",
        &format!("trap '' INT; touch '{}'; while :; do sleep 0.05; done", marker.display()),
    );
    let plan = format!(
        "name = \"e2e\"\nbase_branch = \"main\"\n\n[defaults]\n{}\n\
         [[tasks]]\nid = \"ask\"\ncommand = [\"{}\"]\nfiles = [\"answer.txt\"]\nretries = 0\n\n\
         [[tasks]]\nid = \"hang\"\ndeps = [\"ask\"]\ncommand = [\"{}\"]\nfiles = [\"x\"]\nretries = 0\n",
        sandbox(repo.path(), marks.path()),
        ask.display(),
        hang.display()
    );
    let ctl = start_controller(repo.path());
    let mut op = operator(&ctl.url()).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None }).await.expect("create");
    let sidecar =
        tokio::spawn(swarm_sidecar::run(sidecar_config(&ctl.url(), repo.path()), CancellationToken::new()));

    task_until(&mut op, "e2e/ask", "the question", |d| {
        d.task.as_ref().is_some_and(|t| !t.pending_question.is_empty())
    })
    .await;
    op.answer(v1::AnswerRequest {
        task_id: "e2e/ask".into(),
        question_id: "q1".into(),
        text: "B, please".into(),
    })
    .await
    .expect("answer");
    let d = task_until(&mut op, "e2e/ask", "success", finished).await;
    let commit = d.attempts[0].result_commit.clone();
    let git = repo.git2();
    let tree =
        git.find_commit(git2::Oid::from_str(&commit).expect("oid")).expect("commit").tree().expect("tree");
    let blob = tree.get_name("answer.txt").expect("answer.txt").to_object(&git).expect("object");
    assert_eq!(String::from_utf8_lossy(blob.as_blob().expect("blob").content()), "B, please");

    poll("hang worker started", Duration::from_secs(30), || async { marker.exists().then_some(()) }).await;
    op.cancel_task(v1::CancelTaskRequest { task_id: "e2e/hang".into(), reason: "test".into() })
        .await
        .expect("cancel");
    let d = task_until(&mut op, "e2e/hang", "cancelled attempt", |d| {
        d.attempts.first().is_some_and(|a| a.outcome() == v1::Outcome::Cancelled)
    })
    .await;
    assert_eq!(state(&d), v1::TaskState::Cancelled);

    op.drain_worker(v1::DrainWorkerRequest { worker_id: "w1".into() }).await.expect("drain");
    tokio::time::timeout(Duration::from_secs(10), sidecar)
        .await
        .expect("a drained sidecar exits")
        .expect("join")
        .expect("ok");
}

#[tokio::test]
async fn reports_made_while_the_controller_is_down_are_replayed() {
    let repo = TempRepo::new();
    repo.commit_on_branch("main", &[("README", Some("hi"))], "base");
    let started = repo.path().join(".git/started");
    let go = repo.path().join(".git/go");
    let worker = script(
        repo.path(),
        "w.sh",
        &format!(
            "touch '{s}'\nwhile [ ! -e '{g}' ]; do sleep 0.05; done\necho hi > hello.txt",
            s = started.display(),
            g = go.display()
        ),
    );
    let ctl = start_controller(repo.path());
    let addr = ctl.url().trim_start_matches("http://").to_string();
    let mut op = operator(&ctl.url()).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan("hello", &worker, 0), origin: None })
        .await
        .expect("create");
    let shutdown = CancellationToken::new();
    let sidecar = tokio::spawn(swarm_sidecar::run(sidecar_config(&ctl.url(), repo.path()), shutdown.clone()));
    poll("worker running", Duration::from_secs(30), || async { started.exists().then_some(()) }).await;

    drop(ctl); // kill -9: the stream breaks, the worker keeps running
    std::fs::write(&go, "").expect("go");
    let journal = repo.path().join(".git/workspaces/w1.journal");
    poll("result journaled while disconnected", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(&journal).ok()?;
        text.lines().any(|l| l.contains("\"release\"")).then_some(())
    })
    .await;

    let ctl = start_controller_at(repo.path(), &addr);
    let mut op = operator(&ctl.url()).await;
    let d = task_until(&mut op, "e2e/hello", "success after replay", finished).await;
    assert_eq!(d.attempts.len(), 1, "the re-sent Assign was not run again: {:?}", d.attempts);
    assert_eq!(d.attempts[0].outcome(), v1::Outcome::Success);
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), sidecar).await.expect("stops").expect("join").expect("ok");
}

#[tokio::test]
async fn remote_sidecar_fetches_the_base_and_pushes_its_result() {
    let repo = TempRepo::new();
    repo.commit_on_branch("main", &[("README", Some("hi"))], "base");
    let worker = script(repo.path(), "w.sh", "test -f README && echo hi > hello.txt");
    let clone = TempRepo::new(); // empty: no commits at all
    let ctl = start_controller(repo.path());
    let mut op = operator(&ctl.url()).await;
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan("hello", &worker, 0), origin: None })
        .await
        .expect("create");
    let mut cfg = sidecar_config(&ctl.url(), clone.path());
    cfg.remote = true;
    let shutdown = CancellationToken::new();
    let sidecar = tokio::spawn(swarm_sidecar::run(cfg, shutdown.clone()));
    let d = task_until(&mut op, "e2e/hello", "success", finished).await;
    let a = &d.attempts[0];
    assert_eq!(a.outcome(), v1::Outcome::Success, "{a:?}");
    let git = repo.git2();
    let commit = git.find_commit(git2::Oid::from_str(&a.result_commit).expect("oid")).expect("pushed commit");
    assert!(commit.tree().expect("tree").get_name("hello.txt").is_some());
    assert!(clone.path().join(".git/workspaces/w1/hello.txt").exists(), "worked in its own clone");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), sidecar).await.expect("stops").expect("join").expect("ok");
}
