//! The integrator actor: one thread per repository owns the git engine
//! (`swarm_git::Integrator`, which is `Send` but not `Sync`) and serializes
//! every merge, so the scheduler's thread and the async runtime never wait
//! on git.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use swarm_core::TaskKey;
use swarm_core::plan::{MergeStrategy, OwnershipPolicy};
use swarm_git::{Integrator, MergeError, MergeRequest, RefLock};
use tokio::sync::oneshot;

use crate::error::{ControllerError, SchedError};

/// A lock file on an integration ref must be at least this old before the
/// integrator removes it: a live `git` holds a ref lock for milliseconds,
/// so an older one (also open by no process) was left by a killed writer.
pub const STALE_LOCK_AGE: Duration = Duration::from_secs(2);

/// A succeeded task's result, to be merged.
#[derive(Debug, Clone)]
pub struct MergeJob {
    pub task: TaskKey,
    pub attempt: u32,
    pub attempt_label: String,
    pub integration_branch: String,
    pub task_commit: String,
    pub base_commit: String,
    pub strategy: MergeStrategy,
    pub ownership: OwnershipPolicy,
    pub owned_globs: Vec<String>,
    pub title: String,
    pub summary: String,
    /// Submitted again after a restart: the merge may have landed before
    /// the crash, so look for it first.
    pub recovering: bool,
}

#[derive(Debug, Clone)]
pub enum MergeVerdict {
    Merged {
        head: String,
        merge_commit: String,
        report: serde_json::Value,
    },
    Conflict {
        paths: Vec<String>,
        description: String,
    },
    /// Ownership enforced, or forbidden paths.
    Refused {
        reason: String,
    },
    Failed {
        reason: String,
    },
}

#[derive(Debug, Clone)]
pub struct MergeResult {
    pub task: TaskKey,
    pub attempt: u32,
    pub verdict: MergeVerdict,
    /// Paths outside the task's globs under `ownership = "warn"`.
    pub ownership_warning: Vec<String>,
    /// A stale lock on the integration ref that had to be removed first.
    pub lock_removed: Option<LockRemoved>,
}

/// A stale `<ref>.lock` the integrator removed from one of the controller's
/// integration refs (for the audit log).
#[derive(Debug, Clone)]
pub struct LockRemoved {
    pub swarm: String,
    pub branch: String,
    pub path: String,
    pub age_ms: u64,
}

/// What the integrator thread tells the scheduler, unasked.
#[derive(Debug, Clone)]
pub enum IntegratorReport {
    Merged(MergeResult),
    /// Removed while clearing the controller's refs at start.
    LockRemoved(LockRemoved),
}

/// Where the integrator sends its reports; false once nobody listens (the
/// thread then ends).
pub type ReportSink = Box<dyn Fn(IntegratorReport) -> bool + Send>;

#[derive(Debug, Clone)]
pub struct Landed {
    pub target: String,
    pub old: String,
    pub new: String,
}

enum Request {
    Merge(MergeJob),
    ClearStaleLocks(Vec<OwnedRef>),
    EnsureBranch { branch: String, from: String, reply: oneshot::Sender<Result<String, SchedError>> },
    FastForward { target: String, new_head: String, reply: oneshot::Sender<Result<Landed, SchedError>> },
}

/// An integration ref the controller alone writes: `(swarm, branch)`.
#[derive(Debug, Clone)]
pub struct OwnedRef {
    pub swarm: String,
    pub branch: String,
}

#[derive(Clone)]
pub struct IntegratorHandle {
    tx: mpsc::Sender<Request>,
    repo: PathBuf,
}

impl IntegratorHandle {
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    pub fn submit(&self, job: MergeJob) {
        if self.tx.send(Request::Merge(job)).is_err() {
            tracing::error!("integrator thread is gone; merge dropped (it is resubmitted on restart)");
        }
    }

    /// Removes stale locks of `refs` (at start: a controller killed while
    /// moving one left its lock behind); each removal is reported as
    /// [`IntegratorReport::LockRemoved`].
    pub fn clear_stale_locks(&self, refs: Vec<OwnedRef>) {
        if !refs.is_empty() && self.tx.send(Request::ClearStaleLocks(refs)).is_err() {
            tracing::error!("integrator thread is gone; stale locks not cleared");
        }
    }

    /// Creates `branch` at the head of `from` unless it exists; returns
    /// the branch's head.
    pub async fn ensure_branch(&self, branch: &str, from: &str) -> Result<String, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::EnsureBranch { branch: branch.into(), from: from.into(), reply })?;
        rx.await.map_err(|_| gone())?
    }

    /// Moves `target` to `new_head` only as a fast-forward.
    pub async fn fast_forward(&self, target: &str, new_head: &str) -> Result<Landed, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::FastForward { target: target.into(), new_head: new_head.into(), reply })?;
        rx.await.map_err(|_| gone())?
    }

    fn call(&self, r: Request) -> Result<(), SchedError> {
        self.tx.send(r).map_err(|_| gone())
    }
}

fn gone() -> SchedError {
    SchedError::Unavailable("integrator stopped".into())
}

/// Starts the integrator thread. Merge results and lock removals go to
/// `reports`; the thread ends when every handle is dropped or `reports`
/// returns false.
pub fn spawn(
    repo: &Path,
    reports: ReportSink,
) -> Result<(IntegratorHandle, JoinHandle<()>), ControllerError> {
    let (tx, rx) = mpsc::channel();
    // gix's repository handle is not Send (without its `parallel`
    // feature), so the thread opens its own and reports whether it could.
    let (opened_tx, opened_rx) = mpsc::sync_channel(1);
    let path = repo.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("integrator".into())
        .spawn(move || match Integrator::open(&path) {
            Ok(integrator) => {
                let _ = opened_tx.send(Ok(()));
                serve(integrator, rx, reports);
            }
            Err(e) => {
                let _ = opened_tx.send(Err(e.to_string()));
            }
        })
        .map_err(|e| ControllerError::Thread(e.to_string()))?;
    let opened = opened_rx.recv().map_err(|_| ControllerError::Thread("integrator thread died".into()))?;
    opened.map_err(|reason| ControllerError::Repository { path: repo.display().to_string(), reason })?;
    Ok((IntegratorHandle { tx, repo: repo.to_path_buf() }, handle))
}

fn serve(integrator: Integrator, rx: mpsc::Receiver<Request>, reports: ReportSink) {
    while let Ok(request) = rx.recv() {
        match request {
            Request::Merge(job) => {
                let result = merge(&integrator, job);
                if !reports(IntegratorReport::Merged(result)) {
                    return; // the scheduler stopped
                }
            }
            Request::ClearStaleLocks(refs) => {
                for owned in refs {
                    let removed = match clear_stale_lock(&integrator, &owned, false) {
                        Ok(removed) => removed,
                        Err(reason) => {
                            tracing::warn!(swarm = %owned.swarm, branch = %owned.branch, %reason, "stale lock check");
                            None
                        }
                    };
                    if let Some(removed) = removed
                        && !reports(IntegratorReport::LockRemoved(removed))
                    {
                        return;
                    }
                }
            }
            Request::EnsureBranch { branch, from, reply } => {
                let r = ensure_branch(&integrator, &branch, &from);
                let _ = reply.send(r);
            }
            Request::FastForward { target, new_head, reply } => {
                let r = integrator
                    .fast_forward(&target, &new_head)
                    .map(|ff| Landed { target: target.clone(), old: ff.old, new: ff.new })
                    .map_err(|e| match e {
                        MergeError::NotFastForward { .. } => SchedError::FailedPrecondition(e.to_string()),
                        other => SchedError::FailedPrecondition(other.to_string()),
                    });
                let _ = reply.send(r);
            }
        }
    }
}

fn ensure_branch(integrator: &Integrator, branch: &str, from: &str) -> Result<String, SchedError> {
    let base = integrator
        .branch_head(from)
        .map_err(|e| SchedError::FailedPrecondition(e.to_string()))?
        .ok_or_else(|| {
            SchedError::FailedPrecondition(format!("base branch {from:?} does not exist in the repository"))
        })?;
    integrator.ensure_branch(branch, &base).map_err(|e| SchedError::FailedPrecondition(e.to_string()))
}

fn merge(integrator: &Integrator, job: MergeJob) -> MergeResult {
    let span = tracing::info_span!(
        "merge",
        swarm = %job.task.swarm,
        task = %job.task,
        attempt = %job.attempt_label,
        strategy = %job.strategy,
        recovering = job.recovering,
    );
    // One swarm is one trace: the merge sits under its task beside the
    // attempts.
    swarm_telemetry::join_swarm_trace(&span, job.task.swarm.as_str(), &job.task.to_string());
    let _entered = span.enter();
    let mut result = MergeResult {
        task: job.task.clone(),
        attempt: job.attempt,
        verdict: MergeVerdict::Failed { reason: String::new() },
        ownership_warning: Vec::new(),
        lock_removed: None,
    };
    result.verdict =
        match merge_verdict(integrator, &job, &mut result.ownership_warning, &mut result.lock_removed) {
            Ok(v) => v,
            Err(reason) => MergeVerdict::Failed { reason },
        };
    result
}

fn merge_verdict(
    integrator: &Integrator,
    job: &MergeJob,
    warnings: &mut Vec<String>,
    lock_removed: &mut Option<LockRemoved>,
) -> Result<MergeVerdict, String> {
    let head_of = |branch: &str| -> Result<String, String> {
        integrator
            .branch_head(branch)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("integration branch {branch} does not exist"))
    };
    if job.recovering {
        // The controller may have died after moving the ref and before
        // recording it: the trailer says whether this attempt landed.
        if let Some(landed) =
            integrator.find_landed(&job.integration_branch, &job.attempt_label).map_err(|e| e.to_string())?
        {
            let head = head_of(&job.integration_branch)?;
            tracing::info!(merge_commit = %landed, "merge had landed before the restart");
            return Ok(MergeVerdict::Merged {
                head,
                merge_commit: landed,
                report: serde_json::json!({ "strategy": job.strategy.as_str(), "recovered": true }),
            });
        }
    }
    let changed = integrator.changed_paths(&job.base_commit, &job.task_commit).map_err(|e| e.to_string())?;
    let outside = swarm_git::paths_outside(&job.owned_globs, &changed).map_err(|e| e.to_string())?;
    if !outside.is_empty() {
        match job.ownership {
            OwnershipPolicy::Enforce => {
                return Ok(MergeVerdict::Refused {
                    reason: format!("result touches files outside its owned globs: {}", outside.join(", ")),
                });
            }
            OwnershipPolicy::Warn => *warnings = outside,
        }
    }
    let head = head_of(&job.integration_branch)?;
    let request = MergeRequest {
        integration_branch: job.integration_branch.clone(),
        expected_head: head,
        task_commit: job.task_commit.clone(),
        strategy: job.strategy,
        attempt_label: job.attempt_label.clone(),
        title: job.title.clone(),
        summary: job.summary.clone(),
    };
    match integrate(integrator, job, &request, lock_removed) {
        Ok(report) => Ok(MergeVerdict::Merged {
            head: report.result.clone(),
            merge_commit: report.result.clone(),
            report: serde_json::json!({
                "strategy": report.strategy.as_str(),
                "base": report.base,
                "result": report.result,
                "files_changed": report.files_changed,
                "duration_us": report.duration.as_micros() as u64,
                "cas_retries": report.cas_retries,
            }),
        }),
        Err(MergeError::AlreadyContained { head, .. }) => Ok(MergeVerdict::Merged {
            head: head.clone(),
            merge_commit: head,
            report: serde_json::json!({ "strategy": job.strategy.as_str(), "already_contained": true }),
        }),
        Err(MergeError::Conflict { head, paths, .. }) => {
            let mut description = format!(
                "Your previous result (commit {}) conflicted with the integration branch {} at {head}.\n\
                 This attempt starts from that head; redo the change on top of it.\n\nConflicting paths:\n",
                job.task_commit, job.integration_branch
            );
            for p in &paths {
                description.push_str(&format!("- `{}` (the integration branch {} it)\n", p.path, p.ours));
            }
            Ok(MergeVerdict::Conflict { paths: paths.into_iter().map(|p| p.path).collect(), description })
        }
        Err(e @ MergeError::ForbiddenPath { .. }) => Ok(MergeVerdict::Refused { reason: e.to_string() }),
        Err(e) => Err(e.to_string()),
    }
}

/// `integrate`, removing a stale lock on the integration ref once: this
/// thread is the only writer of the ref and has no update of it in flight,
/// so a lock that is old and open by nobody was left by a killed writer.
fn integrate(
    integrator: &Integrator,
    job: &MergeJob,
    request: &MergeRequest,
    lock_removed: &mut Option<LockRemoved>,
) -> Result<swarm_git::MergeReport, MergeError> {
    match integrator.integrate(request) {
        Err(MergeError::RefLocked { branch, lock }) => {
            let owned = OwnedRef { swarm: job.task.swarm.to_string(), branch: branch.clone() };
            match clear_stale_lock(integrator, &owned, true) {
                Ok(Some(removed)) => {
                    *lock_removed = Some(removed);
                    integrator.integrate(request)
                }
                Ok(None) | Err(_) => Err(MergeError::RefLocked { branch, lock }),
            }
        }
        other => other,
    }
}

/// Removes `owned`'s lock if stale. A lock younger than [`STALE_LOCK_AGE`]
/// is waited out once when `wait_young` (a merge is blocked on it; the wait
/// is bounded by the age) and left alone otherwise; a lock some process
/// has open is never removed.
fn clear_stale_lock(
    integrator: &Integrator,
    owned: &OwnedRef,
    wait_young: bool,
) -> Result<Option<LockRemoved>, String> {
    let span = tracing::info_span!("integration.lock", swarm = %owned.swarm, branch = %owned.branch);
    let _entered = span.enter();
    let mut found =
        integrator.remove_stale_ref_lock(&owned.branch, STALE_LOCK_AGE).map_err(|e| e.to_string())?;
    if let RefLock::Young { wait, .. } = &found
        && wait_young
    {
        std::thread::sleep((*wait).min(STALE_LOCK_AGE));
        found = integrator.remove_stale_ref_lock(&owned.branch, STALE_LOCK_AGE).map_err(|e| e.to_string())?;
    }
    match found {
        RefLock::Removed { path, age } => {
            tracing::warn!(lock = %path.display(), age_ms = age.as_millis() as u64,
                "removed a stale lock on the integration ref (left by a killed writer)");
            Ok(Some(LockRemoved {
                swarm: owned.swarm.clone(),
                branch: owned.branch.clone(),
                path: path.display().to_string(),
                age_ms: age.as_millis() as u64,
            }))
        }
        RefLock::Absent => Ok(None),
        RefLock::Young { path, age, .. } => {
            tracing::info!(lock = %path.display(), age_ms = age.as_millis() as u64, "integration ref lock is recent; left alone");
            Ok(None)
        }
        RefLock::Open { path, pid } => {
            tracing::warn!(lock = %path.display(), pid, "integration ref lock is held open by a live process; left alone");
            Ok(None)
        }
    }
}
