use std::path::Path;

use serde_json::{Value, json};
use swarm_core::plan::PermissionRule;

use super::*;
use crate::agent::TurnEnd;

fn cfg(deny: &[&str]) -> AgentConfig {
    AgentConfig {
        program: "gemini".into(),
        extra_args: vec!["--experimental-acp".into()],
        deny: deny.iter().map(|r| PermissionRule::parse(r).expect("rule")).collect(),
        ..AgentConfig::of_kind(AgentKind::Acp)
    }
}

fn acp(wt: &Path) -> Acp {
    Acp::new(&cfg(&["Read(.env)"]), wt, &["src/**".into()]).expect("adapter")
}

fn feed(a: &mut Acp, v: Value) -> Vec<AgentEvent> {
    a.parse_line(&v.to_string())
}

/// The JSON-RPC messages among the events' Sends.
fn sent(events: &[AgentEvent]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| if let AgentEvent::Send(s) = e { Some(s) } else { None })
        .flat_map(|s| {
            s.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect::<Vec<Value>>()
        })
        .collect()
}

fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn update(u: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": u}})
}

/// Runs the handshake to an open session; returns the prompt request.
fn open_session(a: &mut Acp, wt: &Path) -> Value {
    let init: Value = serde_json::from_str(a.opening("Write src/a.rs", None).input.trim()).expect("json");
    let ev = feed(a, response(&init["id"], json!({"protocolVersion": 1, "agentCapabilities": {}})));
    let new = sent(&ev).remove(0);
    assert_eq!(new["method"], "session/new");
    assert_eq!(new["params"]["cwd"], wt.to_str().expect("utf-8"));
    assert_eq!(new["params"]["mcpServers"], json!([]));
    let ev = feed(a, response(&new["id"], json!({"sessionId": "s1"})));
    assert_eq!(ev[0], AgentEvent::SessionStarted("s1".into()));
    sent(&ev).remove(0)
}

#[test]
fn the_handshake_offers_files_but_no_terminal_and_prompts_once_the_session_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = acp(dir.path());
    assert_eq!(a.argv(&cfg(&[]), Some("ignored")), ["gemini", "--experimental-acp"]);
    let opening = a.opening("task", None);
    assert!(!opening.close);
    let init: Value = serde_json::from_str(opening.input.trim()).expect("json");
    assert_eq!(init["method"], "initialize");
    assert_eq!(init["params"]["protocolVersion"], 1);
    let caps = &init["params"]["clientCapabilities"];
    assert_eq!(caps["fs"], json!({"readTextFile": true, "writeTextFile": true}));
    assert_eq!(caps["terminal"], false);
    // A message before the session exists waits for it.
    assert_eq!(a.user_message("early"), "");
    let mut a = acp(dir.path());
    let prompt = open_session(&mut a, dir.path());
    assert_eq!(prompt["method"], "session/prompt");
    assert_eq!(prompt["params"]["sessionId"], "s1");
    assert_eq!(prompt["params"]["prompt"], json!([{"type": "text", "text": "Write src/a.rs"}]));
}

#[test]
fn a_full_session_parses_into_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wt = dir.path();
    std::fs::create_dir_all(wt.join("src")).expect("mkdir");
    std::fs::write(wt.join("src/lib.rs"), "one\ntwo\nthree\n").expect("write");
    let mut a = acp(wt);
    let prompt = open_session(&mut a, wt);
    let abs = |p: &str| wt.join(p).to_string_lossy().into_owned();
    let lines = [
        update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Working "}}),
        ),
        update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "on it.\nMore"}}),
        ),
        update(json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}})),
        update(json!({"sessionUpdate": "plan", "entries": [
            {"content": "a", "priority": "high", "status": "completed"},
            {"content": "b", "priority": "low", "status": "in_progress"},
            {"content": "c", "priority": "low", "status": "pending"}]})),
        update(json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Editing the lib",
            "kind": "edit", "status": "pending", "locations": [{"path": abs("src/lib.rs")}]})),
        update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
            "content": [{"type": "diff", "path": abs("src/new.rs"), "oldText": null, "newText": "x"}]})),
        // claude-code-acp: no kind, the path in the title and the raw input.
        update(
            json!({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": format!("Write {}", abs("src/b.rs")),
            "status": "pending", "rawInput": {"file_path": abs("src/b.rs"), "content": "b"}}),
        ),
        update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t2", "status": "completed"})),
        update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t2", "status": "completed"})),
        update(
            json!({"sessionUpdate": "tool_call", "toolCallId": "t3", "title": "Write src/denied.rs", "status": "pending"}),
        ),
        update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t3", "status": "failed"})),
        update(
            json!({"sessionUpdate": "tool_call", "toolCallId": "t4", "title": "Run: cargo test", "kind": "execute",
            "rawInput": {"command": "cargo test"}}),
        ),
        update(
            json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200000, "cost": {"amount": 0.12, "currency": "USD"}}),
        ),
        update(json!({"sessionUpdate": "available_commands_update", "availableCommands": []})),
        update(json!({"sessionUpdate": "brand_new_update", "x": 1})),
        update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "All done."}}),
        ),
    ];
    let mut ev: Vec<AgentEvent> = lines.into_iter().flat_map(|l| feed(&mut a, l)).collect();
    ev.extend(feed(&mut a, response(&prompt["id"], json!({"stopReason": "end_turn"}))));
    assert!(ev.contains(&AgentEvent::Note("Working on it.".into())), "{ev:?}");
    assert!(ev.contains(&AgentEvent::Note("More".into())), "a line ended by a tool call: {ev:?}");
    assert!(ev.contains(&AgentEvent::Todo { done: 1, total: 3 }));
    assert!(ev.contains(&AgentEvent::Step("Edit ".to_string() + &abs("src/lib.rs"))), "{ev:?}");
    assert!(ev.contains(&AgentEvent::FilesChanged(vec![abs("src/lib.rs"), abs("src/new.rs")])));
    assert!(ev.contains(&AgentEvent::Step(format!("Write {}", abs("src/b.rs")))));
    assert_eq!(
        ev.iter().filter(|e| **e == AgentEvent::FilesChanged(vec![abs("src/b.rs")])).count(),
        1,
        "a completion repeated is one change"
    );
    assert!(
        !ev.iter()
            .any(|e| matches!(e, AgentEvent::FilesChanged(f) if f.iter().any(|p| p.contains("denied"))))
    );
    assert!(ev.contains(&AgentEvent::Step("Bash: cargo test".into())));
    assert!(ev.iter().any(|e| matches!(e, AgentEvent::Usage(u) if u.cost_usd == 0.12)));
    assert!(!ev.iter().any(|e| matches!(e, AgentEvent::Unparseable(_))), "{ev:?}");
    assert_eq!(
        ev.last(),
        Some(&AgentEvent::TurnEnded(TurnEnd { ok: true, text: "All done.".into(), rate_limit: None }))
    );
    // The next message is the next prompt; a stop cancels it.
    let next: Value = serde_json::from_str(a.user_message("The operator answered.").trim()).expect("json");
    assert_eq!(
        (next["method"].as_str(), next["params"]["sessionId"].as_str()),
        (Some("session/prompt"), Some("s1"))
    );
    let cancel: Value = serde_json::from_str(a.stop_message().expect("a cancel").trim()).expect("json");
    assert_eq!(cancel, json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}));
    let ev = feed(&mut a, response(&next["id"], json!({"stopReason": "cancelled"})));
    assert!(matches!(ev.last(), Some(AgentEvent::TurnEnded(t)) if !t.ok && t.text.contains("cancelled")));
    assert_eq!(a.stop_message(), None, "no prompt runs");
}

#[test]
fn permission_requests_meet_the_policy_and_pick_options_by_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wt = dir.path();
    let mut a = acp(wt);
    open_session(&mut a, wt);
    let options = json!([
        {"optionId": "allow_always", "name": "Always Allow", "kind": "allow_always"},
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]);
    let request = |id: Value, tool_call: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "session/request_permission",
            "params": {"sessionId": "s1", "toolCall": tool_call, "options": options}})
    };
    // claude-code-acp's shape: a made-up toolCallId, the command only in rawInput.
    let ev = feed(
        &mut a,
        request(
            json!(7),
            json!({"toolCallId": "x", "title": "Run: cargo te...", "rawInput": {"command": "cargo test --lib"}}),
        ),
    );
    let Some(AgentEvent::PermissionRequest { request_id, tool, input }) = ev.first() else {
        panic!("{ev:?}")
    };
    assert_eq!((tool.as_str(), input["command"].as_str()), ("Bash", Some("cargo test --lib")));
    let reply: Value =
        serde_json::from_str(a.permission_reply(request_id, &Verdict::Allow, input).expect("reply").trim())
            .expect("json");
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["result"]["outcome"], json!({"outcome": "selected", "optionId": "allow"}));
    assert_eq!(a.permission_reply(request_id, &Verdict::Allow, input), None, "answered once");

    let ev = feed(
        &mut a,
        request(json!("p2"), json!({"toolCallId": "y", "title": "Edit src/a.rs", "kind": "edit"})),
    );
    let Some(AgentEvent::PermissionRequest { request_id, tool, input }) = ev.first() else {
        panic!("{ev:?}")
    };
    assert_eq!((tool.as_str(), input["file_path"].as_str()), ("Edit", Some("src/a.rs")));
    let reply = a.permission_reply(request_id, &Verdict::Deny("no".into()), input).expect("reply");
    assert!(reply.contains(r#""optionId":"reject""#) && reply.contains(r#""id":"p2""#), "{reply}");

    // A multi-file edit touching a file the task does not own is refused here.
    let ev = feed(
        &mut a,
        request(
            json!(9),
            json!({"toolCallId": "z", "title": "Patch", "kind": "edit",
        "locations": [{"path": wt.join("src/a.rs")}, {"path": wt.join("Cargo.toml")}]}),
        ),
    );
    assert!(ev.iter().any(|e| matches!(e, AgentEvent::Note(n) if n.contains("Cargo.toml"))), "{ev:?}");
    assert_eq!(sent(&ev)[0]["result"]["outcome"]["optionId"], "reject");

    // Only allow_always offered: it is used; no reject offered: "cancelled".
    let ev = feed(
        &mut a,
        json!({"jsonrpc": "2.0", "id": 10, "method": "session/request_permission",
        "params": {"sessionId": "s1", "toolCall": {"toolCallId": "w", "title": "Read x"},
            "options": [{"optionId": "a", "kind": "allow_always", "name": "A"}, {"optionId": "n", "kind": "newer_kind", "name": "N"}]}}),
    );
    let Some(AgentEvent::PermissionRequest { request_id, input, .. }) = ev.first() else { panic!("{ev:?}") };
    let open_one = request_id.clone();
    let stop = a.stop_message().expect("a prompt runs");
    assert!(
        stop.contains("session/cancel") && stop.contains(r#""id":10"#) && stop.contains("cancelled"),
        "{stop}"
    );
    assert_eq!(a.permission_reply(&open_one, &Verdict::Allow, input), None, "cancelled on the stop");
}

#[test]
fn a_resume_loads_the_session_only_when_the_agent_can() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wt = dir.path();
    for can_load in [true, false] {
        let mut a = acp(wt);
        let init: Value = serde_json::from_str(a.opening("go on", Some("s0")).input.trim()).expect("json");
        let ev = feed(
            &mut a,
            response(
                &init["id"],
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": can_load}}),
            ),
        );
        let req = sent(&ev).remove(0);
        if !can_load {
            assert_eq!(req["method"], "session/new");
            assert!(ev.iter().any(|e| matches!(e, AgentEvent::Note(n) if n.contains("s0"))));
            continue;
        }
        assert_eq!(
            (req["method"].as_str(), req["params"]["sessionId"].as_str()),
            (Some("session/load"), Some("s0"))
        );
        // The replayed history is not this attempt's progress.
        let replay = feed(
            &mut a,
            update(
                json!({"sessionUpdate": "tool_call", "toolCallId": "old", "title": "Edit src/x.rs", "kind": "edit", "status": "completed", "locations": [{"path": "src/x.rs"}]}),
            ),
        );
        assert!(replay.is_empty(), "{replay:?}");
        let ev = feed(&mut a, response(&req["id"], Value::Null));
        assert_eq!(ev[0], AgentEvent::SessionStarted("s0".into()));
        assert_eq!(sent(&ev)[0]["params"]["prompt"][0]["text"], "go on");
    }
}

#[test]
fn turns_end_by_stop_reason_error_or_usage_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let end = |result: Value| {
        let mut a = acp(dir.path());
        let prompt = open_session(&mut a, dir.path());
        let ev = feed(&mut a, json!({"jsonrpc": "2.0", "id": prompt["id"], "result": result}));
        match ev.last() {
            Some(AgentEvent::TurnEnded(t)) => t.clone(),
            other => panic!("{other:?}"),
        }
    };
    for (reason, says) in [
        ("refusal", "refused"),
        ("max_tokens", "tokens"),
        ("max_turn_requests", "requests"),
        ("later", "unknown"),
    ] {
        let t = end(json!({"stopReason": reason}));
        assert!(!t.ok && t.text.contains(says), "{reason}: {t:?}");
    }
    let t = end(
        json!({"stopReason": "end_turn", "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}}),
    );
    assert!(t.ok);
    // An error as the turn's text (claude-code-acp ends such a turn normally).
    let mut a = acp(dir.path());
    let prompt = open_session(&mut a, dir.path());
    feed(
        &mut a,
        update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Claude AI usage limit reached|1750000000"}}),
        ),
    );
    let ev = feed(&mut a, response(&prompt["id"], json!({"stopReason": "end_turn"})));
    let Some(AgentEvent::TurnEnded(t)) = ev.last() else { panic!("{ev:?}") };
    assert_eq!((t.ok, t.rate_limit.as_ref().map(|r| r.reset_unix_ms)), (false, Some(1_750_000_000_000)));
    // A JSON-RPC error ends the turn with its message.
    let mut a = acp(dir.path());
    let prompt = open_session(&mut a, dir.path());
    let ev = feed(
        &mut a,
        json!({"jsonrpc": "2.0", "id": prompt["id"], "error": {"code": -32603, "message": "Internal error", "data": "boom"}}),
    );
    let Some(AgentEvent::TurnEnded(t)) = ev.last() else { panic!("{ev:?}") };
    assert!(!t.ok && t.text.contains("session/prompt failed: Internal error (boom)"), "{t:?}");
    // A protocol this client does not speak ends the first turn.
    let mut a = acp(dir.path());
    let init: Value = serde_json::from_str(a.opening("x", None).input.trim()).expect("json");
    let ev = feed(&mut a, response(&init["id"], json!({"protocolVersion": 7})));
    assert!(matches!(ev.last(), Some(AgentEvent::TurnEnded(t)) if t.text.contains("version 7")));
}

#[test]
fn hostile_lines_never_panic_and_unknown_methods_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = acp(dir.path());
    open_session(&mut a, dir.path());
    let huge = "x".repeat(1 << 20);
    let bad = [
        json!({}),
        json!({"jsonrpc": "2.0", "id": 99, "result": {}}),
        json!({"jsonrpc": "2.0", "id": {"an": "object"}, "method": "fs/read_text_file"}),
        json!({"jsonrpc": "2.0", "method": "session/update"}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "tool_call"}}}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "plan", "entries": 5}}}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "tool_call_update", "toolCallId": huge, "title": huge}}}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "usage_update", "cost": {"amount": 1e308, "currency": "USD"}}}}),
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": huge}}}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "session/request_permission", "params": {"toolCall": 5}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "fs/write_text_file", "params": {"path": 5}}),
        json!({"jsonrpc": "2.0", "method": "_vendor/notice", "params": {}}),
    ];
    for v in bad {
        let _ = feed(&mut a, v);
    }
    for raw in ["", "{", "[1]", "null", "\"s\""] {
        assert!(matches!(a.parse_line(raw).as_slice(), [AgentEvent::Unparseable(_)]), "{raw:?}");
    }
    for method in ["terminal/create", "session/elicitation", "x"] {
        let ev = feed(&mut a, json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": {}}));
        let reply = &sent(&ev)[0];
        assert_eq!(
            (reply["id"].as_i64(), reply["error"]["code"].as_i64()),
            (Some(5), Some(-32601)),
            "{method}"
        );
    }
    let ev = feed(
        &mut a,
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/request_permission", "params": {"toolCall": 5}}),
    );
    assert_eq!(sent(&ev)[0]["error"]["code"], -32602);
}

/// An fs request and its reply: the result, or the error's message.
fn fs_call(a: &mut Acp, method: &str, params: Value) -> (Result<Value, String>, Vec<AgentEvent>) {
    let ev = feed(a, json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    let reply = sent(&ev).remove(0);
    let r = match reply.get("error") {
        Some(e) => Err(e["message"].as_str().unwrap_or_default().to_string()),
        None => Ok(reply["result"].clone()),
    };
    (r, ev)
}

#[test]
fn files_are_served_inside_the_worktree_only_and_written_only_when_owned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let wt = dir.path();
    std::fs::create_dir_all(wt.join("src")).expect("mkdir");
    std::fs::write(wt.join("src/lib.rs"), "one\ntwo\nthree\n").expect("write");
    std::fs::write(wt.join(".env"), "KEY=1").expect("write");
    std::fs::write(outside.path().join("secret"), "s").expect("write");
    std::os::unix::fs::symlink(outside.path(), wt.join("src/out")).expect("symlink");
    std::os::unix::fs::symlink(outside.path().join("secret"), wt.join("src/link.rs")).expect("symlink");
    let mut a = acp(wt);
    let read =
        |a: &mut Acp, p: Value| fs_call(a, "fs/read_text_file", json!({"sessionId": "s1", "path": p})).0;
    let lib = wt.join("src/lib.rs");
    assert_eq!(read(&mut a, json!(lib)), Ok(json!({"content": "one\ntwo\nthree\n"})));
    let window =
        fs_call(&mut a, "fs/read_text_file", json!({"sessionId": "s1", "path": lib, "line": 2, "limit": 1}))
            .0;
    assert_eq!(window, Ok(json!({"content": "two\n"})));
    for (path, why) in [
        (json!("/etc/passwd"), "outside the worktree"),
        (json!(wt.join("../x")), "outside the worktree"),
        (json!(wt.join("src/out/secret")), "symlink"),
        (json!(wt.join("src/link.rs")), "symlink"),
        (json!(wt.join(".env")), "Read(.env)"),
        (json!(wt.join("src/missing.rs")), "does not exist"),
        (json!(wt.join("src")), "not a regular file"),
    ] {
        let r = read(&mut a, path.clone());
        assert!(r.as_ref().is_err_and(|e| e.contains(why)), "{path}: {r:?}");
    }
    let write = |a: &mut Acp, p: Value| {
        fs_call(a, "fs/write_text_file", json!({"sessionId": "s1", "path": p, "content": "new\n"}))
    };
    let (r, ev) = write(&mut a, json!(wt.join("src/deep/new.rs")));
    assert_eq!(r, Ok(json!({})));
    assert!(ev.contains(&AgentEvent::FilesChanged(vec!["src/deep/new.rs".into()])));
    assert_eq!(std::fs::read_to_string(wt.join("src/deep/new.rs")).expect("written"), "new\n");
    for (path, why) in [
        (json!(wt.join("Cargo.toml")), "outside this task's owned files"),
        (json!("/tmp/x.rs"), "outside the worktree"),
        (json!(wt.join("src/out/secret")), "symlink"),
        (json!(wt.join("src/link.rs")), "symlink"),
    ] {
        let (r, ev) = write(&mut a, path.clone());
        assert!(r.as_ref().is_err_and(|e| e.contains(why)), "{path}: {r:?}");
        assert!(!ev.iter().any(|e| matches!(e, AgentEvent::FilesChanged(_))));
    }
    assert_eq!(std::fs::read_to_string(outside.path().join("secret")).expect("read"), "s", "untouched");
    assert!(!wt.join("Cargo.toml").exists());
}

#[test]
fn a_new_session_gets_swarms_tools_as_a_stdio_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = crate::worker_mcp::sample_stdio();
    let with_tools = AgentConfig { mcp: Some(server), ..cfg(&[]) };
    let mut a = Acp::new(&with_tools, dir.path(), &["src/**".into()]).expect("adapter");
    let init: Value = serde_json::from_str(a.opening("go", None).input.trim()).expect("json");
    let ev = feed(&mut a, response(&init["id"], json!({"protocolVersion": 1, "agentCapabilities": {}})));
    let new = sent(&ev).remove(0);
    assert_eq!(
        new["params"]["mcpServers"],
        json!([{"name": "swarm", "command": "/usr/bin/swarm-sidecar", "args": ["__mcp-bridge"],
                "env": [{"name": "SWARM_MCP_TOKEN", "value": "t0k"}]}])
    );
}

#[test]
fn turn_tokens_are_priced_as_the_sessions_model_until_the_agent_reports_its_cost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wt = dir.path();
    let mut a = acp(wt);
    let init: Value = serde_json::from_str(a.opening("go", None).input.trim()).expect("json");
    let new =
        sent(&feed(&mut a, response(&init["id"], json!({"protocolVersion": 1, "agentCapabilities": {}}))))
            .remove(0);
    let models = json!({"currentModelId": "claude-sonnet-4-5", "availableModels": []});
    let prompt =
        sent(&feed(&mut a, response(&new["id"], json!({"sessionId": "s1", "models": models})))).remove(0);
    let cost = |ev: &[AgentEvent]| {
        ev.iter().rev().find_map(|e| if let AgentEvent::Usage(u) = e { Some(u.cost_usd) } else { None })
    };
    let usage = json!({"inputTokens": 1_000_000, "outputTokens": 100_000, "totalTokens": 1_100_000});
    let ev = feed(&mut a, response(&prompt["id"], json!({"stopReason": "end_turn", "usage": usage})));
    let usd = cost(&ev).expect("usage");
    assert!((usd - 4.5).abs() < 1e-9, "sonnet's $3 in and $15 out per million: {usd}");
    assert!(!ev.iter().any(|e| matches!(e, AgentEvent::Note(_))), "a priced model: {ev:?}");
    let next: Value = serde_json::from_str(a.user_message("more").trim()).expect("json");
    let update = json!({"sessionUpdate": "usage_update", "used": 1, "size": 2,
        "cost": {"amount": 4.0, "currency": "USD"}});
    let ev = feed(
        &mut a,
        json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": "s1", "update": update}}),
    );
    assert_eq!(cost(&ev), Some(4.0), "the agent's own total replaces the estimate");
    let ev = feed(&mut a, response(&next["id"], json!({"stopReason": "end_turn", "usage": usage})));
    assert_eq!(cost(&ev), Some(4.0), "and later tokens do not add to it");
}
