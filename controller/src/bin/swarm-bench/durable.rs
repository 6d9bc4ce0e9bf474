//! The durable and heartbeat benchmarks: simulated sidecars on real gRPC
//! against a real `swarm-controller` process.
//!
//! 1. Baseline, same disk, same run: raw SQLite inserts (WAL, fsync) one
//!    row per commit and in batches of 100.
//! 2. Durable tasks/s: N simulated sidecars on several HTTP/2 channels take
//!    assigns and answer with no-op results (the base commit), each task
//!    going through assignment, result, merge and MERGED.
//! 3. Heartbeats: S streams beating once a second; controller CPU and RSS
//!    over the window, read from /proc.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use swarm_proto::v1;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_proto::v1::sidecar_message::Body;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::common::{channels, heartbeat, start_controller, success, temp_repo, usage};

/// `swarm-bench durable` and `swarm-bench heartbeats` (and the default run).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Tasks of the durable benchmark.
    #[arg(long, default_value_t = 20_000)]
    pub tasks: usize,
    /// Simulated sidecars of the durable benchmark.
    #[arg(long, default_value_t = 100)]
    pub sidecars: usize,
    /// HTTP/2 connections the simulated sidecars share.
    #[arg(long, default_value_t = 10)]
    pub channels: usize,
    /// Heartbeat streams.
    #[arg(long, default_value_t = 10_000)]
    pub streams: usize,
    /// How long the heartbeat window lasts.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_secs: u64,
}

/// Which parts of the durable benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    All,
    Durable,
    Heartbeats,
}

pub async fn run(args: &Args, parts: Parts) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    if parts != Parts::Heartbeats {
        let (single, batched) = sqlite_baseline(dir.path())?;
        let in_memory = sqlite_cpu_baseline()?;
        println!(
            "sqlite baseline (same disk): {single:.0} commits/s one row each; {batched:.0} rows/s in batches of 100; \
             in memory (CPU alone) {in_memory:.0} rows/s"
        );
        durable_tasks(args, &temp_repo(dir.path(), "tasks", 0)?).await?;
    }
    if parts != Parts::Durable {
        heartbeats(args, &temp_repo(dir.path(), "beats", 0)?).await?;
    }
    Ok(())
}

const BASELINE_TABLE: &str = "CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b TEXT)";
const BASELINE_INSERT: &str = "INSERT INTO t (a, b) VALUES ('swarm/task', 'RUNNING')";

fn sqlite_baseline(dir: &Path) -> anyhow::Result<(f64, f64)> {
    let conn = rusqlite::Connection::open(dir.join("baseline.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(BASELINE_TABLE)?;
    let started = Instant::now();
    let mut single = 0u64;
    while single < 2_000 && started.elapsed() < Duration::from_secs(5) {
        conn.execute(BASELINE_INSERT, [])?;
        single += 1;
    }
    let single_rate = single as f64 / started.elapsed().as_secs_f64();
    let batched = batched_inserts(&conn, 100, 200_000, Duration::from_secs(5))?;
    Ok((single_rate, batched))
}

/// The same inserts into an in-memory database: what this machine's CPU
/// gives SQLite now. The controller's throughput is bound by its CPU, so
/// runs on different days compare through this figure, not the disk's.
fn sqlite_cpu_baseline() -> anyhow::Result<f64> {
    let conn = rusqlite::Connection::open_in_memory()?;
    conn.execute_batch(BASELINE_TABLE)?;
    batched_inserts(&conn, 1_000, 1_000_000, Duration::from_secs(3))
}

/// Rows/s inserting `batch` rows per transaction, bounded in rows and time.
fn batched_inserts(
    conn: &rusqlite::Connection,
    batch: u64,
    max_rows: u64,
    budget: Duration,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut rows = 0u64;
    while rows < max_rows && started.elapsed() < budget {
        let tx = conn.unchecked_transaction()?;
        {
            let mut stmt = tx.prepare_cached(BASELINE_INSERT)?;
            for _ in 0..batch {
                stmt.execute([])?;
            }
        }
        tx.commit()?;
        rows += batch;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

fn hello(worker: String) -> v1::SidecarMessage {
    v1::SidecarMessage {
        seq: 0,
        body: Some(Body::Hello(v1::Hello {
            worker_id: worker,
            capacity: 1,
            shares_repository: true,
            ..Default::default()
        })),
    }
}

/// A sidecar that answers every Assign with a no-op success.
async fn noop_sidecar(channel: Channel, worker: String, deadline: Instant) -> anyhow::Result<u64> {
    let (tx, rx) = mpsc::channel(64);
    tx.send(hello(worker)).await?;
    let mut inbound = SidecarServiceClient::new(channel).connect(ReceiverStream::new(rx)).await?.into_inner();
    let mut seq = 0;
    let mut done = 0;
    while Instant::now() < deadline {
        // An idle sidecar waits for work until the deadline (the run aborts
        // it once every task merged): one that left after a quiet spell
        // took its last assignment with it, and that task never merged.
        let m = match tokio::time::timeout(Duration::from_secs(2), inbound.message()).await {
            Err(_) => continue,
            Ok(Ok(Some(m))) => m,
            Ok(_) => break,
        };
        if let Some(v1::controller_message::Body::Welcome(_)) = m.body {
            // As a real sidecar does: the controller gives work only to a
            // sidecar it heard from after the Welcome.
            tx.send(heartbeat()).await?;
        }
        if let Some(v1::controller_message::Body::Assign(a)) = m.body {
            seq += 1;
            tx.send(success(seq, a)).await?;
            done += 1;
        }
    }
    Ok(done)
}

async fn durable_tasks(args: &Args, repo: &Path) -> anyhow::Result<()> {
    let controller =
        start_controller(repo, &["--heartbeat-interval-ms", "1000", "--lease-ttl-ms", "60000"], None)?;
    let pid = controller.pid();
    // One HTTP/2 connection carries at most ~100-200 concurrent streams.
    let chans = channels(&controller.addr, args.channels.max(args.sidecars.div_ceil(100))).await?;
    let mut plan = String::from("name = \"bench\"\n[defaults]\ncommand = \"true\"\n");
    for i in 0..args.tasks {
        plan.push_str(&format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"f/{i}\"]\n"));
    }
    let mut op = OperatorServiceClient::new(chans[0].clone());
    let cpu0 = usage(pid)?.cpu_s;
    // The simulated sidecars share the machine's cores with the controller:
    // their own CPU says whether the bench, not the controller, is the limit.
    let bench_cpu0 = usage(std::process::id())?.cpu_s;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None }).await?;
    // The aim counts the whole run, creation included; apart, the two say
    // whether the plan's creation or the task path moved.
    let created = started.elapsed().as_secs_f64();
    let mut sims = Vec::new();
    for i in 0..args.sidecars {
        sims.push(tokio::spawn(noop_sidecar(chans[i % chans.len()].clone(), format!("w{i}"), deadline)));
    }
    loop {
        let s = op.get_swarm(v1::GetSwarmRequest { swarm_id: "bench".into() }).await?.into_inner();
        let merged = s.tasks_by_state.get("MERGED").copied().unwrap_or(0) as usize;
        if merged == args.tasks {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {merged}/{} merged before the deadline", args.tasks);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    let u1 = usage(pid)?;
    let (cpu1, rss) = (u1.cpu_s, u1.rss);
    let bench_cpu = usage(std::process::id())?.cpu_s - bench_cpu0;
    for s in sims {
        s.abort();
    }
    println!(
        "durable tasks: {} tasks, {} sidecars on {} channels: {:.0} tasks/s (CreateSwarm {:.0} ms, then {:.0} tasks/s); \
         controller CPU {:.2} cores, RSS {} MiB; simulated sidecars {:.2} cores",
        args.tasks,
        args.sidecars,
        chans.len(),
        args.tasks as f64 / wall,
        created * 1000.0,
        args.tasks as f64 / (wall - created),
        (cpu1 - cpu0) / wall,
        rss >> 20,
        bench_cpu / wall
    );
    Ok(())
}

async fn heartbeats(args: &Args, repo: &Path) -> anyhow::Result<()> {
    let controller =
        start_controller(repo, &["--heartbeat-interval-ms", "1000", "--lease-ttl-ms", "60000"], None)?;
    let pid = controller.pid();
    // One HTTP/2 connection carries at most ~100-200 concurrent streams.
    let chans = channels(&controller.addr, args.streams.div_ceil(100)).await?;
    let window = Duration::from_secs(args.heartbeat_secs);
    let mut senders = Vec::with_capacity(args.streams);
    let mut keep = Vec::with_capacity(args.streams);
    for i in 0..args.streams {
        let (tx, rx) = mpsc::channel(4);
        tx.send(hello(format!("hb{i}"))).await?;
        let inbound = SidecarServiceClient::new(chans[i / 100].clone())
            .connect(ReceiverStream::new(rx))
            .await?
            .into_inner();
        keep.push(inbound);
        senders.push(tx);
    }
    let cpu0 = usage(pid)?.cpu_s;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while started.elapsed() < window {
        tick.tick().await;
        // Spread each second's beats over the second, as jitter would.
        let per_slice = senders.len().div_ceil(10);
        for slice in senders.chunks(per_slice) {
            for tx in slice {
                let beat = v1::SidecarMessage {
                    seq: 0,
                    body: Some(Body::Heartbeat(v1::Heartbeat { sent_at_unix_ms: 0 })),
                };
                if tx.try_send(beat).is_ok() {
                    sent += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(90)).await;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let u1 = usage(pid)?;
    let (cpu1, rss) = (u1.cpu_s, u1.rss);
    println!(
        "heartbeats: {} streams: {:.0} heartbeats/s; controller CPU {:.3} cores, RSS {} MiB",
        args.streams,
        sent as f64 / wall,
        (cpu1 - cpu0) / wall,
        rss >> 20
    );
    drop(keep);
    Ok(())
}
