//! Test support: temp repositories, worker scripts, plans, and the real
//! binaries started as processes.
//!
//! The binaries are found in the target directory next to the test
//! executable (`target/<profile>/`); `cargo test --workspace` builds every
//! binary of the workspace before it runs tests, so they are there.
//! Nothing here sleeps to wait: every wait polls a condition against a
//! deadline and fails with what it was waiting for.
#![allow(clippy::unwrap_used)] // test support: a panic is the report

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use tonic::transport::{Channel, Endpoint};

pub use tempfile::TempDir;

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Binaries

/// The path of a workspace binary, next to the test executable.
///
/// `cargo test` builds a package's binaries only for that package's own
/// integration tests, so `cargo test --workspace` alone does not build
/// `swarm-controller`, `swarm-sidecar` and `swarmctl` for these tests. The
/// first call in a test process therefore runs `cargo build --workspace
/// --bins` (a no-op when they are fresh; cargo releases its lock while tests
/// run). Set `SWARM_TESTS_NO_BUILD=1` to skip that and use what is there.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_path_buf();
    ensure_built(&dir);
    let path = dir.join(name);
    assert!(path.is_file(), "{name} not found at {}: run `cargo build --workspace` first", path.display());
    path
}

fn ensure_built(dir: &Path) {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let result = BUILT.get_or_init(|| {
        if std::env::var_os("SWARM_TESTS_NO_BUILD").is_some() {
            return Ok(());
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--workspace", "--bins", "--quiet"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        match cmd.output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
            Err(e) => Err(e.to_string()),
        }
    });
    if let Err(e) = result {
        panic!("building the workspace binaries failed; run `cargo build --workspace` first:\n{e}");
    }
}

// ---------------------------------------------------------------------------
// Git repositories

/// A git repository in a temporary directory, on branch `main` with one commit.
pub struct TempRepo {
    dir: TempDir,
}

impl TempRepo {
    /// A repository whose first commit holds `files` (path, content).
    pub fn with_files(files: &[(&str, &str)]) -> TempRepo {
        let dir = tempfile::Builder::new().prefix("swarm-e2e-").tempdir().expect("tempdir");
        let repo = TempRepo { dir };
        repo.git(&["init", "--quiet", "--initial-branch=main"]);
        repo.git(&["config", "user.name", "swarm tests"]);
        repo.git(&["config", "user.email", "tests@swarm.invalid"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        let mut files: Vec<(&str, &str)> = files.to_vec();
        if files.is_empty() {
            files.push(("README.md", "# test repo\n"));
        }
        repo.commit("initial commit", &files);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes files and commits them on the current branch; returns the commit id.
    pub fn commit(&self, message: &str, files: &[(&str, &str)]) -> String {
        for (path, content) in files {
            self.write(path, content);
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "--quiet", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"]).trim().to_string()
    }

    pub fn write(&self, path: &str, content: &str) {
        let full = self.path().join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(full, content).unwrap();
    }

    /// Runs git in the repository; panics with its stderr on failure.
    pub fn git(&self, args: &[&str]) -> String {
        let out = self.try_git(args);
        assert!(out.status.success(), "git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn try_git(&self, args: &[&str]) -> Output {
        Command::new("git").arg("-C").arg(self.path()).args(args).output().expect("running git")
    }

    /// Every file of `rev`'s tree with its content.
    pub fn tree(&self, rev: &str) -> BTreeMap<String, String> {
        let names = self.git(&["ls-tree", "-r", "--name-only", rev]);
        names.lines().map(|name| (name.to_string(), self.git(&["show", &format!("{rev}:{name}")]))).collect()
    }

    /// Whether `rev` names a commit.
    pub fn has(&self, rev: &str) -> bool {
        self.try_git(&["rev-parse", "--verify", "--quiet", &format!("{rev}^{{commit}}")]).status.success()
    }

    /// First-parent subjects of `rev`, newest first.
    pub fn subjects(&self, rev: &str) -> Vec<String> {
        self.git(&["log", "--first-parent", "--format=%s", rev]).lines().map(str::to_string).collect()
    }
}

/// A worker script: `sh` code run for each task, chosen by `$SWARM_TASK_ID`.
/// Each arm is shell code; the default arm writes `<task>.txt` and exits 0.
pub fn worker_script(arms: &[(&str, &str)]) -> String {
    let mut s = String::from(
        "#!/bin/sh\n# test worker: behaviour by $SWARM_TASK_ID and $SWARM_ATTEMPT\nset -eu\n\
         mkdir -p \"$(dirname \"$SWARM_STATUS_FILE\")\"\ncase \"$SWARM_TASK_ID\" in\n",
    );
    for (task, body) in arms {
        let _ = writeln!(s, "{task})\n{body}\n;;");
    }
    s.push_str("*)\necho \"$SWARM_TASK_ID\" > \"$SWARM_TASK_ID.txt\"\n;;\nesac\nexit 0\n");
    s
}

// ---------------------------------------------------------------------------
// Plans

/// Builds plan TOML text. Defaults: worker `sh worker.sh`, short backoffs.
pub struct PlanBuilder {
    name: String,
    defaults: Vec<String>,
    tasks: Vec<TaskBuilder>,
}

pub struct TaskBuilder {
    id: String,
    lines: Vec<String>,
}

impl PlanBuilder {
    pub fn new(name: &str) -> PlanBuilder {
        PlanBuilder {
            name: name.to_string(),
            defaults: vec![
                r#"command = ["sh", "worker.sh"]"#.into(),
                "retries = 2".into(),
                "backoff_initial_ms = 50".into(),
                "backoff_max_ms = 200".into(),
                "idle_timeout_secs = 60".into(),
            ],
            tasks: Vec::new(),
        }
    }

    /// Adds (or replaces) a `[defaults]` line, e.g. `("retries", "0")`.
    pub fn default(mut self, key: &str, value: &str) -> PlanBuilder {
        self.defaults.retain(|l| !l.starts_with(&format!("{key} ")));
        self.defaults.push(format!("{key} = {value}"));
        self
    }

    pub fn task(mut self, task: TaskBuilder) -> PlanBuilder {
        self.tasks.push(task);
        self
    }

    pub fn build(&self) -> String {
        let mut s = format!("name = \"{}\"\n\n[defaults]\n", self.name);
        for l in &self.defaults {
            let _ = writeln!(s, "{l}");
        }
        for t in &self.tasks {
            let _ = write!(s, "\n[[tasks]]\nid = \"{}\"\n", t.id);
            for l in &t.lines {
                let _ = writeln!(s, "{l}");
            }
        }
        s
    }
}

/// A task owning `<id>.txt` unless told otherwise.
pub fn task(id: &str) -> TaskBuilder {
    TaskBuilder { id: id.to_string(), lines: vec![format!("files = [\"{id}.txt\"]")] }
}

impl TaskBuilder {
    pub fn deps(self, deps: &[&str]) -> TaskBuilder {
        let list: Vec<String> = deps.iter().map(|d| format!("\"{d}\"")).collect();
        self.set("deps", &format!("[{}]", list.join(", ")))
    }

    pub fn files(self, globs: &[&str]) -> TaskBuilder {
        let list: Vec<String> = globs.iter().map(|d| format!("\"{d}\"")).collect();
        self.set("files", &format!("[{}]", list.join(", ")))
    }

    /// Sets any task field to a TOML value.
    pub fn set(mut self, key: &str, value: &str) -> TaskBuilder {
        self.lines.retain(|l| !l.starts_with(&format!("{key} ")));
        self.lines.push(format!("{key} = {value}"));
        self
    }
}

// ---------------------------------------------------------------------------
// Processes

/// A child process killed (SIGKILL) and reaped on drop; its output goes to
/// a log file that is printed if the test panics.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait (bounded) for the exit.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not exit within 20s of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`, ...).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{sig} {}", self.name);
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            eprintln!("----- {} log ({}) -----\n{tail}\n-----", self.name, self.log.display());
        }
    }
}

fn log_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("swarm-e2e-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}-{}-{}.log", std::process::id(), unique()))
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A running `swarm-controller`.
pub struct ControllerProc {
    pub proc: Proc,
    pub addr: String,
    repo: PathBuf,
    extra: Vec<String>,
}

impl ControllerProc {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// kill -9, then start again on the same port with the same arguments.
    pub fn restart_after_kill9(&mut self) {
        self.proc.kill9();
        let mut extra = self.extra.clone();
        extra.retain(|a| !a.starts_with("--listen="));
        extra.push(format!("--listen={}", self.addr));
        // The port may linger briefly; retry the bind within the deadline.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match try_spawn_controller(&self.repo, &extra) {
                Ok(c) => {
                    self.proc = c.proc;
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("controller restart: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("controller did not restart: {e}"),
            }
        }
    }
}

/// Starts `swarm-controller --listen 127.0.0.1:0 --repo REPO` plus `extra`
/// (e.g. `--lease-ttl-ms=1500`), and reads the port from its ready line.
pub fn spawn_controller(repo: &Path, extra: &[&str]) -> ControllerProc {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    try_spawn_controller(repo, &extra).unwrap_or_else(|e| panic!("{e}"))
}

fn try_spawn_controller(repo: &Path, extra: &[String]) -> Result<ControllerProc, String> {
    let log = log_path("controller");
    let listen_given = extra.iter().any(|a| a.starts_with("--listen"));
    let mut cmd = Command::new(binary("swarm-controller"));
    if !listen_given {
        cmd.arg("--listen=127.0.0.1:0");
    }
    cmd.arg("--repo").arg(repo).args(extra);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap());
    cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
    let mut child = cmd.spawn().map_err(|e| format!("starting swarm-controller: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next();
        let _ = tx.send(first);
        // Keep draining so the controller never blocks on a full pipe.
        for _ in lines {}
    });
    let mut proc = Proc { name: "swarm-controller".into(), child: Some(child), log };
    let line = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(Ok(line))) => line,
        Ok(_) => {
            let log = proc.log();
            proc.kill9();
            return Err(format!("swarm-controller exited before it was ready:\n{log}"));
        }
        Err(_) => return Err("swarm-controller printed no ready line within 30s".into()),
    };
    let addr = line
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("unexpected controller ready line {line:?}"))?
        .trim()
        .to_string();
    Ok(ControllerProc { proc, addr, repo: repo.to_path_buf(), extra: extra.to_vec() })
}

/// Starts `swarm-sidecar` for `repo` against `controller_url`.
pub fn spawn_sidecar(controller_url: &str, repo: &Path, worker_id: &str, extra: &[&str]) -> Proc {
    let log = log_path(worker_id);
    let child = Command::new(binary("swarm-sidecar"))
        .args(["--controller", controller_url, "--worker-id", worker_id, "--repo"])
        .arg(repo)
        .args(extra)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .expect("starting swarm-sidecar");
    Proc { name: format!("swarm-sidecar {worker_id}"), child: Some(child), log }
}

/// Runs `swarmctl ARGS` against `controller_url` and waits (bounded) for it.
pub fn swarmctl(controller_url: &str, args: &[&str]) -> Output {
    let child = Command::new(binary("swarmctl"))
        .args(args)
        .env("SWARM_CONTROLLER", controller_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting swarmctl");
    wait_output(child, WAIT)
}

/// Waits for a child with a deadline, collecting its output; kills it if late.
pub fn wait_output(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("waiting for the child"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("process {pid} did not finish within {limit:?}");
        }
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

// ---------------------------------------------------------------------------
// The Operator API

pub type Operator = OperatorServiceClient<Channel>;

pub async fn operator(url: &str) -> Operator {
    let channel = Endpoint::from_shared(url.to_string()).unwrap().connect().await.expect("connect");
    OperatorServiceClient::new(channel)
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `limit`
/// naming `what`.
pub async fn poll<T, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match try_poll(limit, check).await {
        Some(v) => v,
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Polls `check` every 50 ms until it returns `Some`; `None` after `limit`.
pub async fn try_poll<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A task's state and attempts, for failure messages.
pub async fn task_report(url: &str, task_id: &str) -> String {
    let Some(mut op) = try_operator(url).await else { return "controller unreachable".into() };
    match op.get_task(v1::GetTaskRequest { task_id: task_id.to_string() }).await {
        Ok(d) => {
            let d = d.into_inner();
            let mut s = String::new();
            if let Some(t) = &d.task {
                let _ = writeln!(s, "{task_id}: {:?} ({})", state_of(t), t.reason);
            }
            for a in &d.attempts {
                let _ = writeln!(
                    s,
                    "  #{} {:?} worker={} exit={} outcome={:?} error={:?} summary={:?}",
                    a.number,
                    v1::AttemptState::try_from(a.state).unwrap_or(v1::AttemptState::Unspecified),
                    a.worker_id,
                    a.exit_code,
                    outcome_of(a),
                    a.error,
                    a.summary
                );
            }
            s
        }
        Err(e) => format!("GetTask {task_id}: {e}"),
    }
}

/// The tasks of a swarm, by task id.
pub async fn tasks(op: &mut Operator, swarm: &str) -> BTreeMap<String, v1::Task> {
    let req = v1::ListTasksRequest { swarm_id: swarm.to_string(), states: vec![] };
    match op.list_tasks(req).await {
        Ok(resp) => resp.into_inner().tasks.into_iter().map(|t| (t.id.clone(), t)).collect(),
        Err(_) => BTreeMap::new(),
    }
}

pub fn state_of(t: &v1::Task) -> v1::TaskState {
    v1::TaskState::try_from(t.state).unwrap_or(v1::TaskState::Unspecified)
}

/// Whether process `pid` is alive (or a zombie not yet reaped).
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// A file-based gate between a test and its worker scripts: workers wait
/// (bounded) for `open()`. Opened on drop, so no worker outlives a test
/// (its tiny directory is kept so a late worker still finds the gate).
pub struct Gate {
    pub path: PathBuf,
}

impl Gate {
    pub fn new() -> Gate {
        let dir = tempfile::Builder::new().prefix("swarm-gate-").tempdir().unwrap().keep();
        Gate { path: dir.join("gate") }
    }

    /// Shell code that waits up to 60 s for the gate.
    pub fn wait_sh(&self) -> String {
        format!(
            "i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
            self.path.display()
        )
    }

    pub fn open(&self) {
        std::fs::write(&self.path, "open").unwrap();
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, "open");
    }
}

/// Waits until `task` of `swarm` is in `state`; returns the task. Reconnects
/// on every poll, so it survives a controller restart.
pub async fn wait_task_state(url: &str, swarm: &str, task: &str, state: v1::TaskState) -> v1::Task {
    let found = try_poll(WAIT, || async {
        let mut op = try_operator(url).await?;
        let all = tasks(&mut op, swarm).await;
        all.get(task).filter(|t| state_of(t) == state).cloned()
    })
    .await;
    match found {
        Some(t) => t,
        None => panic!(
            "timed out after {WAIT:?} waiting for {swarm}/{task} to be {}:\n{}",
            state.as_str_name(),
            task_report(url, &format!("{swarm}/{task}")).await
        ),
    }
}

/// Waits until every task of `swarm` is MERGED (failing fast on FAILED).
pub async fn wait_all_merged(url: &str, swarm: &str) -> BTreeMap<String, v1::Task> {
    poll(&format!("every task of {swarm} to be MERGED"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let all = tasks(&mut op, swarm).await;
        for t in all.values() {
            assert!(
                !matches!(state_of(t), v1::TaskState::Failed | v1::TaskState::Cancelled),
                "task {} ended {:?}: {}",
                t.id,
                state_of(t),
                t.reason
            );
        }
        (!all.is_empty() && all.values().all(|t| state_of(t) == v1::TaskState::Merged)).then_some(all)
    })
    .await
}

pub async fn try_operator(url: &str) -> Option<Operator> {
    let channel = Endpoint::from_shared(url.to_string()).ok()?.connect().await.ok()?;
    Some(OperatorServiceClient::new(channel))
}

/// Submits a plan through the API.
pub async fn create_swarm(url: &str, plan: &str) -> v1::Swarm {
    let mut op = operator(url).await;
    let resp = op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan.to_string() }).await;
    resp.expect("CreateSwarm").into_inner().swarm.expect("swarm")
}

/// Every event of a swarm stored so far (Watch replay, cut at the first
/// quiet moment after `min` events).
pub async fn events(url: &str, swarm: &str, after: u64, min: usize) -> Vec<v1::Event> {
    use tokio_stream::StreamExt as _;
    let mut op = operator(url).await;
    let req = v1::WatchRequest { after_event_id: after, swarm_id: swarm.to_string() };
    let mut stream = op.watch(req).await.expect("Watch").into_inner();
    let mut out = Vec::new();
    loop {
        let wait = if out.len() >= min { Duration::from_millis(300) } else { WAIT };
        match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(Ok(e))) => out.push(e),
            Ok(Some(Err(status))) => panic!("Watch failed: {status}"),
            Ok(None) | Err(_) => return out,
        }
    }
}

// ---------------------------------------------------------------------------
// A controller with sidecars

/// Controller timings short enough for tests that lose sidecars.
pub const FAST_LEASES: &[&str] =
    &["--heartbeat-interval-ms=200", "--lease-ttl-ms=1500", "--lost-grace-ms=100", "--cancel-grace-ms=500"];

/// A controller and `n` sidecars (`w1`..`wn`) on one repository.
pub struct Cluster {
    pub controller: ControllerProc,
    pub sidecars: Vec<Proc>,
}

impl Cluster {
    pub fn start(repo: &TempRepo, sidecars: usize, controller_args: &[&str]) -> Cluster {
        let controller = spawn_controller(repo.path(), controller_args);
        let url = controller.url();
        let sidecars =
            (1..=sidecars).map(|n| spawn_sidecar(&url, repo.path(), &format!("w{n}"), &[])).collect();
        Cluster { controller, sidecars }
    }

    pub fn url(&self) -> String {
        self.controller.url()
    }
}

/// The number of first-parent merges on `branch` made for `swarm/task`
/// (merge subjects name the attempt: `(swarm/task#N)`).
pub fn merges_of(repo: &TempRepo, branch: &str, swarm: &str, task: &str) -> usize {
    let tag = format!("({swarm}/{task}#");
    repo.subjects(branch).iter().filter(|s| s.contains(&tag)).count()
}

/// A task's attempts, through GetTask.
pub async fn attempts(url: &str, task_id: &str) -> Vec<v1::Attempt> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().attempts
}

pub fn outcome_of(a: &v1::Attempt) -> v1::Outcome {
    v1::Outcome::try_from(a.outcome).unwrap_or(v1::Outcome::Unspecified)
}
