//! The real binaries as child processes: found, started, killed, reaped.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::WAIT;

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

    /// Waits (polling, bounded by `limit`) for the process to exit on its
    /// own; its exit status, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if status.is_some() || Instant::now() > deadline {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
    env: Vec<(String, String)>,
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
            match try_spawn_controller(&self.repo, &extra, &self.env) {
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
    spawn_controller_env(repo, extra, &[])
}

/// [`spawn_controller`] with extra environment variables.
pub fn spawn_controller_env(repo: &Path, extra: &[&str], env: &[(&str, &str)]) -> ControllerProc {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    try_spawn_controller(repo, &extra, &env).unwrap_or_else(|e| panic!("{e}"))
}

fn try_spawn_controller(
    repo: &Path,
    extra: &[String],
    env: &[(String, String)],
) -> Result<ControllerProc, String> {
    let log = log_path("controller");
    let listen_given = extra.iter().any(|a| a.starts_with("--listen"));
    let mut cmd = Command::new(binary("swarm-controller"));
    if !listen_given {
        cmd.arg("--listen=127.0.0.1:0");
    }
    cmd.arg("--repo").arg(repo).args(extra);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap());
    cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
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
    Ok(ControllerProc { proc, addr, repo: repo.to_path_buf(), extra: extra.to_vec(), env: env.to_vec() })
}

/// Starts `swarm-sidecar` for `repo` against `controller_url`.
pub fn spawn_sidecar(controller_url: &str, repo: &Path, worker_id: &str, extra: &[&str]) -> Proc {
    spawn_sidecar_env(controller_url, repo, worker_id, extra, &[])
}

/// [`spawn_sidecar`] with extra environment variables.
pub fn spawn_sidecar_env(
    controller_url: &str,
    repo: &Path,
    worker_id: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Proc {
    let log = log_path(worker_id);
    let child = Command::new(binary("swarm-sidecar"))
        .args(["--controller", controller_url, "--worker-id", worker_id, "--repo"])
        .arg(repo)
        .args(extra)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .spawn()
        .expect("starting swarm-sidecar");
    Proc { name: format!("swarm-sidecar {worker_id}"), child: Some(child), log }
}

/// `XDG_STATE_HOME` for the `swarmctl run`s of tests: local mode keeps
/// its worktrees there, and a test's belong in the target directory, not
/// in the home of whoever runs the tests.
pub fn state_home() -> std::path::PathBuf {
    crate::claude_cli::target_dir().map_or_else(|_| std::env::temp_dir(), |t| t.join("tmp")).join("xdg-state")
}

/// Runs `swarmctl ARGS` against `controller_url` and waits (bounded) for it.
pub fn swarmctl(controller_url: &str, args: &[&str]) -> Output {
    let child = Command::new(binary("swarmctl"))
        .args(args)
        .env("SWARM_CONTROLLER", controller_url)
        .env("XDG_STATE_HOME", state_home())
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

/// A token's SHA-256 hex, as a tokens file holds it (what `swarmctl token
/// create` prints), computed by `sha256sum` so the tests do not reuse the
/// implementation they check.
pub fn sha256_hex(token: &str) -> String {
    use std::io::Write as _;
    let mut child =
        Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum");
    child.stdin.take().expect("stdin").write_all(token.as_bytes()).expect("writing to sha256sum");
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("sha256sum printed a hash")
        .to_string()
}
