//! swarm-bench: benchmarks against real swarm processes (not tests).
//!
//! ```text
//! cargo build --release -p swarm-controller -p swarm-sidecar -p swarmctl
//! B=./target/release/swarm-bench
//! $B [--tasks N] [--sidecars N] [--channels N] [--streams N]   # sqlite baseline, durable, heartbeats
//! $B durable [--tasks N] [--sidecars N] [--channels N]         # sqlite baseline and durable tasks/s
//! $B heartbeats [--streams N] [--heartbeat-secs S]             # heartbeat streams: controller CPU, RSS
//! $B e2e --tasks N --sidecars K [--files F] [--shape chains|flat] [--keep] [--shared-fs]
//!                                  # real controller + K real sidecars + real worktrees:
//!                                  # READY->exec, exec->exit, exit->MERGED, tasks/s, CPU, RSS
//! $B startup [--sidecars K] [--files F] [--runs R]
//!                                  # `swarmctl run`: process start -> K sidecars connected
//! $B memory [--tasks N]            # controller RSS per task at rest, CPU at rest
//! $B merge-queue [--tasks N] [--culprits F] [--verify-secs S] [--workers W] [--verifiers V]
//!                                  # integration_verify: landing time / lower bound, verifications
//! $B soak [--minutes M] [--sidecars K] [--churn P]
//!                                  # K simulated sidecars, P% of them churning a minute:
//!                                  # RSS/fds/threads drift, tasks lost, run twice, store growth
//! $B makespan [--dag FILE | --tasks N --roots R --depth D] [--workers W] [--mean-ms M]
//!             [--alpha A] [--seed S] [--runs R] [--estimates]
//!                                  # a DAG with heavy-tailed sleeps on W simulated sidecars:
//!                                  # makespan / lower bound, critical-path order beside FIFO
//! ```
//!
//! Each prints its baseline from the same run beside its figures (this kind
//! of machine is noisy). Every loop is bounded in count and time.

mod common;
mod durable;
mod e2e;
mod makespan;
// Shared with the worktree bench; std only (see the file).
#[path = "../../../../tests/src/fresh_fs.rs"]
mod fresh_fs;
mod memory;
mod merge_queue;
mod soak;
mod startup;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "swarm-bench", args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Without a subcommand: the SQLite baseline, durable tasks and heartbeats.
    #[command(flatten)]
    durable: durable::Args,
}

#[derive(Subcommand)]
enum Cmd {
    /// SQLite baseline and durable tasks/s with simulated sidecars.
    Durable(durable::Args),
    /// Heartbeat streams: controller CPU and RSS.
    Heartbeats(durable::Args),
    /// End to end: real controller, real sidecars, real worktrees.
    E2e(e2e::Args),
    /// `swarmctl run` startup to K sidecars connected.
    Startup(startup::Args),
    /// Controller RSS per task at rest after `swarmctl create`.
    Memory(memory::Args),
    /// A merge queue with culprits: landing time against its lower bound.
    MergeQueue(merge_queue::Args),
    /// Hours of fleet churn: drift, lost and duplicated tasks, store growth.
    Soak(soak::Args),
    /// Makespan of a DAG over its lower bound, critical-path order and FIFO.
    Makespan(makespan::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => durable::run(&cli.durable, durable::Parts::All).await,
        Some(Cmd::Durable(a)) => durable::run(&a, durable::Parts::Durable).await,
        Some(Cmd::Heartbeats(a)) => durable::run(&a, durable::Parts::Heartbeats).await,
        Some(Cmd::E2e(a)) => e2e::run(&a).await,
        Some(Cmd::Startup(a)) => tokio::task::spawn_blocking(move || startup::run(&a)).await?,
        Some(Cmd::Memory(a)) => tokio::task::spawn_blocking(move || memory::run(&a)).await?,
        Some(Cmd::Soak(a)) => soak::run(&a).await,
        Some(Cmd::MergeQueue(a)) => merge_queue::run(&a).await,
        Some(Cmd::Makespan(a)) => makespan::run(&a).await,
    }
}
