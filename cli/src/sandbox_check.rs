//! `swarmctl sandbox check PLAN`: each task's setup and verify commands run
//! once, confined exactly as a local sidecar would confine them (the
//! sidecar library's policy and trampoline), in a scratch worktree of the
//! repository at the plan's base; what the sandbox denied them is printed
//! with the setting that would allow it. Tasks whose commands, environment
//! and sandbox settings are the same are checked once.
//!
//! Exit codes: 0 when nothing was denied, 1 when something was (or the
//! task's sandbox cannot be built here), 3 for a bad plan or repository.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use swarm_core::plan::{Plan, TaskSpec};
use swarm_sidecar::sandbox::{self, Capability, Place, Settings, denials, toolchains};
use swarm_sidecar::verify::{Tier, run_tier};

use crate::cli::SandboxCheckArgs;
use crate::client::read_plan;
use crate::exit::{self, Usage};

/// How long a setup command may run, as in an attempt.
const SETUP_TIMEOUT: Duration = Duration::from_secs(3600);
/// Lines of a failed command's output shown when no denial explains it.
const SHOWN_LINES: usize = 5;

/// What the check found for one task.
#[derive(Debug, Serialize)]
struct TaskCheck {
    task: String,
    /// "ok", "denied", "failed" (a command failed and its output shows no
    /// denial), "unconfined" (`sandbox = "off"` or no Landlock), "error"
    /// (the sandbox cannot be built), "skipped" (nothing to run).
    status: &'static str,
    /// Checked as this earlier task, whose commands and sandbox are the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    same_as: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    note: String,
    commands: Vec<CommandCheck>,
}

#[derive(Debug, Serialize)]
struct CommandCheck {
    /// "setup" or "verify <tier>".
    step: String,
    command: String,
    exit_code: i32,
    passed: bool,
    denied: Vec<Denied>,
    #[serde(skip_serializing_if = "String::is_empty")]
    output_tail: String,
}

#[derive(Debug, Serialize)]
struct Denied {
    path: String,
    setting: String,
    credential: bool,
    #[serde(skip)]
    text: String,
}

pub async fn run(args: SandboxCheckArgs) -> anyhow::Result<u8> {
    let (_, plan) = read_plan(&args.plan)?;
    let repo = crate::local::check_repo(&args.repo)?;
    let base = rev_parse(&repo, &plan.base_branch)?;
    let kernel = sandbox::probe();
    let exe = std::env::current_exe().context("finding swarmctl's own executable")?;
    let mut checks: Vec<TaskCheck> = Vec::new();
    let mut seen: Vec<&TaskSpec> = Vec::new();
    for spec in &plan.tasks {
        if let Some(earlier) = seen.iter().find(|s| same_check(s, spec)) {
            let same =
                checks.iter().find(|c| c.task == earlier.id.as_str()).map(|c| c.status).unwrap_or("ok");
            checks.push(TaskCheck {
                task: spec.id.to_string(),
                status: same,
                same_as: Some(earlier.id.to_string()),
                note: String::new(),
                commands: Vec::new(),
            });
            continue;
        }
        seen.push(spec);
        let check = check_task(&repo, &base, &plan, spec, kernel, &exe).await?;
        checks.push(check);
    }
    let found = found_toolchains(&repo);
    crate::output::print_value(&checks, args.out.output, || table(&checks, &found, kernel))?;
    let denied = checks.iter().any(|c| matches!(c.status, "denied" | "error"));
    Ok(if denied { exit::FAILURE } else { exit::SUCCESS })
}

/// Whether `b` would run exactly what `a` ran, in the same sandbox.
fn same_check(a: &TaskSpec, b: &TaskSpec) -> bool {
    a.setup == b.setup
        && a.verify == b.verify
        && a.sandbox == b.sandbox
        && a.env == b.env
        && a.agent == b.agent
}

/// Runs one task's setup and verify commands, confined, in a fresh
/// scratch worktree at `base`.
async fn check_task(
    repo: &Path,
    base: &str,
    plan: &Plan,
    spec: &TaskSpec,
    kernel: Capability,
    exe: &Path,
) -> anyhow::Result<TaskCheck> {
    let mut check = TaskCheck {
        task: spec.id.to_string(),
        status: "ok",
        same_as: None,
        note: String::new(),
        commands: Vec::new(),
    };
    if spec.setup.is_empty() && spec.verify.is_empty() {
        check.status = "skipped";
        check.note = "no setup or verify commands".into();
        return Ok(check);
    }
    let scratch = Scratch::new(repo, base)?;
    let env = worker_env(plan, spec, &scratch, base);
    let agent =
        spec.agent.as_ref().map(|a| (a.kind, a.path.clone().unwrap_or_else(|| a.kind.as_str().into())));
    let place = Place {
        worktree: &scratch.worktree,
        common_dir: &scratch.common_dir,
        private: &[&scratch.tmp, &scratch.git_dir],
        agent: agent.as_ref().map(|(k, p)| (*k, p.as_str())),
        review: false,
    };
    let confinement = match sandbox::confine(&Settings((*spec.sandbox).clone()), kernel, exe, &place, &env) {
        Ok(c) => c,
        Err(e) => {
            check.status = "error";
            check.note = format!("the task {e}");
            return Ok(check);
        }
    };
    match &confinement {
        None => check.note = "sandbox = \"off\": not confined".into(),
        Some(_) if kernel.abi == 0 => check.note = "this kernel has no Landlock: nothing is denied".into(),
        Some(_) => {}
    }
    let tiers = spec.setup.iter().map(|c| setup_tier(c)).chain(spec.verify.iter().map(|v| Tier {
        name: format!("verify {}", v.name),
        command: v.command.clone(),
        blocking: v.blocking,
        timeout: Duration::from_secs(u64::from(v.timeout_secs)),
    }));
    for tier in tiers {
        let r = run_tier(&tier, &scratch.worktree, &env, confinement.as_ref()).await;
        let lines: Vec<String> = r.output_tail.lines().map(str::to_string).collect();
        let denied = match &confinement {
            Some(c) if kernel.abi > 0 => denials::find(&lines, &c.policy, &env),
            _ => Vec::new(),
        };
        let setup_failed = !r.passed && tier.name == "setup";
        check.commands.push(CommandCheck {
            step: tier.name,
            command: tier.command,
            exit_code: r.exit_code,
            passed: r.passed,
            denied: denied.iter().map(denied_of).collect(),
            output_tail: if r.passed { String::new() } else { last_lines(&lines, SHOWN_LINES) },
        });
        if setup_failed {
            break; // the verify commands would run in a worktree not set up
        }
    }
    check.status = if confinement.is_none() || kernel.abi == 0 {
        "unconfined"
    } else if check.commands.iter().any(|c| !c.denied.is_empty()) {
        "denied"
    } else if check.commands.iter().any(|c| !c.passed) {
        "failed"
    } else {
        "ok"
    };
    Ok(check)
}

fn setup_tier(command: &str) -> Tier {
    Tier { name: "setup".into(), command: command.to_string(), blocking: true, timeout: SETUP_TIMEOUT }
}

fn denied_of(d: &denials::Denial) -> Denied {
    Denied {
        path: d.path.display().to_string(),
        setting: d.setting_text(),
        credential: d.credential,
        text: d.to_string(),
    }
}

fn last_lines(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The worker's environment as a sidecar builds it for an attempt: the
/// allowlisted variables of this process, the task's `env`, then what the
/// sidecar sets. The task's secrets are not read: a command that needs one
/// sees it unset.
fn worker_env(plan: &Plan, spec: &TaskSpec, scratch: &Scratch, base: &str) -> Vec<(String, String)> {
    let mut env = sandbox::inherited_env();
    env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let path = |p: &Path| p.display().to_string();
    env.extend([
        ("TMPDIR".to_string(), path(&scratch.tmp)),
        ("GIT_DIR".to_string(), path(&scratch.git_dir)),
        ("GIT_WORK_TREE".to_string(), path(&scratch.worktree)),
        ("SWARM_SWARM_ID".to_string(), plan.swarm.to_string()),
        ("SWARM_TASK_ID".to_string(), spec.id.to_string()),
        ("SWARM_ATTEMPT".to_string(), "1".to_string()),
        ("SWARM_WORKER_ID".to_string(), "sandbox-check".to_string()),
        ("SWARM_BASE_COMMIT".to_string(), base.to_string()),
    ]);
    let mut seen = std::collections::HashSet::new();
    let mut env: Vec<_> = env.into_iter().rev().filter(|(k, _)| seen.insert(k.clone())).collect();
    env.reverse();
    env
}

/// What the sandbox finds behind this process's `PATH`, as a worker of a
/// sidecar started here gets it.
fn found_toolchains(repo: &Path) -> Vec<PathBuf> {
    let guard = toolchains::Guard { sealed: vec![repo.join(".git")], above: vec![repo.to_path_buf()] };
    toolchains::find(&sandbox::inherited_env(), &guard)
}

fn table(checks: &[TaskCheck], found: &[PathBuf], kernel: Capability) -> String {
    let mut out = String::new();
    if kernel.abi == 0 {
        out.push_str("this kernel has no Landlock: workers are not confined, and nothing is denied\n");
    }
    if let Some(line) = toolchains::describe(found) {
        out.push_str(&format!("{line} (found on PATH)\n"));
    }
    let width = checks.iter().map(|c| c.task.len()).max().unwrap_or(0);
    for c in checks {
        let status = c.status.to_uppercase();
        match (&c.same_as, c.note.is_empty()) {
            (Some(same), _) => out.push_str(&format!("{:width$}  {status} (as {same})\n", c.task)),
            (None, true) => out.push_str(&format!("{:width$}  {status}\n", c.task)),
            (None, false) => out.push_str(&format!("{:width$}  {status}: {}\n", c.task, c.note)),
        }
        for cmd in c.commands.iter().filter(|cmd| !cmd.passed || !cmd.denied.is_empty()) {
            out.push_str(&format!("  {} {:?}: exit {}\n", cmd.step, cmd.command, cmd.exit_code));
            for d in &cmd.denied {
                out.push_str(&format!("    denied {}\n", d.text));
            }
            if cmd.denied.is_empty() {
                for line in cmd.output_tail.lines() {
                    out.push_str(&format!("    | {line}\n"));
                }
            }
        }
    }
    out.trim_end().to_string()
}

fn rev_parse(repo: &Path, branch: &str) -> anyhow::Result<String> {
    let out = git(repo, &["rev-parse", "--verify", "--quiet", &format!("{branch}^{{commit}}")])?;
    match out {
        Some(commit) => Ok(commit),
        None => Err(Usage(format!("the plan's base branch {branch:?} is not in {}", repo.display())).into()),
    }
}

/// `git -C repo args`: its trimmed stdout when it succeeded.
fn git(repo: &Path, args: &[&str]) -> anyhow::Result<Option<String>> {
    let out = Command::new("git").arg("-C").arg(repo).args(args).output().context("running git")?;
    Ok(out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

/// A worktree of the repository at the plan's base in a temporary
/// directory, with the private `TMPDIR` and git directory an attempt has
/// beside it; removed (and unregistered) when dropped.
struct Scratch {
    repo: PathBuf,
    _dir: tempfile::TempDir,
    worktree: PathBuf,
    common_dir: PathBuf,
    tmp: PathBuf,
    git_dir: PathBuf,
}

impl Scratch {
    fn new(repo: &Path, base: &str) -> anyhow::Result<Scratch> {
        let dir = tempfile::Builder::new().prefix("swarm-sandbox-check.").tempdir()?;
        let root = dir.path().canonicalize()?;
        let worktree = root.join("wt");
        let add = ["worktree", "add", "--quiet", "--detach"];
        let made = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(add)
            .arg(&worktree)
            .arg(base)
            .output()
            .context("running git worktree add")?;
        anyhow::ensure!(
            made.status.success(),
            "cannot make a scratch worktree: {}",
            String::from_utf8_lossy(&made.stderr).trim()
        );
        let common = git(repo, &["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
        let common_dir = PathBuf::from(common.context("finding the repository's git directory")?);
        let mut scratch = Scratch {
            repo: repo.to_path_buf(),
            _dir: dir,
            worktree,
            common_dir,
            tmp: root.join("wt.tmp"),
            git_dir: PathBuf::new(),
        };
        std::fs::create_dir(&scratch.tmp)?;
        scratch.git_dir = swarm_sidecar::worker_git::prepare(&scratch.worktree)?;
        Ok(scratch)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let removed = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "remove", "--force", "--force"])
            .arg(&self.worktree)
            .output();
        if !removed.is_ok_and(|o| o.status.success()) {
            let _ = std::fs::remove_dir_all(&self.worktree);
            let _ = Command::new("git").arg("-C").arg(&self.repo).args(["worktree", "prune"]).output();
        }
    }
}
