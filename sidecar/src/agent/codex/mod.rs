//! OpenAI Codex as a worker, through one of its two machine interfaces:
//!
//! - `codex app-server` ([`app_server`]): JSON-RPC on stdio with threads,
//!   turns and items, where Codex asks its client before a command or an
//!   edit and when the model wants the user's answer. swarm is that
//!   client, so those go through the task's permission policy and, where
//!   it says ask, to the operator, and an answer reaches the model in the
//!   same turn.
//! - `codex exec --json` ([`exec`]): one turn per process and no channel
//!   back, for a CLI older than the protocol swarm speaks.
//!
//! [`transport`] picks by the CLI's `--version`.
//!
//! # Codex's sandbox and swarm's
//!
//! Codex confines the commands it runs itself (`sandbox_mode`); on Linux
//! that is bubblewrap, which needs user namespaces and a `bwrap` binary. In
//! swarm's sandbox the agent process and everything it starts are already
//! under Landlock (writes only to the worktree and the allowed paths, no
//! way out), and a namespace sandbox cannot be built inside it, so a
//! confined attempt runs Codex with `danger-full-access`: swarm's sandbox
//! is the floor, and Codex's approvals (app-server) still put every
//! command and edit before the task's policy. An attempt swarm does not
//! confine (the plan opted out, or no Landlock) asks Codex for
//! `workspace-write`, so that something confines it. A plan that sets
//! `sandbox_mode` or `approval_policy` itself in `extra_args` (`-c key=…`,
//! `--sandbox`, `--full-auto`, `--dangerously-bypass-approvals-and-sandbox`)
//! is left as it is.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::worker_mcp::{SERVER_NAME, StdioServer};

pub mod app_server;
pub mod exec;

pub use app_server::AppServer;
pub use exec::Codex as Exec;

/// What Codex's tokens are priced as when the plan names no model.
const DEFAULT_MODEL: &str = "codex";
/// The oldest release whose app-server speaks the method and field names
/// the client here was written against (they were renamed before it).
const APP_SERVER_SINCE: [u64; 3] = [0, 147, 0];
/// `codex --version` answers at once; a program that does not is not
/// going to speak the protocol either.
const VERSION_LIMIT: Duration = Duration::from_secs(10);

/// How swarm talks to the installed Codex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    AppServer,
    Exec,
}

/// The transport for `program`, by its `--version` (asked once per
/// program for the sidecar's life: a new CLI needs a new sidecar).
pub async fn transport(program: &str) -> Transport {
    static SEEN: Mutex<Option<HashMap<String, Transport>>> = Mutex::new(None);
    if let Some(t) = SEEN.lock().ok().and_then(|m| m.as_ref()?.get(program).copied()) {
        return t;
    }
    let version = cli_version(program).await;
    let t = match version.as_deref().and_then(release) {
        Some(r) if r >= APP_SERVER_SINCE => Transport::AppServer,
        _ => Transport::Exec,
    };
    tracing::info!(program, version = version.as_deref().unwrap_or("unknown"), transport = ?t, "codex transport");
    if let Ok(mut m) = SEEN.lock() {
        m.get_or_insert_with(HashMap::new).insert(program.to_string(), t);
    }
    t
}

async fn cli_version(program: &str) -> Option<String> {
    let run = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(VERSION_LIMIT, run).await.ok()?.ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `codex-cli 0.147.0` (or `codex-cli 0.148.0-alpha.2`) as [0, 147, 0].
fn release(version: &str) -> Option<[u64; 3]> {
    let number = version.strip_prefix("codex-cli ")?.split(['-', '+', ' ']).next()?;
    let mut parts = number.split('.').map(|p| p.parse::<u64>().ok());
    let r = [parts.next()??, parts.next()??, parts.next()??];
    parts.next().is_none().then_some(r)
}

/// The `sandbox_mode` swarm asks of Codex (see the module's notes).
pub fn sandbox_mode(confined: bool) -> &'static str {
    if confined { "danger-full-access" } else { "workspace-write" }
}

/// Whether the plan's `extra_args` already decide Codex's `key`
/// (`sandbox_mode` or `approval_policy`), as a `-c` override or a flag.
fn user_sets(extra_args: &[String], key: &str) -> bool {
    let flags: &[&str] = match key {
        "sandbox_mode" => {
            &["-s", "--sandbox", "--full-auto", "--dangerously-bypass-approvals-and-sandbox", "--yolo"]
        }
        "approval_policy" => &[
            "-a",
            "--ask-for-approval",
            "--full-auto",
            "--dangerously-bypass-approvals-and-sandbox",
            "--yolo",
        ],
        _ => &[],
    };
    extra_args.iter().enumerate().any(|(i, a)| {
        let after_c = i > 0 && matches!(extra_args[i - 1].as_str(), "-c" | "--config");
        let value = a.strip_prefix("--config=").or_else(|| a.strip_prefix("-c")).filter(|v| !v.is_empty());
        let assignment = if after_c { Some(a.as_str()) } else { value.map(|v| v.trim_start_matches('=')) };
        flags.contains(&a.as_str())
            || flags.iter().any(|f| f.starts_with("--") && a.starts_with(&format!("{f}=")))
            || assignment.is_some_and(|v| v.split('=').next().map(str::trim) == Some(key))
    })
}

/// swarm's tools as `-c` overrides of Codex's `mcp_servers` table: each
/// value is TOML, so strings go in as JSON strings (valid TOML basic strings).
fn mcp_overrides(server: &StdioServer) -> Vec<String> {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let key = format!("mcp_servers.{SERVER_NAME}");
    let args: Vec<String> = server.args.iter().map(|a| quote(a)).collect();
    let env: Vec<String> = server.env.iter().map(|(k, v)| format!("{} = {}", quote(k), quote(v))).collect();
    vec![
        "-c".into(),
        format!("{key}.command={}", quote(&server.command)),
        "-c".into(),
        format!("{key}.args=[{}]", args.join(", ")),
        "-c".into(),
        format!("{key}.env={{ {} }}", env.join(", ")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_read_from_the_version_line() {
        assert_eq!(release("codex-cli 0.147.0"), Some([0, 147, 0]));
        assert_eq!(release("codex-cli 0.148.0-alpha.2"), Some([0, 148, 0]));
        assert_eq!(release("codex-cli 1.2"), None);
        assert_eq!(release("2.1.332 (Claude Code)"), None);
        assert!(release("codex-cli 0.146.9").is_some_and(|r| r < APP_SERVER_SINCE));
        assert!(release("codex-cli 0.200.0").is_some_and(|r| r >= APP_SERVER_SINCE));
    }

    #[test]
    fn a_plan_that_decides_the_sandbox_itself_is_left_alone() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(user_sets(&args(&["--sandbox", "read-only"]), "sandbox_mode"));
        assert!(user_sets(&args(&["-c", "sandbox_mode=\"read-only\""]), "sandbox_mode"));
        assert!(user_sets(&args(&["--config=sandbox_mode=\"read-only\""]), "sandbox_mode"));
        assert!(user_sets(&args(&["--full-auto"]), "approval_policy"));
        assert!(user_sets(&args(&["-c", "approval_policy = \"never\""]), "approval_policy"));
        assert!(!user_sets(&args(&["-c", "model_reasoning_effort=\"low\""]), "sandbox_mode"));
        assert!(!user_sets(&args(&["sandbox_mode=x"]), "sandbox_mode"), "not after -c: an argument");
        assert_eq!(sandbox_mode(true), "danger-full-access");
        assert_eq!(sandbox_mode(false), "workspace-write");
    }
}
