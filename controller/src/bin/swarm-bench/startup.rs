//! `swarm-bench startup`: how long `swarmctl run` takes to be ready to
//! assign — from its process start to the embedded controller's K-th
//! `worker.connected` event — and to its first assignment, read from the
//! store after each run. The first run is on a fresh repository (it makes
//! the store and the worktrees); the later ones find them in place.
//!
//! Baseline from the same run: starting `swarmctl --version` (one exec of
//! the same binary).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use crate::common::{Dist, sibling, temp_repo};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Local sidecars `swarmctl run` starts (--workers).
    #[arg(long, default_value_t = 8)]
    pub sidecars: usize,
    /// Files in the repository.
    #[arg(long, default_value_t = 1_000)]
    pub files: usize,
    /// Runs on the existing repository, after the first (fresh) one.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

fn unix_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0)
}

/// (ms to the K-th worker.connected, ms to the first RUNNING, ms to exit).
fn one_run(
    swarmctl: &Path,
    repo: &Path,
    dir: &Path,
    run: usize,
    k: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let plan = dir.join(format!("startup-{run}.toml"));
    std::fs::write(
        &plan,
        format!(
            "name = \"startup-{run}\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"t\"\nfiles = [\"startup-{run}.txt\"]\n"
        ),
    )?;
    let db = repo.join(".git").join("swarm").join("swarm.db");
    let last_id: i64 = if db.exists() {
        let conn = rusqlite::Connection::open(&db)?;
        conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))?
    } else {
        0
    };
    let t0 = unix_ms();
    let started = Instant::now();
    let mut child = Command::new(swarmctl)
        .arg("run")
        .arg(&plan)
        .args(["--workers", &k.to_string(), "--plain", "--repo"])
        .arg(repo)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting swarmctl")?;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("swarmctl run did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let total = started.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("swarmctl run failed: {status} (logs in {}/.git/swarm/logs)", repo.display());
    }
    let conn = rusqlite::Connection::open(&db)?;
    let connected: Vec<i64> = conn
        .prepare("SELECT at FROM events WHERE id > ?1 AND kind = 'worker.connected' ORDER BY id")?
        .query_map([last_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if connected.len() < k {
        bail!("only {} worker.connected events", connected.len());
    }
    let first_running: i64 = conn.query_row(
        "SELECT MIN(at) FROM events WHERE id > ?1 AND kind = 'task.state' AND message LIKE '%-> RUNNING%'",
        [last_id],
        |r| r.get(0),
    )?;
    Ok((connected[k - 1] as f64 - t0, first_running as f64 - t0, total))
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.sidecars == 0 {
        bail!("--sidecars must be at least 1");
    }
    let swarmctl = sibling("swarmctl")?;
    let tmp = tempfile::tempdir()?;
    let repo = temp_repo(tmp.path(), "repo", args.files)?;
    let mut base = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        Command::new(&swarmctl).arg("--version").stdout(Stdio::null()).status()?;
        base.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let base = Dist::new(base);
    let (ready, first, total) = one_run(&swarmctl, &repo, tmp.path(), 0, args.sidecars)?;
    let mut again = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=args.runs {
        let (a, b, c) = one_run(&swarmctl, &repo, tmp.path(), r, args.sidecars)?;
        again.0.push(a);
        again.1.push(b);
        again.2.push(c);
    }
    println!("startup: swarmctl run --workers {} on a repository of {} files", args.sidecars, args.files);
    println!("  baseline (same run): swarmctl --version        {}", base.line());
    println!(
        "  fresh repository: {ready:.0} ms to {} sidecars connected, {first:.0} ms to the first assignment, {total:.0} ms to exit",
        args.sidecars
    );
    println!("  existing repository, {} runs:", args.runs);
    println!("    process start -> {} connected   {}", args.sidecars, Dist::new(again.0).line());
    println!("    process start -> first assigned {}", Dist::new(again.1).line());
    println!("    process start -> exit           {}", Dist::new(again.2).line());
    Ok(())
}
