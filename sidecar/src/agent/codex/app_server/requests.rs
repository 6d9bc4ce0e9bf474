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
    /// them). Refused at once when the task may not edit one of them; else
    /// the policy sees the path it is least sure of, so that a rule
    /// allowing the first file cannot carry the others.
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
        if let Some(why) = paths.iter().find_map(|p| policy.forbids("Edit", &edit(p))) {
            out.push(AgentEvent::Note(format!("permission denied: {why}")));
            out.push(AgentEvent::Send(decision(id, "decline")));
            return;
        }
        let shown = paths
            .iter()
            .find(|p| !matches!(policy.decide("Edit", &edit(p)), Decision::Allow { .. }))
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
                Kind::UserInput(_) => answers(&r.id, &[], &[]),
            })
            .collect()
    }
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
