//! What Codex asks of its client while a turn runs, held until the policy
//! or the operator decides: approvals of a command or an edit, and the
//! model's questions to the user. A request is keyed by its JSON-RPC id
//! as text, which is what the driver hands back with the verdict.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::agent::jsonrpc::{INVALID_PARAMS, error_reply, line};
use crate::agent::policy::{Decision, Policy};
use crate::agent::{AgentEvent, AskedQuestion, Verdict, clip};

/// Open requests at most; more are refused at once.
const MAX_OPEN: usize = 256;
/// Questions of one request at most, and options of one question.
const MAX_QUESTIONS: usize = 16;
const MAX_OPTIONS: usize = 32;
const MAX_QUESTION_ID: usize = 256;

#[derive(Debug, Clone)]
enum Kind {
    /// A command or an edit: answered with a decision.
    Approval,
    /// An MCP tool call Codex asks about as an elicitation: answered with an action.
    ToolCall,
    /// The model's questions, by their ids in the asked order.
    UserInput(Vec<String>),
}

#[derive(Debug, Clone)]
struct Request {
    id: Value,
    kind: Kind,
}

#[derive(Debug, Default, Clone)]
pub(super) struct Open {
    open: HashMap<String, Request>,
}

impl Open {
    fn add(&mut self, id: &Value, kind: Kind, out: &mut Vec<AgentEvent>) -> Option<String> {
        if self.open.len() >= MAX_OPEN {
            out.push(error_reply(id, INVALID_PARAMS, &format!("more than {MAX_OPEN} requests are open")));
            return None;
        }
        let key = id.to_string();
        self.open.insert(key.clone(), Request { id: id.clone(), kind });
        Some(key)
    }

    /// A command to approve, as the whole command line Codex will run.
    pub(super) fn command(&mut self, id: &Value, command: Option<String>, out: &mut Vec<AgentEvent>) {
        let Some(command) = command else {
            // A policy must never allow a command it did not see whole.
            out.push(AgentEvent::Note("Codex asked to run a command it did not name; declined".into()));
            out.push(AgentEvent::Send(decision(id, "decline")));
            return;
        };
        if let Some(request_id) = self.add(id, Kind::Approval, out) {
            out.push(AgentEvent::PermissionRequest {
                request_id,
                tool: "Bash".into(),
                input: json!({"command": command}),
            });
        }
    }

    /// An edit of `paths` (worktree-relative or absolute, as Codex named
    /// them), put to the policy as the one path it is least sure of: one
    /// the task may not edit (refused at the edit, and reported so), else
    /// one no rule allows, else the first; so a rule allowing one file
    /// cannot carry the others.
    pub(super) fn file_change(
        &mut self,
        policy: &Policy,
        id: &Value,
        params: &Value,
        paths: Vec<String>,
        out: &mut Vec<AgentEvent>,
    ) {
        if paths.is_empty() {
            out.push(AgentEvent::Note("Codex asked to apply an edit it did not announce; declined".into()));
            out.push(AgentEvent::Send(decision(id, "decline")));
            return;
        }
        let edit = |p: &String| json!({"file_path": p});
        let shown = paths
            .iter()
            .find(|p| policy.forbids("Edit", &edit(p)).is_some())
            .or_else(|| {
                paths.iter().find(|p| !matches!(policy.decide("Edit", &edit(p)), Decision::Allow { .. }))
            })
            .unwrap_or(&paths[0]);
        let mut input = edit(shown);
        if paths.len() > 1 {
            input["file_paths"] = json!(paths);
        }
        if let Some(reason) = params.get("reason").and_then(Value::as_str) {
            input["reason"] = json!(clip(reason, 500));
        }
        if let Some(request_id) = self.add(id, Kind::Approval, out) {
            out.push(AgentEvent::PermissionRequest { request_id, tool: "Edit".into(), input });
        }
    }

    /// An elicitation: Codex's own question before an MCP tool call goes
    /// to the policy as that tool; anything else an MCP server asks is
    /// declined (the operator is not there to fill in forms).
    pub(super) fn elicitation(&mut self, id: &Value, params: &Value, out: &mut Vec<AgentEvent>) {
        let kind = params.pointer("/_meta/codex_approval_kind").and_then(Value::as_str);
        let server = params.get("serverName").and_then(Value::as_str).filter(|s| is_name(s));
        let tool = params.get("message").and_then(Value::as_str).and_then(quoted_tool);
        let (Some("mcp_tool_call"), Some(server), Some(tool)) = (kind, server, tool) else {
            out.push(AgentEvent::Send(action(id, "decline")));
            return;
        };
        let input = params.pointer("/_meta/tool_params").cloned().unwrap_or(json!({}));
        if let Some(request_id) = self.add(id, Kind::ToolCall, out) {
            out.push(AgentEvent::PermissionRequest {
                request_id,
                tool: format!("mcp__{server}__{tool}"),
                input,
            });
        }
    }

    /// The model's questions (`item/tool/requestUserInput`).
    pub(super) fn user_input(&mut self, id: &Value, params: &Value, out: &mut Vec<AgentEvent>) {
        let raw = params.get("questions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let mut ids = Vec::new();
        let mut questions = Vec::new();
        for q in raw.iter().take(MAX_QUESTIONS) {
            let s = |k: &str| q.get(k).and_then(Value::as_str).unwrap_or_default();
            let (qid, text) = (s("id"), s("question"));
            if qid.is_empty() || qid.len() > MAX_QUESTION_ID || text.is_empty() {
                continue;
            }
            let options = q.get("options").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            ids.push(qid.to_string());
            questions.push(AskedQuestion {
                text: clip(text, 2000),
                header: clip(s("header"), 100),
                options: options
                    .iter()
                    .take(MAX_OPTIONS)
                    .filter_map(|o| o.get("label").and_then(Value::as_str))
                    .map(|l| clip(l, 200))
                    .collect(),
                multi_select: false,
            });
        }
        if questions.is_empty() {
            out.push(AgentEvent::Send(answers(id, &[], &[])));
            return;
        }
        // What the driver hands back with the answers: the questions as asked.
        let input =
            json!({"questions": questions.iter().map(|q| json!({"question": q.text})).collect::<Vec<_>>()});
        if let Some(request_id) = self.add(id, Kind::UserInput(ids), out) {
            out.push(AgentEvent::UserQuestion { request_id, input, questions });
        }
    }

    /// The reply carrying a verdict on an approval (a refused question is
    /// answered with no answers).
    pub(super) fn decide(&mut self, request_id: &str, verdict: &Verdict) -> Option<String> {
        let r = self.open.remove(request_id)?;
        Some(match (&r.kind, verdict) {
            (Kind::Approval, Verdict::Allow) => decision(&r.id, "accept"),
            // Codex's reply carries no reason: the model learns only that it was declined.
            (Kind::Approval, Verdict::Deny(_)) => decision(&r.id, "decline"),
            (Kind::ToolCall, Verdict::Allow) => action(&r.id, "accept"),
            (Kind::ToolCall, Verdict::Deny(_)) => action(&r.id, "decline"),
            (Kind::UserInput(_), _) => answers(&r.id, &[], &[]),
        })
    }

    /// The operator's answers, in the asked order.
    pub(super) fn answer(&self, request_id: &str, given: &[(String, String)]) -> Option<String> {
        let r = self.open.get(request_id)?;
        let Kind::UserInput(ids) = &r.kind else { return None };
        let texts: Vec<String> = given.iter().map(|(_, a)| a.clone()).collect();
        Some(answers(&r.id, ids, &texts))
    }

    /// Codex no longer waits for this request (answered, or given up).
    pub(super) fn resolved(&mut self, params: &Value) {
        if let Some(id) = params.get("requestId") {
            self.open.remove(&id.to_string());
        }
    }

    pub(super) fn clear(&mut self) {
        self.open.clear();
    }

    /// Every open request answered "cancel" (a question: no answers).
    pub(super) fn cancel_all(&mut self) -> String {
        self.open
            .drain()
            .map(|(_, r)| match r.kind {
                Kind::Approval => decision(&r.id, "cancel"),
                Kind::ToolCall => action(&r.id, "cancel"),
                Kind::UserInput(_) => answers(&r.id, &[], &[]),
            })
            .collect()
    }
}

/// The tool an MCP approval names: `… run tool "progress"?` (Codex puts
/// the name only in its message).
fn quoted_tool(message: &str) -> Option<&str> {
    let (_, rest) = message.rsplit_once("tool \"")?;
    let (name, _) = rest.split_once('"')?;
    is_name(name).then_some(name)
}

/// An MCP server's or tool's name as a rule can name it.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn action(id: &Value, action: &str) -> String {
    let content = if action == "accept" { json!({}) } else { Value::Null };
    line(
        &json!({"jsonrpc": "2.0", "id": id, "result": {"action": action, "content": content, "_meta": null}}),
    )
}

fn decision(id: &Value, decision: &str) -> String {
    line(&json!({"jsonrpc": "2.0", "id": id, "result": {"decision": decision}}))
}

/// `{"answers": {question id: {"answers": [text]}}}` for the ids answered.
fn answers(id: &Value, ids: &[String], texts: &[String]) -> String {
    let map: serde_json::Map<String, Value> =
        ids.iter().zip(texts).map(|(q, a)| (q.clone(), json!({"answers": [a]}))).collect();
    line(&json!({"jsonrpc": "2.0", "id": id, "result": {"answers": map}}))
}
