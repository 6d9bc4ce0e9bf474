//! The real Codex CLI against the scripted Responses API
//! ([`crate::responses_api`]): the CLI ([`crate::codex_cli`]), the server,
//! a private `HOME`/`CODEX_HOME`, and the `-c` overrides that point Codex
//! at the server as a custom model provider.

use std::path::Path;

use crate::codex_cli::{CodexCli, codex_cli};
use crate::responses_api::{ResponsesApi, Script, marker};
use crate::{Cluster, PlanBuilder, TaskBuilder, TempDir, TempRepo, skip, task};

/// The provider id the overrides define.
pub const CODEX_PROVIDER: &str = "swarmtest";
/// The variable the provider reads its API key from.
pub const CODEX_KEY_ENV: &str = "SWARMTEST_API_KEY";
/// A model of Codex's built-in catalog (so no metadata is fetched) that is
/// not Code Mode only: it gets `exec_command` as a function tool and
/// `apply_patch` as a freeform (custom) tool. `gpt-5-codex` is not in
/// 0.147's catalog: its fallback metadata offers no `apply_patch`.
pub const CODEX_MODEL: &str = "gpt-5.5";

/// The server, the CLI and a home for one test.
pub struct RealCodex {
    pub api: ResponsesApi,
    pub cli: &'static CodexCli,
    home: TempDir,
}

impl RealCodex {
    /// Starts the server with `scripts`; `None` (the test skipped, saying
    /// why) when the CLI cannot be installed here.
    pub fn start(test: &str, scripts: Vec<Script>) -> Option<RealCodex> {
        let cli = match codex_cli() {
            Ok(cli) => cli,
            Err(why) => {
                skip(test, &format!("no Codex CLI: {why}"));
                return None;
            }
        };
        eprintln!("{test}: {} ({})", cli.version, cli.path.display());
        let home = tempfile::Builder::new().prefix("codex-home-").tempdir().unwrap();
        Some(RealCodex { api: ResponsesApi::start(scripts), cli, home })
    }

    /// `HOME` and `CODEX_HOME` (Codex keeps its config, sessions and logs there).
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// What the CLI's environment needs: its homes and the provider's key.
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.home().display().to_string();
        [("HOME", home.clone()), ("CODEX_HOME", home), (CODEX_KEY_ENV, "test".to_string())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// The provider's `-c` overrides, without `-m` and the sandbox.
    pub fn provider_config(&self) -> Vec<(String, String)> {
        let provider = format!(
            r#"{{name="{CODEX_PROVIDER}", base_url="{}", wire_api="responses", env_key="{CODEX_KEY_ENV}"}}"#,
            self.api.base_url()
        );
        vec![
            // Code Mode (on by default) wants a model served with it.
            ("features.code_mode_host".to_string(), "false".to_string()),
            ("model_provider".to_string(), format!("{CODEX_PROVIDER:?}")),
            (format!("model_providers.{CODEX_PROVIDER}"), provider),
            // One attempt per request: a scripted error is answered at once.
            (format!("model_providers.{CODEX_PROVIDER}.request_max_retries"), "0".to_string()),
            (format!("model_providers.{CODEX_PROVIDER}.stream_max_retries"), "0".to_string()),
        ]
    }

    /// `-m MODEL` and a `-c key=value` per [`RealCodex::provider_config`]
    /// entry, and the sandbox off: Codex's own Linux sandbox needs
    /// bubblewrap, which a test machine need not have.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["-m".to_string(), CODEX_MODEL.to_string()];
        for (k, v) in self.provider_config() {
            args.push("-c".to_string());
            args.push(format!("{k}={v}"));
        }
        args.extend(["-c".to_string(), r#"sandbox_mode="danger-full-access""#.to_string()]);
        args
    }

    /// A plan whose tasks run the CLI (`agent = "codex"`) with the
    /// plan's `model` and only [`RealCodex::provider_config`] in
    /// `extra_args`, so that the sandbox and approvals are swarm's to set;
    /// its workers can reach the server's port and no other.
    pub fn plan(&self, name: &str) -> PlanBuilder {
        let args: Vec<String> = self
            .provider_config()
            .into_iter()
            .flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")])
            .map(|a| format!("{a:?}"))
            .collect();
        PlanBuilder::new(name)
            .remove_default("command")
            .default("agent", r#""codex""#)
            .default("agent_path", &format!("{:?}", self.cli.path.display().to_string()))
            .default("model", &format!("{CODEX_MODEL:?}"))
            .default("extra_args", &format!("[{}]", args.join(", ")))
            .default("env", &format!("{{ {CODEX_KEY_ENV} = \"test\" }}"))
            .sandbox_with(&[], &[], &[self.api.port()])
    }

    /// A controller and `n` sidecars whose `HOME` is [`RealCodex::home`]:
    /// `~/.codex` is the one agent state swarm's sandbox lets Codex write.
    pub fn cluster(&self, repo: &TempRepo, n: usize) -> Cluster {
        let home = self.home().to_str().unwrap_or_default();
        Cluster::start_env(repo, n, &[], &[("HOME", home)])
    }
}

/// A task owning `globs` whose prompt says `text` and picks `script`.
pub fn codex_task(id: &str, globs: &[&str], script: &str, text: &str) -> TaskBuilder {
    let prompt = format!("'''\n{text}\n\n{}\n'''", marker(script));
    task(id).files(globs).set("prompt", &prompt)
}
