//! The worker's supervising parent, so that a worker outlives its sidecar.
//!
//! The sidecar does not spawn the worker itself: it re-executes its own
//! binary as `<exe> __supervise <exit-file> <log-file> -- <command...>` in a
//! new process group. The supervisor starts the worker in that same group
//! with stdout and stderr appended to the log file, waits for it, and writes
//! its exit (code or signal) atomically to the exit file. A sidecar killed
//! with `kill -9` therefore loses nothing: restarted, it finds the journaled
//! supervisor pid, checks through `/proc/<pid>/cmdline` that the process is
//! still that supervisor (not a reused pid), follows the log and the exit
//! file, and reports the result once.
//!
//! Signals sent to the group (SIGINT → SIGTERM → SIGKILL) reach the worker
//! and everything it started. The supervisor catches SIGINT, SIGTERM and
//! SIGHUP (a caught signal is reset to its default in the exec'd worker) so
//! that it lives to record the worker's exit; SIGKILL ends it too, and the
//! sidecar then reports the signal it sent.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::runner::{ExitInfo, MAX_LINE, SpawnError, SpawnSpec};

/// The hidden first argument that selects supervisor mode.
pub const ARG: &str = "__supervise";
/// How often the log and a re-adopted supervisor are looked at.
const POLL: Duration = Duration::from_millis(100);

/// What the exit file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Set when the worker could not be started at all.
    #[serde(default)]
    pub spawn_error: Option<String>,
}

/// Runs supervisor mode when `argv[1]` is [`ARG`]; returns the process exit
/// code. Call first thing in `main`, before any argument parsing.
pub fn main_if_requested() -> Option<i32> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != ARG) {
        return None;
    }
    // argv: exe __supervise <exit-file> <log-file> -- cmd...
    let (Some(exit_file), Some(log), Some(sep)) = (args.get(2), args.get(3), args.get(4)) else {
        eprintln!("usage: {ARG} <exit-file> <log-file> -- <command...>");
        return Some(2);
    };
    if sep != "--" || args.len() < 6 {
        eprintln!("usage: {ARG} <exit-file> <log-file> -- <command...>");
        return Some(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("supervisor: cannot start the runtime: {e}");
            return Some(1);
        }
    };
    let record = runtime.block_on(supervise(Path::new(log), &args[5..]));
    match write_exit(Path::new(exit_file), &record) {
        Ok(()) => Some(0),
        Err(e) => {
            eprintln!("supervisor: writing {}: {e}", Path::new(exit_file).display());
            Some(1)
        }
    }
}

async fn supervise(log: &Path, argv: &[OsString]) -> ExitRecord {
    use tokio::signal::unix::{SignalKind, signal};
    // Caught, not ignored: the group's stop signals are for the worker.
    let _caught: Vec<_> = [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()]
        .into_iter()
        .filter_map(|k| signal(k).ok())
        .collect();
    let spawn_error = |e: String| ExitRecord { code: None, signal: None, spawn_error: Some(e) };
    let out = match std::fs::OpenOptions::new().create(true).append(true).open(log) {
        Ok(f) => f,
        Err(e) => return spawn_error(format!("cannot open log {}: {e}", log.display())),
    };
    let err = match out.try_clone() {
        Ok(f) => f,
        Err(e) => return spawn_error(format!("cannot open log {}: {e}", log.display())),
    };
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return spawn_error(format!("cannot start {:?}: {e}", argv[0].to_string_lossy())),
    };
    match child.wait().await {
        Ok(s) => {
            let info = ExitInfo::from(s);
            ExitRecord { code: info.code, signal: info.signal, spawn_error: None }
        }
        Err(e) => spawn_error(format!("waiting for the worker: {e}")),
    }
}

fn write_exit(path: &Path, record: &ExitRecord) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let body = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Reads an exit file; None when absent or unreadable (not written yet).
pub fn read_exit(path: &Path) -> Option<ExitRecord> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Whether `pid` is alive and is the supervisor writing `exit_file`.
pub fn is_supervisor(pid: u32, exit_file: &Path) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    if matches!(state, Some("Z") | Some("X")) {
        return false;
    }
    let args: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
    args.get(1).is_some_and(|a| *a == ARG.as_bytes())
        && args.get(2).is_some_and(|a| *a == exit_file.as_os_str().as_encoded_bytes())
}

/// A worker under its supervisor, spawned now or re-adopted after a restart.
pub struct Supervised {
    /// The processes; its methods borrow only it, so `lines` can be read meanwhile.
    pub process: Process,
    /// The worker's output, one line at a time (lossy UTF-8, newline removed).
    pub lines: mpsc::Receiver<String>,
    follower: JoinHandle<()>,
}

/// The supervisor, which leads the worker's process group.
pub struct Process {
    pid: u32,
    /// The supervisor process, when this sidecar process spawned it.
    child: Option<tokio::process::Child>,
    exit_file: PathBuf,
    exit: Option<ExitInfo>,
    spawn_error: Option<String>,
    /// Tells the log reader that no more output will come.
    finished: watch::Sender<bool>,
}

impl Supervised {
    /// Starts `spec` under a supervisor (`exe __supervise ...`).
    pub fn spawn(exe: &Path, spec: &SpawnSpec, exit_file: &Path, log: &Path) -> Result<Self, SpawnError> {
        if spec.argv.is_empty() {
            return Err(SpawnError::EmptyCommand);
        }
        let spawn_err = |source| SpawnError::Spawn { program: exe.display().to_string(), source };
        match std::fs::remove_file(exit_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(spawn_err(e)),
            _ => {}
        }
        let offset = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg(ARG)
            .arg(exit_file)
            .arg(log)
            .arg("--")
            .args(&spec.argv)
            .current_dir(&spec.cwd)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group (the worker joins it), and no kill on drop: it
            // must outlive a crashed sidecar.
            .process_group(0);
        let child = cmd.spawn().map_err(spawn_err)?;
        let pid = child.id().unwrap_or(0);
        Ok(Self::new(pid, Some(child), exit_file, log, offset))
    }

    /// Follows a supervisor started by an earlier sidecar process (alive, or
    /// gone with its exit file written); its log is read from the start.
    pub fn adopt(pid: u32, exit_file: &Path, log: &Path) -> Self {
        Self::new(pid, None, exit_file, log, 0)
    }

    fn new(
        pid: u32,
        child: Option<tokio::process::Child>,
        exit_file: &Path,
        log: &Path,
        offset: u64,
    ) -> Self {
        let (tx, lines) = mpsc::channel(1024);
        let (finished, finished_rx) = watch::channel(false);
        let follower = tokio::spawn(follow(log.to_path_buf(), offset, tx, finished_rx));
        let process = Process {
            pid,
            child,
            exit_file: exit_file.to_path_buf(),
            exit: None,
            spawn_error: None,
            finished,
        };
        Supervised { process, lines, follower }
    }

    /// The supervisor's pid, which is also the process group of the worker.
    pub fn pid(&self) -> u32 {
        self.process.pid
    }

    /// Why the worker could not start, once it was waited for.
    pub fn spawn_error(&self) -> Option<&str> {
        self.process.spawn_error.as_deref()
    }

    pub async fn wait(&mut self) -> ExitInfo {
        self.process.wait().await
    }

    pub async fn stop(&mut self, grace: Duration) -> ExitInfo {
        self.process.stop(grace).await
    }

    /// Collects the output still unread after exit, bounded in time.
    pub async fn drain_lines(&mut self, max_wait: Duration) -> Vec<String> {
        let _ = self.process.finished.send(true);
        crate::runner::drain_within(&mut self.lines, max_wait).await
    }
}

impl Process {
    /// The supervisor's pid, which is also the process group of the worker.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Waits for the worker's exit; cancel-safe. Afterwards any process
    /// left in the group is killed, so nothing outlives its worker.
    pub async fn wait(&mut self) -> ExitInfo {
        if let Some(e) = self.exit {
            return e;
        }
        let supervisor_exit = match &mut self.child {
            Some(c) => c.wait().await.ok().map(ExitInfo::from),
            None => {
                while is_supervisor(self.pid, &self.exit_file) {
                    tokio::time::sleep(POLL).await;
                }
                None
            }
        };
        let info = match read_exit(&self.exit_file) {
            Some(r) => {
                self.spawn_error = r.spawn_error;
                ExitInfo { code: r.code, signal: r.signal }
            }
            // The supervisor died without a record: it was killed with the
            // group (SIGKILL), so the worker was too.
            None => match supervisor_exit {
                Some(ExitInfo { signal: Some(s), .. }) => ExitInfo { code: None, signal: Some(s) },
                _ => ExitInfo { code: None, signal: Some(Signal::SIGKILL as i32) },
            },
        };
        self.exit = Some(info);
        crate::runner::kill_group(self.pid as i32, Signal::SIGKILL);
        let _ = self.finished.send(true);
        info
    }

    /// Sends `sig` to the whole group (supervisor, worker and its children).
    pub fn signal(&self, sig: Signal) {
        if self.exit.is_none() {
            crate::runner::kill_group(self.pid as i32, sig);
        }
    }

    /// SIGINT, wait `grace`, SIGTERM, wait `grace`, SIGKILL.
    pub async fn stop(&mut self, grace: Duration) -> ExitInfo {
        crate::runner::stop_escalating(self, grace).await
    }
}

impl crate::runner::Stoppable for Process {
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

impl Drop for Supervised {
    fn drop(&mut self) {
        // Only the reader stops: the worker's fate is decided by whoever
        // dropped this (a crash must leave it running).
        self.follower.abort();
    }
}

/// Sends the lines appended to `log` after `offset`; once `finished` is set,
/// reads what is left (a last line without newline included) and ends.
async fn follow(log: PathBuf, offset: u64, tx: mpsc::Sender<String>, mut finished: watch::Receiver<bool>) {
    let mut pos = offset;
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let done = *finished.borrow_and_update();
        if let Ok(mut f) = tokio::fs::File::open(&log).await
            && f.seek(std::io::SeekFrom::Start(pos)).await.is_ok()
        {
            let mut buf = Vec::new();
            if let Ok(n) = f.read_to_end(&mut buf).await {
                pos += n as u64;
                partial.extend_from_slice(&buf);
            }
        }
        while let Some(i) = partial.iter().position(|b| *b == b'\n') {
            let rest = partial.split_off(i + 1);
            let line = std::mem::replace(&mut partial, rest);
            if tx.send(to_line(line)).await.is_err() {
                return;
            }
        }
        if done {
            if !partial.is_empty() {
                let _ = tx.send(to_line(std::mem::take(&mut partial))).await;
            }
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = finished.changed() => {}
        }
    }
}

fn to_line(mut raw: Vec<u8>) -> String {
    while raw.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        raw.pop();
    }
    raw.truncate(MAX_LINE);
    String::from_utf8_lossy(&raw).into_owned()
}

/// Finds a live supervisor writing `exit_file` by looking through `/proc`:
/// for a worker whose pid did not reach the journal before a crash.
pub fn find_supervisor(exit_file: &Path) -> Option<u32> {
    let dir = std::fs::read_dir("/proc").ok()?;
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .find(|pid| is_supervisor(*pid, exit_file))
}
