//! What the merge service answers: a task ready to merge goes to the
//! merger (or its swarm's merge queue), and its `Verdict` moves the task:
//! MERGED with its dependents READY, CONFLICT by the plan's policy, or the
//! result refused.

use swarm_core::plan::ConflictPolicy;
use swarm_core::{AttemptState, TaskKey, TaskState};
use swarm_git::merge::{Conflict, LockRemoved, MergeResult, MergeStats, QueueReport, RefRepaired, Verdict};

use super::core::{Core, Effects};
use super::merge_queue::{self, Queues};
use super::review::ReviewQueue;

/// A task's attempt succeeded: the one way in for a succeeded result,
/// to REVIEW when its plan asks for one, else the merge path.
pub(super) fn after_success(
    core: &mut Core,
    reviews: &mut ReviewQueue,
    queues: &mut Queues,
    key: &TaskKey,
    number: u32,
) {
    if reviews.after_success(core, key, number) {
        start_merge(core, queues, key, number, false);
    }
}

/// SUCCEEDED → MERGING, and the job goes to the merger after commit.
/// The one way in for a task ready to merge: a swarm with
/// `integration_verify` queues it for a verified batch instead.
pub(super) fn start_merge(
    core: &mut Core,
    queues: &mut Queues,
    key: &TaskKey,
    number: u32,
    recovering: bool,
) {
    if merge_queue::queues_merges(core.model, &key.swarm) {
        return queues.enqueue(core, key, number);
    }
    let Some(job) = merge_queue::merge_job(core.model, key, number, recovering) else { return };
    core.to_merging(key, &format!("merging attempt {number}"));
    core.fx.merges.push(job);
}

/// A merge queue's report: the results it decided move their tasks as
/// the merger's own do, and a culprit found with a landing goes back
/// after them.
pub(super) fn on_queue_report(core: &mut Core, queues: &mut Queues, report: QueueReport) {
    let decided = queues.on_report(core, report);
    for r in decided.merged {
        on_merged(core, r);
    }
    for key in decided.culprits {
        queues.return_culprit(core, &key);
    }
}

/// A merge's verdict moves its task. Long: one arm per verdict, so a
/// merge's consequences read in one place.
pub(super) fn on_merged(core: &mut Core, result: MergeResult) {
    let key = result.task.clone();
    let number = result.attempt;
    let Some(t) = core.model.tasks().get(&key) else { return };
    if !matches!(t.state(), TaskState::Merging | TaskState::Succeeded) {
        return;
    }
    let span =
        tracing::info_span!("merge.result", swarm = %key.swarm, task = %key, attempt = %key.attempt(number));
    if !span.is_disabled() {
        swarm_telemetry::join_swarm_trace(&span, key.swarm.as_str(), &key.to_string());
    }
    let _span = span.entered();
    if !result.ownership_warning.is_empty() {
        core.fx.task_event(
            &key,
            number,
            "",
            "task.ownership_warning",
            format!("touched files outside its globs: {}", result.ownership_warning.join(", ")),
            serde_json::json!({ "paths": result.ownership_warning }),
        );
    }
    match result.verdict {
        Verdict::Merged { head, merge_commit, stats } => {
            if let MergeStats::Integrated { duration, .. } = &stats {
                crate::metrics::Metrics::observe(&core.metrics.merge_duration, *duration);
            }
            core.edit_swarm(&key.swarm, |s| s.integration_head = head.clone());
            core.edit_task(&key, |t| {
                t.merge_commit = merge_commit.clone();
                t.resume_commit.clear();
            });
            // Said where the operator looks (the event, describe, the
            // run's report): a merge that brought nothing is no success
            // to take on trust.
            let reported_none =
                core.model.tasks().get(&key).is_some_and(|t| t.notes.files_changed.is_empty());
            let note = if brought_nothing(&stats, reported_none) { " with no change" } else { "" };
            core.fx.task_event(
                &key,
                number,
                "",
                "task.merged",
                format!("merged as {merge_commit}{note}"),
                merged_detail(&stats),
            );
            core.to_merged(&key, &format!("merged as {}{note}", short(&merge_commit)));
            let dependents = core.model.dependents(&key).to_vec();
            for d in dependents {
                if core.model.tasks().get(&d).is_some_and(|t| t.state() == TaskState::Pending) {
                    core.make_ready(&d, &format!("dependency {} merged", key.task));
                }
            }
        }
        Verdict::Conflict(conflict) => {
            let (paths, description) = (conflict.path_names(), conflict_description(&conflict));
            core.fx.task_event(
                &key,
                number,
                "",
                "task.conflict",
                format!("conflict in {}", paths.join(", ")),
                serde_json::json!({ "paths": paths, "description": description }),
            );
            let policy = core.model.tasks().get(&key).map(|t| t.spec.on_conflict).unwrap_or_default();
            core.edit_task(&key, |t| {
                t.notes.conflict = Some(description);
                t.resume_commit.clear();
            });
            core.to_conflict(&key, &format!("conflict in {}", paths.join(", ")));
            if policy == ConflictPolicy::Return {
                core.make_ready(
                    &key,
                    "conflict returned to its owner: new attempt from the integration head",
                );
            }
        }
        Verdict::Refused(refusal) => refuse_result(core, &key, number, &refusal.to_string()),
        Verdict::Failed(failure) => refuse_result(core, &key, number, &format!("merge failed: {failure}")),
    }
}

/// The merge service would not merge what the attempt reported (a commit
/// it lacks, an unrelated history, paths outside the owned globs,
/// changes under `.swarm/`): the attempt did not succeed after all. It
/// ends FAILED with the reason, the task forgets the commit, and the
/// task's retry policy decides what comes next.
fn refuse_result(core: &mut Core, key: &TaskKey, number: u32, reason: &str) {
    core.edit_attempt(key, number, |a| a.error = reason.to_string());
    core.set_attempt_state(key, number, AttemptState::Failed);
    core.edit_task(key, |t| t.result_commit.clear());
    core.fx.task_event(
        key,
        number,
        "",
        "task.result_refused",
        format!("{} refused: {reason}", key.attempt(number)),
        serde_json::json!({ "reason": reason }),
    );
    core.fail_or_retry(key, number, reason);
}

/// Whether a landed merge changed no file on the integration branch. A
/// result already contained in it (an attempt that committed nothing over
/// its base) counts when the attempt reported no file either; one found
/// after a restart is not claimed.
fn brought_nothing(stats: &MergeStats, reported_none: bool) -> bool {
    match stats {
        MergeStats::Integrated { files_changed, .. } => files_changed.is_empty(),
        MergeStats::Verified { files_changed, .. } => *files_changed == 0,
        MergeStats::AlreadyContained { .. } => reported_none,
        MergeStats::Recovered { .. } => false,
    }
}

/// The `task.merged` event's detail: its field names are what operators'
/// tools and the tests read, one shape per way a merge lands.
fn merged_detail(stats: &MergeStats) -> serde_json::Value {
    match stats {
        MergeStats::Integrated { strategy, base, result, files_changed, duration, cas_retries } => {
            serde_json::json!({
                "strategy": strategy.as_str(),
                "base": base,
                "result": result,
                "files_changed": files_changed,
                "duration_us": duration.as_micros() as u64,
                "cas_retries": cas_retries,
            })
        }
        MergeStats::Recovered { strategy } => {
            serde_json::json!({ "strategy": strategy.as_str(), "recovered": true })
        }
        MergeStats::AlreadyContained { strategy } => {
            serde_json::json!({ "strategy": strategy.as_str(), "already_contained": true })
        }
        MergeStats::Verified { result, files_changed, job } => {
            serde_json::json!({ "verified": true, "result": result, "files_changed": files_changed, "job": job })
        }
    }
}

/// What the task's next attempt is told of its conflict (its task text).
fn conflict_description(c: &Conflict) -> String {
    let mut description = format!(
        "Your previous result (commit {}) conflicted with the integration branch {} at {}.\n\
         This attempt starts from that head; redo the change on top of it.\n\nConflicting paths:\n",
        c.task_commit, c.branch, c.head
    );
    for p in &c.paths {
        description.push_str(&format!("- `{}` (the integration branch {} it)\n", p.path, p.ours));
    }
    description
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Records, in the swarm's audit log, that a stale lock on its
/// integration ref was removed.
pub(super) fn on_lock_removed(fx: &mut Effects, removed: LockRemoved) {
    fx.event(
        &removed.swarm,
        "",
        0,
        "",
        "integration.lock_removed",
        format!("removed stale lock {} on {} ({} ms old)", removed.path, removed.branch, removed.age_ms),
        serde_json::json!({ "branch": removed.branch, "path": removed.path, "age_ms": removed.age_ms }),
    );
}

/// Records, in the swarm's audit log, that its integration ref was
/// behind the recorded head at start, or unreadable, and was put back.
pub(super) fn on_ref_repaired(fx: &mut Effects, repaired: RefRepaired) {
    fx.event(
        &repaired.swarm,
        "",
        0,
        "",
        "integration.ref_repaired",
        format!(
            "integration ref {} held {:?}, behind the recorded head or no commit id (a power loss?); put back at the recorded head {}",
            repaired.branch, repaired.found, repaired.head
        ),
        serde_json::json!({ "branch": repaired.branch, "found": repaired.found, "head": repaired.head }),
    );
}
