//! Verifying a merge queue's merged commit (`VerifyMerge`): the controller
//! merged a batch of task results in memory and asks an idle sidecar to run
//! the plan's `integration_verify` tiers on that tree before the
//! integration branch moves.
//!
//! The tree is written to a scratch directory of its own, not the
//! sidecar's worktree: the worktree keeps its task branch and warm build
//! state, and the merged commit belongs to no branch. The scratch directory
//! lives in the workspaces directory like the worktrees, is named by the worker
//! id and the job (a controller restarted mid-verification may send the
//! batch again while the first run still goes on) and is removed after.

use std::path::{Path, PathBuf};

use swarm_proto::v1;
use tracing::Instrument as _;

use crate::verify::{Tier, TierOutcome, run_tiers};

/// The sidecar that verifies.
pub struct Verifier {
    pub repo: PathBuf,
    /// Where its scratch directory goes, beside the worktrees.
    pub workspaces: crate::worktree::Workspaces,
    pub worker_id: String,
    pub remote: Option<crate::remote::Remote>,
    /// Its own binary, the sandbox trampoline.
    pub exe: PathBuf,
    /// What its kernel enforces of the sandbox.
    pub kernel: crate::sandbox::Capability,
    /// The user the tiers run as, when not the sidecar's (`--worker-user`).
    pub worker_user: Option<crate::sandbox::WorkerUser>,
}

/// Runs one verification and returns the message that answers it.
pub async fn run(verifier: Verifier, job: v1::VerifyMerge) -> v1::SidecarMessage {
    let span = tracing::info_span!("merge_queue.verify", swarm = %job.swarm_id, job = job.job_id, commit = %job.commit, attempts = ?job.attempts);
    // A child of the controller's dispatch span, in the swarm's trace.
    swarm_telemetry::set_parent(&span, &job.traceparent);
    let verdict = verify(&verifier, &job).instrument(span).await;
    let body = match verdict {
        Ok((tiers, passed)) => {
            let tiers = tiers.iter().map(v1::TierResult::from).collect();
            v1::MergeVerified { job_id: job.job_id, commit: job.commit, passed, tiers, error: String::new() }
        }
        Err(error) => {
            tracing::warn!(%error, "could not verify the merged commit");
            v1::MergeVerified {
                job_id: job.job_id,
                commit: job.commit,
                passed: false,
                tiers: Vec::new(),
                error,
            }
        }
    };
    v1::SidecarMessage { seq: 0, body: Some(v1::sidecar_message::Body::MergeVerified(body)) }
}

async fn verify(verifier: &Verifier, job: &v1::VerifyMerge) -> Result<(Vec<TierOutcome>, bool), String> {
    let (repo, worker_id) = (verifier.repo.as_path(), verifier.worker_id.as_str());
    let remote = verifier.remote.as_ref();
    swarm_core::names::check_commit(&job.commit).map_err(|rule| format!("commit: {rule}"))?;
    if let Some(remote) = remote {
        remote.ensure_commit(repo, &job.commit).await.map_err(|e| format!("fetch {}: {e}", job.commit))?;
    }
    let dir = scratch_dir(&verifier.workspaces.dir, worker_id, job.job_id)?;
    let (r, d, c) = (repo.to_path_buf(), dir.clone(), job.commit.clone());
    tokio::task::spawn_blocking(move || write_tree(&r, &d, &c))
        .await
        .map_err(|e| format!("checkout thread: {e}"))??;
    let tiers: Vec<Tier> = job.tiers.iter().map(crate::wire::tier).collect();
    let tmp = dir.with_extension("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
    let mut env = crate::sandbox::inherited_env();
    if let Some(u) = &verifier.worker_user {
        // The tiers write the scratch tree and their TMPDIR as that user;
        // no git of the sidecar opens either afterwards.
        for d in [&dir, &tmp] {
            crate::sandbox::ownership::give(d, &u.ids)
                .map_err(|e| format!("handing to the worker user: {e}"))?;
        }
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".to_string(), u.home.to_string_lossy().into_owned()));
    }
    env.push(("TMPDIR".to_string(), tmp.to_string_lossy().into_owned()));
    env.extend([
        ("SWARM_SWARM_ID".to_string(), job.swarm_id.clone()),
        ("SWARM_VERIFY_COMMIT".to_string(), job.commit.clone()),
        ("SWARM_WORKER_ID".to_string(), worker_id.to_string()),
    ]);
    let confinement = confinement(verifier, job, &dir, &tmp, &env);
    let result = match confinement {
        Ok(c) => Ok(run_tiers(&tiers, &dir, &env, c.as_ref()).await),
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not remove the verification's scratch directory");
    }
    result
}

/// The tiers' sandbox: the scratch directory is their worktree.
fn confinement(
    verifier: &Verifier,
    job: &v1::VerifyMerge,
    dir: &Path,
    tmp: &Path,
    env: &[(String, String)],
) -> Result<Option<crate::sandbox::Confinement>, String> {
    use crate::sandbox::Place;
    let settings = crate::wire::sandbox(job.sandbox.as_ref()).map_err(|e| format!("invalid sandbox: {e}"))?;
    let common = &verifier.workspaces.common;
    let place = Place { worktree: dir, common_dir: common, private: &[tmp], agent: None, review: false };
    crate::sandbox::confine(&settings, verifier.kernel, &verifier.exe, &place, env)
        .map(|c| crate::sandbox::worker_user::run_as(c, verifier.worker_user.as_ref(), &verifier.exe))
        .map_err(|e| format!("the merge queue {e}"))
}

/// `<workspaces>/.verify-<worker>-<job>`, emptied.
fn scratch_dir(workspaces: &Path, worker_id: &str, job: u64) -> Result<PathBuf, String> {
    let dir = workspaces.join(format!(".verify-{worker_id}-{job}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("clear {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Writes `commit`'s tree into `dir` (no index, no ref, no worktree entry).
fn write_tree(repo: &Path, dir: &Path, commit: &str) -> Result<(), String> {
    let git = git2::Repository::open(repo).map_err(|e| format!("open repository: {e}"))?;
    let oid = git2::Oid::from_str(commit).map_err(|e| format!("commit id: {e}"))?;
    let commit = git.find_commit(oid).map_err(|e| format!("find commit {commit}: {e}"))?;
    let mut opts = git2::build::CheckoutBuilder::new();
    opts.target_dir(dir).force().recreate_missing(true).update_index(false);
    git.checkout_tree(commit.as_object(), Some(&mut opts)).map_err(|e| format!("write the merged tree: {e}"))
}
