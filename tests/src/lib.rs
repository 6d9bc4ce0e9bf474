//! Test support shared by every crate's tests: temp repositories, polling,
//! worker scripts, plans, and the real binaries started as processes.
//!
//! The binaries are found in the target directory next to the test
//! executable (`target/<profile>/`); the first use in a test process builds
//! them (see [`binary`]). Nothing here sleeps to wait: every wait polls a
//! condition against a deadline and fails saying what it was waiting for.
#![allow(clippy::unwrap_used)] // test support: a panic is the report

use std::time::Duration;

pub mod acp_agent;
mod api;
pub mod claude_cli;
pub mod codex_cli;
mod command;
pub mod docker;
pub mod fresh_fs;
pub mod github;
mod install_lock;
pub mod messages_api;
mod netns;
pub mod otlp;
mod plan;
mod poll;
pub mod postgres;
mod procs;
mod real_claude;
mod real_codex;
mod repo;
pub mod responses_api;
mod scripted_api;
mod skip;
mod wheel;

pub use api::*;
pub use install_lock::*;
pub use netns::*;
pub use plan::*;
pub use poll::*;
pub use procs::*;
pub use real_claude::*;
pub use real_codex::*;
pub use repo::*;
pub use skip::*;
pub use tempfile::TempDir;

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(60);
