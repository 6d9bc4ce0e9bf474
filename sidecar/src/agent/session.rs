//! `.swarm/agent-session.json`: which agent session did the work in this
//! worktree, and at which commit that work ended. A later attempt resumes
//! the session only when the worktree still holds that work (its base is
//! that commit); `.swarm/` is never committed, so the file stays local.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::worktree::SWARM_DIR;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub kind: String,
    pub session_id: String,
    /// The commit the session's work ended at (the attempt's base until a
    /// WIP or result commit is made).
    pub commit: String,
}

pub fn path(worktree: &Path) -> PathBuf {
    worktree.join(SWARM_DIR).join("agent-session.json")
}

pub fn read(worktree: &Path) -> Option<SessionRecord> {
    let bytes = crate::worker_files::read(&path(worktree), 64 * 1024).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Written atomically: a crash mid-write must not leave a record that names
/// the wrong commit.
pub fn write(worktree: &Path, r: &SessionRecord) -> std::io::Result<()> {
    let p = path(worktree);
    let tmp = p.with_extension("json.tmp");
    crate::worker_files::write(&tmp, &serde_json::to_vec(r).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &p)
}

/// How the worktree holds a session's work, when it may be resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The attempt starts where the session stopped.
    Same,
    /// The attempt starts from a commit that holds the session's work
    /// merged with others' (a merged task reopened by its pull request's
    /// CI or reviewers).
    Merged,
}

/// How the wanted session can be resumed here, or why it cannot.
/// `descends(base, commit)` says whether `base` has `commit` in its history.
pub fn can_resume(
    worktree: &Path,
    kind: &str,
    wanted: &str,
    base: &str,
    descends: impl FnOnce(&str, &str) -> bool,
) -> Result<Resume, String> {
    let Some(r) = read(worktree) else {
        return Err("this worktree has no agent-session.json (another worktree did the work)".into());
    };
    if r.kind != kind || r.session_id != wanted {
        return Err(format!("this worktree's last session is {} {}, not {wanted}", r.kind, r.session_id));
    }
    if r.commit == base {
        return Ok(Resume::Same);
    }
    if !r.commit.is_empty() && descends(base, &r.commit) {
        return Ok(Resume::Merged);
    }
    Err(format!("the session's work ended at {}, which the attempt's base {base} does not hold", r.commit))
}

/// Records that the session's work now ends at `commit` (after a WIP or
/// result commit), when the file names a session.
pub fn set_commit(worktree: &Path, commit: &str) -> std::io::Result<()> {
    match read(worktree) {
        Some(mut r) => {
            r.commit = commit.to_string();
            write(worktree, &r)
        }
        None => Ok(()),
    }
}

/// [`set_commit`] for the attempt's own commit: a failure only costs a
/// later attempt its resume, so it is logged, not raised.
pub fn note_commit(worktree: &Path, commit: &str) {
    if let Err(e) = set_commit(worktree, commit) {
        tracing::warn!(error = %e, "cannot update agent-session.json");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_only_the_same_session_at_the_same_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wt = dir.path();
        std::fs::create_dir_all(wt.join(SWARM_DIR)).expect("mkdir");
        let unrelated = |_: &str, _: &str| false;
        assert!(can_resume(wt, "claude", "s1", "c1", unrelated).is_err());
        write(wt, &SessionRecord { kind: "claude".into(), session_id: "s1".into(), commit: "c0".into() })
            .expect("write");
        assert!(can_resume(wt, "claude", "s1", "c1", unrelated).expect_err("old commit").contains("c0"));
        // A base that holds the session's commit (it was merged) resumes it.
        let holds = |base: &str, commit: &str| (base, commit) == ("m1", "c0");
        assert_eq!(can_resume(wt, "claude", "s1", "m1", holds), Ok(Resume::Merged));
        set_commit(wt, "c1").expect("set");
        assert_eq!(can_resume(wt, "claude", "s1", "c1", unrelated), Ok(Resume::Same));
        assert!(can_resume(wt, "claude", "s2", "c1", unrelated).is_err());
        assert!(can_resume(wt, "codex", "s1", "c1", unrelated).is_err());
        std::fs::write(path(wt), b"{garbage").expect("write");
        assert!(can_resume(wt, "claude", "s1", "c1", unrelated).is_err());
    }
}
