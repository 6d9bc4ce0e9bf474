//! Any Agent Client Protocol server (Gemini CLI's `--experimental-acp`,
//! the Claude Code and Codex adapters, Goose, OpenHands…) through one
//! adapter. The sidecar is the ACP *client*: JSON-RPC 2.0 on the agent's
//! stdio, one message a line.
//!
//! # The conversation
//!
//! `initialize` (protocol version 1; the client serves
//! `fs/read_text_file` and `fs/write_text_file`, no terminal) → once it is
//! answered, `session/load` of the session to resume when the agent
//! advertised `loadSession`, else `session/new` in the worktree → once the
//! session exists, `session/prompt` with the task. Follow-up messages
//! (answers, operator messages) are further `session/prompt`s; a prompt's
//! response ends the turn (`stopReason`). `session/update` notifications
//! become steps, changed files, the percent done (the agent's plan) and
//! notes. On a stop the driver first sends `session/cancel`
//! ([`Agent::stop_message`]).
//!
//! # What the agent asks of the client
//!
//! `session/request_permission` goes through the same [`Policy`] as Claude
//! Code's requests (the tool and its path or command worked out from the
//! tool call's kind, title, raw input and locations: `permission.rs`); the
//! reply picks an option by its kind. The fs methods are served only inside
//! the worktree and, for writes, only to owned files (`fs.rs`). Anything
//! else is answered "method not found". The terminal methods are not
//! offered: an agent then runs commands itself, inside the same sandbox as
//! its own process, which is what a served terminal would have to rebuild.
//!
//! # Cost
//!
//! A `usage_update`'s cost is the agent's own running total and stands as
//! the process's cost once one came; until then the tokens a prompt
//! response reports are priced with the attempt's price table, as the
//! model the session named (`models.currentModelId`) or, unnamed, as the
//! table's fallback.
//!
//! Every line is hostile input: nothing here panics, sizes are bounded,
//! a line that is not a JSON-RPC message is [`AgentEvent::Unparseable`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1 as schema;
use serde_json::{Value, json};
use swarm_core::Usage;
use swarm_core::plan::AgentKind;

use super::cost::Pricing;
use super::jsonrpc::{self, INVALID_PARAMS, METHOD_NOT_FOUND, Message, error_reply, line, session_ok};
use super::policy::Policy;
use super::{Agent, AgentConfig, AgentError, AgentEvent, FollowUp, Opening, Verdict, clip};

mod fs;
mod permission;
mod updates;

/// swarm's tool server as a session's stdio MCP server.
fn mcp_server(server: &crate::worker_mcp::StdioServer) -> schema::McpServer {
    let env = server.env.iter().map(|(k, v)| schema::EnvVariable::new(k.clone(), v.clone())).collect();
    schema::McpServer::Stdio(
        schema::McpServerStdio::new(crate::worker_mcp::SERVER_NAME, server.command.clone())
            .args(server.args.clone())
            .env(env),
    )
}

#[cfg(test)]
mod tests;

/// Texts held for the session (the prompt, follow-ups) at most.
const MAX_HELD: usize = 64;

/// One of our requests the agent has yet to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    Initialize,
    NewSession,
    LoadSession(String),
    Prompt,
}

/// Cloneable so that one client, set up once, can be tried on many inputs
/// (the fuzzer does).
#[derive(Debug, Clone)]
pub struct Acp {
    worktree: PathBuf,
    /// Decides the permission requests' tools here too, for the fs methods.
    policy: Policy,
    next_id: i64,
    pending: HashMap<i64, Sent>,
    /// Texts to prompt with once the session exists, in order.
    held: Vec<String>,
    /// The session this process should continue.
    resume: Option<String>,
    session: Option<String>,
    /// The agent advertised `loadSession`.
    can_load: bool,
    /// `session/load` replays the conversation as updates; they are history,
    /// not this attempt's progress.
    loading: bool,
    turn: updates::Turn,
    perms: permission::Pending,
    /// The process's usage so far (cost from `usage_update`, tokens from a
    /// prompt response's `usage`, where an agent reports them).
    usage: Usage,
    /// The process reported its cost (`usage_update`): estimates stop counting.
    reported: bool,
    /// The estimated cost of its turns' tokens.
    estimated: f64,
    pricing: Pricing,
    /// The session's model, as the agent named it; empty when it did not.
    model: String,
    /// swarm's tools, given to every session (stdio, which every agent supports).
    mcp_servers: Vec<schema::McpServer>,
}

impl Acp {
    pub fn new(cfg: &AgentConfig, worktree: &Path, owned_globs: &[String]) -> Result<Acp, AgentError> {
        Ok(Acp {
            worktree: worktree.to_path_buf(),
            policy: Policy::new(cfg, owned_globs, worktree)?,
            next_id: 0,
            pending: HashMap::new(),
            held: Vec::new(),
            resume: None,
            session: None,
            can_load: false,
            loading: false,
            turn: updates::Turn::default(),
            perms: permission::Pending::default(),
            usage: Usage::default(),
            reported: false,
            estimated: 0.0,
            pricing: Pricing::new(cfg.prices.clone()),
            model: String::new(),
            mcp_servers: cfg.mcp.iter().map(mcp_server).collect(),
        })
    }

    /// A request line of ours, remembered until it is answered.
    fn request(&mut self, sent: Sent, method: &str, params: impl serde::Serialize) -> String {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, sent);
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }

    fn prompt(&mut self, session: &str, text: String) -> String {
        let req = schema::PromptRequest::new(session.to_string(), vec![schema::ContentBlock::from(text)]);
        self.turn.start();
        self.request(Sent::Prompt, "session/prompt", req)
    }

    /// The held texts as one prompt, when a session exists and no prompt runs.
    fn release_held(&mut self) -> Option<String> {
        let session = self.session.clone()?;
        if self.held.is_empty() || self.pending.values().any(|s| *s == Sent::Prompt) {
            return None;
        }
        let text = std::mem::take(&mut self.held).join("\n\n");
        Some(self.prompt(&session, text))
    }

    fn hold(&mut self, text: &str) {
        if self.held.len() < MAX_HELD {
            self.held.push(text.to_string());
        }
    }

    fn on_message(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        match jsonrpc::classify(v) {
            Ok(Message::Request { id, method, params }) => self.on_request(method, id, params, out),
            Ok(Message::Notification { method, params }) => self.on_notification(method, params, out),
            Ok(Message::Response { id, result }) => self.on_response(id, result, out),
            Err(unparseable) => out.push(unparseable),
        }
    }

    fn on_request(&mut self, method: &str, id: &Value, params: &Value, out: &mut Vec<AgentEvent>) {
        let _span = tracing::debug_span!("acp.request", method = %clip(method, 64)).entered();
        match method {
            "session/request_permission" => self.on_permission(id, params, out),
            "fs/read_text_file" => out.push(fs::read(&self.worktree, &self.policy, id, params)),
            "fs/write_text_file" => {
                let (reply, changed) = fs::write(&self.worktree, &self.policy, id, params);
                out.push(reply);
                if let Some(rel) = changed {
                    out.push(AgentEvent::FilesChanged(vec![rel]));
                }
            }
            _ => {
                tracing::debug!("refusing an ACP method swarm does not serve");
                out.push(error_reply(
                    id,
                    METHOD_NOT_FOUND,
                    &format!("method not found: {}", clip(method, 128)),
                ));
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: Option<&Value>, out: &mut Vec<AgentEvent>) {
        // Extension notifications (`_…`) and anything newer are ignored.
        if method != "session/update" || self.loading {
            return;
        }
        let Some(update) = params.and_then(|p| p.get("update")) else {
            out.push(AgentEvent::Unparseable("session/update without an update".into()));
            return;
        };
        if let Some(cost) = self.turn.on_update(update, out) {
            self.reported = true;
            self.usage.cost_usd = cost;
            out.push(AgentEvent::Usage(self.usage));
        }
    }

    fn on_response(&mut self, id: &Value, result: Result<&Value, String>, out: &mut Vec<AgentEvent>) {
        let Some(sent) = id.as_i64().and_then(|id| self.pending.remove(&id)) else {
            // Not an answer to anything of ours (or answered twice).
            return;
        };
        let result = match result {
            Ok(r) => r,
            Err(why) => {
                self.loading = false;
                out.push(AgentEvent::TurnEnded(self.turn.failed(format!("{} failed: {why}", sent.method()))));
                if sent == Sent::Prompt
                    && let Some(next) = self.release_held()
                {
                    out.push(AgentEvent::Send(next));
                }
                return;
            }
        };
        match sent {
            Sent::Initialize => self.on_initialized(result, out),
            Sent::NewSession => {
                self.note_model(result);
                match result.get("sessionId").and_then(Value::as_str).filter(|s| session_ok(s)) {
                    Some(id) => self.on_session(id.to_string(), out),
                    None => out.push(AgentEvent::TurnEnded(
                        self.turn.failed("session/new answered without a usable sessionId".into()),
                    )),
                }
            }
            Sent::LoadSession(id) => {
                self.note_model(result);
                self.loading = false;
                self.on_session(id, out);
            }
            Sent::Prompt => {
                let turn = updates::turn_usage(result);
                self.estimated += self.pricing.cost(&self.model, &turn, out);
                self.usage.add(&turn);
                if !self.reported {
                    self.usage.cost_usd = self.estimated.min(swarm_core::usage::MAX_COST_USD);
                }
                out.push(AgentEvent::Usage(self.usage));
                out.push(AgentEvent::TurnEnded(self.turn.end(result)));
                if let Some(next) = self.release_held() {
                    out.push(AgentEvent::Send(next));
                }
            }
        }
    }

    fn on_initialized(&mut self, result: &Value, out: &mut Vec<AgentEvent>) {
        let version = result.get("protocolVersion").and_then(Value::as_u64);
        if version != Some(u64::from(agent_client_protocol_schema::ProtocolVersion::V1.as_u16())) {
            let v = version.map_or_else(|| "none".to_string(), |v| v.to_string());
            out.push(AgentEvent::TurnEnded(
                self.turn.failed(format!("the agent speaks ACP protocol version {v}; swarm speaks 1")),
            ));
            return;
        }
        self.can_load =
            result.pointer("/agentCapabilities/loadSession").and_then(Value::as_bool) == Some(true);
        let cwd = self.worktree.clone();
        let line = match self.resume.clone() {
            Some(id) if self.can_load => {
                self.loading = true;
                let req =
                    schema::LoadSessionRequest::new(id.clone(), cwd).mcp_servers(self.mcp_servers.clone());
                self.request(Sent::LoadSession(id), "session/load", req)
            }
            resume => {
                if let Some(id) = resume {
                    out.push(AgentEvent::Note(format!(
                        "the agent cannot load sessions (no loadSession); a new session replaces {id}"
                    )));
                }
                let req = schema::NewSessionRequest::new(cwd).mcp_servers(self.mcp_servers.clone());
                self.request(Sent::NewSession, "session/new", req)
            }
        };
        out.push(AgentEvent::Send(line));
    }

    /// The session's model, where the agent names it (for pricing).
    fn note_model(&mut self, result: &Value) {
        if let Some(m) = result.pointer("/models/currentModelId").and_then(Value::as_str) {
            self.model = clip(m, 128);
        }
    }

    fn on_session(&mut self, id: String, out: &mut Vec<AgentEvent>) {
        self.session = Some(id.clone());
        out.push(AgentEvent::SessionStarted(id));
        if let Some(prompt) = self.release_held() {
            out.push(AgentEvent::Send(prompt));
        }
    }
}

impl Sent {
    fn method(&self) -> &'static str {
        match self {
            Sent::Initialize => "initialize",
            Sent::NewSession => "session/new",
            Sent::LoadSession(_) => "session/load",
            Sent::Prompt => "session/prompt",
        }
    }
}

impl Agent for Acp {
    fn kind(&self) -> AgentKind {
        AgentKind::Acp
    }

    /// The plan's `agent_command` (program, then arguments), then
    /// `extra_args`; a resume is a `session/load`, not a flag.
    fn argv(&self, cfg: &AgentConfig, _resume: Option<&str>) -> Vec<String> {
        std::iter::once(cfg.program.clone()).chain(cfg.extra_args.iter().cloned()).collect()
    }

    fn opening(&mut self, prompt: &str, resume: Option<&str>) -> Opening {
        self.resume = resume.map(str::to_string);
        self.held.clear();
        self.hold(prompt);
        let caps = schema::ClientCapabilities::new()
            .fs(schema::FileSystemCapabilities::new().read_text_file(true).write_text_file(true))
            .terminal(false);
        let req = schema::InitializeRequest::new(agent_client_protocol_schema::ProtocolVersion::V1)
            .client_capabilities(caps)
            .client_info(schema::Implementation::new("swarm", env!("CARGO_PKG_VERSION")));
        Opening { input: self.request(Sent::Initialize, "initialize", req), close: false }
    }

    fn follow_up(&self) -> FollowUp {
        FollowUp::Stdin
    }

    fn user_message(&mut self, text: &str) -> String {
        self.hold(text);
        self.release_held().unwrap_or_default()
    }

    fn permission_reply(&mut self, request_id: &str, verdict: &Verdict, _input: &Value) -> Option<String> {
        self.perms.reply(request_id, verdict)
    }

    /// ACP has no control requests of Claude's kind; unknown methods are
    /// refused as they arrive.
    fn refuse_control(&self, _request_id: &str) -> Option<String> {
        None
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let v = match super::json_object(line) {
            Ok(v) => v,
            Err(unparseable) => return vec![unparseable],
        };
        let mut out = Vec::new();
        self.on_message(&v, &mut out);
        out
    }

    fn new_process(&mut self) {
        self.pending.clear();
        self.perms = permission::Pending::default();
        self.turn = updates::Turn::default();
        self.loading = false;
        self.can_load = false;
        self.usage = Usage::default();
        self.reported = false;
        self.estimated = 0.0;
        // The session stays: the next process may load it.
    }

    /// `session/cancel` while a prompt runs, and the ACP rule that every
    /// permission request still open is answered "cancelled".
    fn stop_message(&mut self) -> Option<String> {
        let session = self.session.clone()?;
        if !self.pending.values().any(|s| *s == Sent::Prompt) {
            return None;
        }
        let cancel = schema::CancelNotification::new(session);
        let mut text = line(
            &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": serde_json::to_value(cancel).ok()}),
        );
        text.push_str(&self.perms.cancel_all());
        Some(text)
    }
}

impl Acp {
    fn on_permission(&mut self, id: &Value, params: &Value, out: &mut Vec<AgentEvent>) {
        match self.perms.add(&self.policy, id, params) {
            Ok(events) => out.extend(events),
            Err(why) => out.push(error_reply(id, INVALID_PARAMS, &why)),
        }
    }
}
