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
//! Between attempts the sidecar keeps one supervisor started ahead of time,
//! `<exe> __supervise <exit-file> --standby`, which reads the next worker's
//! command (log file, working directory, argv, environment) from its stdin
//! ([`StandbySlot`]): the Assign then waits only for the worker's own exec,
//! not for this binary to be executed, loaded and started.
//!
//! Signals sent to the group (SIGINT → SIGTERM → SIGKILL) reach the worker
//! and everything it started. The supervisor catches SIGINT, SIGTERM and
//! SIGHUP (a caught signal is reset to its default in the exec'd worker) so
//! that it lives to record the worker's exit; SIGKILL ends it too, and the
//! sidecar then reports the signal it sent.
//!
//! An attempt's processes end with it. The supervisor is a child
//! subreaper, so what the worker starts stays below it even after a
//! `setsid` or a double fork (out of the group's reach); once the worker
//! has exited, the supervisor kills every process still below it and reaps
//! them before it writes the exit ([`crate::reaper`]). The sidecar's SIGKILL
//! does the same walk below the supervisor before it kills the group, and
//! an attempt with a cgroup is also ended with `cgroup.kill`
//! ([`crate::sandbox::cgroup`]).

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
/// In place of the log file: a standby that reads its command from stdin.
const STANDBY_ARG: &str = "--standby";
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
    crate::harden_process();
    const USAGE: &str = "<exit-file> <log-file> -- <command...> | <exit-file> --standby";
    // argv: exe __supervise <exit-file> <log-file> -- cmd...
    //   or: exe __supervise <exit-file> --standby (the command comes on stdin)
    let standby = args.len() == 4 && args[3] == STANDBY_ARG;
    let (Some(exit_file), Some(log), Some(sep)) = (args.get(2), args.get(3), args.get(4)) else {
        if !standby {
            eprintln!("usage: {ARG} {USAGE}");
            return Some(2);
        }
        return run_standby(Path::new(&args[2]));
    };
    if sep != "--" || args.len() < 6 {
        eprintln!("usage: {ARG} {USAGE}");
        return Some(2);
    }
    let command = Command { log: PathBuf::from(log), argv: args[5..].to_vec(), cwd: None, env: Vec::new() };
    supervise_to_end(Path::new(exit_file), command)
}

/// A standby supervisor: waits for its command on stdin; a sidecar that
/// ends (or drops it) without sending one closes the pipe, and it leaves
/// without an exit file, as nothing ran.
fn run_standby(exit_file: &Path) -> Option<i32> {
    use std::io::Read as _;
    let mut raw = Vec::new();
    if let Err(e) = std::io::stdin().take(MAX_COMMAND as u64 + 1).read_to_end(&mut raw) {
        eprintln!("supervisor: reading the command: {e}");
        return Some(1);
    }
    if raw.is_empty() {
        return Some(0);
    }
    match Command::decode(&raw) {
        Ok(command) => supervise_to_end(exit_file, command),
        Err(e) => {
            let record = ExitRecord { code: None, signal: None, spawn_error: Some(e) };
            Some(if write_exit(exit_file, &record).is_ok() { 0 } else { 1 })
        }
    }
}

fn supervise_to_end(exit_file: &Path, command: Command) -> Option<i32> {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("supervisor: cannot start the runtime: {e}");
            return Some(1);
        }
    };
    let record = runtime.block_on(supervise(&command));
    match write_exit(exit_file, &record) {
        Ok(()) => Some(0),
        Err(e) => {
            eprintln!("supervisor: writing {}: {e}", Path::new(exit_file).display());
            Some(1)
        }
    }
}

/// What a supervisor runs: from its arguments, or (a standby) from stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Command {
    log: PathBuf,
    argv: Vec<OsString>,
    /// Set for a standby: it was started before the worktree was known.
    cwd: Option<PathBuf>,
    /// Set for a standby: added to the environment it started with.
    env: Vec<(OsString, OsString)>,
}

/// Largest command a standby accepts (argv and environment included).
const MAX_COMMAND: usize = 4 << 20;

/// The wire form of a standby's command: NUL-separated fields, so that
/// any path, argument or variable passes unchanged. `log NUL cwd NUL argc
/// NUL args... NUL (key NUL value NUL)*`.
impl Command {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut field = |b: &[u8]| {
            out.extend_from_slice(b);
            out.push(0);
        };
        field(self.log.as_os_str().as_encoded_bytes());
        field(self.cwd.as_deref().unwrap_or(Path::new("")).as_os_str().as_encoded_bytes());
        field(self.argv.len().to_string().as_bytes());
        for a in &self.argv {
            field(a.as_encoded_bytes());
        }
        for (k, v) in &self.env {
            field(k.as_encoded_bytes());
            field(v.as_encoded_bytes());
        }
        out
    }

    fn decode(raw: &[u8]) -> Result<Command, String> {
        use std::os::unix::ffi::OsStrExt as _;
        if raw.len() > MAX_COMMAND {
            return Err(format!("standby command: longer than {MAX_COMMAND} bytes"));
        }
        let body = raw.strip_suffix(&[0]).ok_or("standby command: must end with NUL")?;
        let mut fields = body.split(|b| *b == 0).map(|f| std::ffi::OsStr::from_bytes(f).to_os_string());
        let mut next = |what: &str| fields.next().ok_or(format!("standby command: no {what}"));
        let log = PathBuf::from(next("log file")?);
        let cwd = Some(PathBuf::from(next("working directory")?)).filter(|c| !c.as_os_str().is_empty());
        let argc: usize = next("argument count")?
            .to_str()
            .and_then(|n| n.parse().ok())
            .ok_or("standby command: argument count must be a number")?;
        if argc == 0 || log.as_os_str().is_empty() {
            return Err("standby command: log file and command must not be empty".into());
        }
        let argv = (0..argc).map(|_| next("argument")).collect::<Result<Vec<_>, _>>()?;
        let mut env = Vec::new();
        while let Ok(k) = next("") {
            let v = next("value of an environment variable")?;
            if k.is_empty() || k.as_bytes().contains(&b'=') {
                return Err(format!("standby command: bad variable name {k:?}"));
            }
            env.push((k, v));
        }
        Ok(Command { log, argv, cwd, env })
    }
}

async fn supervise(command: &Command) -> ExitRecord {
    let (log, argv) = (command.log.as_path(), command.argv.as_slice());
    use tokio::signal::unix::{SignalKind, signal};
    let spawn_error = |e: String| ExitRecord { code: None, signal: None, spawn_error: Some(e) };
    // What the worker orphans (a double fork, `setsid`) is reparented here
    // instead of to init, so that it ends with the attempt.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return spawn_error(format!("cannot become the worker's subreaper: {e}"));
    }
    // Caught, not ignored: the group's stop signals are for the worker.
    let _caught: Vec<_> = [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()]
        .into_iter()
        .filter_map(|k| signal(k).ok())
        .collect();
    // Before the spawn, so that no exit goes unnoticed.
    let mut exited = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => return spawn_error(format!("cannot watch for the worker's exit: {e}")),
    };
    let out = match crate::worker_files::append(log) {
        Ok(f) => f,
        Err(e) => return spawn_error(format!("cannot open log {}: {e}", log.display())),
    };
    let err = match out.try_clone() {
        Ok(f) => f,
        Err(e) => return spawn_error(format!("cannot open log {}: {e}", log.display())),
    };
    // A std child, reaped below with every orphan that comes here: tokio
    // would wait for its own child only.
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err);
    if let Some(cwd) = &command.cwd {
        cmd.current_dir(cwd);
    }
    cmd.envs(command.env.iter().map(|(k, v)| (k, v)));
    let worker = match cmd.spawn() {
        Ok(c) => nix::unistd::Pid::from_raw(c.id() as i32),
        Err(e) => return spawn_error(format!("cannot start {:?}: {e}", argv[0].to_string_lossy())),
    };
    let status = loop {
        match reap_children(Some(worker)) {
            Reaped::Worker(info) => break Ok(info),
            Reaped::NoChildren => break Err("the worker's exit status was lost".to_string()),
            Reaped::Running => {}
        }
        tokio::select! {
            _ = exited.recv() => {}
            // SIGCHLDs coalesce; a missed one costs at most this.
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    // The worker is gone: so is everything it started, before its exit is
    // on record.
    crate::reaper::kill_descendants(std::process::id());
    reap_remaining(Duration::from_secs(5));
    match status {
        Ok(info) => ExitRecord { code: info.code, signal: info.signal, spawn_error: None },
        Err(e) => spawn_error(e),
    }
}

/// What one round of reaping found.
enum Reaped {
    Worker(ExitInfo),
    Running,
    NoChildren,
}

/// Reaps every child that has exited (the worker, or an orphan reparented
/// to this subreaper); the worker's exit once it is among them.
fn reap_children(worker: Option<nix::unistd::Pid>) -> Reaped {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let mut found = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if Some(pid) == worker => {
                found = Some(ExitInfo { code: Some(code), signal: None })
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) if Some(pid) == worker => {
                found = Some(ExitInfo { code: None, signal: Some(sig as i32) })
            }
            Ok(WaitStatus::StillAlive) => return found.map_or(Reaped::Running, Reaped::Worker),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return found.map_or(Reaped::NoChildren, Reaped::Worker),
        }
    }
}

/// Reaps the children left after [`crate::reaper::kill_descendants`], for
/// at most `max_wait` (a process in uninterruptible sleep dies late).
fn reap_remaining(max_wait: Duration) {
    let deadline = std::time::Instant::now() + max_wait;
    while matches!(reap_children(None), Reaped::Running) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn write_exit(path: &Path, record: &ExitRecord) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let body = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let mut f = crate::worker_files::create(&tmp)?;
    f.write_all(&body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Reads an exit file; None when absent or unreadable (not written yet).
pub fn read_exit(path: &Path) -> Option<ExitRecord> {
    serde_json::from_slice(&crate::worker_files::read(path, 64 * 1024).ok()?).ok()
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
            .args(crate::sandbox::command_line(spec.confinement.as_ref(), &spec.argv))
            .current_dir(&spec.cwd)
            // The worker inherits the supervisor's environment: exactly its own.
            .env_clear()
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

    /// Sends `sig` to the whole group (supervisor, worker and its children);
    /// a SIGKILL first goes to every process below the supervisor, those
    /// that left the group included, while the supervisor still holds
    /// them.
    pub fn signal(&self, sig: Signal) {
        if self.exit.is_none() {
            if sig == Signal::SIGKILL {
                crate::reaper::kill_descendants(self.pid);
            }
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

/// A supervisor started ahead of its worker, waiting for the command on
/// its stdin. Starting the supervisor (executing this large binary,
/// loading it, starting its runtime) took a few milliseconds, more on a
/// busy machine, between an Assign and the worker's first instruction;
/// a standby made while the sidecar is idle leaves only the worker's own
/// exec on that path. It is the same supervisor afterwards (its command
/// line names the same exit file, so a restarted sidecar adopts it).
struct Standby {
    child: tokio::process::Child,
    exit_file: PathBuf,
}

impl Standby {
    fn spawn(exe: &Path, exit_file: &Path) -> Result<Standby, SpawnError> {
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg(ARG)
            .arg(exit_file)
            .arg(STANDBY_ARG)
            // Nothing of the sidecar's environment: the worker's comes with its command.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // As `Supervised::spawn`: its own group, no kill on drop (its
            // stdin closing ends it while it waits).
            .process_group(0);
        let child =
            cmd.spawn().map_err(|source| SpawnError::Spawn { program: exe.display().to_string(), source })?;
        Ok(Standby { child, exit_file: exit_file.to_path_buf() })
    }

    /// Hands it `spec`; an error leaves nothing running (the caller starts
    /// a new supervisor instead).
    async fn start(mut self, spec: &SpawnSpec, log: &Path) -> std::io::Result<Supervised> {
        use tokio::io::AsyncWriteExt as _;
        if self.child.try_wait()?.is_some() {
            return Err(std::io::Error::other("the standby supervisor has exited"));
        }
        match std::fs::remove_file(&self.exit_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let offset = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
        let command = Command {
            log: log.to_path_buf(),
            argv: crate::sandbox::command_line(spec.confinement.as_ref(), &spec.argv),
            cwd: Some(spec.cwd.clone()),
            env: spec.env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect(),
        };
        let mut stdin = self.child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin"))?;
        // Closing stdin is what tells it the command is complete.
        stdin.write_all(&command.encode()).await?;
        drop(stdin);
        let pid =
            self.child.id().ok_or_else(|| std::io::Error::other("the standby supervisor has exited"))?;
        Ok(Supervised::new(pid, Some(self.child), &self.exit_file, log, offset))
    }
}

/// A sidecar's standby supervisor, kept across attempts: taken by the next
/// worker start, made again once an attempt is over.
#[derive(Clone, Default)]
pub struct StandbySlot(std::sync::Arc<std::sync::Mutex<SlotState>>);

#[derive(Default)]
struct SlotState {
    ready: Option<Standby>,
    /// The exit file of the last start: the worktree's, for the next one.
    exit_file: Option<PathBuf>,
}

impl std::fmt::Debug for StandbySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("StandbySlot")
            .field("ready", &s.ready.as_ref().and_then(|r| r.child.id()))
            .field("exit_file", &s.exit_file)
            .finish()
    }
}

impl StandbySlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `spec` under the standby supervisor when one waits for this
    /// exit file, otherwise under a new supervisor (`exe __supervise ...`).
    pub async fn start(
        &self,
        exe: &Path,
        spec: &SpawnSpec,
        exit_file: &Path,
        log: &Path,
    ) -> Result<Supervised, SpawnError> {
        let ready = {
            let mut s = self.lock();
            s.exit_file = Some(exit_file.to_path_buf());
            s.ready.take()
        };
        if let Some(standby) = ready.filter(|r| r.exit_file == exit_file) {
            if spec.argv.is_empty() {
                return Err(SpawnError::EmptyCommand);
            }
            match standby.start(spec, log).await {
                Ok(w) => return Ok(w),
                Err(e) => {
                    tracing::info!(error = %e, "the standby supervisor could not take the worker; starting another")
                }
            }
        }
        Supervised::spawn(exe, spec, exit_file, log)
    }

    /// Makes the next standby (for the exit file of the last start) unless
    /// one is waiting; a failure only means the next start makes its own.
    pub fn refill(&self, exe: &Path) {
        let mut s = self.lock();
        if s.ready.as_mut().is_some_and(|r| matches!(r.child.try_wait(), Ok(None))) {
            return;
        }
        let Some(exit_file) = s.exit_file.clone() else { return };
        match Standby::spawn(exe, &exit_file) {
            Ok(r) => s.ready = Some(r),
            Err(e) => {
                s.ready = None;
                tracing::info!(error = %e, "no standby supervisor; the next worker starts its own");
            }
        }
    }

    /// The standby's pid, when one is waiting.
    pub fn ready_pid(&self) -> Option<u32> {
        self.lock().ready.as_ref().and_then(|r| r.child.id())
    }
}

/// Finds a live supervisor writing `exit_file` by looking through `/proc`:
/// for a worker whose pid did not reach the journal before a crash.
pub fn find_supervisor(exit_file: &Path) -> Option<u32> {
    let dir = std::fs::read_dir("/proc").ok()?;
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .find(|pid| is_supervisor(*pid, exit_file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_command_survives_its_wire_form() {
        let c = Command {
            log: PathBuf::from("/w/.swarm/logs/t-1.log"),
            argv: vec!["bash".into(), "-c".into(), "echo 'a b'; true".into(), String::new().into()],
            cwd: Some(PathBuf::from("/w/work tree")),
            env: vec![("A".into(), "1=2".into()), ("EMPTY".into(), "".into())],
        };
        assert_eq!(Command::decode(&c.encode()), Ok(c.clone()));
        let bare = Command { cwd: None, env: Vec::new(), ..c };
        assert_eq!(Command::decode(&bare.encode()), Ok(bare));
    }

    #[test]
    fn a_malformed_standby_command_is_refused_naming_the_field() {
        let cases: [(&[u8], &str); 6] = [
            (b"log\0/w\0", "argument count"),
            (b"log\0/w\0x\0sh\0", "argument count must be a number"),
            (b"log\0/w\x002\0sh\0", "no argument"),
            (b"\0/w\x001\0sh\0", "must not be empty"),
            (b"log\0/w\x001\0sh\0K\0", "value of an environment variable"),
            (b"log\0/w\x001\0sh\0K=V\0v\0", "bad variable name"),
        ];
        for (raw, want) in cases {
            let err = Command::decode(raw).expect_err("refused");
            assert!(err.contains(want), "{raw:?}: {err}");
        }
        assert!(Command::decode(b"log\0/w\x001\0sh").expect_err("no NUL").contains("must end with NUL"));
    }
}
