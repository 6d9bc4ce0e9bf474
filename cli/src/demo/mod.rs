//! `swarmctl demo`: a throwaway repository with a small project and an
//! eight-task plan run by scripted shell workers, showing success, a retry,
//! a checkpoint, a question answered through the Answer RPC, a conflict
//! handed back to its owner, and dependents starting as their deps merge.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;
use swarm_core::plan::Plan;

use crate::cli::DemoArgs;
use crate::exit;
use crate::local::{Ended, Serve, Session};

/// The scripted worker; see its comments for what each task does.
pub const WORKER_SH: &str = include_str!("worker.sh");
/// The plan, with `@SYNC@` standing for the workers' rendezvous directory.
pub const PLAN_TOML: &str = include_str!("plan.toml");
/// What the demo answers to the `config` task's question.
pub const ANSWER: &str = "Use 4 decimal places.";

pub async fn run(args: DemoArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let repo = match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.canonicalize()?
        }
        None => tempfile::Builder::new().prefix("swarm-demo-").tempdir()?.keep(),
    };
    let plan_text = create_repo(&repo)?;
    let plan = Plan::parse(&plan_text).context("the demo plan is invalid")?;
    println!("demo repository: {}", repo.display());
    println!(
        "plan: {} ({} tasks, {} workers)\n",
        repo.join("swarm.toml").display(),
        plan.tasks.len(),
        args.workers
    );

    let live = !args.plain && std::io::stdout().is_terminal();
    let mut session = Session::start(&repo, args.workers, &BTreeMap::new(), &Serve::default(), None).await?;
    let answers = BTreeMap::from([("config".to_string(), ANSWER.to_string())]);
    let result = session.drive(&plan_text, &plan, live, &answers).await;
    let log_dir = session.log_dir.clone();
    session.stop().await?;
    let code = match result? {
        Ended::Finished(outcome) => outcome.code(),
        Ended::Interrupted => exit::INTERRUPTED,
    };

    println!("\n$ git log --graph --oneline {}", plan.integration_branch);
    let graph = git(&repo, &["log", "--graph", "--oneline", "--decorate", &plan.integration_branch])?;
    print!("{graph}");
    println!("\nfinished in {:.1}s", started.elapsed().as_secs_f64());
    println!("where to look:");
    println!("  repository        {}", repo.display());
    println!("  integration       git -C {} log --graph {}", repo.display(), plan.integration_branch);
    println!("  logs              {}", log_dir.display());
    println!("  worker script     {}", repo.join("tools/worker.sh").display());
    println!("  store             {}", repo.join(".git/swarm/swarm.db").display());
    println!(
        "  run it again      swarmctl run {} --repo {}",
        repo.join("swarm.toml").display(),
        repo.display()
    );
    Ok(code)
}

/// Creates the demo project as a git repository with one commit on `main`,
/// and returns the plan text.
pub fn create_repo(repo: &Path) -> anyhow::Result<String> {
    let sync = repo.join(".git").join("demo-sync");
    let sync_text = sync.display().to_string().replace('\\', "\\\\").replace('"', "\\\"");
    let plan_text = PLAN_TOML.replace("@SYNC@", &sync_text);
    git(repo, &["init", "--quiet", "--initial-branch=main"])?;
    git(repo, &["config", "user.name", "swarm demo"])?;
    git(repo, &["config", "user.email", "demo@swarm.invalid"])?;
    git(repo, &["config", "commit.gpgsign", "false"])?;
    let files: [(&str, &str); 4] = [
        ("README.md", "# calc\n\nA tiny calculator in shell, built by a swarm of scripted workers.\n"),
        ("CHANGELOG.md", "# Changelog\n\n"),
        ("tools/worker.sh", WORKER_SH),
        ("swarm.toml", &plan_text),
    ];
    for (path, text) in files {
        write(&repo.join(path), text)?;
    }
    std::fs::create_dir_all(&sync).with_context(|| format!("creating {}", sync.display()))?;
    git(repo, &["add", "-A"])?;
    git(repo, &["commit", "--quiet", "-m", "calc: initial commit"])?;
    Ok(plan_text)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn git(repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .context("running git (is it installed?)")?;
    if !out.status.success() {
        anyhow::bail!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_plan_is_valid_and_has_eight_tasks() {
        let plan = Plan::parse(&PLAN_TOML.replace("@SYNC@", "/tmp/sync")).expect("valid plan");
        assert_eq!(plan.tasks.len(), 8);
    }

    #[test]
    fn demo_repository_is_created_with_one_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        create_repo(dir.path()).expect("repo");
        let log = git(dir.path(), &["log", "--oneline", "main"]).expect("log");
        assert_eq!(log.lines().count(), 1);
        assert!(dir.path().join("tools/worker.sh").is_file());
        let syntax =
            Command::new("sh").arg("-n").arg(dir.path().join("tools/worker.sh")).status().expect("sh");
        assert!(syntax.success());
    }
}
