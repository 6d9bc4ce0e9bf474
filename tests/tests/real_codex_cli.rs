//! The real Codex CLI (`codex exec --json`, `codex app-server`) run
//! directly, not through swarm, against the scripted Responses API
//! (`swarm_tests::responses_api`): what it sends and prints for a shell
//! command, a patch, a usage limit, a server error, and how its app-server
//! asks for approvals. These pin the formats the swarm adapter reads.
//!
//! What `codex app-server` 0.147 sends for a turn that runs
//! `exec_command`, then `apply_patch`, then answers (thread started with
//! `sandbox: "danger-full-access"`; deltas left out): `thread/started`,
//! `warning`, `thread/status/changed`, `turn/started`, `item/started` and
//! `item/completed` of the `userMessage`, then per tool `item/started`
//! (`commandExecution` / `fileChange`), the approval request if any,
//! `serverRequest/resolved` after the answer, `item/completed`;
//! `thread/tokenUsage/updated` and `account/rateLimits/updated` after each
//! response, `turn/diff/updated` after the patch, the `agentMessage` item,
//! `turn/completed` (`turn.status` `completed`).
//! - `approvalPolicy: "untrusted"`: `item/commandExecution/requestApproval`
//!   then `item/fileChange/requestApproval` (answered `{"decision":
//!   "accept"}`), each between `thread/status/changed` notifications.
//! - `"on-request"` and `"never"`: no server requests (with the sandbox
//!   off nothing needs escalating).
//! - `request_user_input` is offered in every request but its description
//!   says "only available in Plan mode"; with `-c
//!   features.default_mode_request_user_input=true` (under development) a
//!   call in the default mode reaches the client as
//!   `item/tool/requestUserInput` (`params.questions[].id`), answered
//!   `{"answers": {"<id>": {"answers": ["..."]}}}`; with `approvalPolicy`
//!   `"never"` too.
//!
//! Where the CLI cannot be installed (no python3, pip or network) each test
//! prints why and returns; under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use swarm_tests::RealCodex;
use swarm_tests::responses_api::{Script, Step, Usage, marker, unix_now_s};

/// Each run of the CLI ends well within this.
const RUN_LIMIT: Duration = Duration::from_secs(45);

/// The output of one `codex exec --json` run.
struct Exec {
    success: bool,
    events: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Exec {
    fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }

    fn dump(&self) -> String {
        format!("success {}\nstdout:\n{}\nstderr:\n{}", self.success, self.stdout, self.stderr)
    }
}

/// `codex exec --json` in `dir` with `prompt` on stdin and `extra` flags.
fn exec(codex: &RealCodex, dir: &Path, prompt: &str, extra: &[&str]) -> Exec {
    let mut cmd = Command::new(&codex.cli.path);
    cmd.args(["exec", "--json", "--skip-git-repo-check", "-C"])
        .arg(dir)
        .args(codex.args())
        .args(extra)
        .arg("-")
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(codex.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(prompt.as_bytes()).unwrap();
    }
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(RUN_LIMIT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("codex exec did not finish within {RUN_LIMIT:?}\n{}", codex.api.summary());
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let events = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    Exec {
        success: out.status.success(),
        events,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn prompt(script: &str, text: &str) -> String {
    format!("{text}\n\n{}\n", marker(script))
}

#[test]
fn exec_command_runs_and_the_turn_reports_the_scripted_usage() {
    let first = Usage { input: 1200, cached: 1000, output: 30, reasoning: 10 };
    let second = Usage { input: 1300, cached: 1100, output: 20, reasoning: 0 };
    let steps = vec![
        Step::exec("printf hi > out.txt").think("writing the file").usage(first),
        Step::text("Wrote out.txt.").usage(second),
    ];
    let test = swarm_tests::current_test();
    let Some(codex) = RealCodex::start(&test, vec![Script::new("exec", steps)]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = exec(&codex, dir.path(), &prompt("exec", "Write hi to out.txt."), &[]);
    assert!(run.success, "{}\n{}", run.dump(), codex.api.summary());
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "hi");

    let commands: Vec<&Value> = run
        .of_type("item.completed")
        .into_iter()
        .filter(|e| e["item"]["type"] == "command_execution")
        .collect();
    assert_eq!(commands.len(), 1, "{}", run.dump());
    assert_eq!(commands[0]["item"]["exit_code"], 0, "{}", run.dump());
    let messages: Vec<&Value> =
        run.of_type("item.completed").into_iter().filter(|e| e["item"]["type"] == "agent_message").collect();
    assert_eq!(messages.last().unwrap()["item"]["text"], "Wrote out.txt.");

    let usage = &run.of_type("turn.completed")[0]["usage"];
    eprintln!("turn.completed usage: {usage}");
    assert_eq!(usage["input_tokens"], first.input + second.input, "{usage}");
    assert_eq!(usage["cached_input_tokens"], first.cached + second.cached, "{usage}");
    assert_eq!(usage["output_tokens"], first.output + second.output, "{usage}");

    let requests = codex.api.requests_of("exec");
    assert_eq!(
        requests.iter().map(|r| r.step).collect::<Vec<_>>(),
        [Some(0), Some(1)],
        "{}",
        codex.api.summary()
    );
    let last = requests.last().unwrap();
    assert!(last.body.get("previous_response_id").is_none_or(Value::is_null), "whole input resent");
    assert_eq!(last.body["stream"], true);
    let outputs = last.call_outputs();
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].tool, "exec_command");
    eprintln!("tools offered: {:?}", last.tools());
    eprintln!("exec_command output: {:?}", outputs[0].output);
}

#[test]
fn apply_patch_creates_a_file() {
    let patch = "*** Begin Patch\n*** Add File: notes.txt\n+first line\n+second line\n*** End Patch\n";
    let steps = vec![Step::apply_patch(patch), Step::text("Added notes.txt.")];
    let test = swarm_tests::current_test();
    let Some(codex) = RealCodex::start(&test, vec![Script::new("patch", steps)]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = exec(&codex, dir.path(), &prompt("patch", "Add notes.txt."), &[]);
    assert!(run.success, "{}\n{}", run.dump(), codex.api.summary());
    assert_eq!(std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(), "first line\nsecond line\n");
    let changes: Vec<&Value> =
        run.of_type("item.completed").into_iter().filter(|e| e["item"]["type"] == "file_change").collect();
    assert_eq!(changes.len(), 1, "{}", run.dump());
    eprintln!("file_change: {}", changes[0]);
    let outputs = codex.api.requests_of("patch").last().unwrap().call_outputs();
    assert_eq!(outputs[0].tool, "apply_patch", "{outputs:?}");
}

#[test]
fn a_usage_limit_ends_the_turn_naming_the_reset() {
    let reset = unix_now_s() + 3 * 3600;
    let test = swarm_tests::current_test();
    let Some(codex) = RealCodex::start(&test, vec![Script::new("limit", vec![Step::usage_limit(reset)])])
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = exec(&codex, dir.path(), &prompt("limit", "Do something."), &[]);
    eprintln!("{}", run.dump());
    assert!(!run.success, "{}", run.dump());
    let failed = run.of_type("turn.failed");
    assert_eq!(failed.len(), 1, "{}", run.dump());
    let message = failed[0]["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("You've hit your usage limit."), "{message}");
    assert!(message.contains("try again at"), "{message}");
    assert_eq!(codex.api.requests_of("limit").len(), 1, "a usage limit is not retried");
}

#[test]
fn a_server_error_fails_the_turn() {
    let test = swarm_tests::current_test();
    let Some(codex) = RealCodex::start(&test, vec![Script::new("boom", vec![Step::server_error()])]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = exec(&codex, dir.path(), &prompt("boom", "Do something."), &[]);
    eprintln!("{}", run.dump());
    assert!(!run.success, "{}", run.dump());
    assert_eq!(run.of_type("turn.failed").len(), 1, "{}", run.dump());
}

#[test]
fn a_malformed_stream_fails_the_turn() {
    let test = swarm_tests::current_test();
    let Some(codex) = RealCodex::start(&test, vec![Script::new("bad", vec![Step::Malformed])]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = exec(&codex, dir.path(), &prompt("bad", "Do something."), &[]);
    eprintln!("{}", run.dump());
    assert!(!run.success, "{}", run.dump());
    assert_eq!(run.of_type("turn.failed").len(), 1, "{}", run.dump());
}

/// `codex app-server` on pipes: one JSON-RPC message per line each way.
struct AppServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

impl AppServer {
    fn start(codex: &RealCodex, extra: &[&str]) -> AppServer {
        let mut child = Command::new(&codex.cli.path)
            .arg("app-server")
            .args(extra)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .envs(codex.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        AppServer { child, stdin, lines, next_id: 1 }
    }

    fn send(&mut self, msg: &Value) {
        use std::io::Write as _;
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request; its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message, within [`RUN_LIMIT`].
    fn next(&mut self) -> Value {
        let line = self.lines.recv_timeout(RUN_LIMIT).expect("a message from codex app-server");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Reads until the response to `id`, answering nothing else; its result.
    fn result_of(&mut self, id: u64) -> Value {
        for _ in 0..1000 {
            let m = self.next();
            if m["id"] == id && m.get("method").is_none() {
                assert!(m.get("error").is_none(), "request {id} failed: {m}");
                return m["result"].clone();
            }
        }
        panic!("no response to request {id}");
    }

    /// Runs one turn of `thread` to `turn/completed`, accepting every
    /// approval; the methods of the server's requests and notifications
    /// (deltas left out), in order.
    fn turn(&mut self, thread: &str, text: &str) -> Vec<String> {
        let input = json!([{"type": "text", "text": text, "text_elements": []}]);
        let id = self.request("turn/start", json!({"threadId": thread, "input": input}));
        let mut seen = Vec::new();
        for _ in 0..2000 {
            let m = self.next();
            let Some(method) = m["method"].as_str() else {
                assert!(m["id"] != id || m.get("error").is_none(), "turn/start failed: {m}");
                continue;
            };
            if method.ends_with("/delta") || method.starts_with("codex/event") {
                continue;
            }
            let label = match method {
                "item/started" | "item/completed" => format!("{method} {}", m["params"]["item"]["type"]),
                _ => method.to_string(),
            };
            seen.push(label);
            if let Some(req) = m.get("id") {
                let result = match method {
                    "item/tool/requestUserInput" => {
                        let q = m["params"]["questions"][0]["id"].as_str().unwrap_or("q").to_string();
                        json!({"answers": {q: {"answers": ["yes"]}}})
                    }
                    _ => json!({"decision": "accept"}),
                };
                self.send(&json!({"jsonrpc": "2.0", "id": req, "result": result}));
            }
            if method == "turn/completed" {
                assert_eq!(m["params"]["turn"]["status"], "completed", "{m}");
                return seen;
            }
        }
        panic!("turn of {thread} did not complete: {seen:?}");
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The provider overrides as `thread/start`'s `config`.
fn thread_config(codex: &RealCodex) -> Value {
    let mut config = serde_json::Map::new();
    for (k, v) in codex.provider_config() {
        let value = match v.as_str() {
            "false" => json!(false),
            "0" => json!(0),
            _ if v.starts_with('"') => json!(v.trim_matches('"')),
            _ => {
                let table: Value = json!({
                    "name": swarm_tests::CODEX_PROVIDER,
                    "base_url": codex.api.base_url(),
                    "wire_api": "responses",
                    "env_key": swarm_tests::CODEX_KEY_ENV,
                });
                table
            }
        };
        config.insert(k, value);
    }
    Value::Object(config)
}

#[test]
fn app_server_asks_for_approvals_by_policy() {
    let patch = "*** Begin Patch\n*** Add File: b.txt\n+patched\n*** End Patch\n";
    let script = |name: &str| {
        Script::new(
            name,
            vec![Step::exec("printf hi > a.txt"), Step::apply_patch(patch), Step::text("Done.")],
        )
    };
    let question = json!({"questions": [{"id": "go", "header": "Go?", "question": "Go on?",
        "options": [{"label": "yes (Recommended)", "description": "go"}, {"label": "no", "description": "stop"}]}]});
    let scripts = vec![
        script("untrusted"),
        script("on-request"),
        script("never"),
        Script::new("ask", vec![Step::call("request_user_input", question), Step::text("Asked.")]),
    ];
    let test = swarm_tests::current_test();
    let Some(codex) = RealCodex::start(&test, scripts) else { return };
    let mut app = AppServer::start(&codex, &["-c", "features.default_mode_request_user_input=true"]);
    let init =
        json!({"clientInfo": {"name": "swarm-tests", "title": null, "version": "0"}, "capabilities": null});
    let id = app.request("initialize", init);
    app.result_of(id);
    app.send(&json!({"jsonrpc": "2.0", "method": "initialized"}));
    for policy in ["untrusted", "on-request", "never", "ask"] {
        let dir = tempfile::tempdir().unwrap();
        let params = json!({
            "cwd": dir.path(), "model": swarm_tests::CODEX_MODEL, "sandbox": "danger-full-access",
            "approvalPolicy": if policy == "ask" { "never" } else { policy }, "config": thread_config(&codex),
        });
        let id = app.request("thread/start", params);
        let thread = app.result_of(id)["thread"]["id"].as_str().unwrap().to_string();
        let seen = app.turn(&thread, &format!("Go.\n\n{}", marker(policy)));
        eprintln!("{policy}: {seen:?}");
        let requests: Vec<&str> = seen
            .iter()
            .map(String::as_str)
            .filter(|m| m.ends_with("/requestApproval") || m.ends_with("/requestUserInput"))
            .collect();
        let expected: &[&str] = match policy {
            "untrusted" => &["item/commandExecution/requestApproval", "item/fileChange/requestApproval"],
            "ask" => &["item/tool/requestUserInput"],
            _ => &[],
        };
        assert_eq!(requests, expected, "{policy}: {seen:?}");
        assert_eq!(seen.contains(&"serverRequest/resolved".to_string()), !expected.is_empty(), "{seen:?}");
        if policy != "ask" {
            assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "hi", "{seen:?}");
            assert_eq!(std::fs::read_to_string(dir.path().join("b.txt")).unwrap(), "patched\n", "{seen:?}");
        }
    }
    eprintln!("{}", codex.api.summary());
}
