//! `swarm-bench memory`: the controller's memory at rest per task.
//!
//! A real `swarm-controller` with no sidecar gets one swarm of N READY
//! tasks (each owning one plain path) through `swarmctl create`. RSS is
//! read from /proc 15 s after the create returned (time for the allocator
//! to hand back the creation turn's transient peak), minus the RSS of the
//! same process just before; then its CPU over the next 10 s. Baselines
//! from the same run: the idle controller's RSS and the plan's bytes per
//! task.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::common::{sibling, start_controller, temp_repo, usage};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Tasks in the swarm.
    #[arg(long, default_value_t = 50_000)]
    pub tasks: usize,
    /// Seconds between the create and the RSS reading.
    #[arg(long, default_value_t = 15)]
    pub settle_secs: u64,
    /// Seconds over which the CPU at rest is measured.
    #[arg(long, default_value_t = 10)]
    pub cpu_secs: u64,
}

/// A plan of `tasks` independent tasks, each owning its own plain path.
fn plan(tasks: usize) -> String {
    let mut plan = String::from("name = \"mem\"\n[defaults]\ncommand = \"true\"\n");
    for i in 0..tasks {
        plan.push_str(&format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"f/{i}\"]\n"));
    }
    plan
}

fn create(swarmctl: &Path, addr: &str, plan: &Path) -> anyhow::Result<()> {
    let out = Command::new(swarmctl)
        .args(["--controller", &format!("http://{addr}"), "create"])
        .arg(plan)
        .output()
        .context("swarmctl create")?;
    if !out.status.success() {
        bail!("swarmctl create: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.tasks == 0 {
        bail!("--tasks: must be at least 1");
    }
    let swarmctl = sibling("swarmctl")?;
    let dir = tempfile::tempdir()?;
    let repo = temp_repo(dir.path(), "mem", 0)?;
    let plan_path = dir.path().join("plan.toml");
    let text = plan(args.tasks);
    std::fs::write(&plan_path, &text)?;
    let controller = start_controller(&repo, &[], None)?;
    let pid = controller.pid();
    // Let startup's allocations settle before the baseline.
    std::thread::sleep(Duration::from_secs(2));
    let before = usage(pid)?;
    create(&swarmctl, &controller.addr, &plan_path)?;
    std::thread::sleep(Duration::from_secs(args.settle_secs));
    let rest = usage(pid)?;
    std::thread::sleep(Duration::from_secs(args.cpu_secs));
    let after = usage(pid)?;
    let per_task = rest.rss.saturating_sub(before.rss) as f64 / args.tasks as f64;
    println!(
        "memory at rest: {} tasks: {per_task:.0} B/task ({} MiB RSS {} s after create, {} MiB before; peak {} MiB)",
        args.tasks,
        rest.rss >> 20,
        args.settle_secs,
        before.rss >> 20,
        rest.hwm >> 20,
    );
    println!(
        "cpu at rest: {:.2} % of a core over {} s",
        (after.cpu_s - rest.cpu_s) * 100.0 / args.cpu_secs as f64,
        args.cpu_secs
    );
    println!(
        "baseline (same run): idle controller RSS {} MiB; plan {:.0} B/task",
        before.rss >> 20,
        text.len() as f64 / args.tasks as f64
    );
    Ok(())
}
