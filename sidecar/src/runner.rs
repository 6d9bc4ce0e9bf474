//! The one helper that spawns worker processes.
//!
//! A worker runs in its own process group with `kill_on_drop`; its stdout and
//! stderr arrive line by line on one channel; stopping it escalates SIGINT →
//! SIGTERM → SIGKILL to the whole group; its exit is mapped in one place
//! ([`ExitInfo::outcome`], which defers to [`Outcome::from_exit`]).

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use swarm_core::Outcome;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Longest line kept from a worker's output; the rest is cut.
pub const MAX_LINE: usize = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("empty command")]
    EmptyCommand,
    #[error("cannot start {program:?}: {source}")]
    Spawn { program: String, source: std::io::Error },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The whole environment: nothing of the sidecar's own is inherited.
    pub env: Vec<(String, String)>,
    /// Set: the process runs inside the worker sandbox.
    pub confinement: Option<crate::sandbox::Confinement>,
}

impl SpawnSpec {
    /// A command for `argv` in `cwd` with exactly `env`, confined by
    /// `confinement` when set: the one way every spawner builds it.
    pub fn command(&self) -> Result<Command, SpawnError> {
        if self.confinement.is_some() {
            // The trampoline is what starts; a missing program must still
            // fail the spawn, as it does unconfined, not exit 127 later.
            self.check_program()?;
        }
        let argv = crate::sandbox::command_line(self.confinement.as_ref(), &self.argv);
        let (program, args) = argv.split_first().ok_or(SpawnError::EmptyCommand)?;
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&self.cwd).env_clear().envs(self.env.iter().map(|(k, v)| (k, v)));
        Ok(cmd)
    }
}

impl SpawnSpec {
    fn check_program(&self) -> Result<(), SpawnError> {
        let program = self.argv.first().ok_or(SpawnError::EmptyCommand)?;
        let found = if program.contains('/') {
            self.cwd.join(program).exists()
        } else {
            let path = self
                .env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_str())
                .unwrap_or("/usr/bin:/bin");
            std::env::split_paths(path).any(|dir| self.cwd.join(dir).join(program).is_file())
        };
        if found {
            return Ok(());
        }
        let source = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        Err(SpawnError::Spawn { program: program.clone(), source })
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    pub fn outcome(self) -> Outcome {
        Outcome::from_exit(self.code, self.signal)
    }

    /// The exit code for the wire: -1 when the process died by a signal.
    pub fn wire_code(self) -> i32 {
        self.code.unwrap_or(-1)
    }
}

impl From<ExitStatus> for ExitInfo {
    fn from(s: ExitStatus) -> Self {
        ExitInfo { code: s.code(), signal: s.signal() }
    }
}

/// A running worker process and the group it leads.
pub struct Worker {
    /// The process; its methods borrow only it, so `lines` can be read meanwhile.
    pub group: Group,
    /// stdout and stderr, one line at a time (lossy UTF-8, newline removed).
    pub lines: mpsc::Receiver<String>,
    readers: Vec<JoinHandle<()>>,
}

/// The leader process of a worker's process group.
pub struct Group {
    child: Child,
    pgid: i32,
    pid: u32,
    exit: Option<ExitInfo>,
}

impl Worker {
    pub fn spawn(spec: &SpawnSpec) -> Result<Worker, SpawnError> {
        let program = spec.argv.first().ok_or(SpawnError::EmptyCommand)?;
        let mut cmd = spec.command()?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child =
            cmd.spawn().map_err(|source| SpawnError::Spawn { program: program.clone(), source })?;
        let pid = child.id().unwrap_or(0);
        let (tx, lines) = mpsc::channel(1024);
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(spawn_reader("stdout", out, tx.clone(), pid));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(spawn_reader("stderr", err, tx, pid));
        }
        Ok(Worker { group: Group { child, pgid: pid as i32, pid, exit: None }, lines, readers })
    }

    pub fn pid(&self) -> u32 {
        self.group.pid
    }

    pub fn pgid(&self) -> i32 {
        self.group.pgid
    }

    pub async fn wait(&mut self) -> ExitInfo {
        self.group.wait().await
    }

    pub fn signal(&self, sig: Signal) {
        self.group.signal(sig)
    }

    pub async fn stop(&mut self, grace: Duration) -> ExitInfo {
        self.group.stop(grace).await
    }

    /// Collects the lines still buffered after exit, bounded in time because a
    /// killed group may leave a pipe open.
    pub async fn drain_lines(&mut self, max_wait: Duration) -> Vec<String> {
        drain_within(&mut self.lines, max_wait).await
    }
}

/// The lines still queued in `lines`, read until it closes or `max_wait`
/// passes (a killed group may leave a pipe open).
pub(crate) async fn drain_within(lines: &mut mpsc::Receiver<String>, max_wait: Duration) -> Vec<String> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + max_wait;
    while let Ok(Some(line)) = tokio::time::timeout_at(deadline, lines.recv()).await {
        out.push(line);
    }
    out
}

impl Group {
    /// Takes over a child spawned with `process_group(0)` (it leads its group).
    pub(crate) fn from_child(child: Child) -> Group {
        let pid = child.id().unwrap_or(0);
        Group { child, pgid: pid as i32, pid, exit: None }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process group id (the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// Waits for the leader to exit; cancel-safe. Afterwards any process left
    /// in the group is killed, so nothing outlives its worker.
    pub async fn wait(&mut self) -> ExitInfo {
        if let Some(e) = self.exit {
            return e;
        }
        let info = match self.child.wait().await {
            Ok(s) => ExitInfo::from(s),
            Err(e) => {
                tracing::warn!(error = %e, "waiting for worker failed");
                ExitInfo { code: None, signal: Some(Signal::SIGKILL as i32) }
            }
        };
        self.exit = Some(info);
        kill_group(self.pgid, Signal::SIGKILL);
        info
    }

    /// Sends `sig` to the whole group; a SIGKILL first goes to every
    /// process below the leader, those that left its group included.
    pub fn signal(&self, sig: Signal) {
        if self.exit.is_none() {
            if sig == Signal::SIGKILL {
                crate::reaper::kill_descendants(self.pid);
            }
            kill_group(self.pgid, sig);
        }
    }

    /// SIGINT, wait `grace`, SIGTERM, wait `grace`, SIGKILL.
    pub async fn stop(&mut self, grace: Duration) -> ExitInfo {
        stop_escalating(self, grace).await
    }
}

/// A process group its owner signals and waits for: a worker run directly,
/// or one under its supervisor.
pub(crate) trait Stoppable {
    fn exited(&self) -> Option<ExitInfo>;
    fn send(&self, sig: Signal);
    fn wait_exit(&mut self) -> impl std::future::Future<Output = ExitInfo> + Send;
}

impl Stoppable for Group {
    fn exited(&self) -> Option<ExitInfo> {
        self.exit
    }
    fn send(&self, sig: Signal) {
        self.signal(sig)
    }
    async fn wait_exit(&mut self) -> ExitInfo {
        self.wait().await
    }
}

/// The one stop sequence: SIGINT, wait `grace`, SIGTERM, wait `grace`,
/// SIGKILL, each to the whole group, ending as soon as it has exited.
pub(crate) async fn stop_escalating(p: &mut impl Stoppable, grace: Duration) -> ExitInfo {
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        if let Some(e) = p.exited() {
            return e;
        }
        p.send(sig);
        if let Ok(e) = tokio::time::timeout(grace, p.wait_exit()).await {
            return e;
        }
    }
    p.send(Signal::SIGKILL);
    p.wait_exit().await
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.exit.is_none() {
            kill_group(self.pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

pub(crate) fn kill_group(pgid: i32, sig: Signal) {
    if pgid <= 1 {
        return;
    }
    if let Err(e) = killpg(Pid::from_raw(pgid), sig)
        && e != nix::errno::Errno::ESRCH
    {
        tracing::warn!(pgid, signal = %sig, error = %e, "killpg failed");
    }
}

/// Whether any process of group `pgid` is still alive (zombies do not count).
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    match killpg(Pid::from_raw(pgid), None) {
        Err(_) => false,
        Ok(()) => group_has_live_member(pgid),
    }
}

/// Looks through /proc for a non-zombie member of the group; assumes alive
/// when /proc cannot be read.
fn group_has_live_member(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return true };
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp ...
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
        let mut f = rest.split_whitespace();
        let state = f.next();
        let _ppid = f.next();
        let pgrp = f.next().and_then(|p| p.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != Some("Z") && state != Some("X") {
            return true;
        }
    }
    false
}

fn spawn_reader<R>(stream: &'static str, r: R, tx: mpsc::Sender<String>, pid: u32) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let span = tracing::debug_span!("worker_output", stream, pid);
    tokio::spawn(
        async move {
            let mut reader = BufReader::new(r);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                            buf.pop();
                        }
                        buf.truncate(MAX_LINE);
                        let line = String::from_utf8_lossy(&buf).into_owned();
                        if tx.send(line).await.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        .instrument(span),
    )
}
