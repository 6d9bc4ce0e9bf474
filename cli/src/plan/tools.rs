//! `swarmctl __planner-mcp DIR`: the planning agent's two tools, served
//! over stdio to the agent that starts this binary as its MCP server.
//!
//! Both tools check a plan as `swarmctl check --planned` does, against the
//! facts of the repository the parent wrote to `DIR/facts.json`; only
//! `propose_plan` writes, and only `DIR/proposed.toml`, which the parent
//! reads once the agent has ended. There is no tool that starts a swarm:
//! a plan reaches a controller only through the operator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmcp::ServiceExt as _;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use swarm_core::plan::repo_rules::{RepoFacts, RuleConfig, Severity};

/// The hidden first argument that selects this server.
pub const ARG: &str = "__planner-mcp";
/// What the parent writes for the server: the repository's facts.
pub const FACTS: &str = "facts.json";
/// Where an accepted plan is written.
pub const PROPOSED: &str = "proposed.toml";
/// A plan larger than this is no plan a person will read.
const MAX_PLAN: usize = 1 << 20;

/// The repository's facts as they travel to the server.
#[derive(Debug, serde::Serialize, Deserialize)]
pub struct Facts {
    pub files: Vec<String>,
    pub has_test_command: bool,
    pub max_share: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct PlanText {
    /// The whole plan, as TOML.
    plan_toml: String,
}

#[derive(Clone)]
struct PlannerTools {
    dir: PathBuf,
    repo: Arc<RepoFacts>,
    rules: RuleConfig,
    tool_router: ToolRouter<PlannerTools>,
}

#[tool_router]
impl PlannerTools {
    #[tool(description = "Check a draft plan (TOML) against swarm's rules and this repository. Returns \
                          {valid, findings: [{path, rule, severity}]}: each finding names the field \
                          (e.g. tasks[1].files[0]) and the rule it breaks; warnings do not make a plan \
                          invalid. Changes nothing.")]
    async fn check_plan(&self, Parameters(args): Parameters<PlanText>) -> Result<CallToolResult, String> {
        let (valid, answer) = self.check(&args.plan_toml);
        tracing::info!(valid, "planner.check_plan");
        Ok(CallToolResult::structured(answer))
    }

    #[tool(description = "Submit the final plan (TOML). It is checked as check_plan does: a plan with \
                          errors is refused with them (fix it and propose again); an accepted plan is \
                          your answer, so end your turn after it. Starts nothing: the operator decides.")]
    async fn propose_plan(&self, Parameters(args): Parameters<PlanText>) -> Result<CallToolResult, String> {
        let (valid, mut answer) = self.check(&args.plan_toml);
        tracing::info!(valid, "planner.propose_plan");
        if valid {
            write_atomically(&self.dir.join(PROPOSED), &args.plan_toml).map_err(|e| e.to_string())?;
            answer["accepted"] = json!(true);
        } else {
            answer["accepted"] = json!(false);
        }
        Ok(CallToolResult::structured(answer))
    }
}

impl PlannerTools {
    /// Whether the plan has no error, and the answer for the agent.
    fn check(&self, plan_toml: &str) -> (bool, Value) {
        if plan_toml.len() > MAX_PLAN {
            let finding = json!({"path": "plan_toml", "rule": format!("at most {} KiB", MAX_PLAN >> 10), "severity": "error"});
            return (false, json!({"valid": false, "findings": [finding]}));
        }
        let findings = match crate::check::check_plan_text(plan_toml, &self.repo, &self.rules) {
            Ok((_, findings)) => findings,
            Err(parse) => vec![parse],
        };
        let valid = !findings.iter().any(|f| f.severity == Severity::Error);
        (valid, json!({"valid": valid, "findings": findings}))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PlannerTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("swarm-planner", env!("CARGO_PKG_VERSION")))
            .with_instructions("Check drafts with check_plan; submit the final plan with propose_plan.")
    }
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// `swarmctl __planner-mcp DIR`: serves the tools until stdin closes.
pub fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args_os().nth(2).map(PathBuf::from) else {
        eprintln!("usage: swarmctl {ARG} DIR");
        return std::process::ExitCode::from(crate::exit::USAGE);
    };
    match serve(dir) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve(dir: PathBuf) -> anyhow::Result<()> {
    let facts: Facts = serde_json::from_slice(&std::fs::read(dir.join(FACTS))?)?;
    let repo = Arc::new(RepoFacts { files: facts.files, has_test_command: facts.has_test_command });
    let rules = RuleConfig { max_share: facts.max_share, planned: true };
    let tools = PlannerTools { dir, repo, rules, tool_router: PlannerTools::tool_router() };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let running = tools.serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
        anyhow::Ok(())
    })
}
