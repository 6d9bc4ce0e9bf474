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
use swarm_git::{Integrator, MergeError, MergeRequest, RefLock, RefRepair};
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
    /// An integration ref found behind the store's head at start (or
    /// unreadable), put back there.
    RefRepaired(RefRepaired),
    /// A merge queue's speculation or landing.
    Queue(crate::merge_queue::QueueReport),
}

/// Where the integrator sends its reports; false once nobody listens (the
/// thread then ends).
pub type ReportSink = Box<dyn Fn(IntegratorReport) -> bool + Send>;

/// An integration ref that was behind the store's head at start, or held
/// no commit id (what a power loss can leave of a ref moved by exchange),
/// put back at the head the store recorded (for the audit log).
#[derive(Debug, Clone)]
pub struct RefRepaired {
    pub swarm: String,
    pub branch: String,
    /// What the ref file held, lossily.
    pub found: String,
    pub head: String,
}

#[derive(Debug, Clone)]
pub struct Landed {
    pub target: String,
    pub old: String,
    pub new: String,
}

enum Request {
    Merge(MergeJob),
    Queue(crate::merge_queue::QueueRequest),
    RestoreRefs(Vec<RecordedRef>),
    EnsureBranch { branch: String, from: String, reply: oneshot::Sender<Result<String, SchedError>> },
    FastForward { target: String, new_head: String, reply: oneshot::Sender<Result<Landed, SchedError>> },
}

/// An integration ref the controller alone writes: `(swarm, branch)`.
#[derive(Debug, Clone)]
pub struct OwnedRef {
    pub swarm: String,
    pub branch: String,
}

/// An owned ref and the head the store last recorded for it.
#[derive(Debug, Clone)]
pub struct RecordedRef {
    pub owned: OwnedRef,
    pub head: String,
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

    /// A merge queue's request; its report comes back through the sink.
    pub fn queue(&self, request: crate::merge_queue::QueueRequest) {
        if self.tx.send(Request::Queue(request)).is_err() {
            tracing::error!(
                "integrator thread is gone; merge queue request dropped (the queue is rebuilt on restart)"
            );
        }
    }

    /// At start, makes `refs` movable again: removes the stale lock a
    /// controller killed while moving one left behind
    /// ([`IntegratorReport::LockRemoved`]), and puts back at the store's
    /// head a ref that a power loss left empty or behind it
    /// ([`IntegratorReport::RefRepaired`]).
    pub fn restore_refs(&self, refs: Vec<RecordedRef>) {
        if !refs.is_empty() && self.tx.send(Request::RestoreRefs(refs)).is_err() {
            tracing::error!("integrator thread is gone; integration refs not restored");
        }
    }

    /// Creates `branch` at the head of `from` unless it exists; returns
    /// the branch's head.
    pub async fn ensure_branch(&self, branch: &str, from: &str) -> Result<String, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::EnsureBranch { branch: branch.into(), from: from.into(), reply })?;
        rx.await.map_err(|_| gone())?
    }

    /// `ensure_branch` for the scheduler thread, which must not wait: it
    /// polls the returned receiver.
    pub fn ensure_branch_later(
        &self,
        branch: &str,
        from: &str,
    ) -> Result<oneshot::Receiver<Result<String, SchedError>>, SchedError> {
        let (reply, rx) = oneshot::channel();
        self.call(Request::EnsureBranch { branch: branch.into(), from: from.into(), reply })?;
        Ok(rx)
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

/// The most requests taken off the queue at once; merges among them for the
/// same integration branch land together.
const MAX_DRAIN: usize = 256;
/// The most merges one `integrate_batch` lands (one pack, one ref update).
const MAX_BATCH: usize = 100;

fn serve(integrator: Integrator, rx: mpsc::Receiver<Request>, reports: ReportSink) {
    let mut queue: Vec<Request> = Vec::new();
    while let Ok(first) = rx.recv() {
        queue.push(first);
        // Whatever queued up behind it (a backlog of merges while the last
        // one landed) is handled in this round, in order.
        while queue.len() < MAX_DRAIN {
            match rx.try_recv() {
                Ok(r) => queue.push(r),
                Err(_) => break,
            }
        }
        let mut requests = std::mem::take(&mut queue).into_iter().peekable();
        while let Some(request) = requests.next() {
            let keep_going = match request {
                Request::Merge(job) => {
                    // A run of consecutive merges lands in batches per
                    // integration branch; other requests keep their place.
                    let mut jobs = vec![job];
                    while let Some(Request::Merge(_)) = requests.peek() {
                        if let Some(Request::Merge(job)) = requests.next() {
                            jobs.push(job);
                        }
                    }
                    merge_all(&integrator, jobs, &reports)
                }
                other => handle(&integrator, other, &reports),
            };
            if !keep_going {
                return; // the scheduler stopped
            }
        }
    }
}

/// A request other than a merge; false once nobody listens.
fn handle(integrator: &Integrator, request: Request, reports: &ReportSink) -> bool {
    match request {
        Request::Merge(job) => merge_all(integrator, vec![job], reports),
        Request::Queue(r) => reports(IntegratorReport::Queue(crate::merge_queue::handle(integrator, r))),
        Request::RestoreRefs(refs) => refs.iter().all(|r| restore_ref(integrator, r, reports)),
        Request::EnsureBranch { branch, from, reply } => {
            let r = ensure_branch(integrator, &branch, &from);
            let _ = reply.send(r);
            true
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
            true
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

/// One job on its way through [`merge_all`].
struct Pending {
    job: MergeJob,
    span: tracing::Span,
    result: MergeResult,
    /// Decided (checks refused it, it had landed, or it was merged).
    done: bool,
}

/// Merges `jobs` (in the order the scheduler sent them) and reports one
/// result per job, in that order. Each job's own checks come first (a
/// landed attempt found after a restart, ownership); the rest land in
/// batches per integration branch: one `integrate_batch` each (one pack
/// or loose objects, one compare-and-swap), a lone job through
/// `integrate`. Within a batch a conflicting or refused job gets its own
/// verdict and the others still land; if the batch as a whole fails, its
/// jobs are merged one at a time, so no job fails for another's sake.
/// False once nobody listens.
fn merge_all(integrator: &Integrator, jobs: Vec<MergeJob>, reports: &ReportSink) -> bool {
    let mut pending: Vec<Pending> = jobs
        .into_iter()
        .map(|job| {
            let span = merge_span(&job);
            let result = MergeResult {
                task: job.task.clone(),
                attempt: job.attempt,
                verdict: MergeVerdict::Failed { reason: String::new() },
                ownership_warning: Vec::new(),
                lock_removed: None,
            };
            Pending { job, span, result, done: false }
        })
        .collect();
    for p in &mut pending {
        let _entered = p.span.enter();
        match precheck(integrator, &p.job, &mut p.result.ownership_warning) {
            Ok(None) => {}
            Ok(Some(verdict)) => {
                p.result.verdict = verdict;
                p.done = true;
            }
            Err(reason) => {
                p.result.verdict = MergeVerdict::Failed { reason };
                p.done = true;
            }
        }
    }
    // The jobs still to land, by integration branch (in order of first
    // appearance; each branch's jobs in the order they came).
    let mut branches: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, p) in pending.iter().enumerate().filter(|(_, p)| !p.done) {
        match branches.iter_mut().find(|(b, _)| *b == p.job.integration_branch) {
            Some((_, idx)) => idx.push(i),
            None => branches.push((p.job.integration_branch.clone(), vec![i])),
        }
    }
    let mut reported = 0usize;
    for (_, idx) in branches {
        for chunk in idx.chunks(MAX_BATCH) {
            land(integrator, &mut pending, chunk);
            // Report every result whose predecessors are all decided.
            while reported < pending.len() && pending[reported].done {
                if !reports(IntegratorReport::Merged(pending[reported].result.clone())) {
                    return false;
                }
                reported += 1;
            }
        }
    }
    for p in &pending[reported..] {
        if !reports(IntegratorReport::Merged(p.result.clone())) {
            return false;
        }
    }
    true
}

fn merge_span(job: &MergeJob) -> tracing::Span {
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
    span
}

/// Lands the jobs `chunk` names (all for one integration branch) and
/// decides each.
fn land(integrator: &Integrator, pending: &mut [Pending], chunk: &[usize]) {
    if let [i] = chunk {
        let p = &mut pending[*i];
        let _entered = p.span.enter();
        p.result.verdict = match merge_one(integrator, &p.job, &mut p.result.lock_removed) {
            Ok(v) => v,
            Err(reason) => MergeVerdict::Failed { reason },
        };
        p.done = true;
        return;
    }
    let branch = pending[chunk[0]].job.integration_branch.clone();
    let span = tracing::info_span!("merge.batch", branch = %branch, jobs = chunk.len());
    let entered = span.enter();
    let head = match integrator.branch_head(&branch) {
        Ok(Some(head)) => head,
        Ok(None) => return fail_all(pending, chunk, &format!("integration branch {branch} does not exist")),
        Err(e) => return fail_all(pending, chunk, &e.to_string()),
    };
    let requests: Vec<MergeRequest> = chunk.iter().map(|&i| request_for(&pending[i].job, &head)).collect();
    let mut lock_removed = None;
    let batch = match integrator.integrate_batch(&requests) {
        Err(MergeError::RefLocked { branch, lock }) => {
            let owned =
                OwnedRef { swarm: pending[chunk[0]].job.task.swarm.to_string(), branch: branch.clone() };
            match clear_stale_lock(integrator, &owned, true) {
                Ok(Some(removed)) => {
                    lock_removed = Some(removed);
                    integrator.integrate_batch(&requests)
                }
                Ok(None) | Err(_) => Err(MergeError::RefLocked { branch, lock }),
            }
        }
        other => other,
    };
    drop(entered);
    match batch {
        Ok(batch) => {
            tracing::debug!(parent: &span, landed = batch.results.iter().filter(|r| r.is_ok()).count(),
                head = %batch.head, retries = batch.cas_retries, "batch landed");
            for (&i, outcome) in chunk.iter().zip(batch.results) {
                let p = &mut pending[i];
                let _entered = p.span.enter();
                p.result.verdict = match verdict_of(&p.job, outcome) {
                    Ok(v) => v,
                    Err(reason) => MergeVerdict::Failed { reason },
                };
                p.done = true;
            }
            if let Some(removed) = lock_removed {
                pending[chunk[0]].result.lock_removed = Some(removed);
            }
        }
        Err(e) => {
            // Nothing landed: each job on its own, so the batch's failure
            // (a locked ref, a failed write, a gix error on one job) is
            // only the jobs' own where it is theirs.
            tracing::warn!(parent: &span, error = %e, "batch failed; merging its jobs one at a time");
            for (n, &i) in chunk.iter().enumerate() {
                let p = &mut pending[i];
                let _entered = p.span.enter();
                p.result.verdict = match merge_one(integrator, &p.job, &mut p.result.lock_removed) {
                    Ok(v) => v,
                    Err(reason) => MergeVerdict::Failed { reason },
                };
                if n == 0 && p.result.lock_removed.is_none() {
                    p.result.lock_removed = lock_removed.take();
                }
                p.done = true;
            }
        }
    }
}

fn fail_all(pending: &mut [Pending], chunk: &[usize], reason: &str) {
    for &i in chunk {
        pending[i].result.verdict = MergeVerdict::Failed { reason: reason.to_string() };
        pending[i].done = true;
    }
}

fn request_for(job: &MergeJob, head: &str) -> MergeRequest {
    MergeRequest {
        integration_branch: job.integration_branch.clone(),
        expected_head: head.to_string(),
        task_commit: job.task_commit.clone(),
        strategy: job.strategy,
        attempt_label: job.attempt_label.clone(),
        title: job.title.clone(),
        summary: job.summary.clone(),
    }
}

/// A job's own checks before it may land: `Some` decides it (it had
/// landed before a restart, or ownership refuses it).
pub(crate) fn precheck(
    integrator: &Integrator,
    job: &MergeJob,
    warnings: &mut Vec<String>,
) -> Result<Option<MergeVerdict>, String> {
    if job.recovering {
        // The controller may have died after moving the ref and before
        // recording it: the trailer says whether this attempt landed.
        if let Some(landed) =
            integrator.find_landed(&job.integration_branch, &job.attempt_label).map_err(|e| e.to_string())?
        {
            let head = head_of(integrator, &job.integration_branch)?;
            tracing::info!(merge_commit = %landed, "merge had landed before the restart");
            return Ok(Some(MergeVerdict::Merged {
                head,
                merge_commit: landed,
                report: serde_json::json!({ "strategy": job.strategy.as_str(), "recovered": true }),
            }));
        }
    }
    let changed = integrator.changed_paths(&job.base_commit, &job.task_commit).map_err(|e| e.to_string())?;
    let outside = swarm_git::paths_outside(&job.owned_globs, &changed).map_err(|e| e.to_string())?;
    if !outside.is_empty() {
        match job.ownership {
            OwnershipPolicy::Enforce => {
                return Ok(Some(MergeVerdict::Refused {
                    reason: format!("result touches files outside its owned globs: {}", outside.join(", ")),
                }));
            }
            OwnershipPolicy::Warn => *warnings = outside,
        }
    }
    Ok(None)
}

fn head_of(integrator: &Integrator, branch: &str) -> Result<String, String> {
    integrator
        .branch_head(branch)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("integration branch {branch} does not exist"))
}

/// One job that passed its checks, landed alone on the current head.
fn merge_one(
    integrator: &Integrator,
    job: &MergeJob,
    lock_removed: &mut Option<LockRemoved>,
) -> Result<MergeVerdict, String> {
    let head = head_of(integrator, &job.integration_branch)?;
    let request = request_for(job, &head);
    verdict_of(job, integrate(integrator, job, &request, lock_removed))
}

/// What the scheduler hears of one merge's outcome.
pub(crate) fn verdict_of(
    job: &MergeJob,
    outcome: Result<swarm_git::MergeReport, MergeError>,
) -> Result<MergeVerdict, String> {
    match outcome {
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

/// Clears `recorded`'s stale lock, then repairs the ref if a power loss
/// undid its last moves; false once nobody listens.
fn restore_ref(integrator: &Integrator, recorded: &RecordedRef, reports: &ReportSink) -> bool {
    let RecordedRef { owned, head } = recorded;
    let removed = clear_stale_lock(integrator, owned, false).unwrap_or_else(|reason| {
        tracing::warn!(swarm = %owned.swarm, branch = %owned.branch, %reason, "stale lock check");
        None
    });
    if let Some(removed) = removed
        && !reports(IntegratorReport::LockRemoved(removed))
    {
        return false;
    }
    let span =
        tracing::info_span!("integration.repair", swarm = %owned.swarm, branch = %owned.branch, head = %head);
    let _entered = span.enter();
    match integrator.repair_ref(&owned.branch, head) {
        Ok(RefRepair::Intact) => true,
        Ok(RefRepair::Repaired { found }) => reports(IntegratorReport::RefRepaired(RefRepaired {
            swarm: owned.swarm.clone(),
            branch: owned.branch.clone(),
            found,
            head: head.clone(),
        })),
        // The merges on this ref then fail with git's own reason, which names the ref.
        Err(e) => {
            tracing::error!(error = %e, "integration ref could not be checked against (or put back at) the store's head");
            true
        }
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use swarm_tests::TempRepo;

    use super::*;

    const BRANCH: &str = "swarm/s/integration";

    fn job(repo: &TempRepo, base: &str, name: &str, files: &[(&str, &str)], globs: &[&str]) -> MergeJob {
        let commit = repo.commit(Some(base), files, name);
        MergeJob {
            task: TaskKey::parse(&format!("s/{name}")).expect("key"),
            attempt: 1,
            attempt_label: format!("s/{name}#1"),
            integration_branch: BRANCH.into(),
            task_commit: commit,
            base_commit: base.into(),
            strategy: MergeStrategy::Merge,
            ownership: OwnershipPolicy::Enforce,
            owned_globs: globs.iter().map(|g| g.to_string()).collect(),
            title: name.into(),
            summary: String::new(),
            recovering: false,
        }
    }

    /// Runs the integrator thread's loop over `jobs`, all queued before it
    /// starts (so they are one backlog), and returns its reports.
    fn serve_backlog(repo: &TempRepo, jobs: &[MergeJob]) -> Vec<MergeResult> {
        let (tx, rx) = mpsc::channel();
        for j in jobs {
            tx.send(Request::Merge(j.clone())).expect("send");
        }
        drop(tx);
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let integrator = Integrator::open(repo.path()).expect("open");
        serve(
            integrator,
            rx,
            Box::new(move |r| {
                if let IntegratorReport::Merged(m) = r {
                    sink.lock().expect("lock").push(m);
                }
                true
            }),
        );
        out.lock().expect("lock").clone()
    }

    fn reflog_len(repo: &TempRepo) -> usize {
        repo.git2().reflog(&format!("refs/heads/{BRANCH}")).expect("reflog").len()
    }

    #[test]
    fn a_backlog_lands_in_one_ref_update_with_per_job_verdicts_in_order() {
        let repo = TempRepo::with_files(&[("shared.txt", "one\ntwo\nthree\n")]);
        let base = repo.head("main");
        repo.set_branch(BRANCH, &base);
        // The integration branch moved on: it edits shared.txt.
        let head = repo.commit(Some(&base), &[("shared.txt", "one\nTWO\nthree\n")], "integration edit");
        repo.set_branch(BRANCH, &head);
        let mut jobs: Vec<MergeJob> = (0..40)
            .map(|i| {
                let path = format!("d{i}/f.txt");
                job(&repo, &base, &format!("t{i}"), &[(path.as_str(), "x\n")], &[&format!("d{i}/**")])
            })
            .collect();
        jobs.insert(5, job(&repo, &base, "conflicts", &[("shared.txt", "one\n2\nthree\n")], &["shared.txt"]));
        jobs.insert(9, job(&repo, &base, "trespasses", &[("d0/g.txt", "y\n")], &["elsewhere/**"]));
        let before = reflog_len(&repo);

        let results = serve_backlog(&repo, &jobs);
        assert_eq!(results.len(), jobs.len());
        let mut last_head = head.clone();
        for (r, j) in results.iter().zip(&jobs) {
            assert_eq!(r.task, j.task, "results come back in the order the jobs went in");
            match (&r.verdict, j.task.task.as_str()) {
                (MergeVerdict::Conflict { paths, .. }, "conflicts") => assert_eq!(paths, &["shared.txt"]),
                (MergeVerdict::Refused { reason }, "trespasses") => {
                    assert!(reason.contains("d0/g.txt"), "{reason}")
                }
                (MergeVerdict::Merged { head, merge_commit, .. }, _) => {
                    assert_eq!(head, merge_commit);
                    assert!(repo.parents(merge_commit).contains(&last_head), "each lands on the one before");
                    last_head = head.clone();
                }
                (other, task) => panic!("{task}: {other:?}"),
            }
        }
        assert_eq!(repo.head(BRANCH), last_head);
        assert_eq!(reflog_len(&repo), before + 1, "one compare-and-swap for the whole backlog");
        let tree = repo.tree(&last_head);
        assert_eq!(tree.get("shared.txt").map(String::as_str), Some("one\nTWO\nthree\n"));
        assert!((0..40).all(|i| tree.contains_key(&format!("d{i}/f.txt"))));

        // A restarted controller resubmits them all: each landed attempt is
        // found by its trailer and nothing is merged twice.
        let fresh = Integrator::open(repo.path()).expect("open");
        for j in &jobs {
            let found = fresh.find_landed(BRANCH, &j.attempt_label).expect("find");
            let landed = !matches!(j.task.task.as_str(), "conflicts" | "trespasses");
            assert_eq!(found.is_some(), landed, "{}", j.attempt_label);
        }
        drop(fresh);
        let again: Vec<MergeJob> = jobs
            .iter()
            .filter(|j| !matches!(j.task.task.as_str(), "conflicts" | "trespasses"))
            .map(|j| MergeJob { recovering: true, ..j.clone() })
            .collect();
        for r in serve_backlog(&repo, &again) {
            match r.verdict {
                MergeVerdict::Merged { head, report, .. } => {
                    assert_eq!(head, last_head);
                    assert_eq!(report["recovered"], true);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(repo.head(BRANCH), last_head);
    }

    #[test]
    fn a_backlog_for_two_branches_lands_on_each() {
        let repo = TempRepo::with_files(&[]);
        let base = repo.head("main");
        repo.set_branch(BRANCH, &base);
        repo.set_branch("swarm/t/integration", &base);
        let mut jobs = Vec::new();
        for i in 0..6 {
            let mut j = job(&repo, &base, &format!("t{i}"), &[(format!("f{i}").as_str(), "x\n")], &["**"]);
            if i % 2 == 1 {
                j.integration_branch = "swarm/t/integration".into();
            }
            jobs.push(j);
        }
        let results = serve_backlog(&repo, &jobs);
        assert!(results.iter().all(|r| matches!(r.verdict, MergeVerdict::Merged { .. })), "{results:?}");
        assert_eq!(repo.tree(&repo.head(BRANCH)).len(), 4); // README + f0, f2, f4
        assert_eq!(repo.tree(&repo.head("swarm/t/integration")).len(), 4);
    }
}
