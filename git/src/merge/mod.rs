//! The merge service: everything the controller asks of git to land task
//! results, typed from the job in to the [`Verdict`] out.
//!
//! - [`MergeService::merge`]: a backlog of jobs, each checked on its own
//!   first (a landing found after a restart, ownership), the rest landed in
//!   batches per integration branch (one pack, one compare-and-swap), with
//!   one [`MergeResult`] per job, in the order the jobs came;
//! - [`MergeService::queue`]: a merge queue's speculation (merged, written,
//!   no ref moved) and its landing of the verified commit;
//! - [`MergeService::restore_refs`]: stale locks and power-loss repair of
//!   the controller's integration refs at start;
//! - [`MergeService::ensure_branch`], [`MergeService::fast_forward`]: a new
//!   swarm's branch, and Land.
//!
//! It owns an [`Integrator`], so it is `Send` but not `Sync`: one thread
//! owns it and serializes every request, which is also what makes removing
//! a stale lock on an integration ref safe (`refs.rs`). It knows a job's
//! task and attempt only to name them in its spans and results.

use std::path::Path;

use swarm_core::plan::OwnershipPolicy;

use crate::{FastForward, GitError, Integrator, MergeError, MergeReport};

mod job;
mod queue;
mod refs;
mod verdict;

pub use job::{MergeJob, OwnedRef, RecordedRef};
pub use queue::{Chained, QueueReport, QueueRequest};
pub use refs::STALE_LOCK_AGE;
pub use verdict::{
    Conflict, LockRemoved, MergeFailure, MergeResult, MergeStats, RefRepaired, Refusal, Verdict,
};

/// The most merges one `integrate_batch` lands (one pack, one ref update).
const MAX_BATCH: usize = 100;

/// What the merge service tells its owner as it goes.
#[derive(Debug)]
pub enum Report {
    Merged(MergeResult),
    /// Removed while clearing the controller's refs at start.
    LockRemoved(LockRemoved),
    /// An integration ref found behind the store's head at start (or
    /// unreadable), put back there.
    RefRepaired(RefRepaired),
    /// A merge queue's speculation or landing.
    Queue(QueueReport),
}

/// Makes a span a child of `(swarm, parent key)` in the swarm's trace;
/// given by the owner, so that this crate stays free of the exporter.
pub type TraceParent = fn(&tracing::Span, &str, &str);

fn no_trace_parent(_: &tracing::Span, _: &str, _: &str) {}

pub struct MergeService {
    integrator: Integrator,
    trace_parent: TraceParent,
}

impl std::fmt::Debug for MergeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeService").field("integrator", &self.integrator).finish_non_exhaustive()
    }
}

/// One job on its way through [`MergeService::merge`].
struct Pending {
    job: MergeJob,
    span: tracing::Span,
    /// Set once decided: checks refused it, it had landed, or it was merged.
    verdict: Option<Verdict>,
    ownership_warning: Vec<String>,
    lock_removed: Option<LockRemoved>,
}

impl MergeService {
    pub fn open(repo: &Path) -> Result<Self, GitError> {
        Ok(Self::new(Integrator::open(repo)?))
    }

    pub fn new(integrator: Integrator) -> Self {
        MergeService { integrator, trace_parent: no_trace_parent }
    }

    /// Puts each merge's span into its swarm's trace.
    pub fn with_trace_parent(mut self, trace_parent: TraceParent) -> Self {
        self.trace_parent = trace_parent;
        self
    }

    /// Merges `jobs` (in the order given) and reports one result per job,
    /// in that order. Each job's own checks come first (a landed attempt
    /// found after a restart, ownership); the rest land in batches per
    /// integration branch: one `integrate_batch` each (one pack or loose
    /// objects, one compare-and-swap), a lone job through `integrate`.
    /// Within a batch a conflicting or refused job gets its own verdict and
    /// the others still land; if the batch as a whole fails, its jobs are
    /// merged one at a time, so no job fails for another's sake. False once
    /// `report` stops listening.
    pub fn merge(&self, jobs: Vec<MergeJob>, mut report: impl FnMut(Report) -> bool) -> bool {
        let mut pending: Vec<Pending> = jobs
            .into_iter()
            .map(|job| Pending {
                span: self.merge_span(&job),
                job,
                verdict: None,
                ownership_warning: Vec::new(),
                lock_removed: None,
            })
            .collect();
        for p in &mut pending {
            let _entered = p.span.enter();
            p.verdict = match self.precheck(&p.job, &mut p.ownership_warning) {
                Ok(verdict) => verdict,
                Err(failure) => Some(Verdict::Failed(failure)),
            };
        }
        // The jobs still to land, by integration branch (in order of first
        // appearance; each branch's jobs in the order they came).
        let mut branches: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, p) in pending.iter().enumerate().filter(|(_, p)| p.verdict.is_none()) {
            match branches.iter_mut().find(|(b, _)| *b == p.job.integration_branch) {
                Some((_, idx)) => idx.push(i),
                None => branches.push((p.job.integration_branch.clone(), vec![i])),
            }
        }
        let mut reported = 0usize;
        for (_, idx) in branches {
            for chunk in idx.chunks(MAX_BATCH) {
                self.land(&mut pending, chunk);
                // Report every result whose predecessors are all decided.
                while let Some(result) = pending.get_mut(reported).and_then(Pending::decided) {
                    if !report(Report::Merged(result)) {
                        return false;
                    }
                    reported += 1;
                }
            }
        }
        // Every job is decided by now: by its checks or by `land`.
        pending[reported..].iter_mut().filter_map(Pending::decided).all(|r| report(Report::Merged(r)))
    }

    /// At start, makes `refs` movable again: removes the stale lock a
    /// controller killed while moving one left behind
    /// ([`Report::LockRemoved`]), and puts back at the store's head a ref
    /// that a power loss left empty or behind it ([`Report::RefRepaired`]).
    /// False once `report` stops listening.
    pub fn restore_refs(&self, refs: &[RecordedRef], mut report: impl FnMut(Report) -> bool) -> bool {
        refs.iter().all(|r| self.restore_ref(r, &mut report))
    }

    /// Creates `branch` at the head of `from` unless it exists; returns the
    /// branch's head.
    pub fn ensure_branch(&self, branch: &str, from: &str) -> Result<String, MergeFailure> {
        let base = self
            .integrator
            .branch_head(from)?
            .ok_or_else(|| MergeFailure::NoBaseBranch { branch: from.to_string() })?;
        Ok(self.integrator.ensure_branch(branch, &base)?)
    }

    /// Creates `branch` at `commit` unless it exists; returns its head.
    pub fn ensure_branch_at(&self, branch: &str, commit: &str) -> Result<String, MergeFailure> {
        Ok(self.integrator.ensure_branch(branch, commit)?)
    }

    /// Moves `target` (a ref the controller does not own) to `new_head`
    /// only as a fast-forward.
    pub fn fast_forward(&self, target: &str, new_head: &str) -> Result<FastForward, MergeError> {
        self.integrator.fast_forward(target, new_head)
    }

    fn merge_span(&self, job: &MergeJob) -> tracing::Span {
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
        (self.trace_parent)(&span, job.task.swarm.as_str(), &job.task.to_string());
        span
    }

    fn head_of(&self, branch: &str) -> Result<String, MergeFailure> {
        self.integrator
            .branch_head(branch)?
            .ok_or_else(|| MergeFailure::NoIntegrationBranch { branch: branch.to_string() })
    }

    /// A job's own checks before it may land: `Some` decides it (it had
    /// landed before a restart, or ownership refuses it).
    fn precheck(&self, job: &MergeJob, warnings: &mut Vec<String>) -> Result<Option<Verdict>, MergeFailure> {
        if job.recovering {
            // The controller may have died after moving the ref and before
            // recording it: the trailer says whether this attempt landed.
            if let Some(landed) = self.integrator.find_landed(&job.integration_branch, &job.attempt_label)? {
                let head = self.head_of(&job.integration_branch)?;
                tracing::info!(merge_commit = %landed, "merge had landed before the restart");
                return Ok(Some(Verdict::Merged {
                    head,
                    merge_commit: landed,
                    stats: MergeStats::Recovered { strategy: job.strategy },
                }));
            }
        }
        let changed = self.integrator.changed_paths(&job.base_commit, &job.task_commit)?;
        let outside = crate::paths_outside(&job.owned_globs, &changed)?;
        if !outside.is_empty() {
            match job.ownership {
                OwnershipPolicy::Enforce => {
                    return Ok(Some(Verdict::Refused(Refusal::OutsideOwnedGlobs { paths: outside })));
                }
                OwnershipPolicy::Warn => *warnings = outside,
            }
        }
        Ok(None)
    }

    /// One job that passed its checks, landed alone on the current head.
    fn merge_one(&self, job: &MergeJob, lock_removed: &mut Option<LockRemoved>) -> Verdict {
        let head = match self.head_of(&job.integration_branch) {
            Ok(head) => head,
            Err(failure) => return Verdict::Failed(failure),
        };
        let request = job.request(&job.integration_branch, &head);
        let outcome =
            self.unlocking(job.task.swarm.as_str(), lock_removed, || self.integrator.integrate(&request));
        verdict_of(job, outcome)
    }

    /// Lands the jobs `chunk` names (all for one integration branch) and
    /// decides each.
    fn land(&self, pending: &mut [Pending], chunk: &[usize]) {
        let [first, ..] = chunk else { return };
        if let [i] = chunk {
            let p = &mut pending[*i];
            let _entered = p.span.enter();
            p.verdict = Some(self.merge_one(&p.job, &mut p.lock_removed));
            return;
        }
        let branch = pending[*first].job.integration_branch.clone();
        let swarm = pending[*first].job.task.swarm.to_string();
        let span = tracing::info_span!("merge.batch", branch = %branch, jobs = chunk.len());
        let entered = span.enter();
        let head = match self.head_of(&branch) {
            Ok(head) => head,
            Err(e) => {
                // As when the batch fails: each job on its own, which reads
                // the head again and fails (or not) with its own error.
                drop(entered);
                tracing::warn!(parent: &span, error = %e, "integration head unreadable; merging the batch's jobs one at a time");
                return self.land_each(pending, chunk, None);
            }
        };
        let requests: Vec<_> = chunk.iter().map(|&i| pending[i].job.request(&branch, &head)).collect();
        let mut lock_removed = None;
        let batch = self.unlocking(&swarm, &mut lock_removed, || self.integrator.integrate_batch(&requests));
        drop(entered);
        match batch {
            Ok(batch) => {
                tracing::debug!(parent: &span, landed = batch.results.iter().filter(|r| r.is_ok()).count(),
                    head = %batch.head, retries = batch.cas_retries, "batch landed");
                for (&i, outcome) in chunk.iter().zip(batch.results) {
                    let p = &mut pending[i];
                    let _entered = p.span.enter();
                    p.verdict = Some(verdict_of(&p.job, outcome));
                }
                pending[*first].lock_removed = lock_removed;
            }
            Err(e) => {
                // Nothing landed: each job on its own, so the batch's failure
                // (a locked ref, a failed write, a gix error on one job) is
                // only the jobs' own where it is theirs.
                tracing::warn!(parent: &span, error = %e, "batch failed; merging its jobs one at a time");
                self.land_each(pending, chunk, lock_removed);
            }
        }
    }

    /// Lands `chunk`'s jobs one at a time; the first carries the lock
    /// removal of the batch that failed before them, if it had none itself.
    fn land_each(&self, pending: &mut [Pending], chunk: &[usize], mut lock_removed: Option<LockRemoved>) {
        for (n, &i) in chunk.iter().enumerate() {
            let p = &mut pending[i];
            let _entered = p.span.enter();
            p.verdict = Some(self.merge_one(&p.job, &mut p.lock_removed));
            if n == 0 && p.lock_removed.is_none() {
                p.lock_removed = lock_removed.take();
            }
        }
    }
}

impl Pending {
    /// The job's result, once decided (taken: reported once).
    fn decided(&mut self) -> Option<MergeResult> {
        let verdict = self.verdict.take()?;
        Some(MergeResult {
            task: self.job.task.clone(),
            attempt: self.job.attempt,
            verdict,
            ownership_warning: std::mem::take(&mut self.ownership_warning),
            lock_removed: self.lock_removed.take(),
        })
    }
}

/// The verdict on one merge's outcome.
fn verdict_of(job: &MergeJob, outcome: Result<MergeReport, MergeError>) -> Verdict {
    match outcome {
        Ok(report) => Verdict::Merged {
            head: report.result.clone(),
            merge_commit: report.result.clone(),
            stats: report.into(),
        },
        Err(MergeError::AlreadyContained { head, .. }) => Verdict::Merged {
            head: head.clone(),
            merge_commit: head,
            stats: MergeStats::AlreadyContained { strategy: job.strategy },
        },
        Err(MergeError::AlreadyLanded { head, merge_commit, .. }) => {
            Verdict::Merged { head, merge_commit, stats: MergeStats::Recovered { strategy: job.strategy } }
        }
        Err(MergeError::Conflict { head, paths, .. }) => Verdict::Conflict(Conflict {
            branch: job.integration_branch.clone(),
            head,
            task_commit: job.task_commit.clone(),
            paths,
        }),
        Err(MergeError::ForbiddenPath { task_commit, paths }) => {
            Verdict::Refused(Refusal::ForbiddenPath { task_commit, paths })
        }
        Err(e) => Verdict::Failed(MergeFailure::Merge(e)),
    }
}

#[cfg(test)]
mod tests;
