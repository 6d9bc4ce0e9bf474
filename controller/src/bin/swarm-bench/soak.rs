//! `swarm-bench soak`: a real controller under hours of fleet churn.
//!
//! K simulated sidecars (real gRPC streams speaking the sidecar protocol:
//! Hello with their resume state, heartbeats, results with sequence
//! numbers, acks) and a few real `swarm-sidecar` processes (real
//! worktrees, a real worker per task; their churn is a kill -9 and a
//! restart under the same id) run an endless stream of tasks, each taking a random
//! few hundred milliseconds, while every minute a fraction P of them
//! churns: reconnects keeping its journal (resume secret, acked sequence,
//! the attempt in hand), reconnects without it (a sidecar that lost its
//! disk: the same worker id, nothing to prove), or is killed and comes
//! back after one to three leases with its journal. Swarms of tasks are
//! created as the ones before drain.
//!
//! At the end the feed stops and the fleet calms down; what is printed:
//! the controller's RSS, open file descriptors and threads after warm-up
//! and at the end, tasks lost (created but never MERGED once the fleet
//! is calm), tasks run twice (assigned to a sidecar while another
//! connected sidecar was still running it), and the store's growth per
//! merged task. The controller forgets a swarm `--retain-secs` after it
//! completed (its retention), so memory and the store hold the swarms of
//! that window; a swarm is counted as merged when it is seen COMPLETED,
//! and one that vanishes before that counts as lost.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng as _, SeedableRng as _};
use swarm_proto::v1;
use swarm_proto::v1::controller_message::Body as Down;
use swarm_proto::v1::operator_service_client::OperatorServiceClient;
use swarm_proto::v1::sidecar_message::Body as Up;
use swarm_proto::v1::sidecar_service_client::SidecarServiceClient;
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::common::{Proc, channels, sibling, start_controller, start_sidecar, temp_repo, usage};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// How long the churn lasts.
    #[arg(long, default_value_t = 5.0)]
    pub minutes: f64,
    /// Simulated sidecars.
    #[arg(long, default_value_t = 100)]
    pub sidecars: usize,
    /// Real `swarm-sidecar` processes beside them (the binary next to this
    /// one).
    #[arg(long, default_value_t = 2)]
    pub real_sidecars: usize,
    /// Percent of the sidecars that churn each minute.
    #[arg(long, default_value_t = 10.0)]
    pub churn: f64,
    /// Tasks per swarm; a new swarm is created when fewer than two run.
    #[arg(long, default_value_t = 1000)]
    pub tasks_per_swarm: usize,
    /// Longest a task's simulated work takes (uniform from a tenth of it).
    #[arg(long, default_value_t = 500)]
    pub work_ms: u64,
    /// The controller's lease.
    #[arg(long, default_value_t = 3000)]
    pub lease_ms: u64,
    /// The controller's retention: a completed swarm is forgotten (rows,
    /// events) this long after it ended; 0 keeps every swarm.
    #[arg(long, default_value_t = 30)]
    pub retain_secs: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What the simulated fleet shares: who runs what, and what went wrong.
#[derive(Default)]
struct Fleet {
    /// Task → the sidecar running it now.
    running: Mutex<HashMap<String, usize>>,
    connected: Vec<AtomicBool>,
    run_twice: AtomicU64,
    results: AtomicU64,
    refused_hellos: AtomicU64,
}

/// How a sidecar churns.
#[derive(Debug, Clone, Copy)]
enum Churn {
    Reconnect { journal: bool },
    Killed { away: Duration },
}

/// A simulated sidecar's journal.
#[derive(Default)]
struct Journal {
    secret: String,
    seq: u64,
    acked: u64,
    in_hand: Option<v1::Assign>,
    /// The result sent and not acked yet, with its sequence.
    unacked: Option<(u64, v1::AttemptResult)>,
}

/// Samples of the controller: (RSS bytes, open fds, threads).
fn sample(pid: u32) -> anyhow::Result<(u64, usize, usize)> {
    let rss = usage(pid)?.rss;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok((rss, fds, threads))
}

fn store_bytes(repo: &Path) -> u64 {
    let dir = repo.join(".git/swarm");
    let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
    entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

pub async fn run(args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let repo = temp_repo(dir.path(), "soak", 0)?;
    let (lease, retain) = (args.lease_ms.to_string(), args.retain_secs.to_string());
    let controller = start_controller(
        &repo,
        &[
            "--heartbeat-interval-ms",
            "1000",
            "--lease-ttl-ms",
            &lease,
            "--lost-grace-ms",
            "100",
            "--forget-finished-after-secs",
            &retain,
        ],
        None,
    )?;
    let pid = controller.pid();
    let chans = channels(&controller.addr, args.sidecars.div_ceil(100).max(2)).await?;
    let fleet = Arc::new(Fleet {
        connected: (0..args.sidecars).map(|_| AtomicBool::new(false)).collect(),
        ..Fleet::default()
    });
    let run_for = Duration::from_secs_f64(args.minutes * 60.0);
    let started = Instant::now();
    let stop_at = started + run_for;
    let mut churners = Vec::new();
    let mut sims = Vec::new();
    for i in 0..args.sidecars {
        let (tx, rx) = mpsc::channel(4);
        churners.push(tx);
        let channel = chans[i % chans.len()].clone();
        let (fleet, work) = (fleet.clone(), args.work_ms.max(10));
        let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
        sims.push(tokio::spawn(sidecar(i, channel, fleet, rx, work, seed, stop_at + run_for)));
    }
    let mut real = RealSidecars::start(args.real_sidecars, &controller.addr, &repo, dir.path())?;
    let mut op = OperatorServiceClient::new(chans[0].clone());
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut swarms = Swarms { tasks_per_swarm: args.tasks_per_swarm, ..Swarms::default() };
    let mut warm: Option<((u64, usize, usize), u64, u64)> = None;
    let warm_at = started + run_for / 5;
    let per_tick = args.churn / 100.0 * args.sidecars as f64 / 60.0;
    let mut owed = 0.0;
    while Instant::now() < stop_at {
        swarms.poll(&mut op).await?;
        swarms.feed(&mut op).await?;
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            let who = rng.random_range(0..args.sidecars + args.real_sidecars);
            if let Some(real_one) = who.checked_sub(args.sidecars) {
                real.kill9_and_restart(real_one)?;
                continue;
            }
            let churn = match rng.random_range(0..3) {
                0 => Churn::Reconnect { journal: true },
                1 => Churn::Reconnect { journal: false },
                _ => Churn::Killed { away: Duration::from_millis(args.lease_ms * rng.random_range(1..=3)) },
            };
            let _ = churners[who].try_send(churn);
        }
        if warm.is_none() && Instant::now() >= warm_at {
            warm = Some((sample(pid)?, swarms.merged, store_bytes(&repo)));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Calm: no more churn or swarms; every task created must merge.
    let calm_deadline =
        Instant::now() + Duration::from_secs(120).max(Duration::from_millis(args.lease_ms * 10));
    let total = swarms.created * args.tasks_per_swarm as u64;
    while Instant::now() < calm_deadline {
        swarms.poll(&mut op).await?;
        if swarms.live.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let end = sample(pid)?;
    let end_merged = swarms.merged + swarms.live.iter().map(|(_, merged)| merged).sum::<u64>();
    let end_store = store_bytes(&repo);
    for s in sims {
        s.abort();
    }
    let ((rss0, fds0, th0), merged0, store0) = warm.unwrap_or((end, 0, end_store));
    let growth =
        (end_store.saturating_sub(store0)) as f64 / (end_merged.saturating_sub(merged0)).max(1) as f64;
    let pct = |a: u64, b: u64| (b as f64 - a as f64) / a.max(1) as f64 * 100.0;
    println!(
        "soak: {:.1} min, {} sidecars, {}% churn/min: {} tasks merged ({:.0}/s), {} results, {} hellos refused \
         (a worker id still held)",
        args.minutes,
        args.sidecars,
        args.churn,
        end_merged,
        end_merged as f64 / started.elapsed().as_secs_f64(),
        fleet.results.load(Ordering::Relaxed),
        fleet.refused_hellos.load(Ordering::Relaxed),
    );
    println!("  real sidecars: {}, killed -9 and restarted {} times", args.real_sidecars, real.restarts);
    println!(
        "  controller after warm-up -> end: RSS {} -> {} MiB ({:+.1}%), fds {fds0} -> {} ({:+.1}%), threads {th0} -> {}",
        rss0 >> 20,
        end.0 >> 20,
        pct(rss0, end.0),
        end.1,
        pct(fds0 as u64, end.1 as u64),
        end.2
    );
    println!(
        "  lost (created, not MERGED after calm): {} (of which vanished before COMPLETED: {}); run twice: {}; \
         store {} -> {} KiB, {growth:.0} bytes per merged task (retention {})",
        total.saturating_sub(end_merged),
        swarms.vanished,
        fleet.run_twice.load(Ordering::Relaxed),
        store0 >> 10,
        end_store >> 10,
        if args.retain_secs == 0 { "none".to_string() } else { format!("{} s", args.retain_secs) },
    );
    Ok(())
}

/// Real sidecars, each a process with its own worktree under the bench's
/// repository, restarted under the same id (so with its journal) after a
/// kill -9.
struct RealSidecars {
    exe: std::path::PathBuf,
    addr: String,
    repo: std::path::PathBuf,
    logs: std::path::PathBuf,
    procs: Vec<Proc>,
    restarts: u64,
}

impl RealSidecars {
    fn start(n: usize, addr: &str, repo: &Path, logs: &Path) -> anyhow::Result<RealSidecars> {
        let exe = if n > 0 { sibling("swarm-sidecar")? } else { Default::default() };
        let mut fleet = RealSidecars {
            exe,
            addr: addr.to_string(),
            repo: repo.to_path_buf(),
            logs: logs.to_path_buf(),
            procs: Vec::new(),
            restarts: 0,
        };
        for i in 0..n {
            let proc = fleet.spawn(i)?;
            fleet.procs.push(proc);
        }
        Ok(fleet)
    }

    fn spawn(&self, i: usize) -> anyhow::Result<Proc> {
        let log = self.logs.join(format!("real-{i}.log"));
        start_sidecar(&self.exe, &self.addr, &format!("real-{i}"), &self.repo, &[], &log)
    }

    fn kill9_and_restart(&mut self, i: usize) -> anyhow::Result<()> {
        let Some(proc) = self.procs.get_mut(i) else { return Ok(()) };
        // Child::kill is SIGKILL: no chance to stop the worker or flush.
        proc.0.kill()?;
        proc.0.wait()?;
        let again = self.spawn(i)?;
        self.procs[i] = again;
        self.restarts += 1;
        Ok(())
    }
}

/// The swarms the bench created: those not yet seen COMPLETED (with
/// their MERGED count), and the sum of the completed ones'.
#[derive(Default)]
struct Swarms {
    tasks_per_swarm: usize,
    created: u64,
    live: Vec<(String, u64)>,
    merged: u64,
    /// Tasks of swarms that vanished (forgotten) before they were seen
    /// COMPLETED: each second's poll is far inside the retention, so only
    /// a swarm that ended some other way does.
    vanished: u64,
}

impl Swarms {
    /// Reads each live swarm; a completed one is counted and let go.
    async fn poll(&mut self, op: &mut OperatorServiceClient<Channel>) -> anyhow::Result<()> {
        let mut still = Vec::with_capacity(self.live.len());
        for (id, _) in std::mem::take(&mut self.live) {
            match op.get_swarm(v1::GetSwarmRequest { swarm_id: id.clone() }).await {
                Ok(view) => {
                    let view = view.into_inner();
                    let merged = view.tasks_by_state.get("MERGED").copied().unwrap_or(0) as u64;
                    if view.state == v1::SwarmState::Completed as i32 {
                        self.merged += merged;
                    } else {
                        still.push((id, merged));
                    }
                }
                Err(status) if status.code() == tonic::Code::NotFound => {
                    self.vanished += self.tasks_per_swarm as u64;
                }
                Err(status) => return Err(status.into()),
            }
        }
        self.live = still;
        Ok(())
    }

    /// Keeps two swarms of work queued.
    async fn feed(&mut self, op: &mut OperatorServiceClient<Channel>) -> anyhow::Result<()> {
        let n = self.tasks_per_swarm;
        let queued = self.live.iter().filter(|(_, merged)| *merged < n as u64).count();
        for _ in queued..2 {
            let name = format!("soak{}", self.created);
            let mut plan = format!("name = \"{name}\"\n[defaults]\ncommand = \"true\"\nretries = 100\n");
            for i in 0..n {
                plan.push_str(&format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"f/{i}\"]\n"));
            }
            op.create_swarm(v1::CreateSwarmRequest { plan_toml: plan, origin: None }).await?;
            self.live.push((name, 0));
            self.created += 1;
        }
        Ok(())
    }
}

fn key_of(a: &v1::Assign) -> String {
    a.attempt.as_ref().map(|r| format!("{}/{}", r.swarm_id, r.task_id)).unwrap_or_default()
}

/// One simulated sidecar until `until`: sessions one after another.
async fn sidecar(
    id: usize,
    channel: Channel,
    fleet: Arc<Fleet>,
    mut churn: mpsc::Receiver<Churn>,
    work_ms: u64,
    seed: u64,
    until: Instant,
) {
    let worker = format!("soak-w{id}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut j = Journal::default();
    let mut work_until: Option<tokio::time::Instant> = None;
    while Instant::now() < until {
        let (tx, rx) = mpsc::channel(16);
        let attempt_in_hand = j.in_hand.as_ref().and_then(|a| a.attempt.clone());
        let hello = v1::Hello {
            worker_id: worker.clone(),
            capacity: 1,
            shares_repository: true,
            last_acked_seq: j.acked,
            attempt_in_hand,
            resume_secret: j.secret.clone(),
            ..Default::default()
        };
        if tx.send(v1::SidecarMessage { seq: 0, body: Some(Up::Hello(hello)) }).await.is_err() {
            return;
        }
        let connected = SidecarServiceClient::new(channel.clone()).connect(ReceiverStream::new(rx)).await;
        let Ok(mut inbound) = connected.map(|r| r.into_inner()) else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        // The Welcome, or the refusal.
        let welcome = match tokio::time::timeout(Duration::from_secs(10), inbound.message()).await {
            Ok(Ok(Some(v1::ControllerMessage { body: Some(Down::Welcome(w)) }))) => w,
            _ => {
                fleet.refused_hellos.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        j.secret = welcome.resume_secret.clone();
        j.seq = j.seq.max(welcome.last_applied_seq);
        j.acked = j.acked.max(welcome.last_applied_seq.min(j.seq));
        if !welcome.attempt_resumed
            && let Some(a) = j.in_hand.take()
        {
            fleet.running.lock().await.remove(&key_of(&a));
            work_until = None;
        }
        let mut resend = Vec::new();
        if let Some((seq, result)) = j.unacked.clone() {
            if seq > welcome.last_applied_seq {
                resend.push(v1::SidecarMessage { seq, body: Some(Up::Result(result)) });
            } else {
                j.unacked = None;
            }
        }
        let beat =
            v1::SidecarMessage { seq: 0, body: Some(Up::Heartbeat(v1::Heartbeat { sent_at_unix_ms: 0 })) };
        resend.push(beat.clone());
        for m in resend {
            let _ = tx.send(m).await;
        }
        fleet.connected[id].store(true, Ordering::Relaxed);
        let mut heartbeat = tokio::time::interval(Duration::from_secs(1));
        let ended: Option<Churn> = loop {
            let working =
                work_until.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(v1::ControllerMessage { body: Some(Down::Assign(a)) })) => {
                        let key = key_of(&a);
                        let mut running = fleet.running.lock().await;
                        if let Some(&other) = running.get(&key)
                            && other != id
                            && fleet.connected[other].load(Ordering::Relaxed)
                        {
                            fleet.run_twice.fetch_add(1, Ordering::Relaxed);
                        }
                        running.insert(key, id);
                        drop(running);
                        let ms = rng.random_range(work_ms / 10..=work_ms);
                        work_until = Some(tokio::time::Instant::now() + Duration::from_millis(ms));
                        j.in_hand = Some(a);
                    }
                    Ok(Some(v1::ControllerMessage { body: Some(Down::Ack(ack)) })) => {
                        j.acked = j.acked.max(ack.seq);
                        if j.unacked.as_ref().is_some_and(|(s, _)| *s <= j.acked) {
                            j.unacked = None;
                        }
                    }
                    Ok(Some(v1::ControllerMessage { body: Some(Down::Cancel(_)) })) => {
                        if let Some(a) = j.in_hand.take() {
                            fleet.running.lock().await.remove(&key_of(&a));
                            let result = v1::AttemptResult {
                                attempt: a.attempt,
                                outcome: v1::Outcome::Cancelled as i32,
                                ..Default::default()
                            };
                            j.seq += 1;
                            j.unacked = Some((j.seq, result.clone()));
                            let _ = tx.send(v1::SidecarMessage { seq: j.seq, body: Some(Up::Result(result)) }).await;
                        }
                        work_until = None;
                    }
                    Ok(Some(_)) => {}
                    _ => break None,
                },
                _ = tokio::time::sleep_until(working), if work_until.is_some() => {
                    work_until = None;
                    if let Some(a) = j.in_hand.take() {
                        fleet.running.lock().await.remove(&key_of(&a));
                        let result = v1::AttemptResult {
                            attempt: a.attempt,
                            outcome: v1::Outcome::Success as i32,
                            commit: a.base_commit,
                            ..Default::default()
                        };
                        j.seq += 1;
                        j.unacked = Some((j.seq, result.clone()));
                        fleet.results.fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(v1::SidecarMessage { seq: j.seq, body: Some(Up::Result(result)) }).await;
                    }
                }
                _ = heartbeat.tick() => {
                    let _ = tx.send(beat.clone()).await;
                }
                c = churn.recv() => break c,
            }
        };
        fleet.connected[id].store(false, Ordering::Relaxed);
        drop(tx);
        drop(inbound);
        match ended {
            Some(Churn::Reconnect { journal: false }) => {
                // A new process on a lost disk: its worker is gone with it.
                if let Some(a) = j.in_hand.take() {
                    fleet.running.lock().await.remove(&key_of(&a));
                }
                work_until = None;
                j = Journal::default();
            }
            Some(Churn::Killed { away }) => tokio::time::sleep(away).await,
            Some(Churn::Reconnect { journal: true }) | None => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
