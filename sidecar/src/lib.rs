//! swarm-sidecar: one per worktree. Registers with the controller, moves its
//! worktree to each assigned task's branch, runs the worker process, relays
//! its reports and exit, runs verification and ships the result commit.
//!
//! - [`runner`]: the one helper that spawns processes (groups, signals, exit mapping)
//! - [`journal`]: the durable outbox of reports (dual-write before send),
//!   versioned records of the sidecar's own [`report::Event`]s
//! - [`worktree`]: the reused git2 worktree, checkouts and commits
//! - [`status`]: `.swarm/status.json` parsing and change detection
//! - [`attempt`]: one attempt from Assign to its [`outcome::AttemptOutcome`]:
//!   prepare, run (a command or an agent), verify, commit
//! - [`report`], [`outcome`]: what an attempt tells the session, as plain values
//! - [`wire`]: the only place those values become prost messages (and an
//!   Assign becomes an [`assignment::Assignment`])
//! - [`agent`]: coding agents (Claude Code, Codex) as workers: one trait,
//!   their parsers, the permission policy, the agent driver
//! - [`verify`]: verify tiers
//! - [`session`]: the Connect stream, replay, heartbeats, reconnects
//! - [`orphans`], [`remote`]: leftover worktrees; packs for remote mode
//!
//! # Files in the workspaces directory
//!
//! `--workspaces`, by default `<repo>/.git/workspaces/`; `swarmctl run`
//! passes `$XDG_STATE_HOME/swarm/<repo hash>/workspaces/`, outside the
//! checkout (see [`worktree::relocate`] for how an older run's move there).
//!
//! - `<worker-id>/`: the worktree (git2 worktree named `<worker-id>`), with
//!   `.swarm/{task.md,status.json,answers/,logs/}` inside, ignored through
//!   the common `info/exclude`.
//! - `<worker-id>.journal`: the outbox (see [`journal`]); outside the
//!   worktree so that it survives worktree removal.
//! - `<worker-id>.lock`: held (`flock`) while the sidecar runs; a second
//!   sidecar with the same id refuses to start, and orphan detection uses it.
//! - `<worker-id>.gitdir/`, `<worker-id>.tmp/`: an attempt's private git
//!   directory and `TMPDIR` (see [`worker_git`]), removed when it ends.
//! - `.create.lock`: held (`flock`) while any sidecar of this directory
//!   creates or removes a worktree (see [`locks`]).
//! - `<worker-id>/.swarm/worker-exit.json`: the worker's exit, written by its
//!   supervisor (see [`supervisor`]).
//!
//! # Protocol choices the controller relies on
//!
//! - Journaled (seq ≥ 1): AttemptStarted (also after each idle restart, with
//!   `restarts`), Status, Question, AttemptResult, OrphanReport. Progress,
//!   Heartbeat and Hello are seq 0. Sequence numbers have no gaps.
//! - An invalid status file is a Status with `WORKER_STATUS_UNSPECIFIED` and
//!   message `invalid status.json: <reason>`; an invalid read is reported
//!   only if a second look 200 ms later sees the same file (mid-write).
//! - `attempt_in_hand` is set from Assign until the AttemptResult is
//!   journaled. An Assign equal to the attempt in hand, or to one whose
//!   result is journaled but not yet acked, is a no-op.
//! - Restart after a crash: a worker left running under its supervisor (or
//!   finished with its exit file written) is re-adopted when the Welcome
//!   resumes the attempt, and its result reported once; its group is killed
//!   when the Welcome does not. An attempt whose worker never started (the
//!   sidecar died while preparing) is simply run. Only a started worker
//!   with neither is lost: AttemptResult ERROR `sidecar restarted; worker
//!   lost`.
//! - A worktree, fetch, commit or push failure that survives the repairs is
//!   AttemptResult INFRA_FAILED; three in a row drain the sidecar.
//! - Cancel with `grace_ms = 0` uses `--stop-grace-ms`. A Cancel or Answer
//!   for an attempt not in hand is logged and ignored.
//! - An invalid Assign with a valid attempt ref is answered with an
//!   AttemptResult ERROR `invalid assign: <field>: <rule>`.
//! - `AttemptResult.exit_code` is -1 when the worker died by a signal (then
//!   `signal` is set), was stalled, or never ran.
//! - Exit 0 runs the verify tiers, then commits (also when a blocking tier
//!   failed: VERIFY_FAILED carries the commit for inspection).
//! - Agent workers (`Assign.agent` set, `command` empty) run without the
//!   supervisor, stdin piped. Their Progress carries `usage` (running
//!   total) and `session_id` (sent as soon as it is known); permission
//!   requests the policy leaves to the operator are Questions `perm-<n>`
//!   with category `permission`, one at a time, answered "allow" or
//!   "deny [reason]"; every permission decision is a Status report. An
//!   Answer is recorded in task.md and also handed to the agent. A usage
//!   limit is a WIP commit and RATE_LIMITED; a shutdown a WIP commit and
//!   CHECKPOINT with the session id; a restarted sidecar holding a started
//!   agent attempt checkpoints the worktree the same way (never "worker
//!   lost"). `.swarm/agent-session.json` names the session and the commit
//!   its work ended at; `agent.resume_session` is resumed only when that
//!   commit is the Assign's base.
//! - Drain: no new Assigns; the stream is closed and `run` returns once the
//!   attempt's result is acked.

pub mod agent;
pub mod assignment;
pub mod attempt;
pub mod cache_tree;
pub mod changes;
mod checkout;
pub mod children;
pub mod config;
pub mod index_entries;
pub mod index_file;
pub mod journal;
mod launch;
pub mod link;
pub mod locks;
pub mod log_serve;
pub mod orphans;
pub mod outcome;
pub mod reaper;
pub mod remote;
pub mod report;
pub mod review;
pub mod runner;
pub mod sandbox;
pub mod secrets;
pub mod session;
pub mod status;
pub mod supervisor;
pub mod swarm_files;
pub mod tracked_index;
mod tree_diff;
pub mod verify;
pub mod verify_job;
pub mod wire;
pub mod worker_files;
pub mod worker_git;
pub mod worker_mcp;
pub mod worktree;

/// Runs one of the binary's helper modes when `argv[1]` selects it (a
/// worker's supervisor, or the sandbox trampoline) and returns its exit
/// code. Call first thing in `main`, before any argument parsing or thread.
pub fn main_if_helper() -> Option<i32> {
    sandbox::main_if_requested()
        .or_else(supervisor::main_if_requested)
        .or_else(worker_mcp::bridge::main_if_requested)
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): its
/// `/proc/<pid>/environ`, `mem` and `fd` then belong to root, so no worker
/// of the same user, confined or not, reads the token in its environment
/// or its open files (and no core dump holds them). Called first thing by
/// every swarm process that holds a credential: the sidecar, a worker's
/// supervisor, and `swarmctl run` with its embedded controller and local
/// sidecars. The flag is reset by exec, so workers are unaffected; this
/// process still reads its own `/proc/self`.
pub fn harden_process() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("swarm: cannot make this process non-dumpable: {e}");
    }
}

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
