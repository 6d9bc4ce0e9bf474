//! `swarmctl run --goal "GOAL"`: plan first, show the plan, ask before it
//! runs (`--yes` does not ask; `e` edits it and checks it again), then run
//! it as `swarmctl run PLAN` would. The plan is kept in the repository's
//! git directory, so running the same file again resumes the swarm.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use swarm_core::plan::repo_rules::{RuleConfig, Severity};

use super::{PlanArgs, Planned, dag};
use crate::cli::RunArgs;
use crate::exit::Usage;

/// The run's arguments with the plan to run: unchanged without `--goal`.
pub async fn resolve(mut args: RunArgs) -> anyhow::Result<RunArgs> {
    let Some(goal) = args.goal.clone() else { return Ok(args) };
    let plan_args = PlanArgs {
        goal: Some(goal.clone()),
        from: None,
        issue: None,
        forge_api_url: String::new(),
        forge_token_env: String::new(),
        out: None,
        repo: args.repo.clone(),
        planner: args.planner.clone(),
        max_turns: crate::cli::PLANNER_TURNS,
        planner_instructions: None,
        max_share: RuleConfig::default().max_share,
    };
    let goal = super::Goal { text: super::checked_goal(&goal)?, source: None };
    let planned =
        tokio::task::spawn_blocking(move || super::plan(&plan_args, goal)).await.context("the planner")??;
    let path = saved_path(&args.repo, planned.plan.swarm.as_str())?;
    std::fs::write(&path, super::with_goal(&planned))
        .with_context(|| format!("writing {}", path.display()))?;
    eprint!("{}", dag::render(&planned.plan, &planned.cost));
    eprintln!("plan saved to {} (run it again with: swarmctl run {})", path.display(), path.display());
    if !args.yes {
        approve(&path, &args.repo, &planned)?;
    }
    let (agent, issue) = (&args.planner.agent, planned.source.as_deref());
    args.origin = Some(Box::new(crate::local::planned_origin(&planned.goal, agent, &planned.cost, issue)));
    args.plan = path;
    args.goal = None;
    Ok(args)
}

/// `<git dir>/swarm/plans/<swarm>.toml`.
fn saved_path(repo: &Path, swarm: &str) -> anyhow::Result<PathBuf> {
    let r = git2::Repository::discover(repo).with_context(|| format!("--repo {}", repo.display()))?;
    let dir = r.commondir().join("swarm").join("plans");
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join(format!("{swarm}.toml")))
}

/// Asks on the terminal: yes runs, no stops, edit opens `$EDITOR` on the
/// saved plan and checks it again.
fn approve(path: &Path, repo: &Path, planned: &Planned) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(Usage(format!(
            "--goal: stdin is not a terminal to approve the plan on; pass --yes, or run the saved plan: swarmctl run {}",
            path.display()
        ))
        .into());
    }
    let stdin = std::io::stdin();
    loop {
        eprint!("Run this plan? [y]es, [e]dit, [N]o: ");
        std::io::stderr().flush()?;
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(()),
            "e" | "edit" => edit(path, repo, planned)?,
            _ => return Err(Usage(format!("not run; the plan is saved at {}", path.display())).into()),
        }
    }
}

fn edit(path: &Path, repo: &Path, planned: &Planned) -> anyhow::Result<()> {
    // An empty variable is an unset one (as git and most tools read them).
    let set = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let editor = set("VISUAL").or_else(|| set("EDITOR")).unwrap_or_else(|| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .with_context(|| format!("starting $EDITOR ({editor})"))?;
    if !status.success() {
        eprintln!("the editor exited {status}; the plan is as it was saved");
    }
    let text = std::fs::read_to_string(path)?;
    let facts = crate::check::repo_facts(repo)?;
    let rules = RuleConfig { planned: true, ..RuleConfig::default() };
    match crate::check::check_plan_text(&text, &facts, &rules) {
        Ok((plan, findings)) => {
            for f in &findings {
                let level = if f.severity == Severity::Error { "error" } else { "warning" };
                eprintln!("{level}: {}: {}", f.path, f.rule);
            }
            eprint!("{}", dag::render(&plan, &planned.cost));
        }
        Err(f) => eprintln!("error: {}: {}", f.path, f.rule),
    }
    Ok(())
}
