//! Everything that reaches the scheduler: reports from sidecars (already
//! validated and converted at the API edge), operator requests and the
//! merge service's reports.

use std::collections::BTreeMap;
use std::sync::Arc;

use swarm_core::plan::Plan;
use swarm_core::{Outcome, SwarmId, TaskKey, TaskState, Usage};
use swarm_git::merge::{self, LockRemoved, MergeResult, QueueReport, RefRepaired};
use tokio::sync::{broadcast, oneshot};

pub use super::budget::BudgetChange;
use super::model::{Session, TierOutcome};
use super::reads::Page;
use super::refs::LandTarget;
use super::views::{SwarmView, TaskDetailView, TaskView, WorkerView};
use crate::error::SchedError;
use crate::merger::ReportSink;
use crate::store::EventRow;

/// An attempt as a sidecar names it in a report.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReportedAttempt {
    pub task: TaskKey,
    pub number: u32,
    pub token: u64,
}

/// How a sidecar says it confined an attempt's worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxReported {
    pub mode: String,
    pub enforced: Vec<String>,
    pub missing: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct HelloInfo {
    pub worker_id: String,
    pub labels: BTreeMap<String, String>,
    pub host: String,
    pub last_acked_seq: u64,
    pub attempt_in_hand: Option<ReportedAttempt>,
    /// The secret the sidecar's last Welcome gave it; empty if it has none.
    pub resume_secret: String,
    /// The credential the stream was authenticated with, when there is one.
    pub principal: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ResultReport {
    pub attempt: ReportedAttempt,
    pub outcome: Outcome,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub commit: Option<String>,
    pub files_changed: Vec<String>,
    pub tiers: Vec<TierOutcome>,
    pub summary: String,
    pub error: String,
    pub log_tail: Vec<String>,
    pub category: String,
    /// Agent attempts: what was spent, and the session to resume.
    pub usage: Usage,
    pub session_id: String,
    /// RATE_LIMITED: when the limit resets (unix ms; 0 unknown) and its kind.
    pub rate_limit_reset_ms: u64,
    pub rate_limit_kind: String,
    /// A reviewer attempt's decision, as its reviewer left it.
    pub review: Option<ReviewVerdict>,
}

/// What a reviewer attempt decided (validated by the scheduler, which
/// knows the reviewed commit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReviewVerdict {
    pub decision: String,
    pub message: String,
    /// Why the sidecar could not read the decision; empty when it could.
    pub error: String,
}

#[derive(Debug, Clone)]
pub enum Report {
    Started {
        attempt: ReportedAttempt,
        pid: u32,
        restarts: u32,
        sandbox: Option<SandboxReported>,
    },
    Progress {
        attempt: ReportedAttempt,
        percent: u32,
        step: String,
        /// Agent attempts: the running total so far, and the session id.
        usage: Option<Usage>,
        session_id: String,
    },
    Status {
        attempt: ReportedAttempt,
        status: String,
        message: String,
    },
    Question {
        attempt: ReportedAttempt,
        id: String,
        text: String,
        category: String,
        /// Choices offered with it; the operator may also answer freely.
        options: Vec<String>,
    },
    Result(Box<ResultReport>),
    /// A merge queue verification's verdict (not journaled: seq 0).
    MergeVerified(Box<super::merge_queue::VerifiedReport>),
    Orphans {
        worktrees: Vec<String>,
        removed: bool,
    },
}

impl Report {
    pub fn attempt(&self) -> Option<&ReportedAttempt> {
        match self {
            Report::Started { attempt, .. }
            | Report::Progress { attempt, .. }
            | Report::Status { attempt, .. }
            | Report::Question { attempt, .. } => Some(attempt),
            Report::Result(r) => Some(&r.attempt),
            Report::Orphans { .. } | Report::MergeVerified(_) => None,
        }
    }
}

pub type Reply<T> = oneshot::Sender<Result<T, SchedError>>;

impl Command {
    /// Whether the command only reads the model.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Command::Operator(
                OperatorOp::GetSwarm { .. }
                    | OperatorOp::ListSwarms { .. }
                    | OperatorOp::ListTasks { .. }
                    | OperatorOp::GetTask { .. }
                    | OperatorOp::ListWorkers { .. }
            )
        )
    }
}

/// What SetBudget changes.
#[derive(Debug, Clone)]
pub enum BudgetTarget {
    Swarm(SwarmId),
    Task(TaskKey),
}

#[derive(Debug)]
pub enum OperatorOp {
    /// `plan` was parsed from `plan_text` and the integration branch made
    /// (at `integration_head`) by the API before this reaches the scheduler.
    CreateSwarm {
        plan_text: String,
        plan: Arc<Plan>,
        integration_head: String,
        reply: Reply<(SwarmView, bool)>,
    },
    GetSwarm {
        swarm: String,
        reply: Reply<SwarmView>,
    },
    ListSwarms {
        page: Page,
        /// The page and the token of the next one (empty: the last page).
        reply: Reply<(Vec<SwarmView>, String)>,
    },
    ListTasks {
        swarm: String,
        states: Vec<TaskState>,
        page: Page,
        reply: Reply<(Vec<TaskView>, String)>,
    },
    GetTask {
        task: TaskKey,
        reply: Reply<TaskDetailView>,
    },
    ListWorkers {
        page: Page,
        reply: Reply<(Vec<WorkerView>, String)>,
    },
    CancelTask {
        task: TaskKey,
        reason: String,
        reply: Reply<TaskView>,
    },
    CancelSwarm {
        swarm: String,
        reason: String,
        reply: Reply<u32>,
    },
    RetryTask {
        task: TaskKey,
        reply: Reply<TaskView>,
    },
    /// The operator's decision on a task in REVIEW.
    ReviewTask {
        task: TaskKey,
        decision: String,
        message: String,
        reply: Reply<TaskView>,
    },
    Answer {
        task: TaskKey,
        question_id: String,
        text: String,
        reply: Reply<TaskView>,
    },
    SendMessage {
        task: TaskKey,
        text: String,
        /// The task, and the message's id.
        reply: Reply<(TaskView, String)>,
    },
    DrainWorker {
        worker: String,
        reply: Reply<WorkerView>,
    },
    /// Checks, before the integration branch is made, that no other swarm
    /// owns the plan's refs.
    CheckPlanRefs {
        plan: Arc<Plan>,
        reply: Reply<()>,
    },
    /// Resolves and checks Land's target (`None`: the plan's).
    Land {
        swarm: String,
        target: Option<String>,
        reply: Reply<LandTarget>,
    },
    /// Sets a swarm's or a task's budget.
    SetBudget {
        target: BudgetTarget,
        change: BudgetChange,
        /// The swarm, and the task when the target was one.
        reply: Reply<(SwarmView, Option<TaskView>)>,
    },
    PauseSwarm {
        swarm: SwarmId,
        stop: bool,
        reason: String,
        reply: Reply<SwarmView>,
    },
    ResumeSwarm {
        swarm: SwarmId,
        reply: Reply<SwarmView>,
    },
    /// Records what Land did.
    Landed {
        swarm: String,
        target: String,
        outcome: Result<(String, String), String>,
        reply: Reply<()>,
    },
}

pub enum Command {
    Hello {
        hello: HelloInfo,
        session: Session,
    },
    Report {
        worker: String,
        session: u64,
        seq: u64,
        report: Report,
    },
    Disconnected {
        worker: String,
        session: u64,
    },
    /// The first message of a session after its Hello: the sidecar has
    /// its Welcome.
    Heard {
        worker: String,
        session: u64,
    },
    Operator(OperatorOp),
    /// Registers a Watch: replies with the id of the last committed event
    /// and a receiver of every later one.
    Subscribe {
        reply: oneshot::Sender<(u64, broadcast::Receiver<Arc<EventRow>>)>,
    },
    Merged(MergeResult),
    /// May this caller move a pack? It must hold the worker id's live
    /// session (by its resume secret or credential) and, for an upload,
    /// the live attempt the pack is for.
    AuthorizePack {
        claim: PackClaim,
        reply: oneshot::Sender<Result<(), SchedError>>,
    },
    /// A stale integration-ref lock removed at start.
    LockRemoved(LockRemoved),
    /// An integration ref a power loss undid, put back at the store's head
    /// at start.
    RefRepaired(RefRepaired),
    /// A merge queue's speculation or landing, from the merger.
    Queue(QueueReport),
    /// A call refused at the edge, for the (rate-limited) audit log.
    Denied {
        client: String,
        message: String,
    },
    Shutdown,
}

/// Who a pack transfer says it is for.
#[derive(Debug, Clone)]
pub struct PackClaim {
    pub worker: String,
    pub resume_secret: String,
    pub principal: Option<String>,
    /// The attempt an upload belongs to; none for a download.
    pub attempt: Option<ReportedAttempt>,
}

/// The merger's report sink: its reports become commands of the
/// scheduler whose inbox `results` feeds (unbounded: the merger never
/// waits on the scheduler).
pub fn merger_sink(results: flume::Sender<Command>) -> ReportSink {
    Box::new(move |report| {
        let cmd = match report {
            merge::Report::Merged(result) => Command::Merged(result),
            merge::Report::LockRemoved(removed) => Command::LockRemoved(removed),
            merge::Report::RefRepaired(repaired) => Command::RefRepaired(repaired),
            merge::Report::Queue(report) => Command::Queue(report),
        };
        results.send(cmd).is_ok()
    })
}
