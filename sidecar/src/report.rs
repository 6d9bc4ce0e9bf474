//! What an attempt tells the session while it runs, as plain values: the
//! attempt's driver hands them to a channel, and the session journals,
//! converts (see [`crate::wire`]) and sends them. Nothing here knows the
//! connection.

use std::time::Duration;

use swarm_core::Usage;
use swarm_proto::convert::AttemptRef;
use tokio::sync::mpsc;

use crate::outcome::AttemptOutcome;
use crate::sandbox::SandboxReport;
use crate::status::WorkerStatus;

/// What the driver hands to the session.
// A handful per attempt pass through the channel, and nearly all are
// `Journaled`: boxing that variant would add an allocation to each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// A state-changing report: journaled, then sent with a sequence number.
    Journaled(Event),
    /// Best effort, seq 0, not journaled.
    Progress(Progress),
    /// The worker's supervisor (also its process group) and the idle
    /// restarts before it, for the journal: a restarted sidecar re-adopts it.
    Pid { pid: u32, restarts: u32 },
}

/// A state-changing report.
// The result is the large one, and there is one per attempt: boxing it
// would save nothing worth an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A worker (or agent process) started.
    Started {
        attempt: AttemptRef,
        pid: u32,
        restarts: u32,
        sandbox: SandboxReport,
    },
    Status {
        attempt: AttemptRef,
        status: StatusKind,
        message: String,
    },
    Question {
        attempt: AttemptRef,
        id: String,
        text: String,
        category: String,
        options: Vec<String>,
    },
    /// The agent's answer on a pull request thread (its `reply` tool).
    ForgeReply {
        attempt: AttemptRef,
        thread: String,
        text: String,
    },
    /// The attempt's end; exactly one per attempt unless it was stopped silently.
    Result(AttemptOutcome),
    /// Worktrees of other worker ids found at start, and whether they were removed.
    Orphans {
        worktrees: Vec<String>,
        removed: bool,
    },
}

impl Event {
    /// The attempt the report is about, if any.
    pub fn attempt(&self) -> Option<&AttemptRef> {
        match self {
            Event::Started { attempt, .. }
            | Event::Status { attempt, .. }
            | Event::Question { attempt, .. }
            | Event::ForgeReply { attempt, .. } => Some(attempt),
            Event::Result(o) => Some(&o.attempt),
            Event::Orphans { .. } => None,
        }
    }

    /// A notice from the sidecar about the attempt.
    pub fn note(attempt: &AttemptRef, message: String) -> Event {
        Event::Status { attempt: attempt.clone(), status: StatusKind::Note, message }
    }
}

/// Whose status a Status report carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusKind {
    /// The worker's own, from its status file.
    Worker(WorkerStatus),
    /// The status file could not be read as one.
    Invalid,
    /// A notice from the sidecar (a permission decided, a stale lock removed).
    Note,
}

/// How far the worker got; sent at most every 500 ms.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub attempt: AttemptRef,
    pub percent: u32,
    pub step: String,
    pub files_modified: Vec<String>,
    pub tests_passing: u32,
    pub tests_total: u32,
    pub log_tail: Vec<String>,
    /// Agent workers: the usage so far.
    pub usage: Option<Usage>,
    /// Agent workers: the session, as soon as the agent names it.
    pub session_id: String,
}

impl Progress {
    pub fn new(attempt: AttemptRef) -> Progress {
        Progress {
            attempt,
            percent: 0,
            step: String::new(),
            files_modified: Vec::new(),
            tests_passing: 0,
            tests_total: 0,
            log_tail: Vec::new(),
            usage: None,
            session_id: String::new(),
        }
    }
}

/// Why the driver was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The controller's Cancel: stop with this grace, report CANCELLED.
    Cancel { grace: Duration },
    /// The controller's Cancel with `checkpoint` (a budget reached, a
    /// swarm paused with `--stop`): stop with this grace, keep the work as
    /// a WIP commit and report CHECKPOINT, so a later attempt resumes it.
    Checkpoint { grace: Duration },
    /// The controller no longer considers the attempt current: stop, report nothing.
    Silent,
    /// The sidecar is shutting down: stop, report the exit as it maps.
    Shutdown,
}

/// Operator answers routed to the attempt's driver: (question id, text).
pub type Answers = mpsc::UnboundedReceiver<(String, String)>;

/// The attempt's end of the reports channel.
#[derive(Debug, Clone)]
pub struct Sink {
    pub(crate) tx: mpsc::UnboundedSender<Report>,
}

impl Sink {
    pub fn new(tx: mpsc::UnboundedSender<Report>) -> Sink {
        Sink { tx }
    }

    /// A closed channel means the session is gone, and with it whoever
    /// would read the report.
    pub fn journaled(&self, event: Event) {
        let _ = self.tx.send(Report::Journaled(event));
    }

    pub fn progress(&self, p: Progress) {
        let _ = self.tx.send(Report::Progress(p));
    }

    pub fn pid(&self, pid: u32, restarts: u32) {
        let _ = self.tx.send(Report::Pid { pid, restarts });
    }
}
