//! `swarm-bench e2e`: the per-task latency of the local path, end to end.
//!
//! A real `swarm-controller` and K real `swarm-sidecar` processes (local
//! mode: the sidecars share the controller's repository) run N no-op tasks
//! in a temporary repository of F files. Each worker stamps its own start
//! and exit (bash's `$EPOCHREALTIME`, µs) into a file outside the repository
//! and writes its owned file, so every task makes a real commit and a real
//! merge. Everything else comes from the controller's events (Watch):
//! `task.state` READY / RUNNING / MERGED, `attempt.started`, and the
//! attempt's end (`attempt.state`).
//!
//! - READY → exec: from the later of the task's READY and its sidecar
//!   becoming free (the controller applying its previous result) to the
//!   worker's first instruction. With `--shape chains` (K chains of
//!   dependent tasks, the default) a sidecar is free whenever a task
//!   becomes READY, so this is the dispatch latency alone.
//! - exec → exit: the worker itself (a few ms of bash).
//! - exit → MERGED: from the worker's last instruction to the controller's
//!   MERGED (the sidecar's commit and report, the merge, the ref update and
//!   the commits of the store in between).
//!
//! Baselines from the same run: spawning the same worker script directly,
//! and an fdatasync on the same disk.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use futures::StreamExt;
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use tokio::sync::mpsc;

use crate::common::{Dist, channels, sibling, start_controller, start_sidecar, temp_repo, usage};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// K chains (K = sidecars): task i depends on task i-K.
    Chains,
    /// No dependencies: every task READY at once.
    Flat,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Tasks in the plan.
    #[arg(long, default_value_t = 2_000)]
    pub tasks: usize,
    /// Local sidecars (real swarm-sidecar processes).
    #[arg(long, default_value_t = 2)]
    pub sidecars: usize,
    /// Files in the repository besides the tasks' own.
    #[arg(long, default_value_t = 100)]
    pub files: usize,
    #[arg(long, value_enum, default_value_t = Shape::Chains)]
    pub shape: Shape,
    /// Give up (and report what merged) after this long.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Keep the temporary directory (repository, logs, stamps) and print it.
    #[arg(long)]
    pub keep: bool,
    /// Run where the temporary directory is, not on an ext4 made for this
    /// run (which needs root and a loop device).
    #[arg(long)]
    pub shared_fs: bool,
    /// The workers' sandbox: on (the default, as in a plan) or off, to
    /// measure what confining each worker costs.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub sandbox: String,
}

/// Room for a 10,000-file repository with its loose objects and a few
/// worktrees of it (ext4 makes an inode per 16 KiB).
const FRESH_FS_BYTES: u64 = 2 << 30;

fn unix_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0)
}

/// The worker: stamps its start, writes its owned file, stamps its exit.
fn worker_script(stamps: &Path) -> String {
    let s = stamps.display();
    format!(
        "printf \"%s#%s s %s\\n\" \"$SWARM_TASK_ID\" \"$SWARM_ATTEMPT\" \"$EPOCHREALTIME\" >> {s}; \
         mkdir -p tasks && echo \"$SWARM_ATTEMPT\" > \"tasks/$SWARM_TASK_ID.txt\"; \
         printf \"%s#%s e %s\\n\" \"$SWARM_TASK_ID\" \"$SWARM_ATTEMPT\" \"$EPOCHREALTIME\" >> {s}"
    )
}

fn plan(args: &Args, script: &str, stamps: &Path) -> String {
    let mut plan = String::from("name = \"e2e\"\n[defaults]\n");
    plan.push_str(&format!("command = [\"bash\", \"-c\", '''{script}''']\n"));
    // The workers stamp a file outside their worktrees.
    let stamps = stamps.display();
    plan.push_str(&format!("sandbox = {{ mode = \"{}\", write = [\"{stamps}\"] }}\n", args.sandbox));
    for i in 0..args.tasks {
        plan.push_str(&format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"tasks/t{i}.txt\"]\n"));
        if args.shape == Shape::Chains && i >= args.sidecars {
            plan.push_str(&format!("deps = [\"t{}\"]\n", i - args.sidecars));
        }
    }
    plan
}

/// One event, as the bench needs it.
#[derive(Debug, Clone)]
struct Ev {
    at: f64,
    task: String,
    attempt: u32,
    worker: String,
    kind: String,
    to: String,
    state: String,
}

impl From<v1::Event> for Ev {
    fn from(e: v1::Event) -> Ev {
        let data: serde_json::Value = serde_json::from_str(&e.data).unwrap_or_default();
        let field = |k: &str| data.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        Ev {
            at: e.at_unix_ms as f64,
            task: e.task_id,
            attempt: e.attempt,
            worker: e.worker_id,
            kind: e.kind,
            to: field("to"),
            state: field("state"),
        }
    }
}

/// Baselines on this machine, now: the worker script spawned directly,
/// and fdatasync of a small append.
fn baselines(dir: &Path, script: &str) -> anyhow::Result<(Dist, Dist)> {
    let work = dir.join("baseline");
    std::fs::create_dir_all(work.join("tasks"))?;
    let mut spawn = Vec::new();
    for i in 0..50 {
        let t = Instant::now();
        let status = Command::new("bash")
            .args(["-c", script])
            .current_dir(&work)
            .env("SWARM_TASK_ID", format!("b{i}"))
            .env("SWARM_ATTEMPT", "1")
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("baseline worker failed: {status}");
        }
        spawn.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(work.join("fsync"))?;
    let mut sync = Vec::new();
    for _ in 0..50 {
        std::io::Write::write_all(&mut f, &[b'x'; 100])?;
        let t = Instant::now();
        f.sync_data()?;
        sync.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((Dist::new(spawn), Dist::new(sync)))
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    if args.sidecars == 0 || args.tasks == 0 {
        bail!("--tasks and --sidecars must be at least 1");
    }
    let tmp = tempfile::tempdir()?;
    // Every run deletes tens of thousands of files, and ext4 then creates
    // files slowly for a minute (its inode allocator skips freed inodes):
    // on a shared disk one run measures the last one's clean-up. A file
    // system made for this run starts each from the same state.
    let fs = if args.shared_fs {
        None
    } else {
        match crate::fresh_fs::FreshFs::make(tmp.path(), "fs", FRESH_FS_BYTES) {
            Ok(fs) => Some(fs),
            Err(e) => {
                println!("(on the shared disk: no fresh file system could be made: {e})");
                None
            }
        }
    };
    let dir = fs.as_ref().map_or_else(|| tmp.path().to_path_buf(), |fs| fs.path().to_path_buf());
    let made = Instant::now();
    let repo = temp_repo(&dir, "repo", args.files)?;
    let repo_secs = made.elapsed().as_secs_f64();
    let stamps = dir.join("stamps.log");
    let script = worker_script(&stamps);
    let (spawn_base, sync_base) = baselines(&dir, &script)?;
    // Emptied, not removed: a sandbox rule names only what exists.
    std::fs::write(&stamps, "")?;

    let controller = start_controller(&repo, &[], Some(&dir.join("controller.log")))?;
    let pid = controller.pid();
    let sidecar_exe = sibling("swarm-sidecar")?;
    let mut sidecars = Vec::new();
    for k in 1..=args.sidecars {
        let log = dir.join(format!("sidecar-{k}.log"));
        sidecars.push(start_sidecar(
            &sidecar_exe,
            &controller.addr,
            &format!("bench-{k}"),
            &repo,
            &[],
            &log,
        )?);
    }

    let chans = channels(&controller.addr, 1).await?;
    let mut op = OperatorServiceClient::new(chans[0].clone());
    let mut stream = op
        .watch(v1::WatchRequest { after_event_id: 0, swarm_id: String::new(), ..Default::default() })
        .await?
        .into_inner();
    let (tx, mut rx) = mpsc::unbounded_channel::<Ev>();
    let reader = tokio::spawn(async move {
        while let Some(Ok(e)) = stream.next().await {
            if tx.send(Ev::from(e)).is_err() {
                break;
            }
        }
    });
    let mut events: Vec<Ev> = Vec::new();
    // Every sidecar connected, bounded.
    let deadline = Instant::now() + Duration::from_secs(30);
    while events.iter().filter(|e| e.kind == "worker.connected").count() < args.sidecars {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(e)) => events.push(e),
            _ => bail!("sidecars did not all connect within 30 s; see {}", dir.display()),
        }
    }

    let u0 = usage(pid)?;
    let started = Instant::now();
    let created_at = unix_ms();
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan(args, &script, &stamps), origin: None }).await?;
    let deadline = started + Duration::from_secs(args.timeout_secs);
    let mut merged = 0usize;
    let mut end_state = String::new();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(5));
        let Ok(Some(e)) = tokio::time::timeout(left, rx.recv()).await else { continue };
        if e.kind == "task.state" && e.to == "MERGED" {
            merged += 1;
        }
        let end = (e.kind == "swarm.state" || e.kind == "swarm.stalled")
            && matches!(e.state.as_str(), "COMPLETED" | "FAILED" | "STALLED");
        if end {
            end_state = e.state.clone();
        }
        events.push(e);
        if end {
            break;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let u1 = usage(pid)?;
    reader.abort();
    drop(sidecars);
    drop(controller);

    let report = analyze(&events, &std::fs::read_to_string(&stamps).unwrap_or_default(), created_at);
    println!(
        "e2e: {} tasks ({:?}), {} sidecars, repository of {} files (made in {repo_secs:.1} s), {}",
        args.tasks,
        args.shape,
        args.sidecars,
        args.files,
        if fs.is_some() { "on an ext4 made for this run" } else { "on the shared disk" }
    );
    println!("  baseline (same run): worker script spawned directly {}", spawn_base.line());
    println!("  baseline (same run): fdatasync of an append          {}", sync_base.line());
    println!(
        "  after the warm-up ({} tasks READY before every sidecar ran its first worker):",
        report.warm_up
    );
    println!("  READY -> exec          {}", report.ready_exec.line());
    println!("  exec -> exit           {}", report.exec_exit.line());
    println!("  exit -> MERGED         {}", report.exit_merged.line());
    println!("  breakdown (controller events):");
    println!("    READY -> assigned    {}", report.ready_assigned.line());
    println!("    assigned -> exec     {}", report.assigned_exec.line());
    println!("    exit -> result       {}", report.exit_result.line());
    println!("    result -> MERGED     {}", report.result_merged.line());
    println!("    attempt (assigned -> result) {}", report.attempt.line());
    println!("  every task, the warm-up's too:");
    println!("    READY -> exec        {}", report.ready_exec_all.line());
    println!("    exit -> MERGED       {}", report.exit_merged_all.line());
    println!(
        "  {merged}/{} merged ({}), {} attempts not succeeded, {} tasks with more than one attempt",
        args.tasks,
        if end_state.is_empty() { "timed out" } else { end_state.as_str() },
        report.failed_attempts,
        report.retried
    );
    println!(
        "  {:.1} tasks/s ({:.1} s from create to last MERGED); controller CPU {:.2} cores, RSS {} MiB (peak {} MiB)",
        report.merged as f64 / (report.span_ms / 1e3).max(1e-9),
        report.span_ms / 1e3,
        (u1.cpu_s - u0.cpu_s) / wall,
        u1.rss >> 20,
        u1.hwm >> 20
    );
    if args.keep {
        // Left mounted, to be read; `umount` it when done.
        std::mem::forget(fs);
        let kept = tmp.keep();
        println!("  kept {}", dir.display());
        println!("  (under {})", kept.display());
    }
    if end_state != "COMPLETED" {
        bail!("the swarm did not complete ({merged}/{} merged)", args.tasks);
    }
    Ok(())
}

struct Report {
    /// Tasks READY before every sidecar had run its first worker, left out
    /// of every distribution but the two `_all` ones.
    warm_up: usize,
    ready_exec_all: Dist,
    exit_merged_all: Dist,
    ready_exec: Dist,
    exec_exit: Dist,
    exit_merged: Dist,
    ready_assigned: Dist,
    assigned_exec: Dist,
    exit_result: Dist,
    result_merged: Dist,
    attempt: Dist,
    failed_attempts: usize,
    retried: usize,
    merged: usize,
    /// From the swarm's creation to the last MERGED.
    span_ms: f64,
}

/// Pairs the worker's stamps with the controller's events.
fn analyze(events: &[Ev], stamps: &str, created_at: f64) -> Report {
    // (task, attempt) -> (exec, exit), unix ms.
    let mut stamp: HashMap<(String, u32), (f64, f64)> = HashMap::new();
    for line in stamps.lines() {
        let mut it = line.split_whitespace();
        let (Some(id), Some(kind), Some(t)) = (it.next(), it.next(), it.next()) else { continue };
        let Some((task, n)) = id.split_once('#') else { continue };
        let (Ok(n), Ok(t)) = (n.parse::<u32>(), t.replace(',', ".").parse::<f64>()) else { continue };
        let entry = stamp.entry((task.to_string(), n)).or_insert((f64::NAN, f64::NAN));
        if kind == "s" {
            entry.0 = t * 1e3;
        } else {
            entry.1 = t * 1e3;
        }
    }
    // Event task ids are `swarm/task`.
    let short = |t: &str| t.rsplit('/').next().unwrap_or(t).to_string();
    let mut ready: HashMap<(String, u32), f64> = HashMap::new();
    let mut running: HashMap<(String, u32), f64> = HashMap::new();
    let mut worker_of: HashMap<(String, u32), String> = HashMap::new();
    let mut ended: HashMap<(String, u32), (f64, String)> = HashMap::new();
    let mut merged: HashMap<String, (u32, f64)> = HashMap::new();
    // Per worker: when the controller freed it (an attempt's end, or its connection).
    let mut frees: HashMap<String, Vec<f64>> = HashMap::new();
    let mut failed_attempts = 0;
    for e in events {
        let task = short(&e.task);
        match (e.kind.as_str(), e.to.as_str()) {
            // The READY before attempt n carries n-1 (attempts so far).
            ("task.state", "READY") => {
                ready.insert((task, e.attempt + 1), e.at);
            }
            ("task.state", "RUNNING") => {
                running.insert((task, e.attempt), e.at);
            }
            ("task.state", "MERGED") => {
                merged.insert(task, (e.attempt, e.at));
            }
            ("attempt.started", _) => {
                worker_of.insert((task, e.attempt), e.worker.clone());
            }
            ("attempt.state", to) if !matches!(to, "ASSIGNED" | "RUNNING") => {
                if to != "SUCCEEDED" {
                    failed_attempts += 1;
                }
                frees.entry(e.worker.clone()).or_default().push(e.at);
                ended.insert((task, e.attempt), (e.at, to.to_string()));
            }
            ("worker.connected", _) => frees.entry(e.worker.clone()).or_default().push(e.at),
            _ => {}
        }
    }
    // Warm-up ends once every sidecar ran its first worker: until then one
    // of them is making its worktree (the first-worktree aim's cost), and
    // the other's tasks share the machine with 10,000 file creations.
    let mut first_exec: HashMap<&str, f64> = HashMap::new();
    for (key, w) in &worker_of {
        if let Some(&(exec, _)) = stamp.get(key) {
            let t = first_exec.entry(w.as_str()).or_insert(exec);
            *t = t.min(exec);
        }
    }
    let warm_end = first_exec.values().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut v: [Vec<f64>; 8] = Default::default();
    let (mut ready_exec_all, mut exit_merged_all) = (Vec::new(), Vec::new());
    let mut retried = 0;
    let mut last_merged = created_at;
    for (task, (n, merged_at)) in &merged {
        last_merged = last_merged.max(*merged_at);
        if *n > 1 {
            retried += 1;
        }
        let key = (task.clone(), *n);
        let (Some(&(exec, exit)), Some(&ready_at), Some(&running_at)) =
            (stamp.get(&key), ready.get(&key), running.get(&key))
        else {
            continue;
        };
        let free_at = worker_of
            .get(&key)
            .and_then(|w| frees.get(w))
            .and_then(|f| f.iter().copied().filter(|t| *t <= running_at).reduce(f64::max))
            .unwrap_or(ready_at);
        let from = ready_at.max(free_at);
        ready_exec_all.push(exec - from);
        exit_merged_all.push(merged_at - exit);
        if from < warm_end {
            continue;
        }
        v[0].push(exec - from);
        v[1].push(exit - exec);
        v[2].push(merged_at - exit);
        v[3].push(running_at - from);
        v[4].push(exec - running_at);
        if let Some((result_at, _)) = ended.get(&key) {
            v[5].push(result_at - exit);
            v[6].push(merged_at - result_at);
            v[7].push(result_at - running_at);
        }
    }
    let [a, b, c, d, e, f, g, h] = v;
    Report {
        warm_up: ready_exec_all.len() - a.len(),
        ready_exec_all: Dist::new(ready_exec_all),
        exit_merged_all: Dist::new(exit_merged_all),
        ready_exec: Dist::new(a),
        exec_exit: Dist::new(b),
        exit_merged: Dist::new(c),
        ready_assigned: Dist::new(d),
        assigned_exec: Dist::new(e),
        exit_result: Dist::new(f),
        result_merged: Dist::new(g),
        attempt: Dist::new(h),
        failed_attempts,
        retried,
        merged: merged.len(),
        span_ms: last_merged - created_at,
    }
}
