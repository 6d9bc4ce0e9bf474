//! `swarm-bench makespan`: how close the scheduling order brings a DAG of
//! tasks to its lower bound.
//!
//! A DAG (from `--dag FILE`, or generated in the shape of a real project's
//! history: 200 tasks, 63 roots, depth 26) gets heavy-tailed task durations
//! (Pareto, seeded, rescaled to `--mean-ms`). A real `swarm-controller`
//! process runs it on W simulated sidecars, each of which sleeps its task's
//! duration before it reports success, once with the critical-path order
//! and once with FIFO (`--schedule-order fifo`), the same instance. The
//! makespan (CreateSwarm returned → every task MERGED) is printed over the
//! lower bound max(critical path, total work / W): no order can beat it.
//!
//! The plan gives no estimates unless `--estimates`: the order then
//! weighs each task by what the controller learned (see the controller's
//! `durations.rs`).
//!
//! `--rerun` measures learning: for each instance, critical-path order
//! only, the plan runs with and without estimates, each twice on one
//! repository: a first run, then (once retention forgot the first swarm
//! and the controller was restarted on the same store) the same plan
//! again, as a re-run, which starts from what the first run's tasks took.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_proto::v1::sidecar_message::Body;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::common::{channels, heartbeat, start_controller, success, temp_repo};

/// Largest DAG the bench takes: a plan's own limit.
const MAX_TASKS: usize = 50_000;
/// A draw is capped at this many times the Pareto scale (40 times the
/// mean at alpha 1.5), so one draw from the tail cannot make a run last
/// minutes.
const TAIL_CAP: f64 = 120.0;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A DAG file: one task per line, `id dep dep ...` (`#` starts a
    /// comment). Default: a generated DAG of --tasks, --roots, --depth.
    #[arg(long)]
    pub dag: Option<PathBuf>,
    #[arg(long, default_value_t = 200)]
    pub tasks: usize,
    #[arg(long, default_value_t = 63)]
    pub roots: usize,
    /// Tasks on the longest chain of the generated DAG.
    #[arg(long, default_value_t = 26)]
    pub depth: usize,
    /// Simulated sidecars (workers).
    #[arg(long, default_value_t = 6)]
    pub workers: usize,
    /// The mean task duration, ms (durations are sleeps).
    #[arg(long, default_value_t = 150)]
    pub mean_ms: u64,
    /// The Pareto shape of the durations: lower is heavier-tailed.
    #[arg(long, default_value_t = 1.5)]
    pub alpha: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Instances, seeds `--seed` and on, each run in both orders.
    #[arg(long, default_value_t = 1)]
    pub runs: u64,
    /// Give the plan each task's duration as its `estimate`.
    #[arg(long)]
    pub estimates: bool,
    /// For each instance: with and without estimates, a first run and a
    /// re-run of the same plan after a controller restart (critical-path
    /// order only).
    #[arg(long)]
    pub rerun: bool,
    /// Give up on one run after this long.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
}

/// A DAG with durations: tasks in an order where deps come first.
struct Instance {
    ids: Vec<String>,
    deps: Vec<Vec<usize>>,
    ms: Vec<u64>,
}

impl Instance {
    /// max(critical path, total work / workers), ms; and the two apart.
    fn lower_bound(&self, workers: usize) -> (f64, f64, f64) {
        let mut finish = vec![0u64; self.ids.len()];
        for i in 0..self.ids.len() {
            finish[i] = self.ms[i] + self.deps[i].iter().map(|&d| finish[d]).max().unwrap_or(0);
        }
        let path = finish.iter().copied().max().unwrap_or(0) as f64;
        let work = self.ms.iter().sum::<u64>() as f64 / workers as f64;
        (path.max(work), path, work)
    }

    fn depth(&self) -> usize {
        let mut level = vec![1usize; self.ids.len()];
        for i in 0..self.ids.len() {
            level[i] = 1 + self.deps[i].iter().map(|&d| level[d]).max().unwrap_or(0);
        }
        level.into_iter().max().unwrap_or(0)
    }

    fn plan(&self, estimates: bool) -> String {
        let mut plan = String::from("name = \"makespan\"\n[defaults]\ncommand = \"true\"\n");
        for (i, id) in self.ids.iter().enumerate() {
            plan.push_str(&format!("[[tasks]]\nid = \"{id}\"\nfiles = [\"f/{id}\"]\n"));
            if !self.deps[i].is_empty() {
                let deps: Vec<String> =
                    self.deps[i].iter().map(|&d| format!("\"{}\"", self.ids[d])).collect();
                plan.push_str(&format!("deps = [{}]\n", deps.join(", ")));
            }
            if estimates {
                plan.push_str(&format!("estimate = \"{}ms\"\n", self.ms[i].max(1)));
            }
        }
        plan
    }
}

/// `roots` tasks at level 0, the rest spread over levels 1..depth (each
/// level holds one at least); a task depends on one task of the level
/// above, so the longest chain is `depth` tasks, and on a second earlier
/// task half the time.
fn generate(args: &Args, rng: &mut StdRng) -> anyhow::Result<(Vec<String>, Vec<Vec<usize>>)> {
    let (n, roots, depth) = (args.tasks, args.roots, args.depth);
    if roots == 0 || depth == 0 || n < roots + depth - 1 || n > MAX_TASKS {
        bail!("need 1 <= --roots, 1 <= --depth, --roots + --depth - 1 <= --tasks <= {MAX_TASKS}");
    }
    let mut per_level = vec![1usize; depth];
    per_level[0] = roots;
    for _ in 0..n - roots - (depth - 1) {
        per_level[rng.random_range(1..depth.max(2)).min(depth - 1)] += 1;
    }
    let mut ids = Vec::with_capacity(n);
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(n);
    let mut level_start = Vec::with_capacity(depth);
    for (level, count) in per_level.iter().enumerate() {
        let start = ids.len();
        level_start.push(start);
        for _ in 0..*count {
            let mut d = Vec::new();
            if level > 0 {
                let above = level_start[level - 1];
                d.push(rng.random_range(above..start));
                if rng.random_bool(0.5) {
                    let other = rng.random_range(0..start);
                    if !d.contains(&other) {
                        d.push(other);
                    }
                }
            }
            ids.push(format!("t{}", ids.len()));
            deps.push(d);
        }
    }
    Ok((ids, deps))
}

/// `id dep dep ...` per line; tasks may be listed in any order.
fn read_dag(path: &Path) -> anyhow::Result<(Vec<String>, Vec<Vec<usize>>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .take(MAX_TASKS + 1)
        .collect();
    if lines.is_empty() || lines.len() > MAX_TASKS {
        bail!("{}: needs 1..={MAX_TASKS} tasks", path.display());
    }
    let index: HashMap<&str, usize> = lines.iter().enumerate().map(|(i, w)| (w[0], i)).collect();
    let mut named: Vec<Vec<usize>> = Vec::with_capacity(lines.len());
    for w in &lines {
        let d = w[1..].iter().map(|d| index.get(d).copied().with_context(|| format!("unknown task {d:?}")));
        named.push(d.collect::<anyhow::Result<_>>()?);
    }
    // Deps first (Kahn's order), so that the plan and the bound read in one pass.
    let mut waiting: Vec<usize> = named.iter().map(Vec::len).collect();
    let mut dependents = vec![Vec::new(); lines.len()];
    for (i, d) in named.iter().enumerate() {
        for &j in d {
            dependents[j].push(i);
        }
    }
    let mut order: Vec<usize> = (0..lines.len()).filter(|&i| waiting[i] == 0).collect();
    let mut at = 0;
    while at < order.len() {
        for &j in &dependents[order[at]] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                order.push(j);
            }
        }
        at += 1;
    }
    if order.len() != lines.len() {
        bail!("{}: the dependencies have a cycle", path.display());
    }
    let mut position = vec![0; lines.len()];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    let ids = order.iter().map(|&i| lines[i][0].to_string()).collect();
    let deps = order.iter().map(|&i| named[i].iter().map(|&d| position[d]).collect()).collect();
    Ok((ids, deps))
}

/// Pareto durations, capped, rescaled so that their mean is `mean_ms`.
fn durations(n: usize, args: &Args, rng: &mut StdRng) -> Vec<u64> {
    let alpha = args.alpha.max(0.1);
    let raw: Vec<f64> =
        (0..n).map(|_| (1.0 - rng.random::<f64>()).powf(-1.0 / alpha).min(TAIL_CAP)).collect();
    let mean = raw.iter().sum::<f64>() / n.max(1) as f64;
    raw.iter().map(|x| ((x / mean) * args.mean_ms as f64).round().max(1.0) as u64).collect()
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    if args.workers == 0 || args.workers > 1_000 || args.runs == 0 || args.runs > 100 {
        bail!("--workers must be 1..=1000 and --runs 1..=100");
    }
    let dir = tempfile::tempdir()?;
    let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut reruns: [Vec<f64>; 4] = Default::default();
    for seed in args.seed..args.seed + args.runs {
        let mut rng = StdRng::seed_from_u64(seed);
        let (ids, deps) = match &args.dag {
            Some(path) => read_dag(path)?,
            None => generate(args, &mut rng)?,
        };
        let ms = durations(ids.len(), args, &mut rng);
        let instance = Instance { ids, deps, ms };
        let (bound, path, work) = instance.lower_bound(args.workers);
        let roots = instance.deps.iter().filter(|d| d.is_empty()).count();
        println!(
            "makespan: seed {seed}: {} tasks, {roots} roots, depth {}, {} workers, Pareto alpha {} durations \
             (mean {} ms, max {} ms){}",
            instance.ids.len(),
            instance.depth(),
            args.workers,
            args.alpha,
            args.mean_ms,
            instance.ms.iter().max().unwrap_or(&0),
            if args.estimates { ", estimates in the plan" } else { "" }
        );
        println!(
            "  lower bound {:.2} s = max(critical path {:.2} s, work / workers {:.2} s)",
            bound / 1e3,
            path / 1e3,
            work / 1e3
        );
        if args.rerun {
            for (k, estimates) in [true, false].into_iter().enumerate() {
                let repo = temp_repo(dir.path(), &format!("repo-{seed}-{estimates}"), 0)?;
                for (r, what) in ["first run", "re-run"].into_iter().enumerate() {
                    let run = Run { order: "critical-path", estimates, retain: r == 0 };
                    let took = run_once(args, &instance, run, &repo).await?;
                    let ratio = took / bound;
                    reruns[k * 2 + r].push(ratio);
                    let est = if estimates { "estimates" } else { "no estimates" };
                    println!(
                        "  {est:<12} {what:<9} makespan {:.2} s = {ratio:.3} x the lower bound",
                        took / 1e3
                    );
                }
            }
            continue;
        }
        for (k, order) in ["critical-path", "fifo"].into_iter().enumerate() {
            let repo = temp_repo(dir.path(), &format!("repo-{seed}-{order}"), 0)?;
            let run = Run { order, estimates: args.estimates, retain: false };
            let took = run_once(args, &instance, run, &repo).await?;
            let ratio = took / bound;
            ratios[k].push(ratio);
            println!("  {order:<13} makespan {:.2} s = {ratio:.3} x the lower bound", took / 1e3);
        }
    }
    if args.rerun {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let all = |v: &[f64]| v.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" / ");
        println!("| plan | first run | re-run |");
        println!("| --- | --- | --- |");
        for (k, est) in ["estimates", "no estimates"].into_iter().enumerate() {
            let (first, again) = (&reruns[k * 2], &reruns[k * 2 + 1]);
            println!(
                "| {est} | {} (mean {:.3}x) | {} (mean {:.3}x) |",
                all(first),
                mean(first),
                all(again),
                mean(again)
            );
        }
        return Ok(());
    }
    if args.runs > 1 {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
        println!(
            "makespan over {} instances: critical-path mean {:.3} x (max {:.3}), fifo mean {:.3} x (max {:.3})",
            args.runs,
            mean(&ratios[0]),
            max(&ratios[0]),
            mean(&ratios[1]),
            max(&ratios[1])
        );
    }
    Ok(())
}

/// How one run goes.
#[derive(Clone, Copy)]
struct Run {
    order: &'static str,
    estimates: bool,
    /// Wait, after the run, until retention forgot the swarm (its tasks'
    /// durations kept in the store for a re-run).
    retain: bool,
}

/// One run of `instance`: ms from CreateSwarm to all MERGED.
async fn run_once(args: &Args, instance: &Instance, run: Run, repo: &Path) -> anyhow::Result<f64> {
    let order = run.order;
    let controller = start_controller(
        repo,
        &[
            "--heartbeat-interval-ms",
            "1000",
            "--lease-ttl-ms",
            "60000",
            "--schedule-order",
            order,
            "--forget-finished-after-secs",
            "1",
        ],
        None,
    )?;
    let chans = channels(&controller.addr, 1 + args.workers.div_ceil(100)).await?;
    let sleeps: Arc<HashMap<String, u64>> =
        Arc::new(instance.ids.iter().cloned().zip(instance.ms.iter().copied()).collect());
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut sims = Vec::new();
    for i in 0..args.workers {
        let chan = chans[1 + i / 100].clone();
        // A re-run's controller knows the first run's workers from the
        // store; fresh ids keep their claims out of the way.
        let id = if run.retain { format!("w{i}") } else { format!("w{i}-again") };
        sims.push(tokio::spawn(sleeping_sidecar(chan, id, sleeps.clone(), deadline)));
    }
    let mut op = OperatorServiceClient::new(chans[0].clone());
    // Every sidecar connected before the clock starts, bounded.
    let connect_by = Instant::now() + Duration::from_secs(30);
    loop {
        let workers = op.list_workers(v1::ListWorkersRequest::default()).await?.into_inner().workers;
        let connected = workers.iter().filter(|w| w.connected).count();
        if connected >= args.workers {
            break;
        }
        if Instant::now() > connect_by {
            bail!("{connected} of {} sidecars connected within 30 s", args.workers);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let plan = instance.plan(run.estimates);
    let started = Instant::now();
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None }).await?;
    loop {
        let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: "makespan".into() }).await?.into_inner();
        let merged = s.tasks_by_state.get("MERGED").copied().unwrap_or(0) as usize;
        if merged == instance.ids.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!("{order}: only {merged}/{} merged before the deadline", instance.ids.len());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed().as_secs_f64() * 1e3;
    for s in sims {
        s.abort();
    }
    if run.retain {
        // Retention (1 s here) forgets the ended swarm and keeps its tasks'
        // durations; the re-run's controller loads them from the store.
        let forgotten = Instant::now() + Duration::from_secs(30);
        while op.get_swarm(v1::GetSwarmRequest { swarm_id: "makespan".into() }).await.is_ok() {
            if Instant::now() > forgotten {
                bail!("the first run's swarm was not forgotten within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(took)
}

/// A sidecar that sleeps each assigned task's duration, then reports a
/// no-op success (the base commit).
async fn sleeping_sidecar(
    channel: Channel,
    worker: String,
    sleeps: Arc<HashMap<String, u64>>,
    deadline: Instant,
) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel(64);
    let hello = v1::Hello { worker_id: worker, capacity: 1, shares_repository: true, ..Default::default() };
    tx.send(v1::SidecarMessage { seq: 0, body: Some(Body::Hello(hello)) }).await?;
    let mut inbound = SidecarServiceClient::new(channel).connect(ReceiverStream::new(rx)).await?.into_inner();
    let mut seq = 0;
    while Instant::now() < deadline {
        let m = match tokio::time::timeout(Duration::from_secs(2), inbound.message()).await {
            Err(_) => continue,
            Ok(Ok(Some(m))) => m,
            Ok(_) => break,
        };
        match m.body {
            // As a real sidecar does: the controller gives work only to a
            // sidecar it heard from after the Welcome.
            Some(v1::controller_message::Body::Welcome(_)) => {
                tx.send(heartbeat()).await?;
            }
            Some(v1::controller_message::Body::Assign(a)) => {
                let task = a.attempt.as_ref().map(|r| r.task_id.clone()).unwrap_or_default();
                let ms = sleeps.get(&task).copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                seq += 1;
                tx.send(success(seq, a)).await?;
            }
            _ => {}
        }
    }
    Ok(())
}
