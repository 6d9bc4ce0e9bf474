use swarm_core::Usage;

use super::super::{AskedQuestion, TurnEnd};
use super::*;

fn parse_all(lines: &[&str]) -> (Claude, Vec<AgentEvent>) {
    let mut c = Claude::default();
    let events = lines.iter().flat_map(|l| c.parse_line(l)).collect();
    (c, events)
}

fn cfg() -> AgentConfig {
    AgentConfig {
        program: "/opt/claude".into(),
        model: Some("opus".into()),
        max_turns: 30,
        max_budget_usd: 2.5,
        allowed_tools: vec!["Read".into(), "Bash(cargo test:*)".into()],
        permission_mode: Some("acceptEdits".into()),
        append_system_prompt: Some("be brief".into()),
        extra_args: vec!["--debug".into()],
        deny: ["Read(secret.txt)", "Bash(cat:*)"]
            .iter()
            .map(|r| swarm_core::plan::PermissionRule::parse(r).expect("a rule"))
            .collect(),
        ..AgentConfig::of_kind(AgentKind::Claude)
    }
}

#[test]
fn argv_carries_every_setting_and_the_resume() {
    let c = Claude::default();
    let v = c.argv(&cfg(), Some("sess-1"));
    let joined = v.join(" ");
    assert!(joined.starts_with(
        "/opt/claude -p --output-format stream-json --input-format stream-json --verbose --permission-prompt-tool stdio"
    ));
    for pair in [
        "--model opus",
        "--max-turns 30",
        "--max-budget-usd 2.5",
        "--allowedTools Read,Bash(cargo test:*)",
        "--disallowedTools Read(secret.txt),Bash(cat:*)",
        "--permission-mode acceptEdits",
        "--append-system-prompt be brief",
        "--resume sess-1 --debug",
    ] {
        assert!(joined.contains(pair), "{pair} in {joined}");
    }
    let bare = AgentConfig { model: None, max_turns: 0, max_budget_usd: 0.0, ..cfg() };
    assert!(!c.argv(&bare, None).iter().any(|a| a == "--resume" || a == "--model" || a == "--max-turns"));
}

#[test]
fn swarms_tools_go_in_through_mcp_config_and_a_failed_server_is_noticed() {
    let server = crate::worker_mcp::sample_stdio();
    let argv = Claude::default().argv(&AgentConfig { mcp: Some(server), ..cfg() }, None);
    let at = argv.iter().position(|a| a == "--mcp-config").expect("--mcp-config");
    let config: Value = serde_json::from_str(&argv[at + 1]).expect("json");
    assert_eq!(
        config,
        json!({"mcpServers": {"swarm": {"type": "stdio", "command": "/usr/bin/swarm-sidecar",
               "args": ["__mcp-bridge"], "env": {"SWARM_MCP_TOKEN": "t0k"}}}})
    );
    assert!(!argv.iter().any(|a| a == "--strict-mcp-config"), "the user's own servers stay");

    let mut c = Claude::default();
    let init = |status: &str| {
        format!(
            r#"{{"type":"system","subtype":"init","session_id":"s","mcp_servers":[{{"name":"other","status":"failed"}},{{"name":"swarm","status":"{status}"}}]}}"#
        )
    };
    let failed = c.parse_line(&init("failed"));
    assert!(failed.contains(&AgentEvent::ToolsUnavailable("failed".into())), "{failed:?}");
    let connected = c.parse_line(&init("connected"));
    assert!(!connected.iter().any(|e| matches!(e, AgentEvent::ToolsUnavailable(_))), "{connected:?}");
}

#[test]
fn the_opening_registers_the_pre_tool_hook_before_the_task() {
    let mut c = Claude::default();
    let opening = c.opening("the task", None);
    let lines: Vec<Value> = opening.input.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["request"]["subtype"], "initialize");
    assert_eq!(lines[0]["request"]["hooks"]["PreToolUse"][0]["hookCallbackIds"][0], PRE_TOOL_USE_HOOK);
    assert_eq!(lines[1]["message"]["content"], "the task");
    assert!(!opening.close);

    let (_, ev) = parse_all(&[
        r#"{"type":"control_response","response":{"subtype":"success","request_id":"swarm-initialize","response":{"commands":[]}}}"#,
        r#"{"type":"control_request","request_id":"h1","request":{"subtype":"hook_callback","callback_id":"swarm-pre-tool-use","input":{"hook_event_name":"PreToolUse","permission_mode":"acceptEdits","tool_name":"Write","tool_input":{"file_path":"/w/x.txt","content":"x"},"tool_use_id":"t1"},"tool_use_id":"t1"}}"#,
        r#"{"type":"control_request","request_id":"h2","request":{"subtype":"hook_callback","callback_id":"someone-elses","input":{}}}"#,
    ]);
    assert_eq!(
        ev[0],
        AgentEvent::ToolHook {
            request_id: "h1".into(),
            tool: "Write".into(),
            input: json!({"file_path": "/w/x.txt", "content": "x"})
        }
    );
    assert!(matches!(&ev[1], AgentEvent::UnsupportedControl { request_id, .. } if request_id == "h2"));
    let deny: Value =
        serde_json::from_str(c.hook_reply("h1", Some("outside")).expect("reply").trim()).expect("json");
    assert_eq!(deny["response"]["request_id"], "h1");
    assert_eq!(
        deny["response"]["response"]["hookSpecificOutput"],
        json!({"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "outside"})
    );
    let go_on: Value = serde_json::from_str(c.hook_reply("h1", None).expect("reply").trim()).expect("json");
    assert_eq!(go_on["response"]["response"], json!({}));
}

#[test]
fn ask_user_question_becomes_questions_answered_in_updated_input() {
    let (_, ev) = parse_all(&[
        r#"{"type":"control_request","request_id":"q1","request":{"subtype":"can_use_tool","tool_name":"AskUserQuestion","input":{"questions":[{"question":"Which database?","header":"DB","options":[{"label":"SQLite","description":"a file"},{"label":"Postgres"}],"multiSelect":false},{"question":"Extras?","options":[{"label":"a"},{"label":"b"}],"multiSelect":true}]},"tool_use_id":"t1","requires_user_interaction":true}}"#,
        r#"{"type":"control_request","request_id":"q2","request":{"subtype":"can_use_tool","tool_name":"AskUserQuestion","input":{"questions":[]}}}"#,
    ]);
    let AgentEvent::UserQuestion { request_id, input, questions } = &ev[0] else { panic!("{ev:?}") };
    assert_eq!(request_id, "q1");
    assert_eq!(
        questions[0],
        AskedQuestion {
            text: "Which database?".into(),
            header: "DB".into(),
            options: vec!["SQLite".into(), "Postgres".into()],
            multi_select: false
        }
    );
    assert!(questions[1].multi_select);
    assert!(
        matches!(&ev[1], AgentEvent::PermissionRequest { tool, .. } if tool == "AskUserQuestion"),
        "no question to relay: an ordinary permission"
    );
    let c = Claude::default();
    let answers =
        vec![("Which database?".to_string(), "Postgres".to_string()), ("Extras?".into(), "a, b".into())];
    let reply: Value =
        serde_json::from_str(c.answer_reply("q1", input, &answers).expect("reply").trim()).expect("json");
    let r = &reply["response"]["response"];
    assert_eq!(r["behavior"], "allow");
    assert_eq!(r["updatedInput"]["answers"], json!({"Which database?": "Postgres", "Extras?": "a, b"}));
    assert_eq!(r["updatedInput"]["questions"], input["questions"], "the questions go back as they came");
}

#[test]
fn retries_warnings_and_the_clis_own_denials_are_reported() {
    let (_, ev) = parse_all(&[
        r#"{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"retry_delay_ms":1500,"error_status":529,"error":"overloaded","uuid":"u","session_id":"s"}"#,
        r#"{"type":"system","subtype":"permission_denied","tool_name":"Read","tool_use_id":"t1","decision_reason_type":"rule","message":"Permission to read secret.txt has been denied.","uuid":"u","session_id":"s"}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1750000000,"rateLimitType":"five_hour","utilization":0.91,"surpassedThreshold":0.9},"uuid":"u","session_id":"s"}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","rateLimitType":"five_hour","utilization":0.2},"uuid":"u","session_id":"s"}"#,
    ]);
    assert_eq!(
        ev,
        vec![
            AgentEvent::Note("API error 529: overloaded; retry 2 of 10 in 2 s".into()),
            AgentEvent::Denied {
                tool: "Read".into(),
                why: "Permission to read secret.txt has been denied.".into()
            },
            AgentEvent::Note("usage limit warning (five_hour, 90% used, resets at unix 1750000000)".into()),
        ],
        "a window well within its limit says nothing"
    );
}

#[test]
fn messages_on_stdin_have_the_sdk_shape() {
    let mut c = Claude::default();
    let v: Value = serde_json::from_str(c.user_message("do \"it\"\n").trim()).expect("json");
    assert_eq!(v["type"], "user");
    assert_eq!(v["message"]["content"], "do \"it\"\n");
    assert_eq!(v["parent_tool_use_id"], Value::Null);
    let allow = c.permission_reply("r1", &Verdict::Allow, &json!({"command": "ls"})).expect("reply");
    let v: Value = serde_json::from_str(allow.trim()).expect("json");
    assert_eq!(v["response"]["request_id"], "r1");
    assert_eq!(v["response"]["response"]["updatedInput"]["command"], "ls");
    let deny = c.permission_reply("r2", &Verdict::Deny("no".into()), &json!({})).expect("reply");
    let v: Value = serde_json::from_str(deny.trim()).expect("json");
    assert_eq!(v["response"]["response"], json!({"behavior": "deny", "message": "no"}));
    let refuse: Value = serde_json::from_str(c.refuse_control("r3").expect("reply").trim()).expect("json");
    assert_eq!(refuse["response"]["subtype"], "error");
}

#[test]
fn a_full_turn_parses_into_events() {
    let (_, ev) = parse_all(&[
        r#"{"type":"system","subtype":"init","session_id":"s-1","tools":["Edit"],"model":"x","new_field":1}"#,
        r#"{"type":"assistant","message":{"id":"m1","model":"x","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Editing now.\nmore"}],"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100}},"session_id":"s-1"}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"/w/src/a.rs","old_string":"a","new_string":"b"}},{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"src/denied.rs"}}],"usage":{"input_tokens":10,"output_tokens":7,"cache_read_input_tokens":100}}}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"},{"type":"tool_result","tool_use_id":"t2","content":"denied","is_error":true}]}}"#,
        r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"tool_use","id":"t3","name":"TodoWrite","input":{"todos":[{"content":"a","status":"completed"},{"content":"b","status":"in_progress"},{"content":"c","status":"pending"}]}},{"type":"tool_use","id":"t4","name":"Bash","input":{"command":"cargo test"}}],"usage":{"input_tokens":3,"output_tokens":2}}}"#,
        r#"{"type":"control_request","request_id":"req-1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"cargo publish"},"tool_use_id":"t5","permission_suggestions":[],"blocked_path":null}}"#,
        r#"{"type":"control_request","request_id":"req-2","request":{"subtype":"hook_callback","callback_id":"x"}}"#,
        r#"{"type":"control_cancel_request","request_id":"req-1"}"#,
        r#"{"type":"stream_event","uuid":"u","session_id":"s-1","event":{}}"#,
        r#"{"type":"brand_new_type","x":1}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"duration_api_ms":1,"num_turns":3,"result":"Done: edited a.rs","session_id":"s-1","total_cost_usd":0.42,"usage":{"input_tokens":13,"output_tokens":9,"cache_read_input_tokens":100,"cache_creation_input_tokens":4}}"#,
    ]);
    assert_eq!(ev[0], AgentEvent::SessionStarted("s-1".into()));
    assert!(ev.contains(&AgentEvent::Note("Editing now.".into())));
    assert!(ev.contains(&AgentEvent::Step("Edit /w/src/a.rs".into())));
    assert!(
        ev.contains(&AgentEvent::FilesChanged(vec!["/w/src/a.rs".into()])),
        "the denied write is not a change"
    );
    assert!(ev.contains(&AgentEvent::Todo { done: 1, total: 3 }));
    assert!(ev.contains(&AgentEvent::Step("Bash: cargo test".into())));
    assert!(ev.iter().any(|e| matches!(e, AgentEvent::PermissionRequest { request_id, tool, input }
        if request_id == "req-1" && tool == "Bash" && input["command"] == "cargo publish")));
    assert!(ev.contains(&AgentEvent::UnsupportedControl {
        request_id: "req-2".into(),
        subtype: "hook_callback".into()
    }));
    assert!(ev.contains(&AgentEvent::ControlCancelled { request_id: "req-1".into() }));
    let live: Vec<&Usage> =
        ev.iter().filter_map(|e| if let AgentEvent::Usage(u) = e { Some(u) } else { None }).collect();
    assert_eq!(live[1].output_tokens, 7, "one API message counted once, at its largest");
    assert_eq!(live[2].output_tokens, 9);
    let last = live.last().expect("usage");
    assert_eq!((last.input_tokens, last.output_tokens, last.cache_creation_tokens), (13, 9, 4));
    assert_eq!(last.cost_usd, 0.42);
    assert_eq!(
        ev.last(),
        Some(&AgentEvent::TurnEnded(TurnEnd {
            ok: true,
            text: "Done: edited a.rs".into(),
            rate_limit: None
        }))
    );
}

#[test]
fn results_count_their_own_turn_and_the_cost_is_the_running_total() {
    let r = |cost: f64, out: u64| {
        format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s","total_cost_usd":{cost},"usage":{{"input_tokens":1,"output_tokens":{out}}}}}"#
        )
    };
    let assistant = r#"{"type":"assistant","message":{"id":"m9","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":50000,"output_tokens":3}}}"#;
    let mut c = Claude::default();
    c.parse_line(&r(0.10, 5));
    let live = c.parse_line(assistant);
    let u = live
        .iter()
        .find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None })
        .expect("live usage");
    assert_eq!((u.input_tokens, u.output_tokens), (50_001, 8), "the live turn adds to the finished ones");
    assert!(
        (u.cost_usd - (0.10 + 0.15 + 0.000045)).abs() < 1e-9,
        "the latest total plus the live call priced at sonnet's prices: {u:?}"
    );
    let ev = c.parse_line(&r(0.25, 7));
    let u =
        ev.iter().find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None }).expect("usage");
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cost_usd),
        (2, 12, 0.25),
        "each result's usage is its own turn's (replacing the live estimate); the cost is the latest total"
    );
    c.new_process();
    let ev = c.parse_line(&r(0.05, 1));
    let u =
        ev.iter().find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None }).expect("usage");
    assert_eq!((u.output_tokens, u.cost_usd), (1, 0.05), "a new process starts its own count");
}

#[test]
fn rate_limits_are_detected_with_their_reset() {
    let (_, ev) = parse_all(&[
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","rateLimitType":"five_hour"},"uuid":"u","session_id":"s"}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1750000000,"rateLimitType":"five_hour"},"uuid":"u","session_id":"s"}"#,
        r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"s","result":"API Error"}"#,
    ]);
    assert!(ev.contains(&AgentEvent::Note("usage limit warning (five_hour)".into())));
    let Some(AgentEvent::TurnEnded(t)) = ev.last() else { panic!("turn end: {ev:?}") };
    assert!(!t.ok);
    assert_eq!(t.rate_limit, Some(RateLimit { reset_unix_ms: 1_750_000_000_000, kind: "five_hour".into() }));

    let (_, ev) = parse_all(&[
        r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s","result":"Claude AI usage limit reached|1750000123"}"#,
    ]);
    let Some(AgentEvent::TurnEnded(t)) = ev.last() else { panic!("turn end") };
    assert_eq!(t.rate_limit.as_ref().map(|r| r.reset_unix_ms), Some(1_750_000_123_000));
    assert!(!t.ok, "a usage-limit result is not a success even when is_error is false");

    let (_, ev) = parse_all(&[
        r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"s","api_error_status":529}"#,
    ]);
    let Some(AgentEvent::TurnEnded(t)) = ev.last() else { panic!("turn end") };
    assert_eq!(t.rate_limit, Some(RateLimit::default()));
    assert!(t.text.contains("error_during_execution"));

    let (_, ev) = parse_all(&[
        r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s","num_turns":30}"#,
    ]);
    let Some(AgentEvent::TurnEnded(t)) = ev.last() else { panic!("turn end") };
    assert_eq!((t.ok, t.rate_limit.is_none()), (false, true));
    assert!(t.text.contains("error_max_turns"));
}

#[test]
fn hostile_lines_never_panic() {
    let huge = format!(
        r#"{{"type":"assistant","message":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
        "x".repeat(1 << 20)
    );
    let bad = [
        "",
        "{",
        "[1,2]",
        "null",
        "\"str\"",
        "{\"type\":5}",
        r#"{"type":"assistant"}"#,
        r#"{"type":"assistant","message":{"content":"not a list"}}"#,
        r#"{"type":"assistant","message":{"content":[1,null,{"type":"tool_use"}],"id":7,"usage":"x"}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result"}]}}"#,
        r#"{"type":"result","total_cost_usd":-5,"usage":{"input_tokens":-1}}"#,
        r#"{"type":"result","total_cost_usd":1e308}"#,
        r#"{"type":"control_request","request":{"subtype":"can_use_tool"}}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":"soon"}}"#,
        huge.as_str(),
    ];
    let mut c = Claude::default();
    for l in bad {
        let _ = c.parse_line(l);
    }
    assert!(matches!(c.parse_line("{").as_slice(), [AgentEvent::Unparseable(_)]));
    assert!(matches!(c.parse_line("[]").as_slice(), [AgentEvent::Unparseable(_)]));
    assert!(c.usage().cost_usd <= swarm_core::usage::MAX_COST_USD);
}
