//! swarm-sidecar: one per worktree. Registers with the controller, moves its
//! worktree to each assigned task's branch, runs the worker process, relays
//! its reports and exit, runs verification and ships the result commit.
//!
//! - [`runner`]: the one helper that spawns processes (groups, signals, exit mapping)
//! - [`journal`]: the durable outbox of reports (dual-write before send)
//! - [`worktree`]: the reused git2 worktree, checkouts and commits
//! - [`status`]: `.swarm/status.json` parsing and change detection
//! - [`attempt`]: one attempt from Assign to AttemptResult
//! - [`verify`]: verify tiers
//! - [`session`]: the Connect stream, replay, heartbeats, reconnects
//! - [`orphans`], [`remote`]: leftover worktrees; packs for remote mode

pub mod attempt;
pub mod config;
pub mod journal;
pub mod orphans;
pub mod remote;
pub mod runner;
pub mod session;
pub mod status;
pub mod verify;
pub mod worktree;

pub use config::Config;
pub use session::run;

#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error("configuration: {0}")]
    Config(String),
    #[error("repository: {0}")]
    Repo(String),
    #[error(transparent)]
    Journal(#[from] journal::JournalError),
    #[error("connecting to controller: {0}")]
    Connect(String),
    #[error("protocol: {0}")]
    Protocol(String),
}
