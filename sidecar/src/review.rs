//! Reviewer attempts. The worktree sits at the result under review; the
//! reviewer (a command or an agent) reads `.swarm/task.md`, which holds the
//! task and its diff against the task's base, and leaves its decision in
//! `.swarm/review.json`:
//!
//! ```json
//! {"decision": "approve" | "request_changes" | "reject", "message": "..."}
//! ```
//!
//! Nothing is verified or committed: the result names the worktree's
//! HEAD, so the controller can check that the decision is about the commit
//! it asked to be reviewed. An agent that may not write files can instead
//! start its final message with the decision word.

use std::path::Path;
use std::process::Stdio;

use crate::outcome::{InfraFailure, ReviewVerdict};
use crate::swarm_files::SwarmFiles;
use crate::worktree;

/// The reviewer's decision file, inside `.swarm/`.
pub const REVIEW_FILE: &str = "review.json";
/// Larger decision files are refused rather than read.
const MAX_REVIEW_BYTES: u64 = 64 * 1024;
/// The diff in the task text is cut here: a reviewer can run `git diff`
/// itself for the rest.
const MAX_DIFF_BYTES: usize = 256 * 1024;
const DECISIONS: [&str; 3] = ["approve", "request_changes", "reject"];

#[derive(serde::Deserialize)]
struct ReviewFile {
    decision: String,
    #[serde(default)]
    message: String,
}

/// The reviewer's task text: the controller's, then the diff of the result
/// against the task's base (`diff_base`), bounded.
pub async fn task_text(wt: &Path, text: &str, diff_base: &str) -> String {
    let mut md = text.to_string();
    md.push_str("## Diff against the task's base\n\n");
    if diff_base.is_empty() {
        md.push_str("(the task's base is unknown; compare with the integration branch)\n");
        return md;
    }
    match git_diff(wt, diff_base).await {
        Ok(diff) => {
            md.push_str(&format!("`git diff {diff_base} HEAD`:\n\n```diff\n"));
            if diff.len() > MAX_DIFF_BYTES {
                let mut end = MAX_DIFF_BYTES;
                while !diff.is_char_boundary(end) {
                    end -= 1;
                }
                md.push_str(&diff[..end]);
                md.push_str(&format!(
                    "\n... ({} more bytes; run git diff for all of it)\n",
                    diff.len() - end
                ));
            } else {
                md.push_str(&diff);
            }
            md.push_str("```\n");
        }
        Err(e) => md.push_str(&format!("(no diff: {e}; run `git diff {diff_base} HEAD`)\n")),
    }
    md
}

async fn git_diff(wt: &Path, base: &str) -> Result<String, String> {
    swarm_core::names::check_commit(base).map_err(|r| format!("base {base:?}: {r}"))?;
    let out = tokio::process::Command::new("git")
        .args(["diff", "--stat", "--patch", base, "HEAD", "--"])
        .current_dir(wt)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("running git diff: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A reviewer attempt's conclusion: the commit it reviewed and its decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewed {
    /// The worktree's HEAD.
    pub commit: String,
    pub verdict: ReviewVerdict,
}

/// Reads a reviewer's conclusion from its worktree. `said` is what the
/// worker said last (status message or agent's final text), read when no
/// decision file exists.
pub fn conclude(wt: &Path, said: &str) -> Result<Reviewed, InfraFailure> {
    let (head, _) = worktree::head(wt).map_err(|e| InfraFailure::ReviewedHead(e.to_string()))?;
    let verdict = read_decision(&SwarmFiles::new(wt).dir.join(REVIEW_FILE), said);
    Ok(Reviewed { commit: head.to_string(), verdict })
}

fn read_decision(path: &Path, said: &str) -> ReviewVerdict {
    let refuse = |error: String| ReviewVerdict { error, ..Default::default() };
    let text = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return from_words(said),
        Err(e) => return refuse(format!("{}: {e}", path.display())),
        Ok(m) if m.len() > MAX_REVIEW_BYTES => {
            return refuse(format!("{} is larger than {MAX_REVIEW_BYTES} bytes", path.display()));
        }
        Ok(_) => match crate::worker_files::read(path, MAX_REVIEW_BYTES) {
            Ok(t) => String::from_utf8_lossy(&t).into_owned(),
            Err(e) => return refuse(format!("{}: {e}", path.display())),
        },
    };
    decision_of(&text)
}

/// The decision `.swarm/review.json` gives, or why it gives none (the
/// reviewer wrote it: any text at all must come back as one or the other).
pub fn decision_of(text: &str) -> ReviewVerdict {
    let refuse = |error: String| ReviewVerdict { error, ..Default::default() };
    match serde_json::from_str::<ReviewFile>(text) {
        Ok(f) if DECISIONS.contains(&f.decision.as_str()) => {
            ReviewVerdict { decision: f.decision, message: f.message, error: String::new() }
        }
        Ok(f) => refuse(format!(
            "{REVIEW_FILE}: decision must be one of {}, not {:?}",
            DECISIONS.join(", "),
            f.decision
        )),
        Err(e) => refuse(format!("{REVIEW_FILE}: {e}")),
    }
}

/// A decision given as the first word of the worker's last words, the
/// rest being its message; none when they start otherwise.
fn from_words(said: &str) -> ReviewVerdict {
    let said = said.trim();
    let (word, rest) = said.split_once(char::is_whitespace).unwrap_or((said, ""));
    let word = word.trim_end_matches([':', '.', ',']).to_ascii_lowercase();
    if DECISIONS.contains(&word.as_str()) {
        ReviewVerdict { decision: word, message: rest.trim().to_string(), error: String::new() }
    } else {
        ReviewVerdict::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_file_wins_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(REVIEW_FILE);
        std::fs::write(&path, r#"{"decision": "request_changes", "message": "add a test"}"#).expect("write");
        let v = read_decision(&path, "approve looks fine");
        assert_eq!((v.decision.as_str(), v.message.as_str()), ("request_changes", "add a test"));
        std::fs::write(&path, r#"{"decision": "lgtm"}"#).expect("write");
        let v = read_decision(&path, "");
        assert!(v.decision.is_empty() && v.error.contains("lgtm"), "{v:?}");
        std::fs::write(&path, "not json").expect("write");
        assert!(read_decision(&path, "").error.starts_with(REVIEW_FILE));
    }

    #[test]
    fn without_a_file_the_first_word_of_the_last_message_decides() {
        let missing = Path::new("/nonexistent/review.json");
        let v = read_decision(missing, "Reject: the API is wrong");
        assert_eq!((v.decision.as_str(), v.message.as_str()), ("reject", "the API is wrong"));
        assert!(read_decision(missing, "I think it is fine").decision.is_empty());
    }
}
