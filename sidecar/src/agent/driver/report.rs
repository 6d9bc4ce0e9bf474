//! What the driver reports: the agent's status file relayed, Progress at
//! most every 500 ms (and at once when the session id is known), sidecar
//! notes in the attempt log, and rate-limited notices of unparseable output.

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::{Driver, LOG_TAIL, PROGRESS_TAIL, UNPARSEABLE_EVERY};
use crate::report::{Event, Progress, Report, StatusKind};
use crate::status::StatusEvent;

impl Driver<'_, '_> {
    pub(super) async fn poll_status(&mut self) {
        for ev in self.watcher.poll() {
            self.last_activity = Instant::now();
            let attempt = self.s.attempt.clone();
            match ev {
                StatusEvent::Status { status, message } => {
                    self.journal(Event::Status { attempt, status: StatusKind::Worker(status), message })
                }
                StatusEvent::Invalid { message } => {
                    self.journal(Event::Status { attempt, status: StatusKind::Invalid, message })
                }
                StatusEvent::Question(q) => self.journal(Event::Question {
                    attempt,
                    id: q.id,
                    text: q.text,
                    category: q.category,
                    options: q.options,
                }),
                // The agent's own events are the progress of an agent worker.
                StatusEvent::Progress(_) => {}
            }
        }
    }

    pub(super) fn send_progress(&mut self) {
        self.progress_dirty = false;
        self.progress_sent = Instant::now();
        let mut usage = self.usage_done;
        usage.add(&self.usage_proc);
        let p = Progress {
            percent: self.percent,
            step: self.step.clone(),
            files_modified: self.files.iter().cloned().collect(),
            log_tail: self.tail.iter().rev().take(PROGRESS_TAIL).rev().cloned().collect(),
            usage: Some(usage),
            session_id: self.session.clone().unwrap_or_default(),
            ..Progress::new(self.s.attempt.clone())
        };
        let _ = self.ch.tx.send(Report::Progress(p));
    }

    pub(super) async fn unparseable(&mut self, what: &str) {
        self.log(&format!("agent printed an unparseable line: {what}")).await;
        let (last, skipped) = &mut self.unparseable;
        if last.is_some_and(|t| t.elapsed() < UNPARSEABLE_EVERY) {
            *skipped += 1;
            return;
        }
        let more =
            if *skipped > 0 { format!(" (and {skipped} more since the last report)") } else { String::new() };
        *last = Some(Instant::now());
        *skipped = 0;
        self.journal(Event::Status {
            attempt: self.s.attempt.clone(),
            status: StatusKind::Invalid,
            message: format!("agent printed an unparseable line: {what}{more}"),
        });
    }

    pub(super) fn journal(&self, event: Event) {
        let _ = self.ch.tx.send(Report::Journaled(event));
    }

    pub(super) fn push_tail(&mut self, line: String) {
        self.tail.push_back(line);
        while self.tail.len() > LOG_TAIL {
            self.tail.pop_front();
        }
    }

    /// A sidecar note in the attempt log (and the tracing log).
    pub(super) async fn log(&mut self, msg: &str) {
        tracing::info!(agent = %self.s.cfg.kind, "{msg}");
        self.raw_log(&format!("[swarm-sidecar] {msg}")).await;
    }

    pub(super) async fn raw_log(&mut self, line: &str) {
        let _ = self.ch.log.write_all(format!("{line}\n").as_bytes()).await;
    }
}
