//! Renders `.swarm/task.md`: everything a worker needs to know about its
//! attempt, including what went wrong before.

use std::fmt::Write;

use super::model::Task;

pub fn render(task: &Task, attempt: u32, deps: &[(String, String)]) -> String {
    let spec = &task.spec;
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", spec.title);
    let _ = writeln!(md, "Task `{}`, attempt {attempt}.\n", task.key);
    if !spec.prompt.is_empty() {
        let _ = writeln!(md, "## Task\n\n{}\n", spec.prompt.trim_end());
    }
    if !spec.context.is_empty() {
        let _ = writeln!(md, "## Context\n\n{}\n", spec.context.trim_end());
    }
    let _ = writeln!(md, "## Owned files\n");
    for g in &spec.files {
        let _ = writeln!(md, "- `{g}`");
    }
    md.push('\n');
    if !spec.acceptance.is_empty() {
        let _ = writeln!(md, "## Acceptance criteria\n");
        for a in &spec.acceptance {
            let _ = writeln!(md, "- {a}");
        }
        md.push('\n');
    }
    if !spec.verify.is_empty() {
        let _ = writeln!(md, "## Verification\n");
        for t in &spec.verify {
            let blocking = if t.blocking { "blocking" } else { "non-blocking" };
            let _ = writeln!(md, "- {} ({blocking}): `{}`", t.name, t.command);
        }
        md.push('\n');
    }
    if !deps.is_empty() {
        let _ = writeln!(md, "## Finished dependencies\n");
        for (id, summary) in deps {
            let summary = if summary.is_empty() { "(no summary)" } else { summary.as_str() };
            let _ = writeln!(md, "- `{id}`: {summary}");
        }
        md.push('\n');
    }
    if let Some(conflict) = &task.notes.conflict {
        let _ = writeln!(md, "## Merge conflict to resolve\n\n{}\n", conflict.trim_end());
    }
    super::review::render_requested(task, &mut md);
    if !task.resume_commit.is_empty() {
        let _ = writeln!(
            md,
            "## Resuming\n\nThis attempt starts from the checkpoint commit `{}` of an earlier attempt.\n",
            task.resume_commit
        );
    }
    if !task.notes.failures.is_empty() {
        let _ = writeln!(md, "## Earlier attempts\n");
        for f in &task.notes.failures {
            let _ = writeln!(md, "- {f}");
        }
        md.push('\n');
    }
    if !task.notes.feedback.is_empty() {
        let _ = writeln!(
            md,
            "## Feedback on the pull request\n\nYour merged work is under review in a pull request; \
             fix what this says (the latest is last):\n"
        );
        for (i, f) in task.notes.feedback.iter().enumerate() {
            let _ = writeln!(md, "### f{}\n\n{}\n", i + 1, f.trim_end());
        }
    }
    if !task.notes.answers.is_empty() {
        let _ = writeln!(md, "## Answers\n");
        for qa in &task.notes.answers {
            let _ = writeln!(md, "- Q ({}): {}\n  A: {}", qa.question_id, qa.question, qa.answer);
        }
        md.push('\n');
    }
    if !task.notes.messages.is_empty() {
        let _ = writeln!(md, "## Messages from the operator\n");
        for (i, m) in task.notes.messages.iter().enumerate() {
            let _ = writeln!(md, "### m{}\n\n{}\n", i + 1, m.trim_end());
        }
    }
    md
}
