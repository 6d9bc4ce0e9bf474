//! Everything that reaches the scheduler: reports from sidecars (already
//! validated and converted at the API edge), operator requests and the
//! merge service's reports.

use std::sync::Arc;

use swarm_core::plan::Plan;
use swarm_core::{SwarmId, TaskKey, TaskState, Usage};
use swarm_git::merge::{self, LockRemoved, MergeResult, QueueReport, RefRepaired};
use tokio::sync::{broadcast, oneshot};

pub use super::model::BudgetChange;
use super::model::Session;
pub use super::model::messages::{
    HelloInfo, PackClaim, ReportedAttempt, ResultReport, ReviewVerdict, SandboxReported,
};
use super::page::Page;
use super::views::{ChildrenView, SwarmView, TaskDetailView, TaskView, WorkerView};
use crate::error::SchedError;
use crate::merger::ReportSink;
use crate::store::EventRow;

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
    /// The agent's answer on a pull request thread (`KIND:ID`, checked).
    ForgeReply {
        attempt: ReportedAttempt,
        thread: String,
        text: String,
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
            | Report::Question { attempt, .. }
            | Report::ForgeReply { attempt, .. } => Some(attempt),
            Report::Result(r) => Some(&r.attempt),
            Report::Orphans { .. } | Report::MergeVerified(_) => None,
        }
    }
}

pub type Reply<T> = oneshot::Sender<Result<T, SchedError>>;

/// Where a swarm's result lands, as Land resolved it.
#[derive(Debug, Clone)]
pub struct LandTarget {
    pub swarm: String,
    pub target: String,
    pub head: String,
    /// True when the operator named the target rather than the plan: such a
    /// target must not be checked out anywhere.
    pub explicit: bool,
}

/// What a spawn needs next.
#[derive(Debug)]
pub enum SpawnPlan {
    /// The child exists already (a repeated call, a resumed attempt).
    Exists(ChildrenView),
    /// A new child: its branch must be made at `base` first.
    New { text: Arc<str>, plan: Arc<Plan>, base: String },
}

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
        /// How the plan was made, checked by the API; kept only when this
        /// creates the swarm.
        origin: Option<Arc<super::Origin>>,
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
    /// The context tool of a running attempt's agent: the caller must
    /// hold the attempt, as for an upload.
    TaskContext {
        claim: PackClaim,
        reply: oneshot::Sender<Result<super::views::ContextView, SchedError>>,
    },
    /// An agent's `spawn`, first step: checked and composed, or the
    /// child as it is when it exists.
    PlanSpawn {
        claim: PackClaim,
        fragment: String,
        reply: oneshot::Sender<Result<SpawnPlan, SchedError>>,
    },
    /// An agent's `spawn`, second step: the child created on its branch
    /// (answered once stored).
    SpawnChildren {
        claim: PackClaim,
        text: Arc<str>,
        plan: Arc<Plan>,
        head: String,
        reply: oneshot::Sender<Result<super::views::ChildrenView, SchedError>>,
    },
    /// The attempt's spawned child as it is now.
    Children {
        claim: PackClaim,
        reply: oneshot::Sender<Result<super::views::ChildrenView, SchedError>>,
    },
    /// A stale integration-ref lock removed at start.
    LockRemoved(LockRemoved),
    /// An integration ref a power loss undid, put back at the store's head
    /// at start.
    RefRepaired(RefRepaired),
    /// A merge queue's speculation or landing, from the merger.
    Queue(QueueReport),
    /// The forge component: every swarm with a `[forge]` (or the one
    /// named), as it is now.
    ForgeTargets {
        swarm: Option<SwarmId>,
        reply: Reply<Vec<super::views::ForgeTarget>>,
    },
    /// The forge component: what a sync of the swarm's branch and pull
    /// request did (answered once stored).
    ForgeSynced {
        swarm: SwarmId,
        state: super::model::ForgeState,
        reply: Reply<()>,
    },
    /// The forge component: a failed check or a review for a task.
    ForgeFeedback {
        swarm: SwarmId,
        feedback: super::model::messages::ForgeFeedback,
        reply: Reply<super::model::messages::FeedbackTaken>,
    },
    /// The forge component: claims a forge id (a comment with a slash
    /// command) before acting on it; whether it was new.
    ForgeClaim {
        swarm: SwarmId,
        key: String,
        reply: Reply<bool>,
    },
    /// A call refused at the edge, for the (rate-limited) audit log.
    Denied {
        client: String,
        message: String,
    },
    Shutdown,
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
