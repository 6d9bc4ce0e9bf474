//! Claude Code's command line: the stream-json flags, the task's agent
//! settings, swarm's tools as an MCP server, and the session to resume.

use serde_json::{Value, json};

use super::super::AgentConfig;
use crate::worker_mcp::{SERVER_NAME, StdioServer};

/// The argv of `claude -p` in stream-json mode for `cfg`.
pub(super) fn argv(cfg: &AgentConfig, resume: Option<&str>) -> Vec<String> {
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
