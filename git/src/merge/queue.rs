//! A merge queue's git side: merge a batch speculatively (objects written,
//! no ref moved) so a sidecar can verify the merged tree, then land exactly
//! that commit with one compare-and-swap. The queue's decisions (batches,
//! bisection, culprits) are the scheduler's; this only carries out its
//! requests.

use swarm_core::{SwarmId, TaskKey};

use super::{MergeFailure, MergeJob, MergeResult, MergeService, Verdict, verdict_of};
use crate::{MergeError, MergeRequest};

/// What a merge queue asks of the merge service.
#[derive(Debug, Clone)]
pub enum QueueRequest {
    /// Merge `jobs` onto the head of their integration branch (or onto
    /// `onto`, a speculation ahead of this one that contains it), in memory.
    Speculate { swarm: SwarmId, job: u64, branch: String, onto: Option<String>, jobs: Vec<MergeJob> },
    /// Move `branch` from `base` to the verified `head`.
    Advance { swarm: SwarmId, job: u64, branch: String, base: String, head: String, count: usize },
}

/// One task of a speculation that made it into the merged commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chained {
    pub task: TaskKey,
    pub attempt: u32,
    /// Its own commit in the chain (the merge commit that lands it).
    pub merge_commit: String,
    pub files_changed: usize,
}

/// The answer to a [`QueueRequest`].
#[derive(Debug)]
pub enum QueueReport {
    Speculated {
        swarm: SwarmId,
        job: u64,
        /// The head the batch was merged onto, and the merged commit.
        base: String,
        head: String,
        chained: Vec<Chained>,
        /// Tasks decided without verification: conflicts, refusals, and
        /// (after a restart) merges that had landed already.
        decided: Vec<MergeResult>,
        /// The speculation as a whole failed (a missing branch, a failed
        /// write): nothing was decided; the queue tries again.
        error: Option<MergeFailure>,
    },
    Advanced {
        swarm: SwarmId,
        job: u64,
        head: String,
        /// Why the ref did not move.
        error: Option<MergeError>,
    },
}

impl MergeService {
    /// Carries out one queue request.
    pub fn queue(&self, request: QueueRequest) -> QueueReport {
        match request {
            QueueRequest::Speculate { swarm, job, branch, onto, jobs } => {
                self.speculate(swarm, job, &branch, onto.as_deref(), jobs)
            }
            QueueRequest::Advance { swarm, job, branch, base, head, count } => {
                let span = tracing::info_span!("merge_queue.land", swarm = %swarm, job, branch = %branch, tasks = count);
                (self.trace_parent)(&span, swarm.as_str(), swarm.as_str());
                let _entered = span.enter();
                let why = format!("{count} verified merges");
                let error = self.integrator.advance(&branch, &base, &head, &why).err();
                if let Some(e) = &error {
                    tracing::warn!(error = %e, "verified batch did not land");
                }
                QueueReport::Advanced { swarm, job, head, error }
            }
        }
    }

    fn speculate(
        &self,
        swarm: SwarmId,
        job: u64,
        branch: &str,
        onto: Option<&str>,
        jobs: Vec<MergeJob>,
    ) -> QueueReport {
        let span = tracing::info_span!("merge_queue.speculate", swarm = %swarm, job, branch = %branch, tasks = jobs.len());
        (self.trace_parent)(&span, swarm.as_str(), swarm.as_str());
        let _entered = span.enter();
        let mut decided = Vec::new();
        let mut todo = Vec::new();
        for j in jobs {
            let mut ownership_warning = Vec::new();
            let verdict = match self.precheck(&j, &mut ownership_warning) {
                Ok(None) => {
                    todo.push(j);
                    continue;
                }
                Ok(Some(verdict)) => verdict,
                Err(failure) => Verdict::Failed(failure),
            };
            decided.push(MergeResult {
                task: j.task.clone(),
                attempt: j.attempt,
                verdict,
                ownership_warning,
                lock_removed: None,
            });
        }
        let fail = |error: MergeFailure, decided: Vec<MergeResult>| QueueReport::Speculated {
            swarm: swarm.clone(),
            job,
            base: String::new(),
            head: String::new(),
            chained: Vec::new(),
            decided,
            error: Some(error),
        };
        let head = match onto {
            Some(onto) => onto.to_string(),
            None => match self.head_of(branch) {
                Ok(h) => h,
                Err(e) => return fail(e, decided),
            },
        };
        if todo.is_empty() {
            return QueueReport::Speculated {
                swarm,
                job,
                base: head.clone(),
                head,
                chained: Vec::new(),
                decided,
                error: None,
            };
        }
        let requests: Vec<MergeRequest> = todo.iter().map(|j| j.request(branch, &head)).collect();
        let spec = match self.integrator.speculate_onto(branch, onto, &requests) {
            Ok(s) => s,
            Err(e) => return fail(e.into(), decided),
        };
        let mut chained = Vec::new();
        for (j, outcome) in todo.iter().zip(spec.results) {
            match outcome {
                Ok(report) => chained.push(Chained {
                    task: j.task.clone(),
                    attempt: j.attempt,
                    merge_commit: report.result,
                    files_changed: report.files_changed.len(),
                }),
                Err(e) => decided.push(MergeResult {
                    task: j.task.clone(),
                    attempt: j.attempt,
                    verdict: verdict_of(j, Err(e)),
                    ownership_warning: Vec::new(),
                    lock_removed: None,
                }),
            }
        }
        tracing::info!(base = %spec.base, head = %spec.head, chained = chained.len(), decided = decided.len(), "speculated");
        QueueReport::Speculated {
            swarm,
            job,
            base: spec.base,
            head: spec.head,
            chained,
            decided,
            error: None,
        }
    }
}
