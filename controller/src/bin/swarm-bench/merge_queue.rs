//! `swarm-bench merge-queue`: how long a swarm with `integration_verify`
//! takes to land everything, against the least it could take.
//!
//! N tasks (each sleeps its work time, then writes its own file) run on W
//! real sidecars; a fraction of them are culprits whose first attempt
//! writes a file that breaks the integration verification (which sleeps
//! its verification time, then fails on such a file); their second
//! attempt is good. V more sidecars verify the merge queue's batches
//! ("dedicated"), or, with `--shared`, the W sidecars verify too, each
//! verification taking a slot the tasks also need.
//!
//! Lower bounds. Dedicated: the work spread over the workers, one
//! verification, and, with culprits, one more task time and verification
//! for their retries. Shared (S slots, batches of at most B, c culprits):
//! the slots must hold all the work, retries included, and at least
//! ⌈N / B⌉ verifications (one more with culprits), so the bound is the
//! longest of that over S, the work over S and one verification after it,
//! and one task's chain (task, verification, and with culprits a retry and
//! its verification). Printed: landing time / lower bound, and the
//! verifications run (counted by the verify command itself).
//!
//! `--compare` runs the same instance eight ways in one command: one batch
//! at a time, the parallel queue as it was (a car per idle verifier with
//! everything waiting; `SWARM_MERGE_QUEUE_BATCHING=parallel`), the fitted
//! queue bisecting failed cars on the train as it did before probes
//! (`SWARM_MERGE_QUEUE_ISOLATION=train`) and the default (fitted cars,
//! failed cars bisected by probes beside the train), each with dedicated
//! and shared verifiers. The first two bisect on the train too.
//! `--repeat N` runs each of them N times, round by round (so a slow phase
//! of the machine falls on every row alike), and prints each row's median.
//! `--timeline DIR` writes each run's merge-queue events, one line each
//! with the milliseconds since the swarm was created, for reading where
//! the time went.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;

use crate::common::{channels, sibling, start_controller_env, start_sidecar, temp_repo};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, default_value_t = 48)]
    pub tasks: usize,
    /// Fraction of tasks whose first attempt breaks the integration build.
    #[arg(long, default_value_t = 0.1)]
    pub culprits: f64,
    /// Seconds one integration verification takes.
    #[arg(long, default_value_t = 2.0)]
    pub verify_secs: f64,
    /// Seconds one task's work takes.
    #[arg(long, default_value_t = 1.0)]
    pub task_secs: f64,
    /// Sidecars running tasks.
    #[arg(long, default_value_t = 6)]
    pub workers: usize,
    /// Sidecars verifying the queue's batches.
    #[arg(long, default_value_t = 6)]
    pub verifiers: usize,
    /// The queue's largest batch.
    #[arg(long, default_value_t = 8)]
    pub max_batch: u32,
    /// Batches verified at once (`[merge_queue] max_parallel`); 0: the
    /// default, one per idle verifier.
    #[arg(long, default_value_t = 0)]
    pub max_parallel: u32,
    /// Also run the same instance with one batch at a time first, as the
    /// baseline, and print the ratio.
    #[arg(long)]
    pub baseline: bool,
    /// The workers verify too (no separate verifiers; --verifiers is
    /// ignored).
    #[arg(long)]
    pub shared: bool,
    /// Run one batch at a time, the parallel queue, the fitted queue
    /// bisecting on the train and the default, each with dedicated and with
    /// shared verifiers, and print them side by side.
    #[arg(long)]
    pub compare: bool,
    /// With --compare: the queues to run (default: all four).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub queues: Vec<Batching>,
    /// With --compare: only the shared rows (the workers verify).
    #[arg(long)]
    pub shared_only: bool,
    /// Runs of each row; the table shows each row's median (1 to 9).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// A directory to write each run's merge-queue events into.
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
}

/// Most runs of one row (`--repeat`): each run of the instance takes tens
/// of seconds.
const MAX_REPEAT: usize = 9;

fn plan(args: &Args, max_parallel: u32, marks: &Path) -> (String, usize) {
    let every =
        if args.culprits > 0.0 { (1.0 / args.culprits).round().max(1.0) as usize } else { usize::MAX };
    let work = format!(
        "sleep {t}; mkdir -p f; if [ \"$SWARM_ATTEMPT\" = 1 ] && [ -n \"$CULPRIT\" ]; then echo BROKEN; else echo ok; fi \
         > f/$SWARM_TASK_ID.txt",
        t = args.task_secs
    );
    let verify = format!(
        "echo \"$SWARM_VERIFY_COMMIT\" >> '{m}/verifications'; sleep {v}; ! grep -rqs BROKEN f/",
        m = marks.display(),
        v = args.verify_secs
    );
    let mut p = format!(
        "name = \"mq\"\n[defaults]\nlabels = {{ work = \"1\" }}\nretries = 3\ncommand = {work:?}\n\n\
         [[integration_verify]]\nname = \"integration\"\ncommand = {verify:?}\n\n\
         [merge_queue]\nmax_batch = {b}\n{parallel}labels = {{ verify = \"1\" }}\nsandbox = {{ write = [{m:?}] }}\n",
        b = args.max_batch,
        parallel = if max_parallel > 0 { format!("max_parallel = {max_parallel}\n") } else { String::new() },
        m = marks.display().to_string()
    );
    let mut culprits = 0;
    for i in 0..args.tasks {
        p.push_str(&format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"f/t{i}.txt\"]\n"));
        if i % every == every / 2 {
            p.push_str("env = { CULPRIT = \"1\" }\n");
            culprits += 1;
        }
    }
    (p, culprits)
}

/// How the queue forms its batches in one run.
#[derive(Debug, Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum Batching {
    /// `max_parallel = 1`, cars as the parallel queue forms them.
    OneBatch,
    /// A car per idle verifier with everything that waits (before fitting).
    Parallel,
    /// Cars fitted to the verifiers (`fit.rs`), failures bisected on the
    /// train.
    FittedTrain,
    /// The default: fitted cars, failures bisected by probes.
    Fitted,
}

impl Batching {
    fn name(self) -> &'static str {
        match self {
            Batching::OneBatch => "one batch at a time",
            Batching::Parallel => "parallel",
            Batching::FittedTrain => "fitted, bisected on the train",
            Batching::Fitted => "fitted + probes",
        }
    }

    /// The controller's environment for it.
    fn env(self) -> &'static [(&'static str, &'static str)] {
        const TRAIN: (&str, &str) = ("SWARM_MERGE_QUEUE_ISOLATION", "train");
        match self {
            Batching::OneBatch | Batching::Parallel => &[("SWARM_MERGE_QUEUE_BATCHING", "parallel"), TRAIN],
            Batching::FittedTrain => &[TRAIN],
            Batching::Fitted => &[],
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Batching::OneBatch => "one-batch",
            Batching::Parallel => "parallel",
            Batching::FittedTrain => "fitted-train",
            Batching::Fitted => "fitted",
        }
    }
}

/// What one run measured.
struct Landed {
    secs: f64,
    bound: f64,
    verifications: usize,
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    if args.tasks == 0 || args.workers == 0 || (args.verifiers == 0 && !args.shared && !args.compare) {
        bail!("--tasks, --workers and --verifiers must be at least 1");
    }
    if !(1..=MAX_REPEAT).contains(&args.repeat) {
        bail!("--repeat must be between 1 and {MAX_REPEAT}, not {}", args.repeat);
    }
    if let Some(dir) = &args.timeline {
        std::fs::create_dir_all(dir)?;
    }
    if args.compare {
        return compare(args).await;
    }
    let batching = if args.max_parallel == 1 { Batching::OneBatch } else { Batching::Fitted };
    for round in 0..args.repeat {
        let serial = if args.baseline {
            Some(run_once(args, Batching::OneBatch, args.shared, round).await?)
        } else {
            None
        };
        let landed = run_once(args, batching, args.shared, round).await?;
        if let Some(serial) = serial {
            println!("one batch at a time took {:.2}x as long as this queue", serial.secs / landed.secs);
        }
    }
    Ok(())
}

/// `--compare`: every row `--repeat` times, round by round; each row's
/// median run (by its ratio to the bound) in the table.
async fn compare(args: &Args) -> anyhow::Result<()> {
    let queues: Vec<Batching> = if args.queues.is_empty() {
        vec![Batching::OneBatch, Batching::Parallel, Batching::FittedTrain, Batching::Fitted]
    } else {
        args.queues.clone()
    };
    let sides: &[bool] = if args.shared_only { &[true] } else { &[false, true] };
    let rows: Vec<(bool, Batching)> =
        sides.iter().flat_map(|&shared| queues.iter().map(move |&b| (shared, b))).collect();
    let mut runs: Vec<Vec<Landed>> = rows.iter().map(|_| Vec::new()).collect();
    for round in 0..args.repeat {
        for (i, &(shared, batching)) in rows.iter().enumerate() {
            runs[i].push(run_once(args, batching, shared, round).await?);
        }
    }
    println!(
        "| verifiers | queue | landed | / lower bound | verifications | ratios of the {} runs |",
        args.repeat
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for ((shared, batching), mut ls) in rows.into_iter().zip(runs) {
        ls.sort_by(|a, b| (a.secs / a.bound).total_cmp(&(b.secs / b.bound)));
        let all: Vec<String> = ls.iter().map(|l| format!("{:.2}", l.secs / l.bound)).collect();
        let Some(l) = ls.get(ls.len() / 2) else { continue };
        println!(
            "| {} | {} | {:.1} s | {:.2}x ({:.1} s) | {} | {} |",
            if shared {
                format!("shared ({} workers)", args.workers)
            } else {
                format!("dedicated ({} + {})", args.workers, args.verifiers)
            },
            batching.name(),
            l.secs,
            l.secs / l.bound,
            l.bound,
            l.verifications,
            all.join(" / ")
        );
    }
    Ok(())
}

/// The least the instance could take, seconds (see the module's text).
fn lower_bound(args: &Args, culprits: usize, shared: bool) -> f64 {
    let (n, c, t, v) = (args.tasks as f64, culprits as f64, args.task_secs, args.verify_secs);
    let retry = if culprits > 0 { t + v } else { 0.0 };
    if !shared {
        let work = (n * t / args.workers as f64).max(t);
        return work + v + retry;
    }
    let slots = args.workers as f64;
    let verifications = (n / f64::from(args.max_batch.max(1))).ceil() + if culprits > 0 { 1.0 } else { 0.0 };
    let held = ((n + c) * t + verifications * v) / slots;
    let work_then_verify = (n + c) * t / slots + v;
    held.max(work_then_verify).max(t + v + retry)
}

/// One run of the instance: how long it took to land everything.
async fn run_once(args: &Args, batching: Batching, shared: bool, round: usize) -> anyhow::Result<Landed> {
    let max_parallel = if batching == Batching::OneBatch { 1 } else { args.max_parallel };
    let dir = tempfile::tempdir()?;
    let repo = temp_repo(dir.path(), "repo", 0)?;
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks)?;
    let controller =
        start_controller_env(&repo, &[], Some(&dir.path().join("controller.log")), batching.env())?;
    let exe = sibling("swarm-sidecar")?;
    let mut sidecars = Vec::new();
    let verifiers = if shared { 0 } else { args.verifiers };
    let roles = std::iter::repeat_n(if shared { "both" } else { "work" }, args.workers)
        .chain(std::iter::repeat_n("verify", verifiers));
    for (k, role) in roles.enumerate() {
        let log = dir.path().join(format!("sidecar-{k}.log"));
        let labels: Vec<String> = match role {
            "both" => vec!["work=1".into(), "verify=1".into()],
            "work" => vec!["work=1".into()],
            _ => vec!["verify=1".into()],
        };
        sidecars.push(start_sidecar(&exe, &controller.addr, &format!("{role}-{k}"), &repo, &labels, &log)?);
    }
    let chans = channels(&controller.addr, 1).await?;
    let mut op = OperatorServiceClient::new(chans[0].clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let workers = op.list_workers(v1::ListWorkersRequest::default()).await?.into_inner().workers;
        if workers.iter().filter(|w| w.connected).count() == sidecars.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!("sidecars did not all connect within 30 s; see {}", dir.path().display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (plan, culprits) = plan(args, max_parallel, &marks);
    let started = Instant::now();
    let events = match &args.timeline {
        Some(_) => Some(collect_events(&mut op).await?),
        None => None,
    };
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None }).await?;
    let deadline = started + Duration::from_secs(args.timeout_secs);
    loop {
        let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: "mq".into() }).await?.into_inner();
        let merged = s.tasks_by_state.get("MERGED").copied().unwrap_or(0) as usize;
        if merged == args.tasks {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "only {merged}/{} merged in {} s; see {}",
                args.tasks,
                args.timeout_secs,
                dir.path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let landed = started.elapsed().as_secs_f64();
    let verifications =
        std::fs::read_to_string(marks.join("verifications")).unwrap_or_default().lines().count();
    let bound = lower_bound(args, culprits, shared);
    println!(
        "merge queue ({}, {}): {} tasks ({culprits} culprits), task {} s, verification {} s, {} workers, {}, \
         max batch {}, max parallel {}: landed in {landed:.1} s = {:.2}x the lower bound ({bound:.1} s); {verifications} \
         verifications",
        batching.name(),
        if shared { "shared" } else { "dedicated" },
        args.tasks,
        args.task_secs,
        args.verify_secs,
        args.workers,
        if shared { "the workers verify".to_string() } else { format!("{verifiers} verifiers") },
        args.max_batch,
        if max_parallel == 0 { "auto".to_string() } else { max_parallel.to_string() },
        landed / bound
    );
    drop(sidecars);
    if let (Some(dir), Some(events)) = (&args.timeline, events) {
        let (reader, lines) = events;
        reader.abort();
        let side = if shared { "shared" } else { "dedicated" };
        let path = dir.join(format!("{side}-{}-{round}.txt", batching.flag()));
        let lines = lines.lock().map(|l| l.join("\n")).unwrap_or_default();
        std::fs::write(&path, lines)?;
    }
    Ok(Landed { secs: landed, bound, verifications })
}

/// The run's events as they arrive, as lines of text (milliseconds since
/// the swarm was created, kind, worker, task, message).
type Events = (tokio::task::JoinHandle<()>, std::sync::Arc<std::sync::Mutex<Vec<String>>>);

async fn collect_events(op: &mut OperatorServiceClient<tonic::transport::Channel>) -> anyhow::Result<Events> {
    let mut stream = op
        .watch(v1::WatchRequest { after_event_id: 0, swarm_id: String::new(), ..Default::default() })
        .await?
        .into_inner();
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = lines.clone();
    let reader = tokio::spawn(async move {
        while let Ok(Some(e)) = stream.message().await {
            let data = if e.kind.starts_with("merge_queue") { e.data.as_str() } else { "" };
            let (at, kind, worker, task, message) =
                (e.at_unix_ms - since, e.kind, e.worker_id, e.task_id, e.message);
            let line = format!("{at:>6} {kind} {worker} {task} {message} {data}");
            if let Ok(mut l) = out.lock() {
                l.push(line);
            }
        }
    });
    Ok((reader, lines))
}
