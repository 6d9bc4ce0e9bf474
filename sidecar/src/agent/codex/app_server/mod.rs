//! Codex through `codex app-server`: the sidecar is the app-server's
//! client, JSON-RPC on the process's stdio, one message a line (Codex
//! leaves out the `"jsonrpc"` member; it accepts it and so it is sent).
//!
//! # The conversation
//!
//! `initialize` → the `initialized` notification → `thread/start` in the
//! worktree (or `thread/resume` of the thread to continue; a thread Codex
//! cannot find is replaced by a new one, with a note) → `turn/start` with
//! the task. `turn/completed` ends a turn (status `completed`,
//! `interrupted` or `failed`); a follow-up (an answer, an operator's
//! message) is the next `turn/start` once none runs. A stop sends
//! `turn/interrupt` and cancels whatever approval is still open.
//!
//! Each turn runs with `approvalPolicy: "untrusted"`, so that Codex asks
//! before every command outside its short list of read-only ones and
//! before every edit, and with swarm's sandbox as Codex's
//! `externalSandbox` when swarm confines the attempt (see the parent
//! module). The plan's `extra_args` may decide either instead.
//!
//! # What Codex asks of the client
//!
//! - `item/commandExecution/requestApproval`: the task's policy as `Bash`
//!   with the whole command; ask means the operator.
//! - `item/fileChange/requestApproval`: the policy as `Edit` of each path
//!   of the change (the `fileChange` item announced them); a path the
//!   task does not own refuses the edit at once.
//! - `item/tool/requestUserInput`: the model's questions, each an operator
//!   question with its options; the answers go back in the same turn.
//! - `mcpServer/elicitation/request` that Codex itself makes before an MCP
//!   tool call (`_meta.codex_approval_kind: "mcp_tool_call"`): the policy
//!   as `mcp__<server>__<tool>`, so swarm's own tools need no rule; an
//!   MCP server's own forms are declined.
//! - `item/permissions/requestApproval` (more than its sandbox) is
//!   granted nothing, and any other request is answered "method not
//!   found".
//!
//! # Usage and limits
//!
//! `thread/tokenUsage/updated` carries the thread's running token totals;
//! the process's share is priced with the attempt's price table as the
//! model Codex says the thread uses. `account/rateLimits/updated` keeps
//! the newest windows, whose reset time a turn failed for a usage limit
//! (`codexErrorInfo: "usageLimitExceeded"`) waits for.
//!
//! Every line is hostile input: nothing here panics, what is kept is
//! bounded, and a line that is not a JSON-RPC message is
//! [`AgentEvent::Unparseable`].

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Value, json};
use swarm_core::plan::AgentKind;

use super::{DEFAULT_MODEL, mcp_overrides, sandbox_mode, user_sets};
use crate::agent::cost::Pricing;
use crate::agent::jsonrpc::{self, METHOD_NOT_FOUND, Message, error_reply, line, session_ok};
use crate::agent::policy::Policy;
use crate::agent::{Agent, AgentConfig, AgentError, AgentEvent, FollowUp, Opening, TurnEnd, Verdict, clip};

mod notifications;
mod requests;
#[cfg(test)]
mod tests;

/// The feature that lets the model ask the user in Codex's default mode.
const ASK_FEATURE: &str = "features.default_mode_request_user_input";
/// Texts held for the thread (the prompt, follow-ups) at most.
const MAX_HELD: usize = 64;
/// Notifications swarm has no use for, which Codex then does not send:
/// the streamed text of messages, reasoning and command output.
const QUIET: &[&str] = &[
    "item/agentMessage/delta",
    "item/reasoning/textDelta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/plan/delta",
    "command/exec/outputDelta",
    "rawResponseItem/completed",
];

/// One of our requests Codex has yet to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    Initialize,
    StartThread,
    ResumeThread(String),
    StartTurn,
    Interrupt,
}

impl Sent {
    fn method(&self) -> &'static str {
        match self {
            Sent::Initialize => "initialize",
            Sent::StartThread => "thread/start",
            Sent::ResumeThread(_) => "thread/resume",
            Sent::StartTurn => "turn/start",
            Sent::Interrupt => "turn/interrupt",
        }
    }
}

/// What every thread and turn is started with.
#[derive(Debug, Clone)]
struct Settings {
    model: Option<String>,
    cwd: String,
    /// None: the plan's `extra_args` decide.
    approval: Option<&'static str>,
    sandbox: Option<&'static str>,
    /// swarm's sandbox confines the process (and so Codex's commands).
    confined: bool,
}

#[derive(Debug, Clone)]
pub struct AppServer {
    policy: Policy,
    settings: Settings,
    next_id: i64,
    pending: HashMap<i64, Sent>,
    /// Texts to start a turn with once the thread exists, in order.
    held: Vec<String>,
    /// The thread this process should continue.
    resume: Option<String>,
    thread: Option<String>,
    /// A turn was started and has not completed.
    turn_running: bool,
    /// Its id, once Codex named it (for `turn/interrupt`).
    turn_id: Option<String>,
    items: notifications::Items,
    usage: notifications::Tokens,
    open: requests::Open,
}

impl AppServer {
    pub fn new(
        cfg: &AgentConfig,
        worktree: &Path,
        owned_globs: &[String],
        pricing: Pricing,
        confined: bool,
    ) -> Result<AppServer, AgentError> {
        let model = cfg.model.clone().unwrap_or_else(|| DEFAULT_MODEL.to_string());
        Ok(AppServer {
            policy: Policy::new(cfg, owned_globs, worktree)?,
            settings: Settings {
                model: cfg.model.clone(),
                cwd: worktree.display().to_string(),
                approval: (!user_sets(&cfg.extra_args, "approval_policy")).then_some("untrusted"),
                sandbox: (!user_sets(&cfg.extra_args, "sandbox_mode")).then_some(sandbox_mode(confined)),
                confined,
            },
            next_id: 0,
            pending: HashMap::new(),
            held: Vec::new(),
            resume: None,
            thread: None,
            turn_running: false,
            turn_id: None,
            items: notifications::Items::default(),
            usage: notifications::Tokens::new(pricing, model),
            open: requests::Open::default(),
        })
    }

    /// A request line of ours, remembered until it is answered.
    fn request(&mut self, sent: Sent, method: &str, params: Value) -> String {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, sent);
        line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    }

    /// The settings a thread starts (or resumes) with.
    fn thread_params(&self) -> serde_json::Map<String, Value> {
        let s = &self.settings;
        let mut p = serde_json::Map::new();
        p.insert("cwd".into(), json!(s.cwd));
        if let Some(m) = &s.model {
            p.insert("model".into(), json!(m));
        }
        if let Some(a) = s.approval {
            p.insert("approvalPolicy".into(), json!(a));
        }
        if let Some(mode) = s.sandbox {
            p.insert("sandbox".into(), json!(mode));
        }
        p
    }

    fn start_turn(&mut self, thread: &str, text: String) -> String {
        let mut p = serde_json::Map::new();
        p.insert("threadId".into(), json!(thread));
        p.insert("input".into(), json!([{"type": "text", "text": text, "text_elements": []}]));
        // Codex's own sandbox cannot run inside swarm's: it is told that
        // the one it runs in is external, so that it wraps no command.
        if self.settings.confined && self.settings.sandbox.is_some() {
            p.insert(
                "sandboxPolicy".into(),
                json!({"type": "externalSandbox", "networkAccess": "restricted"}),
            );
        }
        self.turn_running = true;
        self.turn_id = None;
        self.items.new_turn();
        self.request(Sent::StartTurn, "turn/start", Value::Object(p))
    }

    /// The held texts as one turn, when a thread exists and no turn runs.
    fn release_held(&mut self) -> Option<String> {
        let thread = self.thread.clone()?;
        if self.held.is_empty() || self.turn_running {
            return None;
        }
        let text = std::mem::take(&mut self.held).join("\n\n");
        Some(self.start_turn(&thread, text))
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
        let _span = tracing::debug_span!("codex.request", method = %clip(method, 64)).entered();
        match method {
            "item/commandExecution/requestApproval" => {
                let command = self.items.command(params);
                self.open.command(id, command, out)
            }
            "item/fileChange/requestApproval" => {
                let paths = self.items.paths(params);
                self.open.file_change(&self.policy, id, params, paths, out)
            }
            "item/tool/requestUserInput" => self.open.user_input(id, params, out),
            "item/permissions/requestApproval" => {
                out.push(AgentEvent::Note("Codex asked for more than its sandbox; granted nothing".into()));
                out.push(jsonrpc::reply(id, json!({"permissions": {}, "scope": "turn"})));
            }
            "mcpServer/elicitation/request" => self.open.elicitation(id, params, out),
            _ => {
                tracing::debug!("refusing a Codex request swarm does not serve");
                out.push(error_reply(
                    id,
                    METHOD_NOT_FOUND,
                    &format!("method not found: {}", clip(method, 128)),
                ));
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: Option<&Value>, out: &mut Vec<AgentEvent>) {
        static NULL: Value = Value::Null;
        let params = params.unwrap_or(&NULL);
        match method {
            "turn/started" => {
                if let Some(id) = params.pointer("/turn/id").and_then(Value::as_str).filter(|s| session_ok(s))
                {
                    self.turn_id = Some(id.to_string());
                }
            }
            "turn/completed" => self.on_turn_completed(params, out),
            "serverRequest/resolved" => self.open.resolved(params),
            _ => self.items.on_notification(method, params, &mut self.usage, out),
        }
    }

    fn on_turn_completed(&mut self, params: &Value, out: &mut Vec<AgentEvent>) {
        let Some(turn) = params.get("turn") else {
            out.push(AgentEvent::Unparseable("turn/completed without a turn".into()));
            return;
        };
        self.turn_running = false;
        self.turn_id = None;
        // An approval Codex no longer waits for must not be answered later.
        self.open.clear();
        out.push(AgentEvent::TurnEnded(self.items.turn_end(turn)));
        if let Some(next) = self.release_held() {
            out.push(AgentEvent::Send(next));
        }
    }

    fn on_response(&mut self, id: &Value, result: Result<&Value, String>, out: &mut Vec<AgentEvent>) {
        let Some(sent) = id.as_i64().and_then(|id| self.pending.remove(&id)) else {
            return; // not an answer to anything of ours (or answered twice)
        };
        let result = match (result, sent) {
            (Ok(r), sent) => (r, sent),
            (Err(why), Sent::ResumeThread(old)) => {
                out.push(AgentEvent::Note(clip(
                    &format!("Codex could not resume thread {old} ({why}); a new thread replaces it"),
                    500,
                )));
                let params = Value::Object(self.thread_params());
                out.push(AgentEvent::Send(self.request(Sent::StartThread, "thread/start", params)));
                return;
            }
            // A turn that was never running cannot be interrupted: nothing to do.
            (Err(_), Sent::Interrupt) => return,
            (Err(why), sent) => {
                if sent == Sent::StartTurn {
                    self.turn_running = false;
                }
                let failed = TurnEnd {
                    ok: false,
                    text: clip(&format!("{} failed: {why}", sent.method()), 4096),
                    rate_limit: None,
                };
                out.push(AgentEvent::TurnEnded(failed));
                if let Some(next) = self.release_held() {
                    out.push(AgentEvent::Send(next));
                }
                return;
            }
        };
        match result {
            (_, Sent::Initialize) => self.on_initialized(out),
            (r, Sent::StartThread | Sent::ResumeThread(_)) => self.on_thread(r, out),
            (r, Sent::StartTurn) => {
                if let Some(id) = r.pointer("/turn/id").and_then(Value::as_str).filter(|s| session_ok(s)) {
                    self.turn_id = Some(id.to_string());
                }
            }
            (_, Sent::Interrupt) => {}
        }
    }

    fn on_initialized(&mut self, out: &mut Vec<AgentEvent>) {
        let mut text = line(&json!({"jsonrpc": "2.0", "method": "initialized"}));
        let mut params = self.thread_params();
        text.push_str(&match self.resume.clone() {
            Some(thread) => {
                params.insert("threadId".into(), json!(thread));
                self.request(Sent::ResumeThread(thread), "thread/resume", Value::Object(params))
            }
            None => self.request(Sent::StartThread, "thread/start", Value::Object(params)),
        });
        out.push(AgentEvent::Send(text));
    }

    fn on_thread(&mut self, result: &Value, out: &mut Vec<AgentEvent>) {
        if let Some(m) = result.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()) {
            self.usage.set_model(clip(m, 128));
        }
        match result.pointer("/thread/id").and_then(Value::as_str).filter(|s| session_ok(s)) {
            Some(id) => {
                self.thread = Some(id.to_string());
                out.push(AgentEvent::SessionStarted(id.to_string()));
                if let Some(turn) = self.release_held() {
                    out.push(AgentEvent::Send(turn));
                }
            }
            None => out.push(AgentEvent::TurnEnded(TurnEnd {
                ok: false,
                text: "Codex answered thread/start without a usable thread id".into(),
                rate_limit: None,
            })),
        }
    }
}

impl Agent for AppServer {
    fn kind(&self) -> AgentKind {
        AgentKind::Codex
    }

    /// `codex app-server` with swarm's tools as config overrides, then the
    /// plan's `extra_args`; the model and the rest go in `thread/start`,
    /// and a resume is a `thread/resume`, not a flag.
    fn argv(&self, cfg: &AgentConfig, _resume: Option<&str>) -> Vec<String> {
        let mut v = vec![cfg.program.clone(), "app-server".into()];
        // Outside Plan mode Codex offers the model no way to ask the user
        // unless this is on; swarm's operator is that user.
        if !cfg.extra_args.iter().any(|a| a.contains(ASK_FEATURE)) {
            v.extend(["-c".into(), format!("{ASK_FEATURE}=true")]);
        }
        if let Some(server) = &cfg.mcp {
            v.extend(mcp_overrides(server));
        }
        v.extend(cfg.extra_args.iter().cloned());
        v
    }

    fn opening(&mut self, prompt: &str, resume: Option<&str>) -> Opening {
        self.resume = resume.map(str::to_string);
        self.held.clear();
        self.hold(prompt);
        let params = json!({
            "clientInfo": {"name": "swarm", "title": "swarm", "version": env!("CARGO_PKG_VERSION")},
            // The model's questions to the user are an experimental method.
            "capabilities": {"experimentalApi": true, "requestAttestation": false, "optOutNotificationMethods": QUIET},
        });
        Opening { input: self.request(Sent::Initialize, "initialize", params), close: false }
    }

    fn follow_up(&self) -> FollowUp {
        FollowUp::Stdin
    }

    fn user_message(&mut self, text: &str) -> String {
        self.hold(text);
        self.release_held().unwrap_or_default()
    }

    fn permission_reply(&mut self, request_id: &str, verdict: &Verdict, _input: &Value) -> Option<String> {
        self.open.decide(request_id, verdict)
    }

    fn answer_reply(&self, request_id: &str, _input: &Value, answers: &[(String, String)]) -> Option<String> {
        self.open.answer(request_id, answers)
    }

    /// Codex's requests are all answered as they arrive.
    fn refuse_control(&self, _request_id: &str) -> Option<String> {
        None
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let v = match crate::agent::json_object(line) {
            Ok(v) => v,
            Err(unparseable) => return vec![unparseable],
        };
        let mut out = Vec::new();
        self.on_message(&v, &mut out);
        out
    }

    fn new_process(&mut self) {
        self.pending.clear();
        self.open = requests::Open::default();
        self.items = notifications::Items::default();
        self.usage.new_process();
        self.turn_running = false;
        self.turn_id = None;
        // The thread stays: the next process resumes it.
    }

    /// `turn/interrupt` of the running turn, and every open approval
    /// answered "cancel" (Codex then ends the turn as interrupted).
    fn stop_message(&mut self) -> Option<String> {
        let thread = self.thread.clone()?;
        if !self.turn_running {
            return None;
        }
        let mut text = self.open.cancel_all();
        if let Some(turn) = self.turn_id.clone() {
            let params = json!({"threadId": thread, "turnId": turn});
            text.push_str(&self.request(Sent::Interrupt, "turn/interrupt", params));
        }
        (!text.is_empty()).then_some(text)
    }
}
