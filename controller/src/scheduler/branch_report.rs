//! Branch reports (a task's branch, its review history and a merge
//! recommendation) and the review sections of task texts.

use std::fmt::Write;

use swarm_core::TaskState;
use swarm_core::plan::{ReviewSpec, task_branch};
use swarm_view::{BranchReportView, ReviewView};

use super::model::{Attempts, Decision, ReviewNotes, ReviewRecord, Task};

/// The merge recommendation of a task whose work is done: `ready` (its
/// result passed every gate), `needs_review` or `blocked`; empty while it
/// still works.
pub fn recommendation(task: &Task) -> &'static str {
    match task.state() {
        TaskState::Succeeded | TaskState::Merging | TaskState::Merged => "ready",
        TaskState::Review => "needs_review",
        TaskState::Rejected
        | TaskState::Failed
        | TaskState::Conflict
        | TaskState::Cancelled
        | TaskState::Blocked
        | TaskState::Escalated => "blocked",
        TaskState::Pending | TaskState::Ready | TaskState::Running => "",
    }
}

/// A task's branch report: what its branch holds and whether to merge it,
/// in the one shape every client reads.
pub fn branch_report(task: &Task, attempts: &Attempts) -> BranchReportView {
    let review = task.notes.review.as_deref();
    let number = review.map(|r| r.attempt).filter(|n| *n > 0).unwrap_or(task.attempts);
    let made_by = attempts.get(&(task.key.clone(), number));
    let reviewer = task.spec.review.as_deref().map(|r| r.kind().to_string()).unwrap_or_default();
    let recommendation = recommendation(task);
    let last = review.and_then(|r| r.history.last());
    let reason = match (task.state(), last) {
        (TaskState::Review, _) => {
            format!("waiting for review by {}", if reviewer.is_empty() { "the operator" } else { &reviewer })
        }
        (TaskState::Rejected, Some(r)) => format!("rejected by {}: {}", r.by, first_line(&r.message)),
        (TaskState::Succeeded | TaskState::Merging | TaskState::Merged, Some(r))
            if r.decision == Decision::Approve =>
        {
            format!("approved by {}", r.by)
        }
        // A result that changed no file is said so: nothing to review
        // (a child swarm's task reports no files of its own).
        (TaskState::Succeeded | TaskState::Merging | TaskState::Merged, _)
            if task.notes.files_changed.is_empty() && task.spec.subplan.is_none() =>
        {
            "no change: its result changes no file".into()
        }
        (TaskState::Succeeded | TaskState::Merging | TaskState::Merged, _) => {
            "its own verification passed".into()
        }
        _ => task.reason.clone(),
    };
    BranchReportView {
        branch: task_branch(&task.key.swarm, task.key.task.as_str()),
        recommendation: recommendation.to_string(),
        reason,
        commit: review
            .map(|r| r.commit.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| task.result_commit.clone()),
        base_commit: made_by.map(|a| a.base_commit.clone()).unwrap_or_default(),
        files_changed: task.notes.files_changed.clone(),
        reviewer,
        reviews: review.map(|r| r.history.iter().map(review_view).collect()).unwrap_or_default(),
    }
}

fn review_view(r: &ReviewRecord) -> ReviewView {
    ReviewView {
        decision: r.decision.as_str().to_string(),
        message: r.message.clone(),
        by: r.by.clone(),
        commit: r.commit.clone(),
        at_unix_ms: r.at,
    }
}

/// The section of a task's own text that carries requested changes.
pub fn render_requested(task: &Task, md: &mut String) {
    let Some(review) = task.notes.review.as_deref() else { return };
    if review.requested.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Review: changes requested\n");
    let _ = writeln!(
        md,
        "A reviewer asked for changes to the result `{}` of an earlier attempt (still in the repository: `git show` it); this attempt starts from the integration head.\n",
        review.commit
    );
    for (i, m) in review.requested.iter().enumerate() {
        let _ = writeln!(md, "### r{}\n\n{}\n", i + 1, m.trim_end());
    }
}

/// The reviewer's `.swarm/task.md`: its instructions, the task, and how to
/// decide. The sidecar appends the diff against the task's base.
pub(super) fn render_review(task: &Task, review: &ReviewNotes, spec: &ReviewSpec, number: u32) -> String {
    let t = &task.spec;
    let mut md = String::new();
    let _ = writeln!(md, "# Review: {}\n", t.title);
    let _ = writeln!(
        md,
        "Reviewer attempt {number} of task `{}`: review the result `{}` of attempt {}.\n",
        task.key, review.commit, review.attempt
    );
    if let ReviewSpec::Agent { prompt, .. } = spec {
        let _ = writeln!(md, "## What to check\n\n{}\n", prompt.trim_end());
    }
    let _ = writeln!(md, "## The task\n");
    if !t.prompt.is_empty() {
        let _ = writeln!(md, "{}\n", t.prompt.trim_end());
    }
    if !t.acceptance.is_empty() {
        let _ = writeln!(md, "Acceptance criteria:\n");
        for a in &t.acceptance {
            let _ = writeln!(md, "- {a}");
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "Owned files: {}\n",
        t.files.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ")
    );
    if !review.history.is_empty() {
        let _ = writeln!(md, "## Earlier reviews\n");
        for r in &review.history {
            let _ = writeln!(
                md,
                "- {} by {} of `{}`: {}",
                r.decision.as_str(),
                r.by,
                short(&r.commit),
                first_line(&r.message)
            );
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "## Your decision\n\nWrite `.swarm/review.json`: `{{\"decision\": \"approve\" | \"request_changes\" | \"reject\", \"message\": \"...\"}}` and exit 0. Changes you make to the worktree are discarded.\n"
    );
    md
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

pub(super) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
