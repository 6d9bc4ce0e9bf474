//! The server as an agent's MCP client meets it: newline-delimited
//! JSON-RPC on the attempt's socket, after the bridge's token line.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::{SOCKET_ENV, TOKEN_ENV, ToolRequest, ToolServer};

struct Client {
    lines: tokio::io::Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    next_id: u64,
}

fn env(server: &ToolServer, key: &str) -> String {
    server.stdio.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).expect("env")
}

async fn connect(server: &ToolServer, token: &str) -> Client {
    let stream = UnixStream::connect(env(server, SOCKET_ENV)).await.expect("connect");
    let (read, mut write) = stream.into_split();
    write.write_all(format!("SWARM-MCP {token}\n").as_bytes()).await.expect("hello");
    Client { lines: BufReader::new(read).lines(), write, next_id: 1 }
}

impl Client {
    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.write.write_all(line.as_bytes()).await.expect("write");
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        loop {
            let line = self.lines.next_line().await.expect("read").expect("a reply");
            let v: Value = serde_json::from_str(&line).expect("json");
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    async fn initialized(server: &ToolServer) -> Client {
        let mut c = connect(server, &env(server, TOKEN_ENV)).await;
        let init = c
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}),
            )
            .await;
        assert_eq!(init["result"]["serverInfo"]["name"], "swarm", "{init}");
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        c
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments})).await
    }
}

fn start() -> (tempfile::TempDir, ToolServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server =
        super::start(dir.path(), std::path::Path::new("/usr/bin/swarm-sidecar"), None).expect("start");
    (dir, server)
}

fn error_text(reply: &Value) -> String {
    assert_eq!(reply["result"]["isError"], json!(true), "{reply}");
    reply["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn the_agent_starts_the_bridge_with_the_socket_and_token_in_its_environment() {
    let (_dir, server) = start();
    assert_eq!(server.stdio.command, "/usr/bin/swarm-sidecar");
    assert_eq!(server.stdio.args, vec![super::BRIDGE_ARG.to_string()]);
    assert_eq!(env(&server, TOKEN_ENV).len(), 48, "a 24-byte random token in hex");
    let (_other_dir, other) = start();
    assert_ne!(env(&server, TOKEN_ENV), env(&other, TOKEN_ENV), "every attempt has its own token");
}

#[tokio::test]
async fn a_connection_without_the_attempts_token_gets_no_mcp() {
    let (_dir, mut server) = start();
    let mut c = connect(&server, "not-the-token").await;
    c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})).await;
    let line = tokio::time::timeout(std::time::Duration::from_secs(10), c.lines.next_line()).await;
    assert!(matches!(line, Ok(Ok(None)) | Ok(Err(_))), "closed without a reply, got {line:?}");
    assert!(server.calls.try_recv().is_err(), "nothing reached the driver");
}

#[tokio::test]
async fn the_eight_tools_are_listed_with_schemas_that_refuse_unknown_fields() {
    let (_dir, server) = start();
    let mut c = Client::initialized(&server).await;
    let list = c.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().expect("tools");
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["ask", "checkpoint", "context", "escalate", "progress", "reply", "spawn", "wait_children"]
    );
    let mut checked = super::TOOL_NAMES.to_vec();
    checked.sort_unstable();
    assert_eq!(checked, names, "request_for knows every tool the server lists");
    let ask = tools.iter().find(|t| t["name"] == "ask").expect("ask");
    assert_eq!(ask["inputSchema"]["additionalProperties"], json!(false), "{ask}");
    assert_eq!(ask["inputSchema"]["required"], json!(["question"]), "{ask}");
    let reply = tools.iter().find(|t| t["name"] == "reply").expect("reply");
    assert_eq!(reply["inputSchema"]["required"], json!(["thread", "text"]), "{reply}");
}

#[test]
fn a_reply_names_a_thread_the_feedback_could_have_given_and_says_something() {
    let ok = super::request_for("reply", json!({"thread": "review-comment:12", "text": "Renamed."}));
    assert_eq!(
        ok,
        Ok(super::ToolRequest::Reply { thread: "review-comment:12".into(), text: "Renamed.".into() })
    );
    for (args, rule) in [
        (json!({"thread": "../../etc", "text": "x"}), "thread: must be KIND:ID"),
        (json!({"thread": "check:3", "text": "x"}), "thread: must be KIND:ID"),
        (json!({"thread": "review:3", "text": "  "}), "text: must not be empty"),
        (json!({"thread": "review:3", "text": "x".repeat(9000)}), "text:"),
        (json!({"thread": "review:3", "text": "x", "to": "everyone"}), "unknown field"),
    ] {
        let err = super::request_for("reply", args.clone()).expect_err("refused");
        assert!(err.contains(rule), "{args}: {err}");
    }
}

#[tokio::test]
async fn a_call_reaches_the_driver_checked_and_returns_its_reply() {
    let (_dir, mut server) = start();
    let mut c = Client::initialized(&server).await;
    let driver = async {
        let call = server.calls.recv().await.expect("a call");
        assert_eq!(
            call.request,
            ToolRequest::Progress { step: "tests".into(), percent: Some(40), note: "half way".into() }
        );
        call.reply.send(Ok(json!({"recorded": true}))).expect("reply");
    };
    let (reply, ()) = tokio::join!(
        c.call("progress", json!({"step": " tests ", "percent": 40, "note": "half way"})),
        driver
    );
    assert_eq!(reply["result"]["structuredContent"], json!({"recorded": true}), "{reply}");
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_field_and_reach_nobody() {
    let (_dir, mut server) = start();
    let mut c = Client::initialized(&server).await;
    let cases = [
        ("progress", json!({"percent": 101}), "percent: must be 0 to 100"),
        ("progress", json!({}), "give at least one"),
        ("progress", json!({"step": "x".repeat(2000)}), "step: at most 1024 bytes"),
        ("ask", json!({"question": "  "}), "question: must not be empty"),
        ("ask", json!({"question": "which?", "choices": vec!["a"; 17]}), "choices: at most 16"),
        ("ask", json!({"question": "which?", "choices": ["a", ""]}), "choices[1]: must not be empty"),
        ("escalate", json!({"category": "bored", "detail": "x"}), "category: must be one of ambiguous_spec"),
        ("checkpoint", json!({"summary": "done", "next_action": ""}), "next_action: must not be empty"),
        ("progress", json!({"step": "a\u{7}b"}), "step: must not contain control characters"),
        ("spawn", json!({}), "tasks: give the child tasks"),
        ("spawn", json!({"tasks": [], "plan_toml": "x"}), "give one, not both"),
        ("spawn", json!({"tasks": [{"id": "a", "x": null}]}), "tasks: cannot be written as a plan"),
        ("spawn", json!({"plan_toml": "x".repeat(300_000)}), "tasks: at most 262144 bytes"),
        ("wait_children", json!({"timeout_secs": 0}), "timeout_secs: must be 1 to 3600"),
        ("wait_children", json!({"timeout_secs": 7200}), "timeout_secs: must be 1 to 3600"),
    ];
    for (tool, args, want) in cases {
        let reply = c.call(tool, args.clone()).await;
        assert!(error_text(&reply).contains(want), "{tool} {args}: {reply}");
        let checked = super::request_for(tool, args.clone()).expect_err("refused without a session too");
        assert!(checked.contains(want), "request_for {tool} {args}: {checked}");
    }
    let unknown = c.call("ask", json!({"question": "q", "urgent": true})).await;
    assert!(unknown.get("error").is_some() || unknown["result"]["isError"] == json!(true), "{unknown}");
    let unknown = c.call("spawn", json!({"tasks": [], "parent": "x"})).await;
    assert!(unknown.get("error").is_some() || unknown["result"]["isError"] == json!(true), "{unknown}");
    assert!(server.calls.try_recv().is_err(), "no refused call reached the driver");
}

#[tokio::test]
async fn a_call_after_the_attempt_ended_says_so() {
    let (_dir, mut server) = start();
    let mut c = Client::initialized(&server).await;
    server.calls.close();
    let reply = c.call("context", json!({})).await;
    assert!(error_text(&reply).contains("no longer running this attempt"), "{reply}");
}
