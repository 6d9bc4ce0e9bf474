//! The stream-json lines Claude Code writes, read into `AgentEvent`s:
//! the session, assistant text and tool uses, tool results, rate limits
//! and each turn's result with its spending.

use serde_json::Value;

use super::super::{
    AgentEvent, RateLimit, TurnEnd, clip, now_unix_ms, step_for_tool, unix_to_ms, usage_limit_in_text,
};
use super::{Claude, EDIT_TOOLS, str_at};
use crate::worker_mcp::SERVER_NAME;

impl Claude {
    pub(super) fn usage(&self) -> swarm_core::Usage {
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

    pub(super) fn system(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
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

    pub(super) fn assistant(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
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

    pub(super) fn user(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
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

    pub(super) fn rate_limit(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
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

    pub(super) fn result(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
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
