//! `session/request_permission`: the tool call it is about, in the terms
//! of the shared [`Policy`] (Claude Code's tool names, a `file_path`, a
//! `command`, a `url`), and the reply that picks one of the agent's options
//! by its kind.
//!
//! Agents differ in what they fill in: the standard `kind`, a title
//! ("Write src/a.rs", "Run: cargo test"), the raw tool input, locations,
//! diff content. A request's `toolCallId` need not match any tool call
//! reported before (claude-code-acp makes one up), so only the request
//! itself is read. A command is taken from the raw input only: a title may
//! be cut short, and a policy must never allow a command it did not see
//! whole.

use std::collections::HashMap;

use agent_client_protocol_schema::v1 as schema;
use serde_json::{Map, Value, json};

use crate::agent::jsonrpc::line;
use crate::agent::policy::{Decision, Policy};
use crate::agent::{AgentEvent, Verdict, clip};

/// Open permission requests at most; more are refused at once.
const MAX_OPEN: usize = 256;
const MAX_OPTION_ID: usize = 256;

/// The tool names the policy's rules know, as titles begin with them.
const TITLE_TOOLS: &[&str] = &[
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "Read",
    "Bash",
    "Glob",
    "Grep",
    "LS",
    "WebFetch",
    "WebSearch",
    "Task",
    "TodoWrite",
];
const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];

/// One open request: the JSON-RPC id to answer and the options to pick.
#[derive(Debug, Clone)]
struct Open {
    id: Value,
    allow: Option<String>,
    reject: Option<String>,
}

#[derive(Debug, Default, Clone)]
pub(super) struct Pending {
    open: HashMap<String, Open>,
}

impl Pending {
    /// The events for a request: the driver's permission request, or — for
    /// an edit of several files one of which the task does not own — the
    /// refusal at once.
    pub(super) fn add(
        &mut self,
        policy: &Policy,
        id: &Value,
        params: &Value,
    ) -> Result<Vec<AgentEvent>, String> {
        let tool_call: schema::ToolCallUpdate =
            serde_json::from_value(params.get("toolCall").cloned().unwrap_or(Value::Null)).map_err(|e| {
                format!("session/request_permission: toolCall: {}", clip(&e.to_string(), 300))
            })?;
        if self.open.len() >= MAX_OPEN {
            return Err(format!("more than {MAX_OPEN} permission requests are open"));
        }
        // Read by hand: an option of a kind newer than this client is
        // skipped, not a reason to refuse the request.
        let options = params.get("options").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let pick = |kinds: [&str; 2]| {
            kinds.iter().find_map(|k| {
                options.iter().find_map(|o| {
                    let id = o.get("optionId").and_then(Value::as_str)?;
                    (o.get("kind").and_then(Value::as_str) == Some(*k) && id.len() <= MAX_OPTION_ID)
                        .then(|| id.to_string())
                })
            })
        };
        let open = Open {
            id: id.clone(),
            // Once rather than always: the next request is decided afresh.
            allow: pick(["allow_once", "allow_always"]),
            reject: pick(["reject_once", "reject_always"]),
        };
        let request_id = id.to_string();
        let call = Call::of(&tool_call);
        let (tool, input) = call.policy_input();
        self.open.insert(request_id.clone(), open);
        if EDIT_TOOLS.contains(&tool.as_str())
            && let Some(why) = refused_path(policy, &tool, &call.paths)
        {
            let reply = self.reply(&request_id, &Verdict::Deny(why.clone())).unwrap_or_default();
            return Ok(vec![AgentEvent::Note(format!("permission denied: {why}")), AgentEvent::Send(reply)]);
        }
        Ok(vec![AgentEvent::PermissionRequest { request_id, tool, input }])
    }

    /// The reply choosing the option for `verdict`; "cancelled" when the
    /// agent offered none of that kind (it then treats the call as not run).
    pub(super) fn reply(&mut self, request_id: &str, verdict: &Verdict) -> Option<String> {
        let open = self.open.remove(request_id)?;
        let option = match verdict {
            Verdict::Allow => open.allow,
            // ACP carries no reason: the agent learns only that it was refused.
            Verdict::Deny(_) => open.reject,
        };
        Some(outcome(&open.id, option))
    }

    /// "cancelled" for every open request (ACP's rule on `session/cancel`).
    pub(super) fn cancel_all(&mut self) -> String {
        self.open.drain().map(|(_, o)| outcome(&o.id, None)).collect()
    }
}

fn outcome(id: &Value, option: Option<String>) -> String {
    let outcome = match option {
        Some(o) => schema::RequestPermissionOutcome::Selected(schema::SelectedPermissionOutcome::new(o)),
        None => schema::RequestPermissionOutcome::Cancelled,
    };
    let result = serde_json::to_value(schema::RequestPermissionResponse::new(outcome)).unwrap_or(Value::Null);
    line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// Why a multi-file edit is refused: the policy denies one of its paths
/// (the driver's policy looks at one path, the first).
fn refused_path(policy: &Policy, tool: &str, paths: &[String]) -> Option<String> {
    if paths.len() < 2 {
        return None;
    }
    paths.iter().find_map(|p| match policy.decide(tool, &json!({"file_path": p})) {
        Decision::Deny { why } => Some(why),
        _ => None,
    })
}

/// What a tool call says about itself, wherever the agent put it.
#[derive(Debug, Default, Clone)]
pub(super) struct Call {
    pub kind: Option<schema::ToolKind>,
    pub title: String,
    pub raw_input: Option<Value>,
    /// Every path it names: raw input, locations, diffs (in that order).
    pub paths: Vec<String>,
}

impl Call {
    pub(super) fn of(u: &schema::ToolCallUpdate) -> Call {
        let mut c = Call::default();
        c.merge(&u.fields);
        c
    }

    /// Takes what an update adds or changes.
    pub(super) fn merge(&mut self, f: &schema::ToolCallUpdateFields) {
        if let Some(k) = f.kind {
            self.kind = Some(k);
        }
        if let Some(t) = &f.title {
            self.title = clip(t, 1000);
        }
        if let Some(r) = &f.raw_input {
            self.raw_input = Some(r.clone());
            for key in ["file_path", "filePath", "path", "notebook_path", "abs_path"] {
                if let Some(p) = r.get(key).and_then(Value::as_str) {
                    self.add_path(p);
                }
            }
        }
        for l in f.locations.iter().flatten() {
            if let Some(p) = l.path.to_str() {
                self.add_path(p);
            }
        }
        for c in f.content.iter().flatten() {
            if let schema::ToolCallContent::Diff(d) = c
                && let Some(p) = d.path.to_str()
            {
                self.add_path(p);
            }
        }
    }

    fn add_path(&mut self, p: &str) {
        if !p.is_empty() && self.paths.len() < 64 && !self.paths.iter().any(|q| q == p) {
            self.paths.push(p.to_string());
        }
    }

    /// The tool in Claude Code's names: the standard kind when the agent
    /// gave one, else the title's first word.
    pub(super) fn tool(&self) -> String {
        use schema::ToolKind as K;
        let word = self.title.split(|c: char| c.is_whitespace() || c == ':' || c == '(').next().unwrap_or("");
        match self.kind {
            Some(K::Edit | K::Delete | K::Move) => "Edit".into(),
            Some(K::Read) => "Read".into(),
            Some(K::Execute) => "Bash".into(),
            Some(K::Fetch) => "WebFetch".into(),
            Some(K::Search) => "Grep".into(),
            _ => match word {
                w if TITLE_TOOLS.contains(&w) => w.into(),
                // claude-code-acp's titles.
                "Run" => "Bash".into(),
                "Find" => "Glob".into(),
                "Search" => "Grep".into(),
                w if !w.is_empty()
                    && w.len() <= 128
                    && w.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')) =>
                {
                    w.into()
                }
                _ => "Other".into(),
            },
        }
    }

    /// The tool and the input the policy (and the operator's question) sees.
    pub(super) fn policy_input(&self) -> (String, Value) {
        let tool = self.tool();
        let mut input = match &self.raw_input {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let raw = |k: &str| self.raw_input.as_ref().and_then(|r| r.get(k));
        let command = match raw("command") {
            Some(Value::String(c)) => Some(c.clone()),
            Some(Value::Array(parts)) => {
                let words: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
                (words.len() == parts.len()).then(|| words.join(" "))
            }
            _ => None,
        };
        input.remove("command");
        if let Some(c) = command {
            input.insert("command".into(), Value::String(c));
        }
        let path = self.paths.first().cloned().or_else(|| self.title_path(&tool));
        if let Some(p) = path {
            let key = if tool == "NotebookEdit" { "notebook_path" } else { "file_path" };
            input.insert(key.into(), Value::String(p));
        }
        input.insert("title".into(), Value::String(self.title.clone()));
        (tool, Value::Object(input))
    }

    /// "Write src/a.rs": the path after a file tool's name, when nothing
    /// else names one.
    fn title_path(&self, tool: &str) -> Option<String> {
        let file_tool = EDIT_TOOLS.contains(&tool) || tool == "Read";
        let rest = self.title.strip_prefix(tool)?.trim();
        (file_tool && !rest.is_empty() && !rest.ends_with("...")).then(|| rest.to_string())
    }
}
