//! swarm-sidecar: one per worktree. Registers with the controller, moves its
//! worktree to each assigned task's branch, runs the worker process, relays
//! its reports and exit, runs verification and ships the result commit.
//!
//! Modules: [`runner`] (process groups, signals, exit mapping), [`journal`]
//! (durable outbox of reports), [`worktree`] (git2 worktree and commits),
//! [`status`] (`.swarm/status.json`).

pub mod journal;
pub mod runner;
pub mod status;
pub mod worktree;
