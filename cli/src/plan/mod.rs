//! `swarmctl plan "GOAL"`: one planning agent turns a goal into a plan.
//!
//! The agent (Claude Code; Codex or an ACP server through [`agent`]) runs
//! over a snapshot of the repository at HEAD, inside swarm's sandbox with
//! the snapshot read-only ([`sandbox`]: it may write only the snapshot's
//! `.swarm/`, where its tool server keeps the proposal, and its own
//! state), with the reading tools and two of swarm's
//! ([`tools`]): `check_plan` and `propose_plan`, which check a draft with
//! the rules `swarmctl check --planned` applies. It iterates until a plan
//! passes; swarmctl then prints the task graph (owned files, dependencies,
//! estimates, the critical path) and what planning cost, and writes the
//! plan with the goal as a comment. The agent never starts anything.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use swarm_core::plan::{AgentKind, Plan};

pub use crate::cli::PlanArgs;

pub mod agent;
pub mod dag;
pub mod goal;
pub mod issue;
mod sandbox;
pub mod tools;

/// The planner's instructions, versioned with swarm (the first line names
/// the version); `--planner-instructions FILE` replaces them.
pub const INSTRUCTIONS: &str = include_str!("instructions.md");
/// A goal longer than this belongs in a file of its own… and still fits here.
const MAX_GOAL: usize = 64 << 10;

/// What to plan for, and where it came from.
#[derive(Debug, Clone)]
pub struct Goal {
    pub text: String,
    /// The issue's URL, for a goal read from one.
    pub source: Option<String>,
}

/// A plan the planner wrote, and what it cost.
pub struct Planned {
    pub goal: String,
    pub source: Option<String>,
    pub plan: Plan,
    pub toml: String,
    pub cost: dag::Cost,
}

pub async fn run(args: PlanArgs) -> anyhow::Result<u8> {
    let goal = read_goal(&args).await?;
    let planned = tokio::task::spawn_blocking(move || plan(&args, goal).map(|p| (p, args.out)))
        .await
        .context("the planner's thread")??;
    let (planned, out) = planned;
    let text = with_goal(&planned);
    match out {
        Some(path) => {
            std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            print!("{}", dag::render(&planned.plan, &planned.cost));
            println!("plan written to {}", path.display());
        }
        None => {
            eprint!("{}", dag::render(&planned.plan, &planned.cost));
            print!("{text}");
        }
    }
    Ok(crate::exit::SUCCESS)
}

/// The plan's text with the goal and the planner's run as a comment.
pub fn with_goal(p: &Planned) -> String {
    let goal: String = p.goal.lines().map(|l| format!("# {l}").trim_end().to_string() + "\n").collect();
    let head = match &p.source {
        Some(url) => format!("# Goal (from {url}):\n"),
        None => "# Goal:\n".to_string(),
    };
    format!("{head}{goal}# Planned by swarmctl plan: {}\n\n{}", p.cost.summary(), p.toml.trim_start())
}

/// Runs the planner to a plan that passes (blocking: a child process).
pub fn plan(args: &PlanArgs, goal: Goal) -> anyhow::Result<Planned> {
    let kind = agent::kind(&args.planner.agent)?;
    let facts = crate::check::repo_facts(&args.repo)?;
    let work = tempfile::Builder::new().prefix("swarm-plan-").tempdir()?;
    let snapshot = work.path().join("repo");
    snapshot_head(&args.repo, &snapshot)?;
    let dir = snapshot.join(".swarm");
    std::fs::create_dir_all(&dir)?;
    let sent = tools::Facts {
        files: facts.files,
        has_test_command: facts.has_test_command,
        max_share: args.max_share,
    };
    std::fs::write(dir.join(tools::FACTS), serde_json::to_vec(&sent)?)?;
    let instructions = match &args.planner_instructions {
        Some(f) => {
            std::fs::read_to_string(f).with_context(|| format!("--planner-instructions {}", f.display()))?
        }
        None => INSTRUCTIONS.to_string(),
    };
    sandbox::check_writable(&args.planner.sandbox_write, &[&args.repo, work.path()])?;
    let tmp = sandbox::tmp_dir(work.path())?;
    let cost = match kind {
        AgentKind::Claude => {
            let argv = claude_argv(args, &dir, &instructions)?;
            run_agent(&argv, &snapshot, &tmp, &goal.text, &args.planner)?
        }
        _ => {
            let prompt = format!("{instructions}\n\nGOAL:\n{}\n", goal.text);
            let run = agent::Run {
                agent: &args.planner,
                kind,
                snapshot: &snapshot,
                dir: &dir,
                tmp: &tmp,
                prompt: &prompt,
            };
            agent::run(&run)?
        }
    };
    let toml = match std::fs::read_to_string(dir.join(tools::PROPOSED)) {
        Ok(t) => t,
        Err(_) => bail!(
            "the planner ended without proposing a plan that passes swarm's checks{}",
            cost.last_message
                .as_deref()
                .map(|m| format!(": {}", crate::plan::dag::one_line(m)))
                .unwrap_or_default()
        ),
    };
    let plan = Plan::parse(&toml).map_err(|e| anyhow::anyhow!("the proposed plan: {e}"))?;
    Ok(Planned { goal: goal.text, source: goal.source, plan, toml, cost })
}

/// The goal as given, read from `--from`, or fetched from `--issue`.
pub async fn read_goal(args: &PlanArgs) -> anyhow::Result<Goal> {
    let mut source = None;
    let goal = match (&args.goal, &args.from, &args.issue) {
        (_, _, Some(spec)) => {
            let (text, url) = issue::goal(spec, &args.forge_api_url, &args.forge_token_env).await?;
            source = Some(url);
            text
        }
        (_, Some(f), None) => {
            std::fs::read_to_string(f).with_context(|| format!("--from {}", f.display()))?
        }
        (Some(g), None, None) => g.clone(),
        (None, None, None) => bail!("goal: give the goal, --from FILE or --issue OWNER/REPO#N"),
    };
    Ok(Goal { text: checked_goal(&goal)?, source })
}

/// The goal trimmed, neither empty nor too long.
pub fn checked_goal(goal: &str) -> anyhow::Result<String> {
    let goal = goal.trim().to_string();
    if goal.is_empty() {
        bail!("goal: must not be empty");
    }
    if goal.len() > MAX_GOAL {
        bail!("goal: at most {} KiB", MAX_GOAL >> 10);
    }
    Ok(goal)
}

/// The repository's HEAD as plain files in `to` (no git metadata, and the
/// repository's index untouched).
fn snapshot_head(repo: &Path, to: &Path) -> anyhow::Result<()> {
    let _span = tracing::info_span!("git.snapshot", repo = %repo.display()).entered();
    let r = git2::Repository::discover(repo)
        .with_context(|| format!("--repo {}: not a git repository", repo.display()))?;
    let tree =
        r.head().and_then(|h| h.peel_to_tree()).context("--repo: the repository has no HEAD commit")?;
    std::fs::create_dir_all(to)?;
    let mut checkout = git2::build::CheckoutBuilder::new();
    checkout.target_dir(to).force().update_index(false);
    r.checkout_tree(tree.as_object(), Some(&mut checkout)).context("writing the snapshot")?;
    Ok(())
}

/// Claude Code in print mode with only the reading tools and the planner's.
fn claude_argv(args: &PlanArgs, dir: &Path, instructions: &str) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("swarmctl's own path")?;
    let mcp = serde_json::json!({"mcpServers": {"planner": {
        "command": exe.display().to_string(), "args": [tools::ARG, dir.display().to_string()],
    }}});
    let mut v: Vec<String> = vec![
        args.planner.agent_path.clone().unwrap_or_else(|| "claude".to_string()),
        "-p".into(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
        "--mcp-config".into(),
        mcp.to_string(),
        "--strict-mcp-config".into(),
        "--allowedTools".into(),
        "Read,Grep,Glob,LS,mcp__planner__check_plan,mcp__planner__propose_plan".into(),
        "--disallowedTools".into(),
        "Bash,Edit,Write,MultiEdit,NotebookEdit,WebFetch,WebSearch,Task".into(),
        "--append-system-prompt".into(),
        instructions.to_string(),
        "--max-turns".into(),
        args.max_turns.to_string(),
    ];
    if let Some(m) = &args.planner.model {
        v.extend(["--model".into(), m.clone()]);
    }
    v.extend(args.planner.extra_args.iter().cloned());
    Ok(v)
}

/// Runs the planner confined (the snapshot read-only) and reads its
/// stream for progress and cost.
fn run_agent(
    argv: &[String],
    snapshot: &Path,
    tmp: &Path,
    goal: &str,
    planner: &crate::cli::PlannerAgentArgs,
) -> anyhow::Result<dag::Cost> {
    let env = sandbox::planner_env(tmp);
    let jail = sandbox::Jail {
        kind: AgentKind::Claude,
        program: &argv[0],
        snapshot,
        tmp,
        env: &env,
        extra_args: &planner.extra_args,
        read: &planner.sandbox_read,
        write: &planner.sandbox_write,
    };
    let argv = sandbox::wrap(sandbox::confinement(&jail)?.as_ref(), argv);
    let _span = tracing::info_span!("planner.run", program = %argv[0].to_string_lossy()).entered();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(snapshot)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start the planner {:?}", argv[0]))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(format!("GOAL:\n{goal}\n").as_bytes())?;
    }
    let mut cost = dag::Cost::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            cost.read_line(&line);
        }
    }
    let status = child.wait()?;
    if !status.success() && cost.turns == 0 {
        bail!("the planner exited {status} before it answered");
    }
    Ok(cost)
}
