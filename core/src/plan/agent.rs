//! The plan's agent settings: `agent = "claude" | "codex" | "acp"` runs a
//! coding agent through its machine interface instead of a `command`, with
//! its model, limits and a permission policy in Claude Code's own rule syntax.
//!
//! `agent = "acp"` drives any Agent Client Protocol server; its command line
//! is `agent_command` (program and arguments), which becomes the spec's
//! `path` and the head of its `extra_args`, so the wire needs no new field.
//! The Claude-specific settings (model, limits, tools, mode, system prompt)
//! are refused for it: ACP has no standard form for them, and an agent's own
//! flags belong in its `agent_command`.

use std::fmt;

use serde::Deserialize;

use super::error::{PlanError, err};
use crate::names::check_text;

/// Which coding agent runs the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// Claude Code: `claude -p` with stream-json in and out.
    Claude,
    /// OpenAI Codex: `codex exec --json`.
    Codex,
    /// Any Agent Client Protocol server (JSON-RPC on its stdio), started
    /// from the plan's `agent_command`.
    Acp,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Acp => "acp",
        }
    }

    pub fn parse(s: &str) -> Option<AgentKind> {
        [AgentKind::Claude, AgentKind::Codex, AgentKind::Acp].into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for AgentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the policy does with a request none of its rules decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Otherwise {
    /// Ask the operator; the agent waits for the answer.
    #[default]
    Ask,
    Deny,
}

/// One permission rule: a tool name, optionally with a specifier in
/// parentheses, as Claude Code writes them: `Read`, `Edit(src/**)`,
/// `Bash(cargo test:*)`, `WebFetch(domain:docs.rs)`, `mcp__github`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionRule {
    pub tool: String,
    /// The text between the parentheses; `None` matches every use of the tool.
    pub specifier: Option<String>,
}

impl PermissionRule {
    pub fn parse(text: &str) -> Result<PermissionRule, String> {
        let text = text.trim();
        let (tool, specifier) = match text.find('(') {
            None => (text, None),
            Some(open) => {
                let Some(inner) = text[open + 1..].strip_suffix(')') else {
                    return Err(format!("rule {text:?} must end with ')' after its specifier"));
                };
                (&text[..open], Some(inner))
            }
        };
        let tool_ok = !tool.is_empty()
            && tool.len() <= 128
            && tool.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*'));
        if !tool_ok {
            return Err(format!(
                "rule {text:?}: tool name must be 1-128 of [A-Za-z0-9_*-], e.g. Edit or Bash"
            ));
        }
        if let Some(s) = specifier {
            if s.trim().is_empty() {
                return Err(format!("rule {text:?}: empty specifier; write {tool} to match every use"));
            }
            if s.chars().any(char::is_control) {
                return Err(format!("rule {text:?} must not contain control characters"));
            }
        }
        Ok(PermissionRule { tool: tool.to_string(), specifier: specifier.map(str::to_string) })
    }
}

impl fmt::Display for PermissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.specifier {
            Some(s) => write!(f, "{}({s})", self.tool),
            None => f.write_str(&self.tool),
        }
    }
}

/// Decides the agent's permission requests. Deny rules win over allow
/// rules; whatever neither decides goes to `otherwise`. An edit outside the
/// task's owned globs is refused before any rule is looked at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PermissionPolicy {
    pub allow: Vec<PermissionRule>,
    pub deny: Vec<PermissionRule>,
    pub otherwise: Otherwise,
}

/// Claude Code's permission modes (`--permission-mode`).
pub const CLAUDE_PERMISSION_MODES: &[&str] =
    &["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"];

/// A validated agent setup for one task.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    pub kind: AgentKind,
    /// The executable; `None`: the kind's name looked up on PATH.
    pub path: Option<String>,
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    pub max_budget_usd: Option<f64>,
    pub allowed_tools: Vec<String>,
    pub permission_mode: Option<String>,
    pub append_system_prompt: Option<String>,
    pub extra_args: Vec<String>,
    pub permissions: PermissionPolicy,
    /// What the agent is told about working in swarm.
    pub instructions: AgentInstructions,
}

/// swarm's note to the agent (its task file, owned files, how to ask,
/// what happens to its commits), sent with every session.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AgentInstructions {
    /// The sidecar's built-in, versioned note.
    #[default]
    BuiltIn,
    /// `agent_instructions = false`.
    Off,
    /// `agent_instructions = "..."`: this text instead.
    Text(String),
}

/// `agent_instructions = true | false | "text"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawInstructions {
    On(bool),
    Text(String),
}

/// The agent fields as `[defaults]` and `[[tasks]]` both write them.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgentFields {
    pub agent: Option<AgentKind>,
    pub agent_path: Option<String>,
    pub agent_command: Option<Vec<String>>,
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    pub max_budget_usd: Option<f64>,
    pub allowed_tools: Option<Vec<String>>,
    pub permission_mode: Option<String>,
    pub append_system_prompt: Option<String>,
    pub agent_instructions: Option<RawInstructions>,
    pub extra_args: Option<Vec<String>>,
    pub permissions: Option<RawPermissions>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPermissions {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    otherwise: Otherwise,
}

const MAX_RULES: usize = 256;
const MAX_ARGS: usize = 64;
const NEEDS_AGENT: &str = "needs an agent: set agent = \"claude\", \"codex\" or \"acp\"";
/// The settings an ACP agent cannot take: the protocol has no standard
/// form for them (its own flags go in `agent_command`).
const NOT_FOR_ACP: &[&str] = &[
    "agent_path",
    "model",
    "max_turns",
    "max_budget_usd",
    "allowed_tools",
    "permission_mode",
    "append_system_prompt",
];
const MAX_ARG_BYTES: usize = 4096;

impl RawAgentFields {
    /// Whether any agent setting is written here (they need an agent).
    fn any_setting(&self) -> Option<&'static str> {
        let set = [
            ("agent_path", self.agent_path.is_some()),
            ("agent_command", self.agent_command.is_some()),
            ("model", self.model.is_some()),
            ("max_turns", self.max_turns.is_some()),
            ("max_budget_usd", self.max_budget_usd.is_some()),
            ("allowed_tools", self.allowed_tools.is_some()),
            ("permission_mode", self.permission_mode.is_some()),
            ("append_system_prompt", self.append_system_prompt.is_some()),
            ("agent_instructions", self.agent_instructions.is_some()),
            ("extra_args", self.extra_args.is_some()),
            ("permissions", self.permissions.is_some()),
        ];
        set.into_iter().find(|(_, on)| *on).map(|(name, _)| name)
    }

    /// Task fields over defaults, field by field.
    fn over(&self, d: &RawAgentFields) -> RawAgentFields {
        RawAgentFields {
            agent: self.agent.or(d.agent),
            agent_path: self.agent_path.clone().or_else(|| d.agent_path.clone()),
            agent_command: self.agent_command.clone().or_else(|| d.agent_command.clone()),
            model: self.model.clone().or_else(|| d.model.clone()),
            max_turns: self.max_turns.or(d.max_turns),
            max_budget_usd: self.max_budget_usd.or(d.max_budget_usd),
            allowed_tools: self.allowed_tools.clone().or_else(|| d.allowed_tools.clone()),
            permission_mode: self.permission_mode.clone().or_else(|| d.permission_mode.clone()),
            append_system_prompt: self
                .append_system_prompt
                .clone()
                .or_else(|| d.append_system_prompt.clone()),
            agent_instructions: self.agent_instructions.clone().or_else(|| d.agent_instructions.clone()),
            extra_args: self.extra_args.clone().or_else(|| d.extra_args.clone()),
            permissions: self.permissions.clone().or_else(|| d.permissions.clone()),
        }
    }
}

/// The agent a task runs, from its own fields over the defaults; `None`
/// when neither names an agent. `at` prefixes error paths (`tasks[2]`).
pub(super) fn resolve(
    at: &str,
    task: &RawAgentFields,
    defaults: &RawAgentFields,
) -> Result<Option<AgentSpec>, PlanError> {
    let f = task.over(defaults);
    let path = |field: &str| format!("{at}.{field}");
    let Some(kind) = f.agent else {
        if let Some(field) = task.any_setting() {
            return Err(err(path(field), NEEDS_AGENT));
        }
        if let Some(field) = defaults.any_setting() {
            return Err(err(format!("defaults.{field}"), NEEDS_AGENT));
        }
        return Ok(None);
    };
    let command = agent_command(&path, kind, &f)?;
    check_settings(&path, kind, &f)?;
    let allowed_tools = f.allowed_tools.clone().unwrap_or_default();
    let instructions = instructions(&path, &f)?;
    let extra_args = f.extra_args.clone().unwrap_or_default();
    if extra_args.len() > MAX_ARGS {
        return Err(err(path("extra_args"), format!("at most {MAX_ARGS} arguments")));
    }
    for (i, a) in extra_args.iter().enumerate() {
        check_arg(a).map_err(|rule| err(format!("{}[{i}]", path("extra_args")), rule))?;
    }
    let permissions = match &f.permissions {
        None => PermissionPolicy::default(),
        // Codex's app-server asks before commands and edits, so its
        // permissions count as Claude's do (a CLI too old for app-server
        // runs `exec`, which cannot ask; the sidecar says so in the log).
        Some(raw) => PermissionPolicy {
            allow: rules(&format!("{}.allow", path("permissions")), &raw.allow)?,
            deny: rules(&format!("{}.deny", path("permissions")), &raw.deny)?,
            otherwise: raw.otherwise,
        },
    };
    // An ACP agent's command line travels as the spec's path and the head
    // of its extra_args.
    let (agent_path, extra_args) = match command {
        Some((program, args)) => (Some(program), args.into_iter().chain(extra_args).collect()),
        None => (f.agent_path.clone(), extra_args),
    };
    if extra_args.len() > MAX_ARGS {
        return Err(err(path("extra_args"), format!("at most {MAX_ARGS} arguments with agent_command's")));
    }
    Ok(Some(AgentSpec {
        kind,
        path: agent_path,
        model: f.model.clone(),
        max_turns: f.max_turns,
        max_budget_usd: f.max_budget_usd,
        allowed_tools,
        permission_mode: f.permission_mode.clone(),
        append_system_prompt: f.append_system_prompt.clone(),
        extra_args,
        permissions,
        instructions,
    }))
}

/// The scalar settings, each against its own rule.
fn check_settings(
    path: &dyn Fn(&str) -> String,
    kind: AgentKind,
    f: &RawAgentFields,
) -> Result<(), PlanError> {
    if let Some(p) = &f.agent_path {
        check_arg(p).map_err(|rule| err(path("agent_path"), rule))?;
        if p.trim().is_empty() {
            return Err(err(path("agent_path"), "must not be empty"));
        }
    }
    if let Some(m) = &f.model {
        let ok = !m.is_empty()
            && m.len() <= 128
            && m.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '[' | ']'));
        if !ok {
            return Err(err(path("model"), "must be 1-128 of [A-Za-z0-9._:/[]-]"));
        }
    }
    if f.max_turns == Some(0) {
        return Err(err(path("max_turns"), "must be at least 1"));
    }
    if let Some(b) = f.max_budget_usd
        && !(b.is_finite() && b > 0.0 && b <= 10_000.0)
    {
        return Err(err(path("max_budget_usd"), "must be more than 0 and at most 10000"));
    }
    for (i, t) in f.allowed_tools.iter().flatten().enumerate() {
        PermissionRule::parse(t).map_err(|rule| err(format!("{}[{i}]", path("allowed_tools")), rule))?;
    }
    if let Some(mode) = &f.permission_mode {
        if kind != AgentKind::Claude {
            return Err(err(path("permission_mode"), format!("is for agent = \"claude\", not {kind:?}")));
        }
        if !CLAUDE_PERMISSION_MODES.contains(&mode.as_str()) {
            return Err(err(
                path("permission_mode"),
                format!("must be one of {}", CLAUDE_PERMISSION_MODES.join(", ")),
            ));
        }
    }
    if let Some(p) = &f.append_system_prompt {
        check_text(p, super::MAX_PROMPT_BYTES).map_err(|rule| err(path("append_system_prompt"), rule))?;
    }
    Ok(())
}

/// `agent_instructions`: the built-in note, none, or the plan's own text.
fn instructions(path: &dyn Fn(&str) -> String, f: &RawAgentFields) -> Result<AgentInstructions, PlanError> {
    Ok(match &f.agent_instructions {
        None | Some(RawInstructions::On(true)) => AgentInstructions::BuiltIn,
        Some(RawInstructions::On(false)) => AgentInstructions::Off,
        Some(RawInstructions::Text(t)) => {
            check_text(t, super::MAX_PROMPT_BYTES).map_err(|rule| err(path("agent_instructions"), rule))?;
            if t.trim().is_empty() {
                return Err(err(path("agent_instructions"), "must not be empty (false turns the note off)"));
            }
            AgentInstructions::Text(t.clone())
        }
    })
}

/// `agent_command`: required for (and only for) `agent = "acp"`, as the
/// program and its arguments. The settings ACP has no form for are refused
/// by name.
fn agent_command(
    path: &dyn Fn(&str) -> String,
    kind: AgentKind,
    f: &RawAgentFields,
) -> Result<Option<(String, Vec<String>)>, PlanError> {
    if kind != AgentKind::Acp {
        if f.agent_command.is_some() {
            return Err(err(
                path("agent_command"),
                format!("is for agent = \"acp\"; agent = \"{kind}\" takes agent_path and extra_args"),
            ));
        }
        return Ok(None);
    }
    if let Some(field) = NOT_FOR_ACP.iter().find(|name| match **name {
        "agent_path" => f.agent_path.is_some(),
        "model" => f.model.is_some(),
        "max_turns" => f.max_turns.is_some(),
        "max_budget_usd" => f.max_budget_usd.is_some(),
        "allowed_tools" => f.allowed_tools.is_some(),
        "permission_mode" => f.permission_mode.is_some(),
        _ => f.append_system_prompt.is_some(),
    }) {
        let rule = if *field == "agent_path" {
            "agent = \"acp\" is started by agent_command, not agent_path".to_string()
        } else {
            format!("agent = \"acp\" has no {field}: pass the agent's own flag in agent_command")
        };
        return Err(err(path(field), rule));
    }
    let Some(command) = &f.agent_command else {
        return Err(err(
            path("agent_command"),
            "agent = \"acp\" needs agent_command, the ACP server's command line, e.g. [\"gemini\", \"--experimental-acp\"]",
        ));
    };
    let Some((program, args)) = command.split_first() else {
        return Err(err(path("agent_command"), "must name a program: a non-empty list of strings"));
    };
    if program.trim().is_empty() {
        return Err(err(format!("{}[0]", path("agent_command")), "the program must not be empty"));
    }
    if command.len() > MAX_ARGS {
        return Err(err(path("agent_command"), format!("at most {MAX_ARGS} strings")));
    }
    for (i, a) in command.iter().enumerate() {
        check_arg(a).map_err(|rule| err(format!("{}[{i}]", path("agent_command")), rule))?;
    }
    Ok(Some((program.clone(), args.to_vec())))
}

fn rules(at: &str, raw: &[String]) -> Result<Vec<PermissionRule>, PlanError> {
    if raw.len() > MAX_RULES {
        return Err(err(at, format!("at most {MAX_RULES} rules")));
    }
    raw.iter()
        .enumerate()
        .map(|(i, r)| PermissionRule::parse(r).map_err(|rule| err(format!("{at}[{i}]"), rule)))
        .collect()
}

/// An argument handed to the agent's command line.
fn check_arg(a: &str) -> Result<(), String> {
    if a.len() > MAX_ARG_BYTES {
        return Err(format!("must be at most {MAX_ARG_BYTES} bytes"));
    }
    if a.contains('\0') {
        return Err("must not contain NUL".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_in_claude_codes_syntax() {
        let r = PermissionRule::parse("Bash(cargo test:*)").expect("valid");
        assert_eq!(r.tool, "Bash");
        assert_eq!(r.specifier.as_deref(), Some("cargo test:*"));
        assert_eq!(r.to_string(), "Bash(cargo test:*)");
        assert_eq!(PermissionRule::parse("Read").expect("valid").specifier, None);
        assert_eq!(PermissionRule::parse("mcp__github").expect("valid").tool, "mcp__github");
        for bad in ["", "Edit(", "Edit()", "Ed it", "Edit(src/**", "(x)"] {
            assert!(PermissionRule::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
