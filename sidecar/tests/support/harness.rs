//! What every attempt test sets up the same way: the sidecar's context for
//! a worker of a test repository, where its worktree is, and the one
//! result among an attempt's reports.

// Not every test uses every helper.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_sidecar::attempt::Context;

use super::sent::Report;

/// The context of worker `worker_id` on `repo`: short grace, the real
/// supervisor binary, the sandbox as this kernel enforces it.
pub fn ctx(repo: &Path, worker_id: &str, idle_timeout: Option<Duration>) -> Context {
    Context {
        repo: repo.to_path_buf(),
        workspaces: swarm_sidecar::worktree::Workspaces::in_repo(repo).expect("workspaces"),
        worker_id: worker_id.into(),
        stop_grace: Duration::from_millis(200),
        default_idle_timeout: idle_timeout,
        remote: None,
        link: swarm_sidecar::link::ControllerLink::new(worker_id),
        supervisor: PathBuf::from(env!("CARGO_BIN_EXE_swarm-sidecar")),
        tracker: Default::default(),
        standby: Default::default(),
        sandbox: swarm_sidecar::sandbox::probe(),
        cgroups: swarm_sidecar::sandbox::Cgroups::probe(),
        worker_user: None,
        redactor: Default::default(),
    }
}

/// Where worker `worker_id` of `repo` works.
pub fn worktree(repo: &Path, worker_id: &str) -> PathBuf {
    repo.join(".git/workspaces").join(worker_id)
}

/// The attempt's result, asserting there is exactly one.
pub fn the_result(reports: &[Report]) -> &v1::AttemptResult {
    let results: Vec<_> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Journaled(Body::Result(r)) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "exactly one result: {reports:?}");
    results[0]
}
