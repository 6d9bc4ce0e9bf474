//! Claude Code through its stream-json interface (what the Claude Agent
//! SDK drives): `claude -p --input-format stream-json --output-format
//! stream-json --verbose --permission-prompt-tool stdio`. User messages go
//! in on stdin, one JSON object a line; permission requests come out as
//! `control_request` (subtype `can_use_tool`) and are answered on stdin
//! with a `control_response`.
//!
//! # Ownership at the edit
//!
//! The CLI asks (`can_use_tool`) only for what its own permission mode
//! leaves open: under `acceptEdits`, an `--allowedTools` rule, or in a
//! checkout outside `.git/` it writes without asking. So the first stdin
//! line registers a `PreToolUse` hook (an `initialize` control request, as
//! the SDK registers its hook callbacks); the CLI then sends a
//! `hook_callback` before every tool use in every mode, and the sidecar
//! denies there what the task may not do (an edit outside its owned files,
//! a deny rule). The sandbox stays the floor beneath it.
//!
//! # Questions
//!
//! The model asks the user through the `AskUserQuestion` tool: a
//! `can_use_tool` request with the questions and their options. It is
//! answered `allow` with `updatedInput.answers` (question text → chosen
//! label), which the CLI hands back to the model as the user's answer.
//!
//! # Usage accounting
//!
//! With stream-json input one process serves every turn; each API call's
//! tokens are priced as its assistant message arrives, and each turn's
//! `result` replaces the estimate with the CLI's own running total
//! ([`ClaudeSpend`]). Across processes (a resume is a new process) each
//! reports only its own spending, so the driver adds the processes' totals.

use std::collections::HashMap;

use serde_json::{Value, json};
use swarm_core::plan::AgentKind;

use super::cost::{ClaudeSpend, Pricing};

use crate::worker_mcp::{SERVER_NAME, StdioServer};

use super::{
    Agent, AgentConfig, AgentEvent, AskedQuestion, FollowUp, Opening, RateLimit, TurnEnd, Verdict, clip,
    now_unix_ms, step_for_tool, unix_to_ms, usage_limit_in_text,
};

const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];
/// The CLI's own tool for asking the user.
const ASK_USER_QUESTION: &str = "AskUserQuestion";
/// The callback id of the sidecar's `PreToolUse` hook.
const PRE_TOOL_USE_HOOK: &str = "swarm-pre-tool-use";
/// At most this many questions (and options per question) are relayed.
const MAX_QUESTIONS: usize = 8;
const MAX_OPTIONS: usize = 16;

#[derive(Debug, Default)]
pub struct Claude {
    session: Option<String>,
    spend: ClaudeSpend,
    /// Edits in flight: tool_use id → the path, reported once the tool's
    /// result says it worked (a denied edit changed nothing).
    pending_edits: HashMap<String, String>,
    /// A `rate_limit_event` said "rejected" in this turn.
    rejected: Option<RateLimit>,
    /// The last assistant text, for a usage-limit message the result lacks.
    last_text: String,
}

impl Agent for Claude {
    fn kind(&self) -> AgentKind {
        AgentKind::Claude
    }

    fn argv(&self, cfg: &AgentConfig, resume: Option<&str>) -> Vec<String> {
        let mut v: Vec<String> = [
            cfg.program.as_str(),
            "-p",
            "--output-format",
            "stream-json",
            "--input-format",
            "stream-json",
            "--verbose",
            "--permission-prompt-tool",
            "stdio",
        ]
        .map(String::from)
        .to_vec();
        let mut opt = |k: &str, val: String| {
            v.push(k.to_string());
            v.push(val);
        };
        if let Some(m) = &cfg.model {
            opt("--model", m.clone());
        }
        if cfg.max_turns > 0 {
            opt("--max-turns", cfg.max_turns.to_string());
        }
        if cfg.max_budget_usd > 0.0 {
            opt("--max-budget-usd", cfg.max_budget_usd.to_string());
        }
        if !cfg.allowed_tools.is_empty() {
            opt("--allowedTools", cfg.allowed_tools.join(","));
        }
        if !cfg.deny.is_empty() {
            // The CLI decides reads inside its directory and read-only
            // commands itself, without asking: a deny rule the policy holds
            // would never be consulted for them. Handed over, the CLI
            // refuses them too.
            let rules: Vec<String> = cfg.deny.iter().map(ToString::to_string).collect();
            opt("--disallowedTools", rules.join(","));
        }
        if let Some(m) = &cfg.permission_mode {
            opt("--permission-mode", m.clone());
        }
        if let Some(p) = &cfg.append_system_prompt {
            opt("--append-system-prompt", p.clone());
        }
        if let Some(server) = &cfg.mcp {
            opt("--mcp-config", mcp_config(server));
        }
        if let Some(s) = resume {
            opt("--resume", s.to_string());
        }
        v.extend(cfg.extra_args.iter().cloned());
        v
    }

    fn opening(&mut self, prompt: &str, _resume: Option<&str>) -> Opening {
        // `onFailure: block`: a hook that cannot be answered stops the
        // tool instead of letting it through.
        let hooks = json!({"PreToolUse": [
            {"matcher": null, "hookCallbackIds": [PRE_TOOL_USE_HOOK], "onFailure": "block"},
        ]});
        let init = json!({
            "type": "control_request",
            "request_id": "swarm-initialize",
            "request": {"subtype": "initialize", "hooks": hooks},
        });
        Opening { input: format!("{init}\n{}", self.user_message(prompt)), close: false }
    }

    fn follow_up(&self) -> FollowUp {
        FollowUp::Stdin
    }

    fn takes_system_prompt(&self) -> bool {
        true
    }

    fn user_message(&mut self, text: &str) -> String {
        let m = json!({
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": null,
            "session_id": self.session.as_deref().unwrap_or("default"),
        });
        format!("{m}\n")
    }

    fn permission_reply(&mut self, request_id: &str, verdict: &Verdict, input: &Value) -> Option<String> {
        let response = match verdict {
            Verdict::Allow => json!({"behavior": "allow", "updatedInput": input}),
            Verdict::Deny(message) => json!({"behavior": "deny", "message": message}),
        };
        Some(control_success(request_id, response))
    }

    fn hook_reply(&self, request_id: &str, deny: Option<&str>) -> Option<String> {
        let response = match deny {
            Some(reason) => json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }}),
            // No opinion: the CLI's own permission flow goes on.
            None => json!({}),
        };
        Some(control_success(request_id, response))
    }

    fn answer_reply(&self, request_id: &str, input: &Value, answers: &[(String, String)]) -> Option<String> {
        let mut updated = input.clone();
        if let Some(obj) = updated.as_object_mut() {
            let map: serde_json::Map<String, Value> =
                answers.iter().map(|(q, a)| (q.clone(), Value::String(a.clone()))).collect();
            obj.insert("answers".into(), Value::Object(map));
        }
        Some(control_success(request_id, json!({"behavior": "allow", "updatedInput": updated})))
    }

    fn refuse_control(&self, request_id: &str) -> Option<String> {
        let m = json!({
            "type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": "not supported by swarm"},
        });
        Some(format!("{m}\n"))
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let v = match super::json_object(line) {
            Ok(v) => v,
            Err(unparseable) => return vec![unparseable],
        };
        let mut out = Vec::new();
        match v.get("type").and_then(Value::as_str).unwrap_or_default() {
            "system" => self.system(&v, &mut out),
            "assistant" => self.assistant(&v, &mut out),
            "user" => self.user(&v, &mut out),
            "result" => self.result(&v, &mut out),
            "rate_limit_event" => self.rate_limit(&v, &mut out),
            "control_request" => control_request(&v, &mut out),
            "control_cancel_request" => {
                if let Some(id) = str_at(&v, "request_id") {
                    out.push(AgentEvent::ControlCancelled { request_id: id.to_string() });
                }
            }
            // stream_event, control_response, keep_alive, anything newer.
            _ => {}
        }
        out
    }

    fn new_process(&mut self) {
        let session = self.session.take();
        self.spend.new_process();
        let spend = std::mem::take(&mut self.spend);
        *self = Claude { session, spend, ..Claude::default() };
    }
}

impl Claude {
    /// Claude Code for an attempt whose calls are priced with `pricing`.
    pub fn new(pricing: Pricing) -> Claude {
        Claude { spend: ClaudeSpend::new(pricing), ..Claude::default() }
    }
}

fn control_success(request_id: &str, response: Value) -> String {
    let m = json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    });
    format!("{m}\n")
}

fn str_at<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn control_request(v: &Value, out: &mut Vec<AgentEvent>) {
    let (Some(id), Some(req)) = (str_at(v, "request_id"), v.get("request")) else {
        out.push(AgentEvent::Unparseable("control_request without request_id or request".into()));
        return;
    };
    let subtype = str_at(req, "subtype").unwrap_or_default();
    let input = req.get("input").cloned().unwrap_or_else(|| json!({}));
    match (subtype, str_at(req, "tool_name")) {
        ("can_use_tool", Some(ASK_USER_QUESTION)) => match asked_questions(&input) {
            Some(questions) => {
                out.push(AgentEvent::UserQuestion { request_id: id.to_string(), input, questions })
            }
            None => out.push(AgentEvent::PermissionRequest {
                request_id: id.to_string(),
                tool: ASK_USER_QUESTION.into(),
                input,
            }),
        },
        ("can_use_tool", Some(tool)) => out.push(AgentEvent::PermissionRequest {
            request_id: id.to_string(),
            tool: tool.to_string(),
            input,
        }),
        ("hook_callback", _) if str_at(req, "callback_id") == Some(PRE_TOOL_USE_HOOK) => {
            out.push(AgentEvent::ToolHook {
                request_id: id.to_string(),
                tool: str_at(&input, "tool_name").unwrap_or_default().to_string(),
                input: input.get("tool_input").cloned().unwrap_or_else(|| json!({})),
            })
        }
        _ => out.push(AgentEvent::UnsupportedControl {
            request_id: id.to_string(),
            subtype: subtype.to_string(),
        }),
    }
}

/// The questions of an `AskUserQuestion` input; None when it has none
/// that can be put to the operator (then it is an ordinary permission).
fn asked_questions(input: &Value) -> Option<Vec<AskedQuestion>> {
    let list = input.get("questions")?.as_array()?;
    let questions: Vec<AskedQuestion> = list
        .iter()
        .take(MAX_QUESTIONS)
        .filter_map(|q| {
            // The answer is keyed by the question's exact text.
            let text = str_at(q, "question").filter(|t| !t.trim().is_empty())?.to_string();
            let options = q
                .get("options")
                .and_then(Value::as_array)
                .map(|o| o.iter().filter_map(|o| str_at(o, "label")).take(MAX_OPTIONS).map(|l| clip(l, 200)))
                .map(Iterator::collect)
                .unwrap_or_default();
            Some(AskedQuestion {
                text,
                header: str_at(q, "header").map(|h| clip(h, 100)).unwrap_or_default(),
                options,
                multi_select: q.get("multiSelect").and_then(Value::as_bool).unwrap_or(false),
            })
        })
        .collect();
    (!questions.is_empty()).then_some(questions)
}

impl Claude {
    fn usage(&self) -> swarm_core::Usage {
        self.spend.usage()
    }

    fn note_session(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        if let Some(id) = str_at(v, "session_id").filter(|s| !s.is_empty())
            && self.session.as_deref() != Some(id)
        {
            self.session = Some(id.to_string());
            out.push(AgentEvent::SessionStarted(id.to_string()));
        }
    }

    fn system(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        match str_at(v, "subtype") {
            Some("init") => {
                self.note_session(v, out);
                tools_server_state(v, out);
            }
            // The CLI retries failed API calls itself; the operator sees why it is slow.
            Some("api_retry") => {
                let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
                let status = v.get("error_status").and_then(Value::as_u64).map(|s| format!(" {s}"));
                let error = str_at(v, "error").map(|e| format!(": {}", clip(e, 200))).unwrap_or_default();
                out.push(AgentEvent::Note(format!(
                    "API error{}{error}; retry {} of {} in {} s",
                    status.unwrap_or_default(),
                    n("attempt"),
                    n("max_retries"),
                    n("retry_delay_ms").div_ceil(1000),
                )));
            }
            // A denial the CLI decided itself (a --disallowedTools rule, its
            // mode, a hook): the audit trail records it like swarm's own.
            Some("permission_denied") => out.push(AgentEvent::Denied {
                tool: str_at(v, "tool_name").map(|t| clip(t, 128)).unwrap_or_default(),
                why: str_at(v, "message")
                    .or_else(|| str_at(v, "decision_reason"))
                    .map(|m| clip(m, 500))
                    .unwrap_or_default(),
            }),
            _ => {}
        }
    }

    fn assistant(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        let Some(msg) = v.get("message") else { return };
        if self.spend.message(msg, out) {
            out.push(AgentEvent::Usage(self.usage()));
        }
        let Some(blocks) = msg.get("content").and_then(Value::as_array) else { return };
        for b in blocks {
            match str_at(b, "type") {
                Some("text") => {
                    let text = str_at(b, "text").unwrap_or_default();
                    self.last_text = clip(text, 4096);
                    if let Some(first) = text.lines().find(|l| !l.trim().is_empty()) {
                        out.push(AgentEvent::Note(clip(first, 300)));
                    }
                }
                Some("tool_use") => self.tool_use(b, out),
                _ => {}
            }
        }
    }

    fn tool_use(&mut self, b: &Value, out: &mut Vec<AgentEvent>) {
        let name = str_at(b, "name").unwrap_or_default();
        let input = b.get("input").cloned().unwrap_or(Value::Null);
        out.push(AgentEvent::Step(step_for_tool(name, &input)));
        if EDIT_TOOLS.contains(&name) {
            let key = if name == "NotebookEdit" { "notebook_path" } else { "file_path" };
            if let (Some(id), Some(p)) = (str_at(b, "id"), str_at(&input, key)) {
                self.pending_edits.insert(id.to_string(), p.to_string());
            }
        }
        if name == "TodoWrite"
            && let Some(todos) = input.get("todos").and_then(Value::as_array)
        {
            let done = todos.iter().filter(|t| str_at(t, "status") == Some("completed")).count();
            out.push(AgentEvent::Todo {
                done: u32::try_from(done).unwrap_or(u32::MAX),
                total: u32::try_from(todos.len()).unwrap_or(u32::MAX),
            });
        }
    }

    fn user(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        let Some(blocks) = v.pointer("/message/content").and_then(Value::as_array) else { return };
        let mut files = Vec::new();
        for b in blocks.iter().filter(|b| str_at(b, "type") == Some("tool_result")) {
            let Some(id) = str_at(b, "tool_use_id") else { continue };
            let failed = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            if let Some(path) = self.pending_edits.remove(id)
                && !failed
            {
                files.push(path);
            }
        }
        if !files.is_empty() {
            out.push(AgentEvent::FilesChanged(files));
        }
    }

    fn rate_limit(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        let Some(info) = v.get("rate_limit_info") else { return };
        let kind = str_at(info, "rateLimitType").map(|k| clip(k, 64)).unwrap_or_default();
        let reset_unix_ms = info.get("resetsAt").and_then(Value::as_u64).and_then(unix_to_ms).unwrap_or(0);
        // A window past a warning threshold may arrive with the top-level
        // status `allowed` (requests still pass): its threshold or
        // utilization tells.
        let fraction = |k: &str| info.get(k).and_then(Value::as_f64).filter(|f| f.is_finite());
        let used = fraction("surpassedThreshold").or_else(|| fraction("utilization").filter(|u| *u >= 0.75));
        match str_at(info, "status") {
            Some("rejected") => {
                let r = RateLimit { reset_unix_ms, kind };
                self.rejected = Some(r.clone());
                out.push(AgentEvent::RateLimited(r));
            }
            Some(status) if status == "allowed_warning" || used.is_some() => {
                let mut note = format!("usage limit warning ({kind}");
                if let Some(u) = used {
                    note.push_str(&format!(", {:.0}% used", (u * 100.0).clamp(0.0, 100.0)));
                }
                if reset_unix_ms > 0 {
                    note.push_str(&format!(", resets at unix {}", reset_unix_ms / 1000));
                }
                note.push(')');
                out.push(AgentEvent::Note(note));
            }
            _ => {}
        }
    }

    fn result(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        self.note_session(v, out);
        self.spend.result(v);
        out.push(AgentEvent::Usage(self.usage()));
        let subtype = str_at(v, "subtype").unwrap_or_default();
        let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(subtype != "success");
        let mut text = str_at(v, "result").unwrap_or_default().trim().to_string();
        if text.is_empty()
            && let Some(errors) = v.get("errors").and_then(Value::as_array)
        {
            text = errors.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; ");
        }
        if text.is_empty() && is_error {
            text = format!("agent ended its turn with {}", clip(subtype, 64));
        }
        let api_status = v.get("api_error_status").and_then(Value::as_u64);
        let now = now_unix_ms();
        let mut rate_limit =
            usage_limit_in_text(&text, now).or_else(|| usage_limit_in_text(&self.last_text, now));
        if rate_limit.is_none()
            && (matches!(api_status, Some(429 | 529)) || is_error && self.rejected.is_some())
        {
            rate_limit = Some(RateLimit::default());
        }
        // The event's reset time and kind are better than the text's.
        if let (Some(r), Some(rej)) = (rate_limit.as_mut(), self.rejected.take()) {
            if rej.reset_unix_ms > 0 {
                r.reset_unix_ms = rej.reset_unix_ms;
            }
            r.kind = rej.kind;
        }
        self.last_text.clear();
        out.push(AgentEvent::TurnEnded(TurnEnd { ok: !is_error && rate_limit.is_none(), text, rate_limit }));
    }
}

/// The CLI carries on when an MCP server fails to start, so `init`'s list
/// is where swarm learns that its tools are out of the agent's reach.
fn tools_server_state(v: &Value, out: &mut Vec<AgentEvent>) {
    let servers = v.get("mcp_servers").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let ours = servers.iter().find(|s| s.get("name").and_then(Value::as_str) == Some(SERVER_NAME));
    let status = ours.and_then(|s| s.get("status")).and_then(Value::as_str).unwrap_or_default();
    if ours.is_some() && !matches!(status, "connected" | "pending") {
        out.push(AgentEvent::ToolsUnavailable(clip(status, 64)));
    }
}

/// `--mcp-config`'s JSON for swarm's tools: added to the user's own
/// servers (no `--strict-mcp-config`), under the name the tools are
/// allowed by (`mcp__swarm__*`).
fn mcp_config(server: &StdioServer) -> String {
    let env: serde_json::Map<String, Value> =
        server.env.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    json!({"mcpServers": {SERVER_NAME: {
        "type": "stdio",
        "command": server.command,
        "args": server.args,
        "env": env,
    }}})
    .to_string()
}

#[cfg(test)]
mod tests {
    use swarm_core::Usage;

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
        let lines: Vec<Value> =
            opening.input.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
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
        let go_on: Value =
            serde_json::from_str(c.hook_reply("h1", None).expect("reply").trim()).expect("json");
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
                AgentEvent::Note(
                    "usage limit warning (five_hour, 90% used, resets at unix 1750000000)".into()
                ),
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
        let refuse: Value =
            serde_json::from_str(c.refuse_control("r3").expect("reply").trim()).expect("json");
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
        let u = ev
            .iter()
            .find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None })
            .expect("usage");
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cost_usd),
            (2, 12, 0.25),
            "each result's usage is its own turn's (replacing the live estimate); the cost is the latest total"
        );
        c.new_process();
        let ev = c.parse_line(&r(0.05, 1));
        let u = ev
            .iter()
            .find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None })
            .expect("usage");
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
        assert_eq!(
            t.rate_limit,
            Some(RateLimit { reset_unix_ms: 1_750_000_000_000, kind: "five_hour".into() })
        );

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
}
