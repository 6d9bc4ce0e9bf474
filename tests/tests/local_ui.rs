//! `swarmctl run --ui --notify`: local mode serves the embedded
//! controller's dashboard on loopback, prints its login link before the
//! run's progress, and posts operator webhooks as `swarm-controller` does;
//! a dashboard on a non-loopback address and a bad webhook URL are refused
//! before anything starts.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

#[path = "dashboard/cdp.rs"]
#[allow(dead_code)] // the dashboard test's driver; no screenshot is taken here
mod cdp;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use swarm_tests::{
    Gate, Needs, PlanBuilder, TempRepo, binary, skip_for, state_home, stderr, stdout, task, wait_output,
    wait_until, worker_script,
};

const LIMIT: Duration = Duration::from_secs(120);

/// `swarmctl run --plain --workers 1 EXTRA --repo REPO PLAN`, with the
/// state and runtime directories a test's own.
fn spawn_run(repo: &Path, plan_path: &Path, runtime: &Path, extra: &[&str]) -> Child {
    Command::new(binary("swarmctl"))
        .args(["run", "--plain", "--workers", "1"])
        .args(extra)
        .arg("--repo")
        .arg(repo)
        .arg(plan_path)
        .env("XDG_STATE_HOME", state_home())
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("SWARM_NOTIFY")
        .env_remove("SWARM_NOTIFY_EVENTS")
        .env_remove("SWARM_NOTIFY_SECRET_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A webhook receiver on 127.0.0.1 that keeps each request's JSON body
/// and answers 200.
struct Hooks {
    url: String,
    got: Arc<Mutex<Vec<Value>>>,
}

impl Hooks {
    fn start() -> Hooks {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        // Ends with the test process; each connection is read with a timeout.
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                if let Some(body) = read_body(&mut conn) {
                    sink.lock().unwrap().push(body);
                }
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Hooks { url, got }
    }

    /// Waits (bounded) for a notification named `kind` about `swarm`.
    fn wait_for(&self, kind: &str, swarm: &str) -> Value {
        wait_until(&format!("a {kind} notification for {swarm}"), LIMIT, || {
            self.got
                .lock()
                .unwrap()
                .iter()
                .find(|b| b["notification"] == kind && b["event"]["swarm"] == swarm)
                .cloned()
        })
    }
}

/// One HTTP/1.1 request's body, parsed as JSON.
fn read_body(conn: &mut TcpStream) -> Option<Value> {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = conn.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).ok().filter(|n| *n > 0)?;
        body.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&body).ok()
}

/// A GET of `path` on `addr` with `cookie`: the status line, the headers
/// (lower-cased names) and the body.
fn get(addr: &str, path: &str, cookie: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let cookie = cookie.map(|c| format!("Cookie: {c}\r\n")).unwrap_or_default();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{cookie}Connection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

/// The child's stdout and stderr, line by line, tagged with their stream.
fn lines_of(child: &mut Child) -> mpsc::Receiver<(&'static str, String)> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    for (name, stream) in
        [("stdout", Box::new(out) as Box<dyn std::io::Read + Send>), ("stderr", Box::new(err))]
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send((name, line));
            }
        });
    }
    rx
}

/// Reads lines (bounded in time) until one satisfies `pred`; every line
/// read is kept in `seen`.
fn wait_line(
    rx: &mpsc::Receiver<(&'static str, String)>,
    seen: &mut Vec<(&'static str, String)>,
    what: &str,
    pred: impl Fn(&str, &str) -> bool,
) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((stream, line)) => {
                seen.push((stream, line.clone()));
                if pred(stream, &line) {
                    return line;
                }
            }
            Err(e) => panic!("no {what} ({e}); output so far:\n{}", show(seen)),
        }
    }
}

fn show(seen: &[(&str, String)]) -> String {
    seen.iter().map(|(s, l)| format!("{s}: {l}\n")).collect()
}

/// `swarmctl --controller URL --token-file FILE ARGS`, which must succeed.
fn operator(url: &str, token_file: &str, args: &[&str]) {
    let child = Command::new(binary("swarmctl"))
        .args(["--controller", url, "--token-file", token_file])
        .args(args)
        .env("XDG_STATE_HOME", state_home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, LIMIT);
    assert!(out.status.success(), "swarmctl {args:?}: {}{}", stdout(&out), stderr(&out));
}

#[test]
fn run_serves_the_dashboard_and_posts_webhooks() {
    let gate = Gate::new();
    let hold = format!("{}; echo held > held.txt", gate.wait_sh());
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("held", &hold)]))]);
    let plan = PlanBuilder::new("lui").task(task("held")).task(task("next").deps(&["held"])).build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let hooks = Hooks::start();
    let mut child = spawn_run(repo.path(), &plan_path, dir.path(), &["--ui", "--notify", &hooks.url]);
    let rx = lines_of(&mut child);
    let mut seen = Vec::new();

    // The controller's line names its URL and the operator token's file.
    let controller =
        wait_line(&rx, &mut seen, "controller line", |s, l| s == "stderr" && l.starts_with("controller: "));
    let (url, rest) = controller["controller: ".len()..].split_once(" (operator token: ").unwrap();
    let token_file = rest.trim_end_matches(')').to_string();
    let dashboard =
        wait_line(&rx, &mut seen, "dashboard line", |s, l| s == "stderr" && l.starts_with("dashboard: "));
    let link = dashboard["dashboard: ".len()..].to_string();
    let rest = link.strip_prefix("http://").unwrap_or_else(|| panic!("an http:// link: {link}"));
    let (addr, path) = rest.split_once('/').unwrap();
    assert!(addr.starts_with("127.0.0.1:"), "loopback by default: {link}");
    assert!(path.starts_with("?token=swarm_"), "a login link: {link}");
    assert!(
        !seen.iter().any(|(_, l)| l.contains("swarm lui created")),
        "the link comes before the run's progress:\n{}",
        show(&seen)
    );
    wait_line(&rx, &mut seen, "the held task's start", |s, l| {
        s == "stdout" && l.contains("lui/held#1") && l.contains("attempt.started")
    });

    // The gate is on: no page without the login.
    let (status, _, body) = get(addr, "/", None);
    assert_eq!(status, 401, "{body}");
    let (status, headers, _) = get(addr, &format!("/{path}"), None);
    assert_eq!(status, 303, "the link logs in and redirects");
    let set = headers.iter().find(|(k, _)| k == "set-cookie").map(|(_, v)| v.clone()).unwrap();
    let cookie = set.split(';').next().unwrap().to_string();
    assert!(cookie.starts_with("swarm_token="), "{set}");
    let (status, _, page) = get(addr, "/", Some(&cookie));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<title>swarm</title>"), "the dashboard's page:\n{page}");
    let (status, _, swarm) = get(addr, "/api/swarms/lui", Some(&cookie));
    assert_eq!(status, 200, "{swarm}");
    let swarm: Value = serde_json::from_str(&swarm).unwrap();
    let text = swarm.to_string();
    assert!(text.contains("\"lui\"") && text.contains("\"held\"") && text.contains("\"next\""), "{text}");
    in_chromium(&link, addr, dir.path());

    // A pause while the held task runs is the operator's to hear about.
    operator(url, &token_file, &["pause", "lui", "--reason", "looking"]);
    let paused = hooks.wait_for("swarm.paused", "lui");
    assert!(paused["text"].as_str().unwrap().contains("lui"), "{paused}");
    operator(url, &token_file, &["resume", "lui"]);

    gate.open();
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        while let Ok(line) = rx.try_recv() {
            seen.push(line);
        }
        assert!(Instant::now() < deadline, "the run did not end:\n{}", show(&seen));
        std::thread::sleep(Duration::from_millis(50));
    };
    // The readers end with the pipes.
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.push(line);
    }
    assert_eq!(status.code(), Some(0), "{}", show(&seen));
    let completed = hooks.wait_for("swarm.completed", "lui");
    assert_eq!(completed["event"]["swarm"], "lui", "{completed}");
}

/// The printed link in a real browser: it logs in, and the swarm's page
/// draws both tasks, the held one running; a plan file has no goal line.
fn in_chromium(link: &str, addr: &str, dir: &Path) {
    let chromium = match cdp::find_or_install() {
        Ok(p) => p,
        Err(why) => {
            return skip_for("run_serves_the_dashboard_and_posts_webhooks (Chromium)", Needs::Chromium, &why);
        }
    };
    let mut browser = cdp::Browser::launch(&chromium, &dir.join("chromium.log"));
    browser.navigate(link);
    browser.wait_for(
        "the swarm list after the login",
        "!!document.querySelector('#swarms tr[data-swarm=\"lui\"]')",
        LIMIT,
    );
    browser.navigate(&format!("http://{addr}/#/swarm/lui"));
    browser.wait_for("both tasks drawn", "document.querySelectorAll('#dag .node').length === 2", LIMIT);
    let rows = "[...document.querySelectorAll('#tasks tbody tr')].map(r => r.dataset.task + '=' + r.dataset.state).join(',')";
    assert_eq!(browser.eval(rows), "held=RUNNING,next=PENDING");
    assert_eq!(browser.eval("document.getElementById('goal') === null"), true, "a plan file has no goal");
}

/// A run with `extra` flags on a valid plan and repository, which must be
/// refused as a usage error before anything starts; its stderr.
fn refused(extra: &[&str]) -> String {
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, PlanBuilder::new("no").task(task("a")).build()).unwrap();
    let out = wait_output(spawn_run(repo.path(), &plan_path, dir.path(), extra), LIMIT);
    assert_eq!(out.status.code(), Some(3), "a usage error: {}{}", stdout(&out), stderr(&out));
    assert!(!repo.has("swarm/no/integration"), "nothing ran");
    stderr(&out)
}

#[test]
fn a_dashboard_off_loopback_is_refused_naming_the_flag() {
    let err = refused(&["--ui", "0.0.0.0:0"]);
    assert!(err.contains("--ui 0.0.0.0:0") && err.contains("not a loopback address"), "{err}");
    assert!(!err.contains("dashboard: "), "{err}");
}

#[test]
fn a_bad_webhook_is_refused_as_the_controller_refuses_it() {
    let err = refused(&["--notify", "ftp://hooks.example/T0K3N"]);
    assert!(err.contains("--notify ftp://hooks.example/…: must be an http:// or https:// URL"), "{err}");
    assert!(!err.contains("T0K3N"), "the URL's secret part is not echoed: {err}");
    let err = refused(&["--notify", "http://127.0.0.1:9/h", "--notify-events", "task.questions"]);
    assert!(err.contains("--notify-events task.questions: unknown event"), "{err}");
}
