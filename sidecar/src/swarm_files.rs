//! The attempt's files inside the worktree's `.swarm/`: the task text, the
//! worker's status, the operator's answers and messages, the logs and the
//! worker's exit. The sidecar touches them only through
//! [`crate::worker_files`], since the worker can plant links there.

use std::path::{Path, PathBuf};

use swarm_core::names::check_id;
use swarm_proto::convert::AttemptRef;

use crate::{worker_files, worktree};

/// Paths inside the worktree.
#[derive(Debug, Clone)]
pub struct SwarmFiles {
    pub dir: PathBuf,
    pub task: PathBuf,
    pub status: PathBuf,
    pub answers: PathBuf,
    /// The operator's messages, one file each.
    pub messages: PathBuf,
    pub logs: PathBuf,
    /// Where the supervisor records the worker's exit.
    pub exit: PathBuf,
}

impl SwarmFiles {
    pub fn new(worktree: &Path) -> Self {
        let dir = worktree.join(worktree::SWARM_DIR);
        SwarmFiles {
            task: dir.join("task.md"),
            status: dir.join("status.json"),
            answers: dir.join("answers"),
            messages: dir.join("messages"),
            logs: dir.join("logs"),
            exit: dir.join("worker-exit.json"),
            dir,
        }
    }

    /// The attempt's worker log: `<swarm>.<task>-<n>.log`, with the `/` of a
    /// nested swarm id written as `.` (no id component has one), so swarms
    /// sharing a task id in one worktree keep their logs apart.
    pub fn log_of(&self, attempt: &AttemptRef) -> PathBuf {
        let swarm = attempt.task.swarm.as_str().replace('/', ".");
        self.logs.join(format!("{swarm}.{}-{}.log", attempt.task.task, attempt.number))
    }

    /// Where a sidecar before the swarm id was in the name wrote the log.
    pub fn unqualified_log_of(&self, attempt: &AttemptRef) -> PathBuf {
        self.logs.join(format!("{}-{}.log", attempt.task.task, attempt.number))
    }

    /// A fresh `.swarm/` for a new attempt: its task text, no stale status
    /// or answers.
    pub fn start_attempt(&self, task_text: &str) -> std::io::Result<()> {
        // No worker runs now: whatever the last one left here is made plain.
        worker_files::ensure_dir(&self.dir)?;
        worker_files::ensure_dir(&self.logs)?;
        // The exit file too: a previous attempt's must never pass for this one's.
        for f in [&self.status, &self.exit] {
            match std::fs::remove_file(f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        // Earlier answers and messages are in the new task text already.
        for dir in [&self.answers, &self.messages] {
            match std::fs::symlink_metadata(dir) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(dir)?,
                Ok(_) => std::fs::remove_file(dir)?,
                Err(_) => {}
            }
        }
        worker_files::write(&self.task, task_text.as_bytes())
    }
}

/// Appends an answer to `task.md` under "Answers" and writes `answers/<id>.md`.
pub fn record_answer(worktree: &Path, question_id: &str, text: &str) -> std::io::Result<()> {
    let files = SwarmFiles::new(worktree);
    record_note(&files, &files.answers, "## Answers", question_id, text)
}

/// Appends an operator's message to `task.md` under "Messages from the
/// operator" (as the controller renders earlier ones) and writes
/// `messages/<id>.md`, where a worker that watches its files finds it.
pub fn record_message(worktree: &Path, message_id: &str, text: &str) -> std::io::Result<()> {
    let files = SwarmFiles::new(worktree);
    record_note(&files, &files.messages, "## Messages from the operator", message_id, text)
}

fn record_note(files: &SwarmFiles, dir: &Path, heading: &str, id: &str, text: &str) -> std::io::Result<()> {
    check_id(id).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    worker_files::ensure_dir(&files.dir)?;
    worker_files::ensure_dir(dir)?;
    worker_files::write(&dir.join(format!("{id}.md")), text.as_bytes())?;
    let task = worker_files::read(&files.task, MAX_TASK_FILE).unwrap_or_default();
    let mut task = String::from_utf8_lossy(&task).into_owned();
    if !task.lines().any(|l| l.trim() == heading) {
        if !task.is_empty() && !task.ends_with('\n') {
            task.push('\n');
        }
        task.push_str(&format!("\n{heading}\n"));
    }
    task.push_str(&format!("\n### {id}\n\n{}\n", text.trim_end()));
    worker_files::write(&files.task, task.as_bytes())
}

/// The most of `task.md` read back to append a note to it.
const MAX_TASK_FILE: u64 = 16 << 20;
