//! The scheduler's in-memory model and its mapping to store rows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use serde::{Deserialize, Serialize};
use swarm_core::plan::{Budget, Plan, SwarmBudget, TaskSpec};
use swarm_core::{AttemptState, Outcome, SwarmId, TaskKey, TaskState, Usage};

use super::stored::{ReviewNotes, Stall, SwarmControl, TaskBudget};
use super::{HashMap, now_ms};
use crate::store::{AttemptRow, SwarmRow, TaskRow, WorkerRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwarmState {
    Active,
    Completed,
    Failed,
    Cancelled,
    /// Nothing can move without the operator; see `stall`.
    Stalled,
    /// No new attempt starts until the operator resumes it; see `budget`.
    Paused,
    /// Every task merged and the work waits on its pull request: CI,
    /// reviewers, a merge. COMPLETED once the pull request merges; a task
    /// the forge's feedback reopens makes it ACTIVE again.
    Landing,
}

impl SwarmState {
    pub fn as_str(self) -> &'static str {
        match self {
            SwarmState::Active => "ACTIVE",
            SwarmState::Completed => "COMPLETED",
            SwarmState::Failed => "FAILED",
            SwarmState::Cancelled => "CANCELLED",
            SwarmState::Stalled => "STALLED",
            SwarmState::Paused => "PAUSED",
            SwarmState::Landing => "LANDING",
        }
    }

    /// Whether it has not ended: its tasks may still move and it owns its
    /// integration branch.
    pub fn is_live(self) -> bool {
        matches!(self, SwarmState::Active | SwarmState::Stalled | SwarmState::Paused | SwarmState::Landing)
    }

    pub fn parse(s: &str) -> Option<SwarmState> {
        [
            SwarmState::Active,
            SwarmState::Completed,
            SwarmState::Failed,
            SwarmState::Cancelled,
            SwarmState::Stalled,
            SwarmState::Paused,
            SwarmState::Landing,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

#[derive(Debug)]
pub struct Swarm {
    pub id: SwarmId,
    pub plan_text: Arc<str>,
    pub plan: Arc<Plan>,
    pub state: SwarmState,
    pub integration_head: String,
    pub created_at: i64,
    /// Task ids in plan order.
    pub tasks: Vec<TaskKey>,
    /// How many tasks are in each state (indexed like `TaskState::ALL`), so
    /// completion checks and views do not walk every task.
    pub(super) counts: [u32; TaskState::ALL.len()],
    /// Why it is STALLED (derived, not stored: described again on recovery).
    pub stall: Option<Stall>,
    /// Tasks whose state counts as moving but which only the operator can
    /// move: REVIEW by the operator, and RUNNING sub-swarm tasks whose
    /// child is STALLED. Kept by each transition, so that deciding a stall
    /// still needs no walk of the swarm.
    pub(super) waits_on_operator: BTreeSet<TaskKey>,
    /// What its agent attempts spent, kept as their sum so that reading it
    /// does not walk the swarm.
    pub(super) usage: Usage,
    /// What the operator set: a pause, a budget (stored with the state).
    pub control: SwarmControl,
    /// When it ended (COMPLETED, FAILED or CANCELLED), unix ms; 0 while it
    /// may still move, and after a restart until retention first looks
    /// (which then takes its tasks' last change). Kept by the model.
    pub(super) ended_at: i64,
    /// How it was made, when a planner wrote its plan; set once, at
    /// creation (or recovery), and never changed.
    pub origin: Option<Arc<super::Origin>>,
}

/// Whether a task in `state` waits for the operator's review (no reviewer
/// attempt will decide it).
pub fn in_operator_review(state: TaskState, spec: &TaskSpec) -> bool {
    state == TaskState::Review && spec.review.as_deref().is_some_and(|r| !r.has_reviewer())
}

pub fn state_index(s: TaskState) -> usize {
    s.index()
}

impl Swarm {
    /// A swarm of `plan` with no task yet: each follows as `TaskAdded`,
    /// which counts it.
    pub fn new(
        plan_text: Arc<str>,
        plan: Arc<Plan>,
        state: SwarmState,
        integration_head: String,
        created_at: i64,
        control: SwarmControl,
    ) -> Swarm {
        Swarm {
            id: plan.swarm.clone(),
            tasks: plan.tasks.iter().map(|t| TaskKey::new(plan.swarm.clone(), t.id.clone())).collect(),
            plan_text,
            plan,
            state,
            integration_head,
            created_at,
            counts: [0; TaskState::ALL.len()],
            stall: None,
            waits_on_operator: BTreeSet::new(),
            usage: Usage::default(),
            control,
            ended_at: 0,
            origin: None,
        }
    }

    /// Whether nothing of it moves again unless the operator retries a task.
    pub fn has_ended(&self) -> bool {
        matches!(self.state, SwarmState::Completed | SwarmState::Failed | SwarmState::Cancelled)
    }

    /// When it ended (see [`Swarm::has_ended`]), if the model saw it end.
    pub fn ended_at(&self) -> Option<i64> {
        (self.ended_at > 0).then_some(self.ended_at)
    }

    pub fn counts(&self) -> &[u32; TaskState::ALL.len()] {
        &self.counts
    }

    pub fn count(&self, state: TaskState) -> u32 {
        self.counts[state.index()]
    }

    pub fn waits_on_operator(&self) -> &BTreeSet<TaskKey> {
        &self.waits_on_operator
    }

    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    pub fn row(&self) -> SwarmRow {
        SwarmRow {
            id: self.id.to_string(),
            plan: self.plan_text.clone(),
            state: self.state.as_str().into(),
            integration_head: self.integration_head.clone(),
            created_at: self.created_at,
            control: self.control.to_json(),
            origin: super::Origin::to_json(self.origin.as_deref()),
        }
    }
}

/// What the controller remembers about a task beyond its state; rendered
/// into the next attempt's task text.
///
/// Empty fields are left out of the stored JSON (every field defaults on
/// reading): a task row is rewritten on each transition, and most tasks'
/// notes stay empty, which is then `{}` rather than ~110 bytes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Notes {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<QuestionAnswer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_question: Option<PendingQuestion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_changed: Vec<String>,
    /// The operator's messages to the task's workers, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// The review gate's record; boxed, since most tasks have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Box<ReviewNotes>>,
    /// The budget as the operator last set it; `None`: the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<TaskBudget>,
    /// What the pull request's CI and reviewers said of this task's work,
    /// oldest first; its next attempt reads them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feedback: Vec<String>,
}

impl Notes {
    const EMPTY: Notes = Notes {
        failures: Vec::new(),
        answers: Vec::new(),
        pending_question: None,
        conflict: None,
        summary: String::new(),
        files_changed: Vec::new(),
        messages: Vec::new(),
        review: None,
        budget: None,
        feedback: Vec::new(),
    };
}

/// A task's notes, allocated on the first write: most tasks of a big swarm
/// never fail, ask or conflict, and inline notes would cost every task
/// ~200 bytes at rest. Reads of absent notes see empty ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LazyNotes(Option<Box<Notes>>);

impl std::ops::Deref for LazyNotes {
    type Target = Notes;
    fn deref(&self) -> &Notes {
        static EMPTY: Notes = Notes::EMPTY;
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl std::ops::DerefMut for LazyNotes {
    fn deref_mut(&mut self) -> &mut Notes {
        self.0.get_or_insert_with(Box::default)
    }
}

impl LazyNotes {
    /// The stored form; absent notes are written without serializing the
    /// empty ones (a task row is written on every transition).
    pub fn to_json(&self) -> String {
        match &self.0 {
            None => "{}".into(),
            Some(n) => serde_json::to_string(&**n).unwrap_or_else(|_| "{}".into()),
        }
    }
}

impl From<Notes> for LazyNotes {
    fn from(n: Notes) -> Self {
        if n == Notes::EMPTY { LazyNotes(None) } else { LazyNotes(Some(Box::new(n))) }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PendingQuestion {
    pub id: String,
    pub text: String,
    pub category: String,
    pub attempt: u32,
    /// Choices offered with it (older stores have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuestionAnswer {
    pub question_id: String,
    pub question: String,
    pub answer: String,
    /// The attempt that was running when it was given (0: none, or an
    /// older store): an agent that asks and then exits races its answer,
    /// and the attempt's end must not ask the operator again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub during_attempt: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug)]
pub struct Task {
    pub key: TaskKey,
    pub spec: Arc<TaskSpec>,
    /// Its owned globs compiled, when they are not all plain paths (see
    /// `Ownership`).
    pub globs: Option<Arc<swarm_core::globs::OwnedGlobs>>,
    /// Changed only by `Transition::TaskState`, which keeps the indexes.
    pub(super) state: TaskState,
    pub attempts: u32,
    pub retries_used: u32,
    /// Unix ms before which a READY task is not assigned (retry backoff,
    /// lost-lease grace).
    pub not_before: i64,
    pub resume_commit: String,
    pub result_commit: String,
    pub merge_commit: String,
    pub reason: String,
    pub cancel_requested: bool,
    pub notes: LazyNotes,
    pub updated_at: i64,
    /// Live progress; not persisted (it is reported again).
    pub percent: u32,
    pub step: String,
    /// The remaining critical path below it, its own weight included, in
    /// ms, as its swarm's paths were last computed (see `ready.rs`; derived,
    /// not stored).
    pub(super) path: u64,
}

impl Task {
    /// A task of `spec` in `state`, with nothing else to remember yet.
    pub fn new(key: TaskKey, spec: Arc<TaskSpec>, state: TaskState, updated_at: i64) -> Task {
        Task {
            key,
            globs: super::Ownership::compile(&spec),
            spec,
            state,
            attempts: 0,
            retries_used: 0,
            not_before: 0,
            resume_commit: String::new(),
            result_commit: String::new(),
            merge_commit: String::new(),
            reason: String::new(),
            cancel_requested: false,
            notes: LazyNotes::default(),
            updated_at,
            percent: 0,
            step: String::new(),
            path: 0,
        }
    }

    pub fn state(&self) -> TaskState {
        self.state
    }

    pub fn row(&self) -> TaskRow {
        TaskRow {
            swarm: self.key.swarm.to_string(),
            id: self.key.task.to_string(),
            state: self.state.as_str().into(),
            attempts: self.attempts,
            retries_used: self.retries_used,
            not_before: self.not_before,
            resume_commit: self.resume_commit.clone(),
            result_commit: self.result_commit.clone(),
            merge_commit: self.merge_commit.clone(),
            reason: self.reason.clone(),
            cancel_requested: self.cancel_requested,
            notes: self.notes.to_json(),
            updated_at: self.updated_at,
        }
    }
}

pub use swarm_core::TierOutcome;

#[derive(Debug, Clone)]
pub struct Attempt {
    pub task: TaskKey,
    pub number: u32,
    pub state: AttemptState,
    pub worker: String,
    pub token: u64,
    pub base_commit: String,
    pub result_commit: String,
    pub outcome: Option<Outcome>,
    pub exit_code: i32,
    pub summary: String,
    pub error: String,
    pub started_at: i64,
    pub ended_at: i64,
    pub tiers: Vec<TierOutcome>,
    /// Agent attempts only; default for a plain command.
    pub agent: AgentRecord,
}

/// What the controller keeps of an agent attempt: which agent, the session
/// a later attempt may resume, and what it spent (stored as JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AgentRecord {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub session_id: String,
    #[serde(default)]
    pub usage: Usage,
}

impl AgentRecord {
    pub fn to_json(&self) -> String {
        if *self == AgentRecord::default() {
            return String::new();
        }
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored record; an unreadable one counts as none (it only feeds
    /// views and resumption, never a state transition).
    pub fn from_json(s: &str) -> AgentRecord {
        if s.is_empty() {
            return AgentRecord::default();
        }
        serde_json::from_str(s).unwrap_or_default()
    }
}

impl Attempt {
    /// A new attempt starting now from `base_commit`: nothing reported yet.
    pub fn begin(
        task: TaskKey,
        number: u32,
        state: AttemptState,
        worker: String,
        token: u64,
        base_commit: String,
        agent: AgentRecord,
    ) -> Attempt {
        Attempt {
            task,
            number,
            state,
            worker,
            token,
            base_commit,
            result_commit: String::new(),
            outcome: None,
            exit_code: 0,
            summary: String::new(),
            error: String::new(),
            started_at: now_ms(),
            ended_at: 0,
            tiers: Vec::new(),
            agent,
        }
    }

    pub fn row(&self) -> AttemptRow {
        AttemptRow {
            swarm: self.task.swarm.to_string(),
            task: self.task.task.to_string(),
            number: self.number,
            state: self.state.as_str().into(),
            worker: self.worker.clone(),
            token: self.token,
            base_commit: self.base_commit.clone(),
            result_commit: self.result_commit.clone(),
            outcome: self.outcome.map(|o| o.as_str().to_string()).unwrap_or_default(),
            exit_code: self.exit_code,
            summary: self.summary.clone(),
            error: self.error.clone(),
            started_at: self.started_at,
            ended_at: self.ended_at,
            tiers: serde_json::to_string(&self.tiers).unwrap_or_else(|_| "[]".into()),
            agent: self.agent.to_json(),
        }
    }

    pub fn label(&self) -> String {
        self.task.attempt(self.number).to_string()
    }
}

/// A connected sidecar's stream. Outbound messages are queued without
/// blocking the scheduler; a sidecar that does not drain its queue is
/// disconnected.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: u64,
    pub tx: super::messages::OutboundTx,
    /// Milliseconds since the controller started at which the sidecar was
    /// last heard from; written by the stream reader without a round trip
    /// through the scheduler.
    pub last_seen: Arc<AtomicU64>,
    /// Cancelled by the scheduler to end the stream when the sidecar
    /// cannot keep up (its outbound queue is full): a message is never
    /// dropped silently; the sidecar reconnects and its Hello brings it up
    /// to date (the current Assign is sent again, its journal replayed).
    pub closed: tokio_util::sync::CancellationToken,
}

#[derive(Debug)]
pub struct Worker {
    pub id: String,
    pub host: String,
    pub labels: BTreeMap<String, String>,
    pub last_applied_seq: u64,
    pub draining: bool,
    pub session: Option<Session>,
    /// The attempt it holds, if any: bound by `AttemptAdded`, let go by
    /// `WorkerFreed`.
    pub(super) attempt: Option<(TaskKey, u32)>,
    pub updated_at: i64,
    /// Given in Welcome and kept in the sidecar's journal: while the id has
    /// a live session or an attempt, only a Hello carrying it (or the same
    /// credential) may take the id over.
    pub resume_secret: String,
    /// The credential the worker last connected with; empty without one.
    pub principal: String,
    /// The merge queue job it is verifying; it takes no attempt meanwhile.
    pub verifying: Option<u64>,
    /// Whether the sidecar of its session is known to hold
    /// `resume_secret`: it presented it (or the worker's credential) in its
    /// Hello, or spoke after its Welcome. Until then it is given no work, so
    /// a Welcome lost with its stream or a controller crash never leaves an
    /// attempt with a worker that cannot prove its claim. In memory only:
    /// after a restart every sidecar says Hello again.
    pub holds_secret: bool,
}

impl Worker {
    /// A worker first heard of now, with no session yet.
    pub fn new(id: String, updated_at: i64) -> Worker {
        Worker {
            id,
            host: String::new(),
            labels: BTreeMap::new(),
            last_applied_seq: 0,
            draining: false,
            session: None,
            attempt: None,
            updated_at,
            resume_secret: String::new(),
            principal: String::new(),
            verifying: None,
            holds_secret: false,
        }
    }

    pub fn attempt(&self) -> Option<&(TaskKey, u32)> {
        self.attempt.as_ref()
    }

    pub fn row(&self) -> WorkerRow {
        WorkerRow {
            id: self.id.clone(),
            host: self.host.clone(),
            labels: serde_json::to_string(&self.labels).unwrap_or_else(|_| "{}".into()),
            last_applied_seq: self.last_applied_seq,
            draining: self.draining,
            updated_at: self.updated_at,
            resume_secret: self.resume_secret.clone(),
            principal: self.principal.clone(),
        }
    }

    pub fn is_idle(&self) -> bool {
        self.session.is_some()
            && self.holds_secret
            && !self.draining
            && self.attempt.is_none()
            && self.verifying.is_none()
    }

    /// A worker may take a task when it carries every label the task asks
    /// for, with the same value.
    pub fn satisfies(&self, required: &BTreeMap<String, String>) -> bool {
        required.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }
}

/// A task's budget in force: the operator's, else the plan's.
pub fn task_budget(task: &Task) -> Budget {
    match task.notes.budget {
        Some(b) => Budget { usd: b.usd, tokens: b.tokens },
        None => task.spec.budget,
    }
}

/// A swarm's budget in force: the operator's, else the plan's.
pub fn swarm_budget(swarm: &Swarm) -> SwarmBudget {
    match swarm.control.budget {
        Some(b) => SwarmBudget {
            limit: Budget { usd: b.usd, tokens: b.tokens },
            max_usd_per_hour: b.max_usd_per_hour,
        },
        None => swarm.plan.budget,
    }
}

/// What a task's attempts spent, summed.
pub fn task_usage(task: &Task, attempts: &Attempts) -> Usage {
    let mut sum = Usage::default();
    for n in 1..=task.attempts {
        if let Some(a) = attempts.get(&(task.key.clone(), n)) {
            sum.add(&a.agent.usage);
        }
    }
    sum
}

pub type Tasks = HashMap<TaskKey, Task>;
pub type Attempts = HashMap<(TaskKey, u32), Attempt>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_stored_without_their_empty_fields_and_read_back_whole() {
        assert_eq!(LazyNotes::default().to_json(), "{}");
        let mut notes = LazyNotes::default();
        notes.failures.push("attempt 1: exit 1".into());
        notes.conflict = Some("src/a.rs".into());
        let json = notes.to_json();
        assert_eq!(json, r#"{"failures":["attempt 1: exit 1"],"conflict":"src/a.rs"}"#);
        let back: Notes = serde_json::from_str(&json).expect("parse");
        assert_eq!(&back, &*notes);
        // What earlier controllers wrote, every field present, still reads.
        let full = r#"{"failures":[],"answers":[],"pending_question":null,"conflict":null,"summary":"","files_changed":[],"messages":[]}"#;
        assert_eq!(serde_json::from_str::<Notes>(full).expect("parse"), Notes::default());
    }
}
