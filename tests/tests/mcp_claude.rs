//! The real Claude Code CLI as an orchestrating agent: it drives a swarm
//! through swarm's MCP tools (`swarmctl mcp` over stdio, and the
//! controller's `/mcp` over HTTP with a token), its turns scripted by the
//! Messages API server the test starts on loopback.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use swarm_tests::messages_api::{Script, Step, marker};
use swarm_tests::{
    Cluster, PlanBuilder, RealClaude, TempRepo, binary, sha256_hex, spawn_sidecar, task, worker_script,
};

/// A task that asks the operator which colour, and writes the answer.
const ASK: &str = r#"if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '%s\n' '{"status":"question","message":"need a decision","question":{"id":"colour","text":"Which colour?","category":"design"}}' > "$SWARM_STATUS_FILE"
  exit 4
fi
grep -o "colour is [a-z]*" "$SWARM_TASK_FILE" > ask.txt"#;

/// The orchestrator's turns: check and start the plan, wait, approve the
/// review, wait, answer the question, wait for the end.
fn orchestration(swarm: &str, plan: &str) -> Vec<Step> {
    vec![
        Step::tool("mcp__swarm__check_plan", json!({"plan_toml": plan})),
        Step::tool("mcp__swarm__create_swarm", json!({"plan_toml": plan})),
        Step::tool("mcp__swarm__wait", json!({"swarm": swarm, "timeout_secs": 90})),
        Step::tool("mcp__swarm__review", json!({"task": format!("{swarm}/a"), "decision": "approve"})),
        Step::tool("mcp__swarm__wait", json!({"swarm": swarm, "timeout_secs": 90})),
        Step::tool("mcp__swarm__answer", json!({"task": format!("{swarm}/ask"), "text": "colour is green"})),
        Step::tool("mcp__swarm__wait", json!({"swarm": swarm, "states": ["COMPLETED"], "timeout_secs": 90})),
        Step::text("The swarm is complete."),
    ]
}

/// Runs the CLI once in `-p` mode with `mcp_config`, at most three minutes.
async fn run_claude(claude: &RealClaude, dir: &Path, script: &str, mcp_config: &Value) -> Output {
    let mut cmd = Command::new(&claude.cli.path);
    cmd.args(["-p", &format!("Deliver the feature with swarm. {}", marker(script))])
        .args(["--output-format", "stream-json", "--verbose"])
        .args(["--mcp-config", &mcp_config.to_string()])
        // Without it the CLI asks before every MCP tool call.
        .args(["--allowedTools", "mcp__swarm"])
        .env("HOME", claude.home())
        .envs(claude.env())
        // The tools' schemas in the first request, not behind ToolSearch.
        .env("ENABLE_TOOL_SEARCH", "false")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let id = child.id();
    let waited = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    );
    match waited.await {
        Ok(out) => out.unwrap().unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("claude did not finish within 180 s:\n{}", claude.api.summary());
        }
    }
}

/// What the orchestrator's conversation got back from each tool, in order.
fn results(claude: &RealClaude, script: &str) -> Vec<(String, bool, String)> {
    let last = claude.api.requests_of(script).into_iter().last().expect("the script was asked");
    last.tool_results().into_iter().map(|r| (r.tool, r.is_error, r.content)).collect()
}

fn check_orchestration(claude: &RealClaude, script: &str, out: &Output, repo: &TempRepo, swarm: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "claude failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let init = stdout.lines().find(|l| l.contains("\"subtype\":\"init\"")).expect("a system/init line");
    let init: Value = serde_json::from_str(init).unwrap();
    let servers = init["mcp_servers"].as_array().cloned().unwrap_or_default();
    assert!(
        servers.iter().any(|s| s["name"] == "swarm" && s["status"] == "connected"),
        "swarm's MCP server connected: {servers:?}"
    );
    // With ENABLE_TOOL_SEARCH=false the model sees every tool's schema from
    // the first request on (the cost, printed, is what README quotes).
    let first = claude.api.requests_of(script).into_iter().next().expect("a first request");
    let ours: Vec<&Value> = first.body["tools"]
        .as_array()
        .map(|t| {
            t.iter().filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("mcp__swarm__"))).collect()
        })
        .unwrap_or_default();
    assert_eq!(ours.len(), 12, "all twelve tools with their schemas in the first request");
    let bytes: usize = ours.iter().map(|t| t.to_string().len()).sum();
    eprintln!("{script}: swarm's 12 tool schemas take {bytes} bytes of each request");
    let got = results(claude, script);
    let tools: Vec<&str> = got.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        tools,
        [
            "mcp__swarm__check_plan",
            "mcp__swarm__create_swarm",
            "mcp__swarm__wait",
            "mcp__swarm__review",
            "mcp__swarm__wait",
            "mcp__swarm__answer",
            "mcp__swarm__wait"
        ],
        "{got:?}"
    );
    for (tool, is_error, content) in &got {
        assert!(!is_error, "{tool} failed: {content}");
    }
    assert!(got[0].2.contains("\"valid\":true"), "{}", got[0].2);
    assert!(got[1].2.contains("\"created\":true"), "{}", got[1].2);
    assert!(got[2].2.contains("\"reason\":\"review\"") && got[2].2.contains("\"reviews\""), "{}", got[2].2);
    // The reviewed task, past its gate.
    assert!(
        got[3].2.contains(&format!("\"swarm\":\"{swarm}\"")) && !got[3].2.contains("REVIEW"),
        "{}",
        got[3].2
    );
    assert!(
        got[4].2.contains("\"reason\":\"question\"") && got[4].2.contains("Which colour?"),
        "{}",
        got[4].2
    );
    assert!(got[6].2.contains("\"state\":\"COMPLETED\""), "{}", got[6].2);
    assert_eq!(repo.tree(&format!("swarm/{swarm}/integration"))["ask.txt"], "colour is green\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_orchestrates_a_swarm_through_swarmctl_mcp() {
    const TEST: &str = "claude_code_orchestrates_a_swarm_through_swarmctl_mcp";
    let plan = PlanBuilder::new("orch")
        .task(task("a").set("review", "\"operator\""))
        .task(task("ask").deps(&["a"]))
        .build();
    let Some(claude) = RealClaude::start(TEST, vec![Script::new("stdio", orchestration("orch", &plan))])
    else {
        return;
    };
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("ask", ASK)]))]);
    let cluster = Cluster::start(&repo, 1, &[]);
    let config = json!({"mcpServers": {"swarm": {
        "command": binary("swarmctl"),
        "args": ["--controller", cluster.url(), "mcp"],
    }}});
    let dir = tempfile::tempdir().unwrap();
    let out = run_claude(&claude, dir.path(), "stdio", &config).await;
    check_orchestration(&claude, "stdio", &out, &repo, "orch");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_orchestrates_a_swarm_through_the_controllers_mcp_endpoint_with_a_token() {
    const TEST: &str = "claude_code_orchestrates_a_swarm_through_the_controllers_mcp_endpoint_with_a_token";
    let plan = PlanBuilder::new("web")
        .task(task("a").set("review", "\"operator\""))
        .task(task("ask").deps(&["a"]))
        .build();
    let Some(claude) = RealClaude::start(TEST, vec![Script::new("http", orchestration("web", &plan))]) else {
        return;
    };
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("ask", ASK)]))]);
    let (operator, sidecar) = ("swarm_orchestrator_secret", "swarm_orchestrator_sidecar_secret");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[tokens]]\nname = \"agent\"\nrole = \"operator\"\nsha256 = \"{}\"\n\n\
             [[tokens]]\nname = \"w\"\nrole = \"sidecar\"\nworkers = \"*\"\nsha256 = \"{}\"\n",
            sha256_hex(operator),
            sha256_hex(sidecar)
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let controller = swarm_tests::spawn_controller(
        repo.path(),
        &[&format!("--tokens={}", tokens.display()), &format!("--mcp-listen=127.0.0.1:{port}")],
    );
    let _sidecar = spawn_sidecar(&controller.url(), repo.path(), "w1", &["--token", sidecar]);
    let config = json!({"mcpServers": {"swarm": {
        "type": "http",
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "headers": {"Authorization": format!("Bearer {operator}")},
    }}});
    let work = tempfile::tempdir().unwrap();
    let out = run_claude(&claude, work.path(), "http", &config).await;
    check_orchestration(&claude, "http", &out, &repo, "web");
}
