//! swarm's MCP tools against the real binaries: an agent's MCP client
//! talking JSON-RPC to `swarmctl mcp` over stdio, and to the controller's
//! `/mcp` (Streamable HTTP) with the Operator API's credentials.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, binary, sha256_hex, spawn_controller, task, worker_script,
};

const TOOLS: [&str; 12] = [
    "answer",
    "cancel",
    "check_plan",
    "create_swarm",
    "describe_task",
    "land",
    "list_tasks",
    "message",
    "report",
    "retry",
    "review",
    "wait",
];

/// An MCP client over a child's stdio, one request at a time.
struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Stdio_ {
    fn start(url: &str) -> Stdio_ {
        let mut child = Command::new(binary("swarmctl"))
            .args(["--controller", url, "mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = Stdio_ { child, stdin, stdout, next_id: 1 };
        let init = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "swarm", "{init}");
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn send(&mut self, msg: &Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "swarmctl mcp closed its output");
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// A tool's result: (is_error, structured content or text).
    fn call(&mut self, tool: &str, args: Value) -> (bool, Value) {
        let reply = self.request("tools/call", json!({"name": tool, "arguments": args}));
        tool_result(&reply)
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tool_result(reply: &Value) -> (bool, Value) {
    let result = &reply["result"];
    assert!(result.is_object(), "not a tool result: {reply}");
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let value = match &result["structuredContent"] {
        Value::Null => Value::String(result["content"][0]["text"].as_str().unwrap_or_default().to_string()),
        v => v.clone(),
    };
    (is_error, value)
}

fn error_text(tool: &str, (is_error, value): (bool, Value)) -> String {
    assert!(is_error, "{tool} should have failed: {value}");
    value.as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_plans_runs_answers_and_lands_a_swarm_through_swarmctl_mcp() {
    let ask = r#"if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '%s\n' '{"status":"question","message":"need a decision","question":{"id":"colour","text":"Which colour?","category":"design"}}' > "$SWARM_STATUS_FILE"
  exit 4
fi
grep -o "colour is [a-z]*" "$SWARM_TASK_FILE" > ask.txt"#;
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("ask", ask)]))]);
    let cluster = Cluster::start(&repo, 1, &[]);
    let mut mcp = Stdio_::start(&cluster.url());

    let listed = mcp.request("tools/list", json!({}));
    let mut names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, TOOLS);

    // A plan is checked before it runs; a bad one names the field.
    let plan = PlanBuilder::new("m").task(task("a")).task(task("ask").deps(&["a"])).build();
    let bad = plan.replace("deps = [\"a\"]", "deps = [\"nope\"]");
    let (err, checked) = mcp.call("check_plan", json!({"plan_toml": bad}));
    assert!(!err && checked["valid"] == false, "{checked}");
    assert!(checked["error"]["path"].as_str().unwrap().starts_with("tasks[1].deps"), "{checked}");
    let (_, checked) = mcp.call("check_plan", json!({"plan_toml": plan}));
    assert_eq!((checked["valid"].clone(), checked["tasks"].clone()), (json!(true), json!(2)), "{checked}");

    let (err, created) = mcp.call("create_swarm", json!({"plan_toml": plan}));
    assert!(!err && created["created"] == true, "{created}");
    assert_eq!(created["swarm"]["integration_branch"], "swarm/m/integration");
    let (_, again) = mcp.call("create_swarm", json!({"plan_toml": plan}));
    assert_eq!(again["created"], false, "the same plan again is not a second swarm: {again}");

    // One call waits until the agent's question is up, then until the end.
    let (err, waited) = mcp.call("wait", json!({"swarm": "m", "timeout_secs": 60}));
    assert!(!err, "{waited}");
    assert_eq!(waited["reason"], "question", "{waited}");
    assert_eq!(waited["questions"][0]["id"], "m/ask", "{waited}");
    assert_eq!(waited["questions"][0]["pending_question"], "Which colour?", "{waited}");
    let (err, answered) = mcp.call("answer", json!({"task": "m/ask", "text": "colour is blue"}));
    assert!(!err, "{answered}");
    let (err, waited) = mcp.call("wait", json!({"swarm": "m", "states": ["COMPLETED"], "timeout_secs": 60}));
    assert!(!err && waited["reason"] == "state", "{waited}");
    assert_eq!(waited["swarm"]["state"], "COMPLETED");

    let (_, report) = mcp.call("report", json!({"swarm": "m"}));
    assert_eq!((report["done"].clone(), report["total"].clone()), (json!(2), json!(2)), "{report}");
    let (_, detail) = mcp.call("describe_task", json!({"task": "m/ask"}));
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 2, "{detail}");
    let (_, tasks) = mcp.call("list_tasks", json!({"swarm": "m", "states": ["merged"]}));
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 2, "{tasks}");
    assert_eq!(repo.tree("swarm/m/integration")["ask.txt"], "colour is blue\n");

    // Hostile or wrong calls get the argument and the rule, and change nothing.
    let huge = format!("name = \"big\"\n# {}\n", "x".repeat(2 << 20));
    let refusals = [
        ("describe_task", json!({"task": "m"}), "task: "),
        ("describe_task", json!({"task": "other/x"}), "not found"),
        ("cancel", json!({"task": "m/a", "swarm": "m"}), "task, swarm: give exactly one"),
        ("list_tasks", json!({"swarm": "m", "states": ["DONE"]}), "states[0]: \"DONE\" is not a task state"),
        ("review", json!({"task": "m/a", "decision": "maybe"}), "decision: must be approve"),
        ("review", json!({"task": "m/a", "decision": "request-changes"}), "message: required"),
        ("answer", json!({"task": "m/a", "text": " "}), "text: must not be empty"),
        ("retry", json!({"task": "m/a"}), "not allowed now"),
        ("wait", json!({"task": "m/a", "timeout_secs": 0}), "timeout_secs: must be at least 1"),
        ("create_swarm", json!({"plan_toml": huge}), "plan_toml: "),
    ];
    for (tool, args, expected) in refusals {
        let text = error_text(tool, mcp.call(tool, args));
        assert!(text.contains(expected), "{tool}: {text:?} should say {expected:?}");
    }
    let unknown = mcp.request("tools/call", json!({"name": "wait", "arguments": {"swarm": "m", "sleep": 1}}));
    assert!(unknown.to_string().contains("sleep"), "an unknown argument is named: {unknown}");
    let swarms = swarm_tests::swarmctl(&cluster.url(), &["get", "swarms", "-o", "json"]);
    let swarms: Value = serde_json::from_slice(&swarms.stdout).unwrap();
    assert_eq!(swarms.as_array().unwrap().len(), 1, "nothing was created: {swarms}");
    let (_, after) = mcp.call("describe_task", json!({"task": "m/a"}));
    assert_eq!(after["task"]["state"], "MERGED", "the refused calls changed nothing");

    let (err, landed) = mcp.call("land", json!({"swarm": "m"}));
    assert!(!err, "{landed}");
    assert_eq!(landed["new_commit"], report["integration_head"], "{landed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_outlives_a_controller_killed_with_sigkill() {
    let script = worker_script(&[("b", "sleep 3; echo b > b.txt")]);
    let repo = TempRepo::with_files(&[("worker.sh", &script)]);
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let mut mcp = Stdio_::start(&cluster.url());
    let plan = PlanBuilder::new("k").task(task("a")).task(task("b").deps(&["a"])).build();
    let (err, created) = mcp.call("create_swarm", json!({"plan_toml": plan}));
    assert!(!err, "{created}");
    let url = cluster.url();
    let waiting = tokio::task::spawn_blocking(move || {
        let waited = mcp.call("wait", json!({"task": "k/b", "timeout_secs": 90}));
        (mcp, waited)
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.controller.restart_after_kill9();
    let (_mcp, (err, waited)) = waiting.await.unwrap();
    assert!(!err, "the wait survived the restart: {waited}");
    assert_eq!(
        (waited["reason"].clone(), waited["task"]["state"].clone()),
        (json!("state"), json!("MERGED"))
    );
    assert_eq!(url, cluster.url());
}

/// One JSON-RPC POST to `/mcp`: the HTTP status, the session header and
/// the JSON-RPC reply (from a JSON body or the event stream's data line).
fn post(port: u16, token: Option<&str>, session: Option<&str>, body: &Value) -> (u16, Option<String>, Value) {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.to_string();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(s) = session {
        req.push_str(&format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    conn.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let session = head.lines().find_map(|l| {
        l.to_ascii_lowercase().strip_prefix("mcp-session-id:").map(|_| l[15..].trim().to_string())
    });
    let reply = rest
        .lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim).or(Some(l.trim())))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("jsonrpc").is_some() || v.get("error").is_some())
        .unwrap_or(Value::Null);
    (status, session, reply)
}

#[test]
fn the_mcp_endpoint_takes_the_operator_api_credentials_and_its_role_table() {
    let repo = TempRepo::with_files(&[("README.md", "mcp\n")]);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let entry = |name: &str, role: &str, token: &str| {
        let workers = if role == "sidecar" { "workers = \"*\"\n" } else { "" };
        format!(
            "[[tokens]]\nname = \"{name}\"\nrole = \"{role}\"\n{workers}sha256 = \"{}\"\n\n",
            sha256_hex(token)
        )
    };
    let operator = "swarm_mcp_operator_secret";
    let sidecar = "swarm_mcp_sidecar_secret";
    std::fs::write(&tokens, entry("alice", "operator", operator) + &entry("ci", "sidecar", sidecar)).unwrap();
    let port = free_port();
    let controller = spawn_controller(
        repo.path(),
        &[&format!("--tokens={}", tokens.display()), &format!("--mcp-listen=127.0.0.1:{port}")],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call = |tool: &str, args: Value| json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let session_for = |token: &str| {
        let (status, session, reply) = post(port, Some(token), None, &init);
        assert_eq!(status, 200, "{reply}");
        let session = session.expect("a session id");
        post(port, Some(token), Some(&session), &initialized);
        session
    };

    // No credential, or an unknown one: refused before any MCP.
    assert_eq!(post(port, None, None, &init).0, 401);
    assert_eq!(post(port, Some("nope"), None, &init).0, 401);

    // A sidecar's token is a credential, but no Operator RPC allows its role.
    let session = session_for(sidecar);
    let plan = PlanBuilder::new("h").task(task("a")).build();
    let (_, _, reply) =
        post(port, Some(sidecar), Some(&session), &call("create_swarm", json!({"plan_toml": plan})));
    let text = error_text("create_swarm", tool_result(&reply));
    assert!(text.contains("permission denied") && text.contains("needs role operator"), "{text}");

    // The operator's token does what swarmctl with it may do.
    let session = session_for(operator);
    let (_, _, reply) =
        post(port, Some(operator), Some(&session), &call("create_swarm", json!({"plan_toml": plan})));
    let (err, created) = tool_result(&reply);
    assert!(!err && created["created"] == true, "{created}");
    let (_, _, reply) =
        post(port, Some(operator), Some(&session), &call("list_tasks", json!({"swarm": "h"})));
    assert_eq!(tool_result(&reply).1["tasks"][0]["id"], "h/a", "{reply}");
    drop(controller);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
