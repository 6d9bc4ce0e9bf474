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
//!
//! Here: the state and the `Agent` impl; `args.rs` the command line,
//! `control.rs` the control protocol on stdin and stdout, `stream.rs` the
//! stream-json lines read into events.

use std::collections::HashMap;

use serde_json::{Value, json};
use swarm_core::plan::AgentKind;

use super::cost::{ClaudeSpend, Pricing};

mod args;
mod control;
mod stream;

use super::{Agent, AgentConfig, AgentEvent, FollowUp, Opening, RateLimit, Verdict};
use control::{control_request, control_success};

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
        args::argv(cfg, resume)
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

fn str_at<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

#[cfg(test)]
mod tests;
