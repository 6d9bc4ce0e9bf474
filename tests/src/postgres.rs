//! A real PostgreSQL server for tests: one per test process, started on
//! first use from the machine's binaries (`initdb`, `postgres`), on a
//! private port of 127.0.0.1 and a temporary directory, as an unprivileged
//! user when the tests run as root (Postgres refuses to run as root).
//! Each test gets its own database from [`database`].
//!
//! Where no PostgreSQL can be started, [`database`] records the test as
//! skipped (see `skip`) and returns `None`, and the test returns early;
//! under CI on a machine with PostgreSQL's binaries that fails the test.
//!
//! The server is stopped and its directory removed when the test process
//! exits, by a small shell that owns it and waits for its stdin (held by
//! this process) to close.

use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A database of its own on the shared test server.
pub struct Database {
    pub url: String,
    pub name: String,
    bin: PathBuf,
    port: u16,
    run_as: Option<(u32, u32)>,
}

impl Database {
    /// Runs SQL through `psql` and returns its unaligned output: for a test
    /// to look at or change what the controllers see.
    pub fn sql(&self, sql: &str) -> String {
        let out = command(&self.bin, self.run_as, "psql")
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", "swarm"])
            .args(["-p", &self.port.to_string(), "-d", &self.name, "-c", sql])
            .output()
            .expect("running psql");
        assert!(out.status.success(), "psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

struct Server {
    bin: PathBuf,
    port: u16,
    /// Closing it (at exit) stops the server.
    _stdin: Mutex<ChildStdin>,
    run_as: Option<(u32, u32)>,
}

/// A fresh, empty database, or `None` (with the reason printed) where no
/// PostgreSQL can be started.
pub fn database(test: &str) -> Option<Database> {
    static SERVER: std::sync::OnceLock<Result<Server, String>> = std::sync::OnceLock::new();
    let server = match SERVER.get_or_init(start) {
        Ok(s) => s,
        Err(reason) => {
            crate::skip_for(test, crate::Needs::Postgres, reason);
            return None;
        }
    };
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name: String = format!("t{n}_{test}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .take(60)
        .collect();
    let out = server
        .command("createdb")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-U", "swarm", &name])
        .output()
        .expect("running createdb");
    assert!(out.status.success(), "createdb {name}: {}", String::from_utf8_lossy(&out.stderr));
    Some(Database {
        url: format!("postgres://swarm@127.0.0.1:{}/{name}", server.port),
        name,
        bin: server.bin.clone(),
        port: server.port,
        run_as: server.run_as,
    })
}

impl Server {
    fn command(&self, program: &str) -> Command {
        command(&self.bin, self.run_as, program)
    }
}

fn command(bin: &Path, run_as: Option<(u32, u32)>, program: &str) -> Command {
    let mut cmd = Command::new(bin.join(program));
    cmd.stdin(Stdio::null());
    if let Some((uid, gid)) = run_as {
        use std::os::unix::process::CommandExt as _;
        cmd.uid(uid).gid(gid);
    }
    cmd
}

/// Whether PostgreSQL's binaries are installed (the server may still fail
/// to start).
pub fn installed() -> bool {
    find_bin().is_some()
}

/// Where the PostgreSQL binaries are: beside `initdb` on PATH, else the
/// newest /usr/lib/postgresql/*/bin.
fn find_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("initdb")).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(Result::ok).map(|e| e.path().join("bin").join("initdb")).collect())
        .unwrap_or_default();
    versions.sort();
    versions.reverse();
    on_path
        .into_iter()
        .chain(versions)
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .find(|dir| ["postgres", "createdb", "pg_isready", "psql"].iter().all(|b| dir.join(b).is_file()))
}

/// Root runs the server as `nobody`; anyone else as themselves.
fn unprivileged() -> Option<(u32, u32)> {
    if !crate::is_root() {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = passwd.lines().find(|l| l.starts_with("nobody:")).and_then(|l| {
        let f: Vec<&str> = l.split(':').collect();
        Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
    });
    Some(ids.unwrap_or((65534, 65534)))
}

fn start() -> Result<Server, String> {
    let bin = find_bin().ok_or(
        "no PostgreSQL: initdb, postgres, createdb, pg_isready and psql not found on PATH or in /usr/lib/postgresql/*/bin",
    )?;
    let run_as = unprivileged();
    let dir = tempfile::Builder::new().prefix("swarm-pg-").tempdir().map_err(|e| e.to_string())?.keep();
    if let Some((uid, gid)) = run_as {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    let data = dir.join("data");
    let init = command(&bin, run_as, "initdb")
        .args(["-U", "swarm", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "-D"])
        .arg(&data)
        .current_dir(&dir)
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !init.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&init.stderr)));
    }
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        match launch(&bin, run_as, &dir, &data, port) {
            Ok(stdin) => return Ok(Server { bin, port, _stdin: Mutex::new(stdin), run_as }),
            Err(e) => last = e,
        }
    }
    Err(format!("postgres did not start: {last}"))
}

/// Starts `postgres` under a shell that stops it and removes `dir` when its
/// stdin closes; waits until it accepts connections.
fn launch(
    bin: &Path,
    run_as: Option<(u32, u32)>,
    dir: &Path,
    data: &Path,
    port: u16,
) -> Result<ChildStdin, String> {
    let log = dir.join(format!("postgres-{port}.log"));
    let script = r#"postgres -D "$1" -p "$2" -c listen_addresses=127.0.0.1 -c unix_socket_directories= \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
        >"$3" 2>&1 &
        pg=$!
        read _ignored
        kill -INT "$pg" 2>/dev/null
        wait "$pg"
        rm -rf "$4""#;
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg("sh").arg(data).arg(port.to_string()).arg(&log).arg(dir);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(paths).map_err(|e| e.to_string())?);
    cmd.current_dir(dir).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
    if let Some((uid, gid)) = run_as {
        use std::os::unix::process::CommandExt as _;
        cmd.uid(uid).gid(gid);
    }
    let mut child = cmd.spawn().map_err(|e| format!("starting postgres: {e}"))?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    // Reaped by a thread so the shell never lingers as a zombie.
    std::thread::spawn(move || child.wait());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = command(bin, run_as, "pg_isready")
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return Ok(stdin);
        }
        if Instant::now() > deadline {
            // Closing it would remove the data directory the next try
            // needs; it closes at exit with the others.
            std::mem::forget(stdin);
            return Err(std::fs::read_to_string(&log).unwrap_or_else(|_| "no log".into()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}
