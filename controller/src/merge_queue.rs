//! The merge queue's git side, run on the integrator thread: merge a batch
//! speculatively (objects written, no ref moved) so a sidecar can verify the
//! merged tree, then land exactly that commit with one compare-and-swap.
//! The queue's decisions live in the scheduler (`scheduler/merge_queue.rs`);
//! this module only carries out its requests and reports back.

use swarm_core::{SwarmId, TaskKey};
use swarm_git::{Integrator, MergeRequest};

use crate::integrator::{MergeJob, MergeResult, MergeVerdict, precheck, verdict_of};

/// What the scheduler asks of the integrator for its merge queues.
#[derive(Debug, Clone)]
pub enum QueueRequest {
    /// Merge `jobs` onto the head of their integration branch, in memory.
    Speculate { swarm: SwarmId, job: u64, branch: String, jobs: Vec<MergeJob> },
    /// Move `branch` from `base` to the verified `head`.
    Advance { swarm: SwarmId, job: u64, branch: String, base: String, head: String, count: usize },
}

/// One task of a speculation that made it into the merged commit.
#[derive(Debug, Clone)]
pub struct Chained {
    pub task: TaskKey,
    pub attempt: u32,
    /// Its own commit in the chain (the merge commit that lands it).
    pub merge_commit: String,
    pub files_changed: usize,
}

/// What the integrator tells the scheduler about a queue request.
#[derive(Debug, Clone)]
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
        /// write): nothing was decided; the scheduler tries again.
        error: Option<String>,
    },
    Advanced {
        swarm: SwarmId,
        job: u64,
        head: String,
        /// Why the ref did not move.
        error: Option<String>,
    },
}

/// Carries out one queue request.
pub fn handle(integrator: &Integrator, request: QueueRequest) -> QueueReport {
    match request {
        QueueRequest::Speculate { swarm, job, branch, jobs } => {
            speculate(integrator, swarm, job, &branch, jobs)
        }
        QueueRequest::Advance { swarm, job, branch, base, head, count } => {
            let span =
                tracing::info_span!("merge_queue.land", swarm = %swarm, job, branch = %branch, tasks = count);
            swarm_telemetry::join_swarm_trace(&span, swarm.as_str(), swarm.as_str());
            let _entered = span.enter();
            let why = format!("{count} verified merges");
            let error = integrator.advance(&branch, &base, &head, &why).err().map(|e| e.to_string());
            if let Some(e) = &error {
                tracing::warn!(error = %e, "verified batch did not land");
            }
            QueueReport::Advanced { swarm, job, head, error }
        }
    }
}

fn speculate(
    integrator: &Integrator,
    swarm: SwarmId,
    job: u64,
    branch: &str,
    jobs: Vec<MergeJob>,
) -> QueueReport {
    let span = tracing::info_span!("merge_queue.speculate", swarm = %swarm, job, branch = %branch, tasks = jobs.len());
    swarm_telemetry::join_swarm_trace(&span, swarm.as_str(), swarm.as_str());
    let _entered = span.enter();
    let mut decided = Vec::new();
    let mut todo = Vec::new();
    for j in jobs {
        let mut result = MergeResult {
            task: j.task.clone(),
            attempt: j.attempt,
            verdict: MergeVerdict::Failed { reason: String::new() },
            ownership_warning: Vec::new(),
            lock_removed: None,
        };
        match precheck(integrator, &j, &mut result.ownership_warning) {
            Ok(None) => todo.push(j),
            Ok(Some(verdict)) => {
                result.verdict = verdict;
                decided.push(result);
            }
            Err(reason) => {
                result.verdict = MergeVerdict::Failed { reason };
                decided.push(result);
            }
        }
    }
    let fail = |error: String, decided: Vec<MergeResult>| QueueReport::Speculated {
        swarm: swarm.clone(),
        job,
        base: String::new(),
        head: String::new(),
        chained: Vec::new(),
        decided,
        error: Some(error),
    };
    let head = match integrator.branch_head(branch) {
        Ok(Some(h)) => h,
        Ok(None) => return fail(format!("integration branch {branch} does not exist"), decided),
        Err(e) => return fail(e.to_string(), decided),
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
    let requests: Vec<MergeRequest> = todo
        .iter()
        .map(|j| MergeRequest {
            integration_branch: branch.to_string(),
            expected_head: head.clone(),
            task_commit: j.task_commit.clone(),
            strategy: j.strategy,
            attempt_label: j.attempt_label.clone(),
            title: j.title.clone(),
            summary: j.summary.clone(),
        })
        .collect();
    let spec = match integrator.speculate(branch, &requests) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string(), decided),
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
            Err(e) => {
                let verdict = verdict_of(j, Err(e)).unwrap_or_else(|reason| MergeVerdict::Failed { reason });
                decided.push(MergeResult {
                    task: j.task.clone(),
                    attempt: j.attempt,
                    verdict,
                    ownership_warning: Vec::new(),
                    lock_removed: None,
                });
            }
        }
    }
    tracing::info!(base = %spec.base, head = %spec.head, chained = chained.len(), decided = decided.len(), "speculated");
    QueueReport::Speculated { swarm, job, base: spec.base, head: spec.head, chained, decided, error: None }
}
