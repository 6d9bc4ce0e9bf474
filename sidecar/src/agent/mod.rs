//! Coding agents (Claude Code, Codex, any ACP server) as workers, behind one trait.
//!
//! An [`Agent`] knows its command line, how to hand it a prompt and an
//! answer, and how to read its machine output; it turns each stdout line
//! into [`AgentEvent`]s. Everything else — the process, permission
//! decisions, progress, questions, usage totals, the session file — is
//! shared ([`driver`], [`policy`], [`session`]), so another agent is one
//! more file implementing the trait plus a line in [`for_kind`].
//!
//! Agent output is hostile input: the parsers never panic, ignore unknown
//! event types and fields, and turn a malformed line into
//! [`AgentEvent::Unparseable`].

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use swarm_core::Usage;
use swarm_core::plan::{AgentKind, Otherwise, PermissionRule};

pub mod acp;
pub mod claude;
pub mod codex;
pub mod cost;
pub mod driver;
pub mod instructions;
mod jsonrpc;
mod limits;
pub mod policy;
mod process;
pub mod session;

pub(crate) use limits::unix_to_ms;
pub use limits::usage_limit_in_text;

/// Longest stdout line an agent may print; a longer one is skipped (and
/// reported) without being held in memory. Tool inputs carry whole files,
/// so this is far above the 8 KiB cut for plain workers.
pub const MAX_AGENT_LINE: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("agent.kind {0:?} is not supported (claude, codex, acp)")]
    UnknownKind(String),
    #[error("permission policy: {0}")]
    Policy(String),
    #[error("cannot start the agent {program:?}: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("writing to the agent's stdin: {0}")]
    Stdin(std::io::Error),
}

/// The Assign's agent settings, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    pub kind: AgentKind,
    /// The executable (the kind's name when the Assign names none).
    pub program: String,
    pub model: Option<String>,
    pub max_turns: u32,
    pub max_budget_usd: f64,
    pub allowed_tools: Vec<String>,
    pub permission_mode: Option<String>,
    pub append_system_prompt: Option<String>,
    pub extra_args: Vec<String>,
    pub allow: Vec<PermissionRule>,
    pub deny: Vec<PermissionRule>,
    pub otherwise: Otherwise,
    pub resume_session: Option<String>,
    pub instructions: instructions::Instructions,
    /// swarm's tools for this attempt, as the agent starts them; set by
    /// the attempt once its server listens.
    pub mcp: Option<crate::worker_mcp::StdioServer>,
    /// The swarm's prices, for the live estimate of each API call's cost.
    pub prices: std::sync::Arc<swarm_core::plan::PriceTable>,
}

impl AgentConfig {
    /// What an Assign naming only the kind gives: the kind's program from
    /// `PATH`, no model, limits or rules, and the operator asked whatever
    /// no rule decides.
    pub fn of_kind(kind: AgentKind) -> AgentConfig {
        AgentConfig {
            kind,
            program: kind.as_str().to_string(),
            model: None,
            max_turns: 0,
            max_budget_usd: 0.0,
            allowed_tools: Vec::new(),
            permission_mode: None,
            append_system_prompt: None,
            extra_args: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            otherwise: Otherwise::Ask,
            resume_session: None,
            instructions: Default::default(),
            mcp: None,
            prices: Default::default(),
        }
    }
}

/// How an agent takes a message after its first one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUp {
    /// Written to the running process's stdin (Claude's stream-json input).
    Stdin,
    /// A new process resuming the session, once the previous one exited
    /// (`codex exec resume`).
    Resume,
}

/// What to feed a freshly started process on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    pub input: String,
    /// Close stdin after writing (the agent reads its prompt to EOF).
    pub close: bool,
}

/// An operator's or policy's verdict on a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
}

/// One coding agent's machine interface.
pub trait Agent: Send {
    fn kind(&self) -> AgentKind;
    /// The full argv; `resume` names the session to continue.
    fn argv(&self, cfg: &AgentConfig, resume: Option<&str>) -> Vec<String>;
    /// What a new process gets on stdin: the prompt (first message or
    /// answer), or the start of a handshake that carries it once the agent
    /// is ready (ACP); `resume` is the session the process continues, as
    /// [`Agent::argv`] was given it. The methods that write to the agent
    /// take `&mut self`: a protocol adapter numbers its requests and holds
    /// what must wait for the agent's replies.
    fn opening(&mut self, prompt: &str, resume: Option<&str>) -> Opening;
    fn follow_up(&self) -> FollowUp;
    /// Whether swarm's note to the agent goes in as a system prompt
    /// (`append_system_prompt`); otherwise it opens the first message.
    fn takes_system_prompt(&self) -> bool {
        false
    }
    /// The stdin text carrying a follow-up user message ([`FollowUp::Stdin`]);
    /// empty when the adapter holds it until the agent is ready.
    fn user_message(&mut self, text: &str) -> String;
    /// The stdin line answering a permission request; None when the agent
    /// has no such channel.
    fn permission_reply(&mut self, request_id: &str, verdict: &Verdict, input: &Value) -> Option<String>;
    /// The stdin line answering a [`AgentEvent::ToolHook`]: `deny` with
    /// the reason, or None to let the agent's own permission flow go on.
    fn hook_reply(&self, _request_id: &str, _deny: Option<&str>) -> Option<String> {
        None
    }
    /// The stdin line answering a [`AgentEvent::UserQuestion`] with the
    /// operator's answers, as (question text, answer) in the asked order.
    fn answer_reply(
        &self,
        _request_id: &str,
        _input: &Value,
        _answers: &[(String, String)],
    ) -> Option<String> {
        None
    }
    /// The stdin line refusing a control request swarm does not support.
    fn refuse_control(&self, request_id: &str) -> Option<String>;
    /// Parses one stdout line (never fails: see [`AgentEvent::Unparseable`]).
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent>;
    /// Called when a process ended, before another is started for the same
    /// session: per-process state (usage, turn bookkeeping) starts over.
    fn new_process(&mut self);
    /// What to write before the process is stopped (a cancel, a checkpoint),
    /// so that the agent can end its turn itself: ACP's `session/cancel`.
    /// None: the process is only signalled.
    fn stop_message(&mut self) -> Option<String> {
        None
    }
}

/// Where an agent runs, beyond its settings.
#[derive(Debug, Clone, Copy)]
pub struct Host<'a> {
    pub worktree: &'a std::path::Path,
    pub owned_globs: &'a [String],
    /// swarm's sandbox confines the agent's process.
    pub confined: bool,
    /// How the installed Codex is spoken to ([`codex::transport`]).
    pub codex: codex::Transport,
}

/// The agent for the Assign's settings. The worktree and owned globs are
/// for an agent whose edits are asked or served (ACP, Codex's
/// app-server), under the same ownership rules as every permission request.
pub fn for_kind(cfg: &AgentConfig, host: Host<'_>) -> Result<Box<dyn Agent>, AgentError> {
    let pricing = cost::Pricing::new(cfg.prices.clone());
    Ok(match (cfg.kind, host.codex) {
        (AgentKind::Claude, _) => Box::new(claude::Claude::new(pricing)),
        (AgentKind::Codex, codex::Transport::AppServer) => {
            Box::new(codex::AppServer::new(cfg, host.worktree, host.owned_globs, pricing, host.confined)?)
        }
        (AgentKind::Codex, codex::Transport::Exec) => Box::new(codex::Exec::new(cfg, pricing, host.confined)),
        (AgentKind::Acp, _) => Box::new(acp::Acp::new(cfg, host.worktree, host.owned_globs)?),
    })
}

/// A usage limit the agent hit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RateLimit {
    /// When it resets, unix ms; 0 when unknown.
    pub reset_unix_ms: u64,
    /// e.g. "five_hour"; empty when unknown.
    pub kind: String,
}

/// The end of one turn (Claude's `result`, Codex's `turn.completed|failed`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnEnd {
    pub ok: bool,
    /// The result text, or the error.
    pub text: String,
    pub rate_limit: Option<RateLimit>,
}

/// One question the agent's own ask-the-user tool put, for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedQuestion {
    pub text: String,
    /// A short label ("Database").
    pub header: String,
    /// The choices offered; the operator may also answer in their own words.
    pub options: Vec<String>,
    pub multi_select: bool,
}

impl AskedQuestion {
    /// The operator's answer in the agent's terms: an option's number or
    /// label (any case) is that option's label; for a multi-select
    /// question, a comma-separated list of them; anything else is the
    /// operator's own words.
    pub fn answer(&self, text: &str) -> String {
        let text = text.trim();
        let pick = |word: &str| {
            let word = word.trim();
            match word.parse::<usize>() {
                Ok(n) if (1..=self.options.len()).contains(&n) => Some(self.options[n - 1].clone()),
                _ => self.options.iter().find(|o| o.eq_ignore_ascii_case(word)).cloned(),
            }
        };
        if let Some(one) = pick(text) {
            return one;
        }
        if self.multi_select {
            let picked: Option<Vec<String>> = text.split(',').map(pick).collect();
            if let Some(p) = picked.filter(|p| !p.is_empty()) {
                return p.join(", ");
            }
        }
        text.to_string()
    }
}

/// What a line of agent output meant, in the terms the driver reports.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    SessionStarted(String),
    /// A tool call or item, as a Progress step ("Edit src/x.rs", "Bash: cargo test").
    Step(String),
    /// Files the agent changed, as it named them (absolute or relative).
    FilesChanged(Vec<String>),
    /// Its todo list: done of total.
    Todo {
        done: u32,
        total: u32,
    },
    /// This process's usage so far (the parser applies the agent's own
    /// accounting rule; the driver adds up processes).
    Usage(Usage),
    /// A readable line for the log tail (assistant text, warnings).
    Note(String),
    PermissionRequest {
        request_id: String,
        tool: String,
        input: Value,
    },
    /// The agent is about to use a tool (whatever its permission mode
    /// decides): swarm may deny it here, before it runs.
    ToolHook {
        request_id: String,
        tool: String,
        input: Value,
    },
    /// The agent asks the user questions through its own tool.
    UserQuestion {
        request_id: String,
        input: Value,
        questions: Vec<AskedQuestion>,
    },
    /// The agent refused a tool use by itself (its own rules or mode).
    Denied {
        tool: String,
        why: String,
    },
    /// A control request swarm does not support; must be refused.
    UnsupportedControl {
        request_id: String,
        subtype: String,
    },
    /// The agent withdrew a control request it sent.
    ControlCancelled {
        request_id: String,
    },
    /// The agent reported that a usage limit was hit (its turn will end).
    RateLimited(RateLimit),
    /// An error the agent reported outside a turn's end.
    Error(String),
    /// Text to write to the agent's stdin as it is: a protocol adapter's
    /// reply to the agent's request, or its next request (ACP).
    Send(String),
    TurnEnded(TurnEnd),
    Unparseable(String),
    /// swarm's tool server did not start in the agent (its status).
    ToolsUnavailable(String),
}

/// Short form of hostile text for logs and reports.
/// One line of an agent's output as a JSON object, or the event saying why
/// it is not one (every agent speaks objects, one per line).
fn json_object(line: &str) -> Result<Value, AgentEvent> {
    match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(AgentEvent::Unparseable("not a JSON object".into())),
        Err(e) => Err(AgentEvent::Unparseable(e.to_string())),
    }
}

pub(crate) fn clip(s: &str, max: usize) -> String {
    let one_line: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let cut = swarm_core::names::truncate(one_line.trim(), max);
    if cut.len() < one_line.trim().len() { format!("{cut}…") } else { cut.to_string() }
}

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

/// A Progress step for a tool call.
pub(crate) fn step_for_tool(name: &str, input: &Value) -> String {
    let s = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or_default();
    let step = match name {
        "Bash" => format!("Bash: {}", s("command")),
        "Edit" | "Write" | "MultiEdit" | "Read" => format!("{name} {}", s("file_path")),
        "NotebookEdit" => format!("{name} {}", s("notebook_path")),
        "Glob" | "Grep" => format!("{name} {}", s("pattern")),
        "WebFetch" => format!("WebFetch {}", s("url")),
        "WebSearch" => format!("WebSearch: {}", s("query")),
        "Task" | "Agent" => format!("{name}: {}", s("description")),
        _ => name.to_string(),
    };
    clip(&step, 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_picks_an_option_by_number_or_label_or_is_the_operators_own_words() {
        let q = AskedQuestion {
            text: "Which?".into(),
            header: String::new(),
            options: vec!["SQLite".into(), "Postgres".into()],
            multi_select: false,
        };
        assert_eq!(q.answer(" 2 "), "Postgres");
        assert_eq!(q.answer("sqlite"), "SQLite");
        assert_eq!(q.answer("3"), "3", "no third option");
        assert_eq!(q.answer("1, 2"), "1, 2", "one choice only");
        assert_eq!(q.answer("Use DuckDB"), "Use DuckDB");
        let multi = AskedQuestion { multi_select: true, ..q };
        assert_eq!(multi.answer("1, postgres"), "SQLite, Postgres");
        assert_eq!(multi.answer("1, DuckDB"), "1, DuckDB", "not all options: the operator's words");
    }

    #[test]
    fn steps_name_the_tool_and_its_target() {
        let v = serde_json::json!({"command": "cargo test", "file_path": "src/a.rs"});
        assert_eq!(step_for_tool("Bash", &v), "Bash: cargo test");
        assert_eq!(step_for_tool("Edit", &v), "Edit src/a.rs");
        assert_eq!(step_for_tool("Mystery", &v), "Mystery");
        assert_eq!(step_for_tool("Bash", &serde_json::json!({"command": "a\nb\u{1b}"})), "Bash: a b");
    }
}
