//! Tasks run by the real Claude Code CLI against the scripted Messages API
//! ([`crate::messages_api`]): the CLI ([`crate::claude_cli`]), the server,
//! a private `HOME` for the sidecars (the CLI keeps its sessions under
//! `~/.claude`, which the sidecar makes for it), and plans whose workers
//! can reach the server's port and no other.

use std::path::Path;

use crate::claude_cli::{ClaudeCli, claude_cli};
use crate::messages_api::{MessagesApi, Script, marker};
use crate::{Cluster, PlanBuilder, TaskBuilder, TempDir, TempRepo, skip, task};

/// The server, the CLI and the sidecars' home for one test.
pub struct RealClaude {
    pub api: MessagesApi,
    pub cli: &'static ClaudeCli,
    home: TempDir,
}

impl RealClaude {
    /// Starts the server with `scripts`; `None` (the test skipped, saying
    /// why) when the CLI cannot be installed here.
    pub fn start(test: &str, scripts: Vec<Script>) -> Option<RealClaude> {
        let cli = match claude_cli() {
            Ok(cli) => cli,
            Err(why) => {
                skip(test, &format!("no Claude Code CLI: {why}"));
                return None;
            }
        };
        eprintln!("{test}: Claude Code {} ({})", cli.version, cli.path.display());
        let home = tempfile::Builder::new().prefix("claude-home-").tempdir().unwrap();
        Some(RealClaude { api: MessagesApi::start(scripts), cli, home })
    }

    /// The sidecars' (and so the agents') `HOME`.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// What the agent's environment needs to talk to the server and to
    /// nothing else: the plan's `env`, since workers inherit only an
    /// allowlist of the sidecar's variables.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("ANTHROPIC_BASE_URL", self.api.url()),
            ("ANTHROPIC_API_KEY", "test".to_string()),
            // No update checks, telemetry, error reports or side calls.
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
            ("DISABLE_AUTOUPDATER", "1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A plan whose tasks run the CLI with [`RealClaude::env`]; `env`
    /// entries are added to it, an entry with an empty value removes one
    /// (e.g. the API key, for a CLI logged in with an OAuth token).
    pub fn plan_env(&self, name: &str, env: &[(&str, &str)]) -> PlanBuilder {
        let mut all = self.env();
        for (k, v) in env {
            all.retain(|(key, _)| key != k);
            if !v.is_empty() {
                all.push((k.to_string(), v.to_string()));
            }
        }
        let table: Vec<String> = all.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
        PlanBuilder::new(name)
            .remove_default("command")
            .default("agent", r#""claude""#)
            .default("agent_path", &format!("{:?}", self.cli.path.display().to_string()))
            .default("env", &format!("{{ {} }}", table.join(", ")))
            .sandbox_with(&[], &[], &[self.api.port()])
    }

    /// [`RealClaude::plan_env`] with the default environment.
    pub fn plan(&self, name: &str) -> PlanBuilder {
        self.plan_env(name, &[])
    }

    /// A controller and `sidecars` sidecars whose `HOME` is [`RealClaude::home`].
    pub fn cluster(&self, repo: &TempRepo, sidecars: usize) -> Cluster {
        let home = self.home().to_str().unwrap();
        Cluster::start_env(repo, sidecars, &[], &[("HOME", home)])
    }
}

/// A task owning `globs` whose prompt says `text` and picks `script`.
pub fn claude_task(id: &str, globs: &[&str], script: &str, text: &str) -> TaskBuilder {
    let prompt = format!("'''\n{text}\n\n{}\n'''", marker(script));
    task(id).files(globs).set("prompt", &prompt)
}
