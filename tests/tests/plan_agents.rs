//! `swarmctl plan --agent codex|acp`: the real Codex CLI (`codex
//! app-server`, as the sidecar drives it) against the scripted Responses
//! API finds swarm's planner tools through Codex's tool search, proposes
//! a plan that `check_plan`'s rules refuse naming the field, then a valid
//! one, which is written. And what keeps a planner from changing
//! anything: the sandbox, not only its tools (Codex's command and the
//! real Claude Code CLI's Bash, under `claude-code-acp`, write into the
//! snapshot, the repository and beside it, and nothing is written; an
//! edit is refused), and a tool server that has no tool to start a swarm
//! and writes only its proposal.
//!
//! Where a CLI cannot be installed each test prints why and returns;
//! under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use swarm_tests::acp_agent::claude_code_acp;
use swarm_tests::messages_api;
use swarm_tests::responses_api::{Request, Script, Step, marker};
use swarm_tests::{
    CODEX_MODEL, Needs, RealClaude, RealCodex, TempRepo, binary, skip, skip_for, state_home, stderr, stdout,
    wait_output,
};

/// One task owning files under a directory that does not exist.
const NOWHERE: &str = r#"
name = "planned"
[defaults]
command = "true"
[[tasks]]
id = "ghost"
files = ["nowhere/deep/**"]
estimate = "5m"
"#;

const VALID: &str = r#"
name = "planned"
[defaults]
retries = 0
[[tasks]]
id = "schema"
files = ["src/schema/**"]
command = "mkdir -p src/schema && echo schema > src/schema/schema.txt"
estimate = "10m"
[[tasks]]
id = "api"
files = ["src/api/**"]
deps = ["schema"]
command = "mkdir -p src/api && echo api > src/api/api.txt"
estimate = "20m"
"#;

/// `swarmctl plan GOAL --agent codex` with the rig's model and provider.
fn plan_with_codex(codex: &RealCodex, goal: &str, repo: &Path, dir: &Path) -> Output {
    let repo = repo.to_str().unwrap();
    swarmctl_with_codex(codex, &["plan", goal, "--repo", repo, "-o", "plan.toml"], dir)
}

/// `swarmctl ARGS` with the planner's settings for the rig's Codex.
fn swarmctl_with_codex(codex: &RealCodex, args: &[&str], dir: &Path) -> Output {
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let path = codex.cli.path.to_str().unwrap();
    args.extend(["--agent", "codex", "--agent-path", path, "--model", CODEX_MODEL].map(String::from));
    for (k, v) in codex.provider_config() {
        args.push("--extra-arg=-c".into());
        args.push(format!("--extra-arg={k}={v}"));
    }
    let child = Command::new(binary("swarmctl"))
        .args(&args)
        .current_dir(dir)
        .envs(codex.env())
        .env("XDG_STATE_HOME", state_home())
        .env("XDG_RUNTIME_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(240))
}

/// Searches for the planner's tools, then proposes `plan` through them.
fn find_tools_then_propose(plan: &'static str) -> [Step; 2] {
    [
        Step::tool_search("swarm planner check_plan propose_plan"),
        Step::dynamic(move |r| {
            let found = r.input().iter().rev().find(|i| i["type"] == "tool_search_output");
            let tools = found.and_then(|f| f["tools"].as_array()).cloned().unwrap_or_default();
            let ours = tools.iter().find(|t| t["name"] == "mcp__swarm");
            let names: Vec<&str> = ours
                .and_then(|s| s["tools"].as_array())
                .map(|ts| ts.iter().filter_map(|t| t["name"].as_str()).collect())
                .unwrap_or_default();
            if names.contains(&"propose_plan") && names.contains(&"check_plan") {
                Step::namespaced_call("mcp__swarm", "propose_plan", json!({"plan_toml": plan}))
            } else {
                Step::text(&format!("the planner tools were not found: {tools:?}"))
            }
        }),
    ]
}

fn last_output(r: &Request) -> String {
    r.call_outputs().last().map(|o| o.output.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_planner_is_told_the_field_its_plan_breaks_then_its_valid_plan_is_written() {
    let [search, first] = find_tools_then_propose(NOWHERE);
    let script = Script::new(
        "cxplan",
        vec![
            search,
            first,
            Step::dynamic(|r| {
                let refused = last_output(r);
                if refused.contains("tasks[0].files[0]") && refused.contains("\"accepted\":false") {
                    Step::namespaced_call("mcp__swarm", "propose_plan", json!({"plan_toml": VALID}))
                } else {
                    Step::text(&format!("unexpected: {refused}"))
                }
            }),
            Step::text("Proposed."),
        ],
    );
    let test = "a_codex_planner_is_told_the_field_its_plan_breaks_then_its_valid_plan_is_written";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let dir = tempfile::tempdir().unwrap();
    let goal = format!("Add a schema and an API on it.\n{}", marker("cxplan"));
    let out = plan_with_codex(&codex, &goal, repo.path(), dir.path());
    assert_eq!(out.status.code(), Some(0), "{}\n{}\n{}", stdout(&out), stderr(&out), codex.api.summary());

    let requests = codex.api.requests_of("cxplan");
    let first = requests.first().expect("the planner asked the model");
    let prompt = first.user_text();
    assert!(prompt.contains("Add a schema and an API on it."), "the goal reaches the model: {prompt}");
    assert!(prompt.contains("swarm planner instructions"), "and the planner's instructions: {prompt}");
    let outputs: Vec<String> = requests
        .last()
        .unwrap()
        .call_outputs()
        .into_iter()
        .filter(|o| o.tool == "propose_plan")
        .map(|o| o.output)
        .collect();
    assert_eq!(outputs.len(), 2, "{}", codex.api.summary());
    assert!(
        outputs[0].contains("tasks[0].files[0]") && outputs[0].contains("nowhere/deep"),
        "the refusal names the field and its glob: {}",
        outputs[0]
    );
    assert!(outputs[1].contains("\"accepted\":true"), "{}", outputs[1]);

    let written = std::fs::read_to_string(dir.path().join("plan.toml")).unwrap();
    assert!(written.starts_with("# Goal:\n# Add a schema and an API on it.\n"), "{written}");
    assert!(written.contains("id = \"api\"") && !written.contains("ghost"), "{written}");
    assert!(stdout(&out).contains("critical path: schema -> api"), "{}", stdout(&out));
}

/// `swarmctl run --goal --agent codex --yes`: the same planner settings
/// plan the swarm, which then runs to MERGED.
#[tokio::test(flavor = "multi_thread")]
async fn run_goal_plans_with_codex_and_runs_to_merged() {
    let [search, propose] = find_tools_then_propose(VALID);
    let script = Script::new("cxrun", vec![search, propose, Step::text("Proposed.")]);
    let test = "run_goal_plans_with_codex_and_runs_to_merged";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let dir = tempfile::tempdir().unwrap();
    let goal = format!("Add a schema and an API on it.\n{}", marker("cxrun"));
    let repo_arg = repo.path().display().to_string();
    let args = ["run", "--plain", "--workers", "2", "--repo", &repo_arg, "--goal", &goal, "--yes"];
    let out = swarmctl_with_codex(&codex, &args, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}\n{}\n{}", stdout(&out), stderr(&out), codex.api.summary());
    assert!(stderr(&out).contains("critical path: schema -> api"), "{}", stderr(&out));
    let tree = repo.tree("swarm/planned/integration");
    assert_eq!(tree.get("src/api/api.txt").map(String::as_str), Some("api\n"), "{tree:?}");
}

/// The planner runs commands (Codex reads with them), but in swarm's
/// sandbox: one that writes into its snapshot, into the repository by
/// its absolute path and into a directory beside it writes nothing, and
/// an edit is refused before it is made.
#[tokio::test(flavor = "multi_thread")]
async fn a_codex_planners_commands_and_edits_write_nowhere() {
    let test = "a_codex_planners_commands_and_edits_write_nowhere";
    if let Some(why) = landlock_missing() {
        return skip_for(test, Needs::Kernel, &why);
    }
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let outside = tempfile::tempdir().unwrap();
    let real = repo.path().join("src/lib.txt");
    let escape = outside.path().join("escape.txt");
    let attack = format!(
        "echo mine > src/lib.txt; echo mine > {}; echo out > {}; echo made > src/new.txt; \
         cat src/lib.txt",
        real.display(),
        escape.display()
    );
    let patch = "*** Begin Patch\n*** Add File: src/patched.txt\n+patched\n*** End Patch\n";
    let script = Script::new(
        "cxjail",
        vec![Step::exec(&attack), Step::apply_patch(patch), Step::text("I could not change anything.")],
    );
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let goal = format!("Change the library.\n{}", marker("cxjail"));
    let out = plan_with_codex(&codex, &goal, repo.path(), dir.path());

    assert_ne!(out.status.code(), Some(0), "no plan was proposed: {}", stdout(&out));
    assert!(stderr(&out).contains("without proposing a plan"), "{}", stderr(&out));
    let told = codex.api.requests_of("cxjail").last().map(|r| r.call_outputs()).unwrap_or_default();
    let ran = told.iter().find(|o| o.tool == "exec_command").map(|o| o.output.clone()).unwrap_or_default();
    assert!(ran.to_lowercase().contains("denied"), "the sandbox refused the writes: {told:#?}");
    assert!(ran.contains("lib"), "the snapshot still reads as the repository: {ran}");
    assert!(told.iter().any(|o| o.tool == "apply_patch"), "the edit was answered: {told:#?}");
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "lib\n", "the repository is untouched");
    assert!(!escape.exists(), "nothing is written outside");
    assert!(!repo.path().join("src/new.txt").exists() && !repo.path().join("src/patched.txt").exists());
    assert!(!dir.path().join("plan.toml").exists());
}

/// Why the sandbox tests cannot run here, if they cannot.
fn landlock_missing() -> Option<String> {
    let cap = swarm_sidecar::sandbox::probe();
    (!cap.is_full())
        .then(|| format!("the kernel enforces Landlock ABI {} of the 6 the sandbox needs", cap.abi))
}

/// An ACP server as the planner: `claude-code-acp` drives the real Claude
/// Code CLI, whose Bash the planner allows (it runs in the sandbox): the
/// command writes into the snapshot, the repository and a directory
/// beside it, and nothing is written; then its plan, proposed through
/// swarm's planner tools as the ACP session's MCP server, is written.
#[tokio::test(flavor = "multi_thread")]
async fn an_acp_planners_bash_writes_nowhere_and_its_plan_is_written() {
    const TEST: &str = "an_acp_planners_bash_writes_nowhere_and_its_plan_is_written";
    if let Some(why) = landlock_missing() {
        return skip_for(TEST, Needs::Kernel, &why);
    }
    let acp = match claude_code_acp() {
        Ok(exe) => exe,
        Err(why) => return skip(TEST, &format!("no claude-code-acp: {why}")),
    };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let outside = tempfile::tempdir().unwrap();
    let real = repo.path().join("src/lib.txt");
    let escape = outside.path().join("escape.txt");
    let attack = format!(
        "echo mine > src/lib.txt; echo mine > {}; echo out > {}; cat src/lib.txt",
        real.display(),
        escape.display()
    );
    let script = messages_api::Script::new(
        "acpplan",
        vec![
            messages_api::Step::tool("Bash", json!({"command": attack, "description": "try to write"})),
            messages_api::Step::tool("mcp__swarm__propose_plan", json!({"plan_toml": VALID})),
            messages_api::Step::text("Proposed."),
        ],
    );
    let Some(claude) = RealClaude::start(TEST, vec![script]) else { return };
    let home = claude.home().to_path_buf();
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let venv = acp.parent().and_then(|bin| bin.parent()).unwrap().to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let goal = format!("Add a schema and an API on it.\n{}", messages_api::marker("acpplan"));
    let paths = [venv.display().to_string(), home.join(".claude").display().to_string()];
    let claude_json = home.join(".claude.json").display().to_string();
    let child = Command::new(binary("swarmctl"))
        .args(["plan", &goal, "--repo", repo.path().to_str().unwrap(), "--agent", "acp"])
        .args(["--agent-path", acp.to_str().unwrap(), "--sandbox-read", &paths[0]])
        .args(["--sandbox-write", &paths[1], "--sandbox-write", &claude_json, "-o", "plan.toml"])
        .current_dir(dir.path())
        .envs(claude.env())
        .env("HOME", &home)
        .env("XDG_STATE_HOME", state_home())
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, Duration::from_secs(240));
    assert_eq!(out.status.code(), Some(0), "{}\n{}\n{}", stdout(&out), stderr(&out), claude.api.summary());

    let results = claude.api.requests_of("acpplan").last().map(|r| r.tool_results()).unwrap_or_default();
    assert_eq!(results.len(), 2, "{results:#?}");
    let ran = &results[0].content;
    assert!(ran.contains("Permission denied"), "the sandbox refused the writes: {ran}");
    assert!(ran.contains("lib"), "the snapshot still reads as the repository: {ran}");
    assert!(results[1].content.contains("\"accepted\":true"), "{:?}", results[1].content);
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "lib\n", "the repository is untouched");
    assert!(!escape.exists(), "nothing is written outside");
    let written = std::fs::read_to_string(dir.path().join("plan.toml")).unwrap();
    assert!(written.starts_with("# Goal:\n# Add a schema and an API on it.\n"), "{written}");
}

/// `--sandbox-write` cannot open the repository to the planner.
#[test]
fn the_repository_cannot_be_made_writable_for_the_planner() {
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let parent = repo.path().parent().unwrap().display().to_string();
    let out = Command::new(binary("swarmctl"))
        .args(["plan", "Anything.", "--repo", repo.path().to_str().unwrap(), "--agent", "codex"])
        .args(["--agent-path", "/nonexistent/codex", "--sandbox-write", &parent])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--sandbox-write") && stderr(&out).contains("read-only"),
        "{}",
        stderr(&out)
    );
}

/// The planner's tool server, spoken to as its agent speaks to it: it
/// offers `check_plan` and `propose_plan` and nothing that creates a
/// swarm (there is no controller to create one on: `swarmctl plan` starts
/// none), and an accepted proposal is the one file it writes.
#[test]
fn the_planner_tools_start_nothing_and_write_only_the_proposal() {
    let dir = tempfile::tempdir().unwrap();
    let facts = json!({"files": ["src/lib.txt"], "has_test_command": false, "max_share": 1.0});
    std::fs::write(dir.path().join("facts.json"), facts.to_string()).unwrap();
    let mut server = Command::new(binary("swarmctl"))
        .arg("__planner-mcp")
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut to = server.stdin.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let from = server.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut call = |id: u64, method: &str, params: Value| rpc(&mut to, &lines, id, method, params);
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    call(1, "initialize", init);
    call(0, "notifications/initialized", Value::Null);
    let listed = call(2, "tools/list", json!({}));
    let mut names: Vec<String> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["check_plan", "propose_plan"], "{listed}");

    let plan = "name = \"p\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"src/**\"]\nestimate = \"5m\"\n";
    let checked = call(3, "tools/call", json!({"name": "check_plan", "arguments": {"plan_toml": plan}}));
    assert_eq!(checked["result"]["structuredContent"]["valid"], true, "{checked}");
    let files = |d: &Path| {
        let mut f: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        f.sort();
        f
    };
    assert_eq!(files(dir.path()), ["facts.json"], "check_plan writes nothing");
    let proposed = call(4, "tools/call", json!({"name": "propose_plan", "arguments": {"plan_toml": plan}}));
    assert_eq!(proposed["result"]["structuredContent"]["accepted"], true, "{proposed}");
    assert_eq!(files(dir.path()), ["facts.json", "proposed.toml"]);
    assert_eq!(std::fs::read_to_string(dir.path().join("proposed.toml")).unwrap(), plan);
    let unknown = call(5, "tools/call", json!({"name": "create_swarm", "arguments": {}}));
    assert!(unknown.get("error").is_some() || unknown["result"]["isError"] == true, "{unknown}");
    drop(to);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            server.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One JSON-RPC request and its answer; a notification (`params` null)
/// has no answer to wait for.
fn rpc(
    to: &mut impl std::io::Write,
    lines: &std::sync::mpsc::Receiver<String>,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    if params.is_null() {
        writeln!(to, "{}", json!({"jsonrpc": "2.0", "method": method})).unwrap();
        return Value::Null;
    }
    writeln!(to, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).expect("the tool server answers");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            return v;
        }
    }
}
