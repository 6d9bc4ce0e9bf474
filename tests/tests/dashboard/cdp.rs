//! A headless Chromium driven over the DevTools protocol through
//! `--remote-debugging-pipe`: JSON messages ended by a NUL byte, written to
//! the browser's fd 3 and read from its fd 4.
//!
//! The pipe rather than `--remote-debugging-port` and a crate such as
//! chromiumoxide: no port to find or race for, no websocket or generated
//! protocol bindings to compile (the handful of commands used here are
//! plain JSON), and the browser's end of the pipe closes when the test's
//! process does, so no browser outlives its test.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Where Chromium is, installing Debian's package when running as root;
/// otherwise why the browser tests cannot run.
pub fn find_or_install() -> Result<PathBuf, String> {
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(locate).clone()
}

fn locate() -> Result<PathBuf, String> {
    if let Some(p) = on_path() {
        return Ok(p);
    }
    if !swarm_tests::is_root() {
        return Err(
            "chromium is not installed and installing it needs root (apt-get install chromium)".into()
        );
    }
    eprintln!("installing chromium (apt-get install -y --no-install-recommends chromium)");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let first = install().map_err(|e| format!("apt-get: {e}"))?;
    if !first.status.success() {
        // A fresh machine may have no package lists yet.
        let _ = Command::new("apt-get").arg("update").output();
        let again = install().map_err(|e| format!("apt-get: {e}"))?;
        if !again.status.success() {
            return Err(format!(
                "apt-get install chromium failed: {}",
                String::from_utf8_lossy(&again.stderr).lines().last().unwrap_or("")
            ));
        }
    }
    on_path().ok_or_else(|| "apt-get installed chromium but it is not on PATH".into())
}

fn on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

pub struct Browser {
    child: Child,
    input: ChildStdin,
    replies: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts the browser and opens one page.
    pub fn launch(chromium: &Path, log: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // sh moves the pipes to fds 3 and 4, where Chromium expects them.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--window-size=1400,1000",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("starting chromium");
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(output);
            let mut buf = Vec::new();
            while reader.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                buf.pop_if(|b| *b == 0);
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    // Replies only: the tests poll the page instead of
                    // following the protocol's events.
                    if v.get("id").is_some() && tx.send(v).is_err() {
                        return;
                    }
                }
                buf.clear();
            }
        });
        let mut b = Browser { child, input, replies, next_id: 0, session: String::new(), _profile: profile };
        let target = b.call("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = b.call("Target.attachToTarget", json!({ "targetId": target_id, "flatten": true }));
        b.session = attached["sessionId"].as_str().expect("sessionId").to_string();
        b
    }

    /// Sends a command (to the page once attached) and waits for its reply.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.input.write_all(&bytes).and_then(|_| self.input.flush()).expect("writing to chromium");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let reply = self.replies.recv_timeout(left).unwrap_or_else(|_| panic!("no reply to {method}"));
            if reply["id"].as_u64() != Some(id) {
                continue;
            }
            if let Some(err) = reply.get("error") {
                panic!("{method} failed: {err}");
            }
            return reply["result"].clone();
        }
    }

    pub fn navigate(&mut self, url: &str) {
        let r = self.call("Page.navigate", json!({ "url": url }));
        assert!(r.get("errorText").is_none(), "navigating to {url}: {r}");
    }

    /// Evaluates `expr` in the page; its value, as JSON.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({ "expression": expr, "returnByValue": true }));
        if let Some(ex) = r.get("exceptionDetails") {
            panic!("evaluating {expr}: {ex}");
        }
        r["result"]["value"].clone()
    }

    /// Polls `expr` until it is true; panics with `what` after `limit`.
    pub fn wait_for(&mut self, what: &str, expr: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.eval(expr) == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                let body = self.eval("document.body ? document.body.innerText.slice(0, 2000) : ''");
                panic!("timed out waiting for {what}; the page shows:\n{}", body.as_str().unwrap_or(""));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the page as it is now.
    pub fn screenshot(&mut self, path: &Path) {
        let r =
            self.call("Page.captureScreenshot", json!({ "format": "png", "captureBeyondViewport": true }));
        let data = r["data"].as_str().expect("screenshot data");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, base64_decode(data)).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (what CDP sends), so the tests need no crate for it.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

#[test]
fn base64_round_trips_a_known_value() {
    assert_eq!(base64_decode("aGVsbG8gd29ybGQ="), b"hello world");
    assert_eq!(base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
}
