//! `swarmctl plan "GOAL"` with the real Claude Code CLI as the planner,
//! offline against the scripted Messages API: the planner's first
//! proposal (two tasks that may run at once owning the same files) is
//! refused naming both tasks and a file, its second (a three-task graph)
//! is accepted, written with the goal as a comment and shown as a graph
//! with its critical path and cost, and then runs to MERGED under
//! `swarmctl run`. The planner has no tool that writes or starts a swarm.
//! `run --goal` asks before it runs, on a pseudo-terminal here; `plan
//! --issue` takes its goal from the scripted GitHub's issue.
//!
//! Where the CLI cannot be installed each test prints why and returns;
//! under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize};
use serde_json::{Value, json};
use swarm_tests::github::GitHub;
use swarm_tests::messages_api::{Script, Step, marker};
use swarm_tests::{
    Needs, RealClaude, TempRepo, binary, current_test, skip_for, state_home, stderr, stdout, wait_output,
};

const OVERLAPPING: &str = r#"
name = "planned"
[defaults]
command = "true"
[[tasks]]
id = "core"
files = ["src/**"]
estimate = "10m"
[[tasks]]
id = "extra"
files = ["src/extra/**"]
estimate = "5m"
"#;

/// Three tasks: `api` after `schema`, `docs` beside them; each writes its
/// file, so the merged tree shows they ran.
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
[[tasks]]
id = "docs"
files = ["docs/**"]
command = "echo docs > docs/guide.md"
estimate = "5m"
"#;

/// `swarmctl` with the planner's environment (the real CLI, pointed at the
/// server) and `extra` variables.
fn swarmctl_with(claude: &RealClaude, args: &[&str], dir: &Path, extra: &[(&str, &str)]) -> Output {
    let child = Command::new(binary("swarmctl"))
        .args(args)
        .current_dir(dir)
        .envs(claude.env())
        .envs(extra.iter().copied())
        .env("HOME", claude.home())
        .env("XDG_STATE_HOME", state_home())
        .env("XDG_RUNTIME_DIR", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, Duration::from_secs(180))
}

fn swarmctl_env(claude: &RealClaude, args: &[&str], dir: &Path) -> Output {
    swarmctl_with(claude, args, dir, &[])
}

/// `swarmctl plan GOAL` over `repo` with the real CLI, writing `plan.toml`
/// in `dir`.
fn plan_goal(claude: &RealClaude, goal: &str, repo: &Path, dir: &Path) -> Output {
    let (repo, cli) = (repo.to_str().unwrap(), claude.cli.path.to_str().unwrap());
    swarmctl_env(claude, &["plan", goal, "--repo", repo, "--agent-path", cli, "-o", "plan.toml"], dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_planner_is_refused_for_overlap_then_proposes_a_graph_that_runs_to_merged() {
    let propose = |plan: &str| Step::tool("mcp__planner__propose_plan", json!({"plan_toml": plan}));
    let script = Script::new(
        "planner",
        vec![
            propose(OVERLAPPING),
            Step::dynamic(move |r| {
                let refused = r.tool_results().last().map(|t| t.content.clone()).unwrap_or_default();
                if refused.contains("\"accepted\":false") {
                    Step::tool("mcp__planner__propose_plan", json!({"plan_toml": VALID}))
                } else {
                    Step::text(&format!("unexpected: {refused}"))
                }
            }),
            Step::text("Proposed."),
        ],
    );
    let test = "a_planner_is_refused_for_overlap_then_proposes_a_graph_that_runs_to_merged";
    let Some(claude) = RealClaude::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n"), ("docs/index.md", "docs\n")]);
    let dir = tempfile::tempdir().unwrap();
    let goal = format!("Add a schema, an API on it, and a guide.\n{}", marker("planner"));
    let out = plan_goal(&claude, &goal, repo.path(), dir.path());
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));

    let results = claude.api.requests_of("planner").last().map(|r| r.tool_results()).unwrap_or_default();
    assert_eq!(results.len(), 2, "{results:#?}");
    let first: Value = serde_json::from_str(&results[0].content).unwrap_or(json!(results[0].content));
    let refusal = first.to_string();
    assert!(refusal.contains("\\\"accepted\\\":false") || first["accepted"] == false, "{refusal}");
    assert!(
        refusal.contains("core") && refusal.contains("extra") && refusal.contains("src/"),
        "names both tasks and a file: {refusal}"
    );
    assert!(results[1].content.contains("\"accepted\":true"), "{:?}", results[1].content);

    let first_request = &claude.api.requests_of("planner")[0];
    let offered: Vec<String> = first_request.body["tools"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    // Its MCP tools are deferred behind the CLI's tool search; the calls above reached them.
    for forbidden in ["Bash", "Write", "Edit", "mcp__swarm__create_swarm"] {
        assert!(!offered.iter().any(|t| t == forbidden), "the planner may not use {forbidden}: {offered:?}");
    }

    let text = stdout(&out);
    assert!(text.contains("swarm planned: 3 tasks"), "{text}");
    assert!(text.contains("critical path: schema -> api"), "{text}");
    assert!(text.contains("planning: 3 turns"), "{text}");
    let written = std::fs::read_to_string(dir.path().join("plan.toml")).unwrap();
    assert!(written.starts_with("# Goal:\n# Add a schema, an API on it, and a guide.\n"), "{written}");
    assert!(written.contains("id = \"api\""), "{written}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("src/lib.txt")).unwrap(),
        "lib\n",
        "the repository is untouched"
    );

    let repo_arg = repo.path().display().to_string();
    let run = swarmctl_env(
        &claude,
        &["run", "--plain", "--workers", "2", "--repo", &repo_arg, "plan.toml"],
        dir.path(),
    );
    assert_eq!(run.status.code(), Some(0), "{}\n{}", stdout(&run), stderr(&run));
    let tree = repo.tree("swarm/planned/integration");
    for (file, text) in
        [("src/schema/schema.txt", "schema\n"), ("src/api/api.txt", "api\n"), ("docs/guide.md", "docs\n")]
    {
        assert_eq!(tree.get(file).map(String::as_str), Some(text), "{tree:?}");
    }
}

/// A planner that ends without a plan that passes fails, saying so, and
/// writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_planner_that_proposes_nothing_fails_and_writes_nothing() {
    let script = Script::new(
        "idle",
        vec![
            Step::tool("Write", json!({"file_path": "src/lib.txt", "content": "mine\n"})),
            Step::text("I could not plan this."),
        ],
    );
    let test = "a_planner_that_proposes_nothing_fails_and_writes_nothing";
    let Some(claude) = RealClaude::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let dir = tempfile::tempdir().unwrap();
    let goal = format!("Plan something.\n{}", marker("idle"));
    let out = plan_goal(&claude, &goal, repo.path(), dir.path());
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("without proposing a plan") && err.contains("I could not plan this."), "{err}");
    assert!(!dir.path().join("plan.toml").exists());
    let results = claude.api.requests_of("idle").last().map(|r| r.tool_results()).unwrap_or_default();
    assert!(results.first().is_some_and(|r| r.is_error), "Write is refused: {results:#?}");
    assert_eq!(std::fs::read_to_string(repo.path().join("src/lib.txt")).unwrap(), "lib\n");
}

/// `swarmctl run --goal`: plans, saves the plan in the repository's git
/// directory, and without a terminal to ask on refuses to run it unless
/// `--yes`, with which the planned swarm runs to MERGED.
#[tokio::test(flavor = "multi_thread")]
async fn run_goal_plans_then_runs_only_when_approved() {
    let script = Script::new(
        "goal",
        vec![Step::tool("mcp__planner__propose_plan", json!({"plan_toml": VALID})), Step::text("Proposed.")],
    );
    let test = "run_goal_plans_then_runs_only_when_approved";
    let Some(claude) = RealClaude::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n"), ("docs/index.md", "docs\n")]);
    let dir = tempfile::tempdir().unwrap();
    // The planner is `claude` on PATH, as a newcomer has it.
    let bin = claude.cli.path.parent().unwrap().display().to_string();
    let path = format!("{bin}:{}", std::env::var("PATH").unwrap_or_default());
    let goal = format!("Add a schema, an API on it, and a guide.\n{}", marker("goal"));
    let repo_arg = repo.path().display().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--plain", "--workers", "2", "--repo", &repo_arg, "--goal", &goal];
        args.extend_from_slice(extra);
        swarmctl_with(&claude, &args, dir.path(), &[("PATH", &path)])
    };

    let refused = run(&[]);
    assert_eq!(refused.status.code(), Some(3), "{}\n{}", stdout(&refused), stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains("--yes") && err.contains("critical path: schema -> api"), "{err}");
    let saved = repo.path().join(".git/swarm/plans/planned.toml");
    assert!(std::fs::read_to_string(&saved).unwrap().starts_with("# Goal:\n"), "saved with its goal");
    assert!(!repo.tree("main").contains_key("src/api/api.txt"), "nothing ran");

    let approved = run(&["--yes"]);
    assert_eq!(approved.status.code(), Some(0), "{}\n{}", stdout(&approved), stderr(&approved));
    // The controller's answer to the create carries the goal it recorded.
    let err = stderr(&approved);
    assert!(err.contains("swarm planned: its goal is recorded, planned by claude session "), "{err}");
    assert!(stdout(&approved).contains("planning spent $"), "said apart: {}", stdout(&approved));
    let tree = repo.tree("swarm/planned/integration");
    assert_eq!(tree.get("src/api/api.txt").map(String::as_str), Some("api\n"), "{tree:?}");
}

/// `swarmctl plan --issue OWNER/REPO#N` against the scripted GitHub: the
/// issue's title and body are the goal the planner is sent, and the plan's
/// goal comment names the issue's page.
#[tokio::test(flavor = "multi_thread")]
async fn a_goal_from_a_github_issue_reaches_the_planner_and_the_plan_names_the_issue() {
    let script = Script::new(
        "issue",
        vec![Step::tool("mcp__planner__propose_plan", json!({"plan_toml": VALID})), Step::text("Proposed.")],
    );
    let test = "a_goal_from_a_github_issue_reaches_the_planner_and_the_plan_names_the_issue";
    let Some(claude) = RealClaude::start(test, vec![script]) else { return };
    let github = GitHub::start();
    github.add_token("tok-issue", "octo");
    github.create_repo("octo", "app", "main");
    let body = format!("The API needs a schema under it, and a guide.\n{}", marker("issue"));
    let number = github.add_issue("octo", "app", "octo", "Add a schema and an API", &body);
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n"), ("docs/index.md", "docs\n")]);
    let dir = tempfile::tempdir().unwrap();
    let (repo_arg, api) = (repo.path().display().to_string(), github.api_url());
    let spec = format!("octo/app#{number}");
    let out = swarmctl_with(
        &claude,
        &[
            "plan",
            "--issue",
            &spec,
            "--forge-api-url",
            &api,
            "--repo",
            &repo_arg,
            "--agent-path",
            claude.cli.path.to_str().unwrap(),
            "-o",
            "plan.toml",
        ],
        dir.path(),
        &[("GITHUB_TOKEN", "tok-issue")],
    );
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    let asked = claude.api.requests_of("issue");
    let prompt = asked.first().map(|r| r.user_text()).unwrap_or_default();
    assert!(
        prompt.contains("Add a schema and an API") && prompt.contains("The API needs a schema under it"),
        "the issue's title and body are the planner's goal: {prompt}"
    );
    let written = std::fs::read_to_string(dir.path().join("plan.toml")).unwrap();
    let head =
        format!("# Goal (from {}/octo/app/issues/{number}):\n# Add a schema and an API\n#\n", github.url());
    assert!(written.starts_with(&head), "{written}");
    assert_eq!(github.count("GET", "/api/v3/repos/octo/app/issues/"), 1);
}

/// An issue the forge does not have fails naming it, and a spec that is
/// not OWNER/REPO#N is a usage error naming the rule; neither starts a
/// planner (the agent named here does not exist).
#[test]
fn a_missing_issue_or_a_malformed_spec_is_refused_naming_it() {
    let github = GitHub::start();
    github.add_token("tok-missing", "octo");
    github.create_repo("octo", "app", "main");
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n")]);
    let dir = tempfile::tempdir().unwrap();
    let (repo_arg, api) = (repo.path().display().to_string(), github.api_url());
    let plan = |spec: &str| {
        let child = Command::new(binary("swarmctl"))
            .args(["plan", "--issue", spec, "--forge-api-url", &api, "--repo", &repo_arg])
            .args(["--agent-path", "/nonexistent/claude", "-o", "plan.toml"])
            .current_dir(dir.path())
            .env("GITHUB_TOKEN", "tok-missing")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_output(child, Duration::from_secs(60))
    };
    let missing = plan("octo/app#7");
    assert_eq!(missing.status.code(), Some(1), "{}", stderr(&missing));
    let err = stderr(&missing);
    assert!(err.contains("octo/app#7") && err.contains("no issue #7") && err.contains("404"), "{err}");

    let bad = plan("foo#x");
    assert_eq!(bad.status.code(), Some(3), "a usage error: {}", stderr(&bad));
    let err = stderr(&bad);
    assert!(err.contains("--issue") && err.contains("foo#x") && err.contains("OWNER/REPO#N"), "{err}");
    assert!(!dir.path().join("plan.toml").exists());
    assert_eq!(github.count("GET", "/api/v3/repos/octo/app/issues/"), 1, "the bad spec asked nothing");
}

/// `swarmctl run --goal` on a terminal (a pseudo-terminal here).
struct Terminal {
    out: Arc<Mutex<String>>,
    writer: Box<dyn std::io::Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Terminal {
    fn start(claude: &RealClaude, args: &[&str], dir: &Path, extra: &[(&str, &str)]) -> Option<Terminal> {
        let size = PtySize { rows: 50, cols: 200, pixel_width: 0, pixel_height: 0 };
        let pair = match portable_pty::native_pty_system().openpty(size) {
            Ok(pair) => pair,
            Err(e) => {
                skip_for(&current_test(), Needs::Kernel, &format!("cannot open a pseudo-terminal here: {e}"));
                return None;
            }
        };
        let mut cmd = CommandBuilder::new(binary("swarmctl"));
        cmd.args(args);
        for (k, v) in claude.env().iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(extra.iter().copied())
        {
            cmd.env(k, v);
        }
        let home = claude.home().display().to_string();
        let state = state_home().display().to_string();
        let runtime = dir.display().to_string();
        for (k, v) in [("HOME", home.as_str()), ("XDG_STATE_HOME", &state), ("XDG_RUNTIME_DIR", &runtime)] {
            cmd.env(k, v);
        }
        cmd.env("TERM", "dumb");
        cmd.cwd(dir);
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let out = Arc::new(Mutex::new(String::new()));
        let mut reader = pair.master.try_clone_reader().unwrap();
        let feed = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                feed.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let writer = pair.master.take_writer().unwrap();
        Some(Terminal { out, writer, child, _master: pair.master })
    }

    fn text(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Waits until `what` has been printed `times` times.
    fn wait_for(&self, what: &str, times: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.text().matches(what).count() < times {
            assert!(Instant::now() < deadline, "waited for {what:?} x{times}:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn answer(&mut self, line: &str) {
        self.writer.write_all(format!("{line}\r").as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    fn exit_code(&mut self, limit: Duration) -> u32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.exit_code();
            }
            assert!(Instant::now() < deadline, "swarmctl did not exit:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

const PROMPT: &str = "Run this plan? [y]es, [e]dit, [N]o:";

/// The approval prompt of `run --goal` on a terminal: `n` stops with no
/// swarm run; `e` opens `$EDITOR` on the saved plan and checks it again
/// (an edit that breaks it shows the error and asks again; a second edit
/// that mends it shows the graph), and `y` runs the edited plan to MERGED.
#[tokio::test(flavor = "multi_thread")]
async fn run_goal_asks_on_a_terminal_no_stops_edit_rechecks_yes_runs_the_edit() {
    let script = Script::new(
        "ask",
        vec![Step::tool("mcp__planner__propose_plan", json!({"plan_toml": VALID})), Step::text("Proposed.")],
    );
    let test = "run_goal_asks_on_a_terminal_no_stops_edit_rechecks_yes_runs_the_edit";
    let Some(claude) = RealClaude::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("src/lib.txt", "lib\n"), ("docs/index.md", "docs\n")]);
    let dir = tempfile::tempdir().unwrap();
    let bin = claude.cli.path.parent().unwrap().display().to_string();
    let path = format!("{bin}:{}", std::env::var("PATH").unwrap_or_default());
    // The first edit adds a task owning files under a directory that does
    // not exist; the second puts the plan back with the guide's text changed.
    let editor = dir.path().join("editor.sh");
    let count = dir.path().join("edits");
    let kept = dir.path().join("kept.toml");
    let script_text = format!(
        "#!/bin/sh\nn=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}\n\
         if [ $n = 1 ]; then cp \"$1\" {kept}; printf '\\n[[tasks]]\\nid = \"ghost\"\\nfiles = [\"nowhere/deep/**\"]\\ncommand = \"true\"\\nestimate = \"1m\"\\n' >> \"$1\";\n\
         else cp {kept} \"$1\"; sed -i 's/echo docs > docs/echo edited > docs/' \"$1\"; fi\n",
        count = count.display(),
        kept = kept.display()
    );
    std::fs::write(&editor, script_text).unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let editor_arg = editor.display().to_string();
    let goal = format!("Add a schema, an API on it, and a guide.\n{}", marker("ask"));
    let repo_arg = repo.path().display().to_string();
    let args = ["run", "--plain", "--workers", "2", "--repo", &repo_arg, "--goal", &goal];
    let env = [("PATH", path.as_str()), ("EDITOR", editor_arg.as_str()), ("VISUAL", "")];
    let plan_time = Duration::from_secs(180);

    let Some(mut declined) = Terminal::start(&claude, &args, dir.path(), &env) else { return };
    declined.wait_for(PROMPT, 1, plan_time);
    assert!(declined.text().contains("critical path: schema -> api"), "{}", declined.text());
    declined.answer("n");
    assert_eq!(declined.exit_code(Duration::from_secs(30)), 3, "{}", declined.text());
    assert!(declined.text().contains("not run"), "{}", declined.text());
    assert!(!repo.has("swarm/planned/integration"), "no swarm ran");
    assert!(!count.exists(), "no editor was opened");

    let Some(mut approved) = Terminal::start(&claude, &args, dir.path(), &env) else { return };
    approved.wait_for(PROMPT, 1, plan_time);
    approved.answer("e");
    approved.wait_for(PROMPT, 2, Duration::from_secs(30));
    let shown = approved.text();
    assert!(
        shown.contains("error: tasks[3].files[0]") && shown.contains("nowhere/deep"),
        "the broken edit is checked again and its error shown: {shown}"
    );
    approved.answer("e");
    approved.wait_for(PROMPT, 3, Duration::from_secs(30));
    let after = approved.text();
    let mended = after.split(PROMPT).nth(2).unwrap_or_default();
    assert!(
        !mended.contains("error:") && mended.contains("critical path: schema -> api"),
        "the mended plan passes and its graph is shown: {mended}"
    );
    approved.answer("y");
    assert_eq!(approved.exit_code(Duration::from_secs(180)), 0, "{}", approved.text());
    let tree = repo.tree("swarm/planned/integration");
    assert_eq!(
        tree.get("docs/guide.md").map(String::as_str),
        Some("edited\n"),
        "the edited plan ran: {tree:?}"
    );
    assert_eq!(tree.get("src/api/api.txt").map(String::as_str), Some("api\n"), "{tree:?}");
}
