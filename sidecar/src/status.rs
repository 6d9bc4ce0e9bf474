//! `.swarm/status.json`, written by the worker: parsing, validation and a
//! change detector that turns file updates into reports.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

/// Largest status file we read.
pub const MAX_STATUS_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerStatus {
    Working,
    Blocked,
    Question,
    Done,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct StatusProgress {
    #[serde(default)]
    pub percent: u32,
    #[serde(default)]
    pub step: String,
    #[serde(default)]
    pub files_modified: Vec<String>,
    #[serde(default)]
    pub tests_passing: u32,
    #[serde(default)]
    pub tests_total: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StatusQuestion {
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub category: String,
    /// Choices to offer the operator (who may still answer freely).
    #[serde(default)]
    pub options: Vec<String>,
}

/// A valid status file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StatusFile {
    pub status: WorkerStatus,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub progress: Option<StatusProgress>,
    #[serde(default)]
    pub question: Option<StatusQuestion>,
}

/// Parses and validates; the error is the reason, for `invalid status.json: <reason>`.
pub fn parse(bytes: &[u8]) -> Result<StatusFile, String> {
    if bytes.len() as u64 > MAX_STATUS_BYTES {
        return Err(format!("larger than {MAX_STATUS_BYTES} bytes"));
    }
    let s: StatusFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if let Some(p) = &s.progress
        && p.percent > 100
    {
        return Err(format!("progress.percent is {}, must be 0-100", p.percent));
    }
    if let Some(q) = &s.question {
        swarm_core::names::check_id(&q.id).map_err(|e| format!("question.id: {e}"))?;
        if q.text.trim().is_empty() {
            return Err("question.text must not be empty".into());
        }
        let limit = swarm_proto::limits::MAX_OPTIONS;
        if q.options.len() > limit {
            return Err(format!("question.options has {} entries, at most {limit}", q.options.len()));
        }
        if let Some(i) = q.options.iter().position(|o| o.trim().is_empty() || o.contains('\n')) {
            return Err(format!("question.options[{i}] must be one non-empty line"));
        }
    }
    Ok(s)
}

/// What changed in the status file since the last look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusEvent {
    /// The status or message changed.
    Status {
        status: WorkerStatus,
        message: String,
    },
    /// The file is invalid; reported as a Status with this message.
    Invalid {
        message: String,
    },
    Progress(StatusProgress),
    /// A question id seen for the first time.
    Question(StatusQuestion),
}

/// Polls the file's metadata; reads it only when mtime or size changed.
#[derive(Debug)]
pub struct StatusWatcher {
    path: PathBuf,
    seen: Option<(SystemTime, u64)>,
    last_status: Option<(WorkerStatus, String)>,
    last_invalid: Option<String>,
    last_progress: Option<StatusProgress>,
    asked: HashSet<String>,
    current: Option<StatusFile>,
    /// An invalid read waits one poll: the worker may be mid-write.
    pending_invalid: Option<String>,
}

impl StatusWatcher {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StatusWatcher {
            path: path.into(),
            seen: None,
            last_status: None,
            last_invalid: None,
            last_progress: None,
            asked: HashSet::new(),
            current: None,
            pending_invalid: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last valid status read.
    pub fn current(&self) -> Option<&StatusFile> {
        self.current.as_ref()
    }

    /// Forgets the file's metadata so the next poll re-reads (after a restart).
    pub fn reset_file(&mut self) {
        self.seen = None;
    }

    /// Checks the file; returns the events of a change (empty when unchanged).
    pub fn poll(&mut self) -> Vec<StatusEvent> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(_) => return Vec::new(),
        };
        let key = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
        if self.seen == Some(key) {
            // Unchanged since an invalid read: now it counts.
            return match self.pending_invalid.take() {
                Some(reason) => self.apply(Err(reason)),
                None => Vec::new(),
            };
        }
        self.seen = Some(key);
        let parsed = if meta.len() > MAX_STATUS_BYTES {
            Err(format!("larger than {MAX_STATUS_BYTES} bytes"))
        } else {
            crate::worker_files::read(&self.path, MAX_STATUS_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|b| parse(&b))
        };
        match parsed {
            Err(reason) => {
                self.pending_invalid = Some(reason);
                Vec::new()
            }
            Ok(s) => {
                self.pending_invalid = None;
                self.apply(Ok(s))
            }
        }
    }

    fn apply(&mut self, parsed: Result<StatusFile, String>) -> Vec<StatusEvent> {
        let mut events = Vec::new();
        match parsed {
            Err(reason) => {
                let message = format!("invalid status.json: {reason}");
                if self.last_invalid.as_ref() != Some(&message) {
                    self.last_invalid = Some(message.clone());
                    self.last_status = None;
                    events.push(StatusEvent::Invalid { message });
                }
            }
            Ok(s) => {
                self.last_invalid = None;
                let pair = (s.status, s.message.clone());
                if self.last_status.as_ref() != Some(&pair) {
                    self.last_status = Some(pair);
                    events.push(StatusEvent::Status { status: s.status, message: s.message.clone() });
                }
                if let Some(p) = &s.progress
                    && self.last_progress.as_ref() != Some(p)
                {
                    self.last_progress = Some(p.clone());
                    events.push(StatusEvent::Progress(p.clone()));
                }
                if let Some(q) = &s.question
                    && self.asked.insert(q.id.clone())
                {
                    events.push(StatusEvent::Question(q.clone()));
                }
                self.current = Some(s);
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_file_parses() {
        let s = parse(
            br#"{"status":"question","message":"m","progress":{"percent":40,"step":"x"},
                "question":{"id":"q1","text":"which?","category":"ambiguous_spec"}}"#,
        )
        .expect("valid");
        assert_eq!(s.status, WorkerStatus::Question);
        assert_eq!(s.progress.expect("progress").percent, 40);
    }

    #[test]
    fn invalid_files_say_why() {
        assert!(parse(b"{not json").is_err());
        assert!(parse(br#"{"status":"sleeping"}"#).is_err());
        let e = parse(br#"{"status":"working","progress":{"percent":101}}"#).expect_err("percent");
        assert!(e.contains("percent"), "{e}");
        let big = vec![b' '; 70 * 1024];
        assert!(parse(&big).expect_err("big").contains("larger"));
    }

    #[test]
    fn watcher_relays_changes_and_each_question_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("status.json");
        let mut w = StatusWatcher::new(&path);
        assert!(w.poll().is_empty(), "no file, no events");
        let write = |body: &str| std::fs::write(&path, body).expect("write");
        write(r#"{"status":"working","message":"a"}"#);
        assert_eq!(
            w.poll(),
            vec![StatusEvent::Status { status: WorkerStatus::Working, message: "a".into() }]
        );
        assert!(w.poll().is_empty(), "unchanged");
        write(r#"{"status":"question","message":"a?","question":{"id":"q1","text":"t"}}"#);
        let ev = w.poll();
        assert_eq!(ev.len(), 2, "{ev:?}");
        assert!(matches!(&ev[1], StatusEvent::Question(q) if q.id == "q1"));
        write(r#"{"status":"question","message":"a?!","question":{"id":"q1","text":"t"}}"#);
        let ev = w.poll();
        assert_eq!(ev.len(), 1, "question q1 is not relayed twice: {ev:?}");
        write(r#"{"status":"done","progress":{"percent":300}}"#);
        assert!(w.poll().is_empty(), "an invalid read waits one poll (the worker may be mid-write)");
        let ev = w.poll();
        assert!(
            matches!(&ev[..], [StatusEvent::Invalid { message }] if message.starts_with("invalid status.json: "))
        );
    }
}
