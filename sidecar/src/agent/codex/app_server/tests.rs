use serde_json::{Value, json};
use swarm_core::plan::AgentKind;

use super::*;
use crate::agent::RateLimit;

fn cfg() -> AgentConfig {
    AgentConfig { model: Some("gpt-5-codex".into()), ..AgentConfig::of_kind(AgentKind::Codex) }
}

fn client(confined: bool) -> (AppServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let owned = vec!["src/**".to_string()];
    let c = AppServer::new(&cfg(), dir.path(), &owned, Pricing::default(), confined).expect("client");
    (c, dir)
}

fn feed(c: &mut AppServer, v: Value) -> Vec<AgentEvent> {
    c.parse_line(&v.to_string())
}

/// The JSON-RPC messages of the `Send` events, in order.
fn sent(events: &[AgentEvent]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| if let AgentEvent::Send(s) = e { Some(s) } else { None })
        .flat_map(|s| s.lines().map(|l| serde_json::from_str::<Value>(l).expect("json")).collect::<Vec<_>>())
        .collect()
}

/// Drives the handshake to a running turn; returns the thread's start params.
fn started(c: &mut AppServer, resume: Option<&str>) -> Value {
    let opening = c.opening("do the task", resume);
    assert!(!opening.close);
    let init: Value = serde_json::from_str(opening.input.trim()).expect("json");
    assert_eq!(init["method"], "initialize");
    assert_eq!(init["params"]["capabilities"]["experimentalApi"], true);
    let ev = feed(
        c,
        json!({"id": init["id"], "result": {"userAgent": "codex", "codexHome": "/h", "platformFamily": "unix", "platformOs": "linux"}}),
    );
    let msgs = sent(&ev);
    assert_eq!(msgs[0]["method"], "initialized");
    assert!(msgs[0].get("id").is_none(), "a notification");
    let thread = msgs[1].clone();
    let ev =
        feed(c, json!({"id": thread["id"], "result": {"thread": {"id": "th-1"}, "model": "gpt-5-codex"}}));
    assert_eq!(ev[0], AgentEvent::SessionStarted("th-1".into()));
    let turn = &sent(&ev)[0];
    assert_eq!(turn["method"], "turn/start");
    assert_eq!(turn["params"]["threadId"], "th-1");
    assert_eq!(turn["params"]["input"][0]["text"], "do the task");
    feed(
        c,
        json!({"id": turn["id"], "result": {"turn": {"id": "tu-1", "status": "inProgress", "items": []}}}),
    );
    thread
}

#[test]
fn a_thread_starts_in_the_worktree_with_swarms_sandbox_as_the_floor() {
    let (mut c, dir) = client(true);
    assert_eq!(
        c.argv(&cfg(), Some("th-0")),
        ["codex", "app-server", "-c", "features.default_mode_request_user_input=true"],
        "a resume is a request, not a flag"
    );
    let thread = started(&mut c, None);
    assert_eq!(thread["method"], "thread/start");
    let p = &thread["params"];
    assert_eq!(p["cwd"], dir.path().display().to_string());
    assert_eq!(p["model"], "gpt-5-codex");
    assert_eq!(p["approvalPolicy"], "untrusted");
    assert_eq!(p["sandbox"], "danger-full-access");

    let (mut free, _dir) = client(false);
    let thread = started(&mut free, None);
    assert_eq!(thread["params"]["sandbox"], "workspace-write", "unconfined: Codex confines itself");
}

#[test]
fn a_confined_turn_names_the_sandbox_external() {
    let (mut c, _dir) = client(true);
    started(&mut c, None);
    feed(
        &mut c,
        json!({"method": "turn/completed", "params": {"threadId": "th-1", "turn": {"id": "tu-1", "status": "completed"}}}),
    );
    let next = c.user_message("and then");
    let v: Value = serde_json::from_str(next.trim()).expect("json");
    assert_eq!(
        v["params"]["sandboxPolicy"],
        json!({"type": "externalSandbox", "networkAccess": "restricted"})
    );
}

#[test]
fn a_resumed_thread_is_asked_for_by_id_and_a_lost_one_is_replaced() {
    let (mut c, _dir) = client(false);
    let opening = c.opening("go on", Some("th-old"));
    let init: Value = serde_json::from_str(opening.input.trim()).expect("json");
    let ev = feed(&mut c, json!({"id": init["id"], "result": {}}));
    let resume = sent(&ev)[1].clone();
    assert_eq!(resume["method"], "thread/resume");
    assert_eq!(resume["params"]["threadId"], "th-old");
    let ev =
        feed(&mut c, json!({"id": resume["id"], "error": {"code": -32600, "message": "no rollout found"}}));
    assert!(
        matches!(&ev[0], AgentEvent::Note(n) if n.contains("th-old") && n.contains("no rollout found")),
        "{ev:?}"
    );
    assert_eq!(sent(&ev)[0]["method"], "thread/start");
}

#[test]
fn commands_and_edits_go_through_the_policy_and_the_verdict_goes_back() {
    let (mut c, dir) = client(false);
    started(&mut c, None);
    let ev = feed(
        &mut c,
        json!({"id": 7, "method": "item/commandExecution/requestApproval", "params": {"threadId": "th-1", "turnId": "tu-1", "itemId": "c1", "command": "cargo test", "startedAtMs": 1}}),
    );
    let AgentEvent::PermissionRequest { request_id, tool, input } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!((tool.as_str(), input["command"].as_str()), ("Bash", Some("cargo test")));
    let reply: Value =
        serde_json::from_str(c.permission_reply(request_id, &Verdict::Allow, input).expect("reply").trim())
            .expect("json");
    assert_eq!(reply, json!({"jsonrpc": "2.0", "id": 7, "result": {"decision": "accept"}}));
    assert!(c.permission_reply(request_id, &Verdict::Allow, input).is_none(), "answered once");

    // The item announces the files; the approval names only the item.
    let inside = dir.path().join("src/a.rs").display().to_string();
    feed(
        &mut c,
        json!({"method": "item/started", "params": {"item": {"type": "fileChange", "id": "f1", "status": "inProgress", "changes": [{"path": inside, "kind": {"type": "add"}, "diff": "+x"}]}}}),
    );
    let ev = feed(
        &mut c,
        json!({"id": "r8", "method": "item/fileChange/requestApproval", "params": {"itemId": "f1"}}),
    );
    let AgentEvent::PermissionRequest { request_id, tool, input } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!((tool.as_str(), input["file_path"].as_str()), ("Edit", Some(inside.as_str())));
    let reply = c.permission_reply(request_id, &Verdict::Deny("not now".into()), input).expect("reply");
    assert_eq!(serde_json::from_str::<Value>(reply.trim()).expect("json")["result"]["decision"], "decline");
}

#[test]
fn an_edit_touching_a_file_the_task_does_not_own_is_put_to_the_policy_as_that_file() {
    let (mut c, dir) = client(false);
    started(&mut c, None);
    let mine = dir.path().join("src/a.rs").display().to_string();
    feed(
        &mut c,
        json!({"method": "item/started", "params": {"item": {"type": "fileChange", "id": "f2", "changes": [{"path": mine}, {"path": "README.md"}]}}}),
    );
    let ev = feed(
        &mut c,
        json!({"id": 9, "method": "item/fileChange/requestApproval", "params": {"itemId": "f2"}}),
    );
    let AgentEvent::PermissionRequest { tool, input, .. } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!(input["file_path"], "README.md", "the file it may not edit: {input}");
    let policy = Policy::new(&cfg(), &["src/**".to_string()], dir.path()).expect("policy");
    assert!(matches!(policy.decide(tool, input), crate::agent::policy::Decision::Deny { .. }));
    // An edit whose files were never announced is declined.
    let ev = feed(
        &mut c,
        json!({"id": 10, "method": "item/fileChange/requestApproval", "params": {"itemId": "nope"}}),
    );
    assert_eq!(sent(&ev)[0]["result"]["decision"], "decline");
    // So is a command Codex does not name.
    let ev = feed(
        &mut c,
        json!({"id": 11, "method": "item/commandExecution/requestApproval", "params": {"itemId": "x"}}),
    );
    assert_eq!(sent(&ev)[0]["result"]["decision"], "decline");
}

#[test]
fn the_models_questions_reach_the_operator_and_the_answers_go_back_by_id() {
    let (mut c, _dir) = client(false);
    started(&mut c, None);
    let ev = feed(
        &mut c,
        json!({"id": 12, "method": "item/tool/requestUserInput", "params": {"threadId": "th-1", "turnId": "tu-1", "itemId": "u1", "isBlocking": true, "questions": [
            {"id": "db", "header": "Database", "question": "Which database?", "isOther": true, "isSecret": false, "options": [{"label": "SQLite", "description": "a file"}, {"label": "Postgres", "description": ""}]},
            {"id": "name", "header": "", "question": "A name?", "isOther": true, "isSecret": false, "options": null}
        ]}}),
    );
    let AgentEvent::UserQuestion { request_id, input, questions } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!(questions.len(), 2);
    assert_eq!(questions[0].options, ["SQLite", "Postgres"]);
    assert_eq!(questions[0].header, "Database");
    let answers = [
        ("Which database?".to_string(), "Postgres".to_string()),
        ("A name?".to_string(), "swarm".to_string()),
    ];
    let reply: Value =
        serde_json::from_str(c.answer_reply(request_id, input, &answers).expect("reply").trim())
            .expect("json");
    assert_eq!(reply["id"], 12);
    assert_eq!(
        reply["result"]["answers"],
        json!({"db": {"answers": ["Postgres"]}, "name": {"answers": ["swarm"]}})
    );
}

#[test]
fn usage_is_the_processes_share_of_the_threads_totals_priced_as_its_model() {
    let (mut c, _dir) = client(false);
    started(&mut c, None);
    let totals = |input: u64, cached: u64, output: u64, last_in: u64, last_cached: u64, last_out: u64| {
        json!({"method": "thread/tokenUsage/updated", "params": {"threadId": "th-1", "turnId": "tu-1", "tokenUsage": {
            "total": {"totalTokens": 0, "inputTokens": input, "cachedInputTokens": cached, "cacheWriteInputTokens": 0, "outputTokens": output, "reasoningOutputTokens": 0},
            "last": {"totalTokens": 0, "inputTokens": last_in, "cachedInputTokens": last_cached, "cacheWriteInputTokens": 0, "outputTokens": last_out, "reasoningOutputTokens": 0},
            "modelContextWindow": null}}})
    };
    let usage = |ev: &[AgentEvent]| {
        ev.iter().rev().find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None })
    };
    let u = usage(&feed(&mut c, totals(100, 40, 7, 100, 40, 7))).expect("usage");
    assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens), (60, 40, 7));
    assert!((u.cost_usd - (60.0 * 1.25 + 40.0 * 0.125 + 7.0 * 10.0) / 1e6).abs() < 1e-12, "{u:?}");
    assert!(
        usage(&feed(&mut c, totals(100, 40, 7, 100, 40, 7))).is_none(),
        "the same totals again count nothing"
    );
    let u = usage(&feed(&mut c, totals(300, 140, 17, 200, 100, 10))).expect("usage");
    assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens), (160, 140, 17));

    // The next process resumes the thread: its totals hold the old calls.
    c.new_process();
    started(&mut c, Some("th-1"));
    let u = usage(&feed(&mut c, totals(500, 240, 20, 200, 100, 3))).expect("usage");
    assert_eq!(
        (u.input_tokens, u.cache_read_tokens, u.output_tokens),
        (100, 100, 3),
        "only this process's call"
    );
}

#[test]
fn a_turn_ends_with_its_last_message_or_its_error_and_a_usage_limit_waits_for_its_reset() {
    let (mut c, _dir) = client(false);
    started(&mut c, None);
    let ev = feed(
        &mut c,
        json!({"method": "item/started", "params": {"item": {"type": "commandExecution", "id": "c1", "command": "cargo test", "status": "inProgress"}}}),
    );
    assert_eq!(ev, [AgentEvent::Step("Bash: cargo test".into())]);
    feed(
        &mut c,
        json!({"method": "turn/plan/updated", "params": {"plan": [{"step": "a", "status": "completed"}, {"step": "b", "status": "pending"}]}}),
    );
    feed(
        &mut c,
        json!({"method": "item/completed", "params": {"item": {"type": "agentMessage", "id": "m1", "text": "Done.\nAll of it."}}}),
    );
    let ev = feed(
        &mut c,
        json!({"method": "turn/completed", "params": {"turn": {"id": "tu-1", "status": "completed", "error": null}}}),
    );
    assert_eq!(
        ev,
        [AgentEvent::TurnEnded(TurnEnd { ok: true, text: "Done.\nAll of it.".into(), rate_limit: None })]
    );

    c.user_message("more");
    let reset = 4_000_000_000u64;
    feed(
        &mut c,
        json!({"method": "account/rateLimits/updated", "params": {"rateLimits": {"primary": {"usedPercent": 100.0, "windowDurationMins": 300, "resetsAt": reset}, "secondary": {"usedPercent": 40.0, "windowDurationMins": 10080, "resetsAt": reset + 9}}}}),
    );
    let ev = feed(
        &mut c,
        json!({"method": "error", "params": {"willRetry": false, "threadId": "th-1", "turnId": "tu-2", "error": {"message": "You've hit your usage limit.", "codexErrorInfo": "usageLimitExceeded", "additionalDetails": null}}}),
    );
    let limit = RateLimit { reset_unix_ms: reset * 1000, kind: "five_hour".into() };
    assert_eq!(ev[0], AgentEvent::RateLimited(limit.clone()));
    let ev = feed(
        &mut c,
        json!({"method": "turn/completed", "params": {"turn": {"id": "tu-2", "status": "failed", "error": {"message": "You've hit your usage limit.", "codexErrorInfo": "usageLimitExceeded"}}}}),
    );
    assert!(
        matches!(&ev[0], AgentEvent::TurnEnded(t) if !t.ok && t.rate_limit == Some(limit.clone())),
        "{ev:?}"
    );
}

#[test]
fn a_stop_interrupts_the_turn_and_cancels_what_is_open() {
    let (mut c, _dir) = client(false);
    assert!(c.stop_message().is_none(), "nothing runs yet");
    started(&mut c, None);
    feed(
        &mut c,
        json!({"id": 5, "method": "item/commandExecution/requestApproval", "params": {"command": "rm -rf /"}}),
    );
    let text = c.stop_message().expect("a stop");
    let msgs: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(msgs[0], json!({"jsonrpc": "2.0", "id": 5, "result": {"decision": "cancel"}}));
    assert_eq!(msgs[1]["method"], "turn/interrupt");
    assert_eq!(msgs[1]["params"], json!({"threadId": "th-1", "turnId": "tu-1"}));
    let ev = feed(
        &mut c,
        json!({"method": "turn/completed", "params": {"turn": {"id": "tu-1", "status": "interrupted"}}}),
    );
    assert!(matches!(&ev[0], AgentEvent::TurnEnded(t) if !t.ok));
    assert!(c.stop_message().is_none(), "the turn is over");
}

#[test]
fn hostile_lines_never_panic() {
    let (mut c, _dir) = client(true);
    started(&mut c, None);
    for l in [
        "",
        "}",
        "[1]",
        r#"{"method":"item/started"}"#,
        r#"{"method":"item/started","params":{"item":{"type":"fileChange","id":"f","changes":[1,{"path":2}]}}}"#,
        r#"{"method":"item/completed","params":{"item":{"type":"fileChange","status":"completed","changes":"x"}}}"#,
        r#"{"method":"thread/tokenUsage/updated","params":{"tokenUsage":{"total":{"inputTokens":-4,"cachedInputTokens":99}}}}"#,
        r#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":"full"}}}}"#,
        r#"{"method":"turn/completed","params":{}}"#,
        r#"{"method":"turn/completed","params":{"turn":{"status":7}}}"#,
        r#"{"method":"error","params":{"error":5}}"#,
        r#"{"id":{"x":1},"method":"item/tool/requestUserInput"}"#,
        r#"{"id":3,"method":"item/tool/requestUserInput","params":{"questions":[{"id":"","question":"q"},7]}}"#,
        r#"{"id":99,"result":{}}"#,
        r#"{"id":4,"method":"some/new/request","params":{}}"#,
    ] {
        let _ = c.parse_line(l);
    }
    let ev = c.parse_line(r#"{"id":4,"method":"some/new/request","params":{}}"#);
    assert_eq!(sent(&ev)[0]["error"]["code"], -32601);
    assert!(matches!(c.parse_line("nope").as_slice(), [AgentEvent::Unparseable(_)]));
}

#[test]
fn a_shell_wrapped_command_is_judged_by_its_script() {
    use super::notifications::script_of;
    assert_eq!(script_of("/bin/bash -lc 'cp a b'"), "cp a b");
    assert_eq!(script_of(r#"/bin/bash -lc 'echo '"'"'hi'"'"' > x'"#), "echo 'hi' > x");
    assert_eq!(script_of("bash -c 'cargo test && rm -rf /'"), "cargo test && rm -rf /", "the whole script");
    assert_eq!(script_of("/bin/bash -lc 'a' extra"), "/bin/bash -lc 'a' extra", "not one script");
    assert_eq!(script_of("python -c 'x'"), "python -c 'x'", "not a shell");
    assert_eq!(script_of("cargo test"), "cargo test");
    assert_eq!(script_of("bash -lc 'unterminated"), "bash -lc 'unterminated");
}

#[test]
fn codexs_question_before_an_mcp_tool_call_is_the_policys_and_other_forms_are_declined() {
    let (mut c, _dir) = client(false);
    started(&mut c, None);
    let ev = feed(
        &mut c,
        json!({"id": 20, "method": "mcpServer/elicitation/request", "params": {
        "threadId": "th-1", "turnId": "tu-1", "serverName": "swarm", "mode": "form",
        "_meta": {"codex_approval_kind": "mcp_tool_call", "tool_params": {"step": "x", "percent": 5}},
        "message": "Allow the swarm MCP server to run tool \"progress\"?", "requestedSchema": {"type": "object", "properties": {}}}}),
    );
    let AgentEvent::PermissionRequest { request_id, tool, input } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!(tool, "mcp__swarm__progress");
    assert_eq!(input["percent"], 5);
    let reply: Value =
        serde_json::from_str(c.permission_reply(request_id, &Verdict::Allow, input).expect("reply").trim())
            .expect("json");
    assert_eq!(reply["result"], json!({"action": "accept", "content": {}, "_meta": null}));

    let ev = feed(
        &mut c,
        json!({"id": 21, "method": "mcpServer/elicitation/request", "params": {
        "serverName": "db", "mode": "form", "_meta": null, "message": "Your password?", "requestedSchema": {}}}),
    );
    assert_eq!(sent(&ev)[0]["result"]["action"], "decline");
    let ev = feed(
        &mut c,
        json!({"id": 22, "method": "mcpServer/elicitation/request", "params": {
        "serverName": "a b", "_meta": {"codex_approval_kind": "mcp_tool_call"}, "message": "run tool \"x\"?"}}),
    );
    assert_eq!(sent(&ev)[0]["result"]["action"], "decline", "a server name no rule can name");
}
