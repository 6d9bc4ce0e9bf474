//! The plan file: a TOML document listing a swarm's tasks, their
//! dependencies, owned files, verification and worker command.
//!
//! Parsing happens in two steps: serde reads the raw document (unknown keys
//! are errors, with their path), then [`validate`] checks the rules that
//! span fields and builds the validated [`Plan`]. Every error names the path
//! of the offending field and the rule it broke, e.g.
//! `tasks[3].deps[0]: unknown task "db"`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

use crate::ids::{SwarmId, TaskId};
use crate::names::{check_branch, check_glob, check_id, check_text};

pub mod agent;
pub mod budget;
mod critical;
pub mod forge;
pub mod integration;
pub mod limits;
pub mod prices;
pub mod repo_rules;
pub mod review;
pub mod sandbox;
pub mod schedule;
pub mod secrets;
pub mod spawn;
pub mod subplan;
pub use agent::{AgentInstructions, AgentKind, AgentSpec, Otherwise, PermissionPolicy, PermissionRule};
pub use budget::{Budget, OnUsageLimit, SwarmBudget};
pub use critical::critical_paths;
pub use forge::ForgeSpec;
pub use limits::Limits;
pub use prices::{Price, PriceTable};
pub use review::ReviewSpec;
pub use sandbox::{SandboxMode, SandboxSpec};
pub use schedule::Schedule;
pub use secrets::SecretSource;
pub use subplan::{DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT, swarm_namespace};

/// Largest plan we accept: bounds memory and work for input from a user or
/// the network.
pub const MAX_PLAN_BYTES: usize = 4 << 20;
pub const MAX_TASKS: usize = 50_000;
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    /// Where in the document, e.g. `tasks[3].deps[0]`.
    pub path: String,
    /// The rule that was broken.
    pub rule: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() { f.write_str(&self.rule) } else { write!(f, "{}: {}", self.path, self.rule) }
    }
}

impl std::error::Error for PlanError {}

fn err(path: impl Into<String>, rule: impl Into<String>) -> PlanError {
    PlanError { path: path.into(), rule: rule.into() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MergeStrategy {
    /// A no-fast-forward merge commit naming the task and attempt.
    #[default]
    Merge,
    /// One commit carrying the task's summary.
    Squash,
    /// The task's commits replayed onto the integration head.
    Rebase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ConflictPolicy {
    /// Start a new attempt from the current integration head, with the
    /// conflict described in its task text.
    #[default]
    Return,
    /// Wait for the operator's RetryTask.
    Hold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OwnershipPolicy {
    /// Refuse a result that touches files outside the task's globs.
    #[default]
    Enforce,
    /// Merge it, and record a warning event.
    Warn,
}

macro_rules! text_enum {
    ($ty:ident { $($variant:ident = $text:literal),+ }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
text_enum!(MergeStrategy { Merge = "merge", Squash = "squash", Rebase = "rebase" });
text_enum!(ConflictPolicy { Return = "return", Hold = "hold" });
text_enum!(OwnershipPolicy { Enforce = "enforce", Warn = "warn" });

/// When a task's setup commands run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SetupOn {
    /// When the sidecar makes its worktree (the worktree, and its build
    /// caches, are then reused across tasks).
    #[default]
    Create,
    /// Before every attempt.
    Attempt,
}
text_enum!(SetupOn { Create = "create", Attempt = "attempt" });

/// What a succeeded attempt that changed no file comes to: an agent that
/// claims success without an edit has usually failed quietly (its commands
/// never ran), while a command may rightly have nothing to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnEmpty {
    /// The attempt fails with "no change", retried like any failure (the
    /// default for agent tasks).
    Fail,
    /// It merges, and the task says it changed nothing (the default for
    /// command tasks).
    Merge,
}
text_enum!(OnEmpty { Fail = "fail", Merge = "merge" });

/// Exponential backoff with jitter, in the spirit of Temporal and Nomad.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 2 by default.
    pub max_retries: u32,
    pub initial_backoff_ms: u64,
    pub multiplier: f64,
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_retries: 2, initial_backoff_ms: 1_000, multiplier: 2.0, max_backoff_ms: 60_000 }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (1-based), before jitter.
    pub fn backoff_ms(&self, retry: u32) -> u64 {
        let exp = self.multiplier.powi(retry.saturating_sub(1).min(63) as i32);
        let raw = (self.initial_backoff_ms as f64) * exp;
        if raw.is_finite() { (raw as u64).min(self.max_backoff_ms) } else { self.max_backoff_ms }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyTier {
    pub name: String,
    pub command: String,
    pub blocking: bool,
    pub timeout_secs: u32,
}

/// One validated task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub id: TaskId,
    pub title: String,
    pub prompt: String,
    pub context: String,
    pub acceptance: Vec<String>,
    pub deps: Vec<TaskId>,
    /// Owned file globs, relative to the repository root.
    pub files: Vec<String>,
    pub verify: Vec<VerifyTier>,
    pub retry: RetryPolicy,
    /// Labels a worker must carry (equal values) to take this task; shared
    /// with the defaults when the task adds none (a one-entry BTreeMap costs
    /// half a kilobyte, times every task of a big plan).
    pub labels: Arc<BTreeMap<String, String>>,
    /// The worker's argv; shared with the defaults' when the task sets no
    /// command of its own (one `sh -c` argv is ~140 bytes, times every task).
    pub command: Arc<[String]>,
    pub env: BTreeMap<String, String>,
    pub idle_timeout_secs: u32,
    pub max_restarts: u32,
    pub strategy: MergeStrategy,
    pub on_conflict: ConflictPolicy,
    pub ownership: OwnershipPolicy,
    pub setup: Vec<String>,
    pub setup_on: SetupOn,
    pub on_empty: OnEmpty,
    /// Set: a coding agent runs the task and `command` is empty. Boxed: most
    /// tasks run a command, and the agent's settings would cost each of
    /// them a few hundred bytes inline.
    pub agent: Option<Box<AgentSpec>>,
    /// Set: the task runs this plan as a child swarm (`<swarm>/<task>`)
    /// instead of a worker, and `command` is empty.
    pub subplan: Option<Arc<Plan>>,
    /// Set: a succeeded result waits in REVIEW for this reviewer (or the
    /// operator) before the merge path; shared with the defaults'.
    pub review: Option<Arc<ReviewSpec>>,
    /// How the worker is confined (shared with the defaults unless the
    /// task sets its own).
    pub sandbox: Arc<SandboxSpec>,
    /// Variables the sidecar reads from its machine for this task's worker
    /// only: the sources, never the values.
    pub secrets: BTreeMap<String, SecretSource>,
    /// What its agent attempts may spend, all together.
    pub budget: Budget,
    pub on_usage_limit: OnUsageLimit,
    /// Higher runs first among READY tasks; the swarm's own `priority` is
    /// added to it when tasks are ranked.
    pub priority: i32,
    /// How long the task is expected to take, in milliseconds: its weight
    /// on the critical path. `None`: what the swarm's tasks took so far.
    pub estimate_ms: Option<u64>,
}

/// A validated plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub swarm: SwarmId,
    pub base_branch: String,
    pub integration_branch: String,
    /// Where `Land` moves the integration head; defaults to the base branch.
    pub target_branch: String,
    /// Shared with the controller's task table rather than copied into it.
    pub tasks: Vec<Arc<TaskSpec>>,
    /// How deep sub-plans may nest below the root plan.
    pub max_depth: u32,
    /// Set: results go through a merge queue that verifies the merged
    /// tree before the integration ref moves (root plans only).
    pub integration: Option<Arc<integration::IntegrationVerify>>,
    /// What the swarm's agent attempts may spend (root plans only).
    pub budget: SwarmBudget,
    /// Its priority, fair share and cap on running tasks (root plans only;
    /// a child swarm takes the defaults).
    pub schedule: Schedule,
    /// Where the finished work is pushed and reviewed (root plans only).
    pub forge: Option<Arc<ForgeSpec>>,
    /// What its agents' tokens cost, over the built-in table (root plans
    /// only: a child swarm's agents are priced by its root's).
    pub prices: Arc<PriceTable>,
}

impl Plan {
    /// Parses and validates a plan document.
    pub fn parse(text: &str) -> Result<Plan, PlanError> {
        if text.len() > MAX_PLAN_BYTES {
            return Err(err("", format!("plan must be at most {MAX_PLAN_BYTES} bytes")));
        }
        let de = toml::Deserializer::parse(text).map_err(|e| err("", toml_message(&e)))?;
        let raw: RawPlan = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            err(path, toml_message(e.inner()))
        })?;
        validate(raw)
    }

    pub fn task(&self, id: &TaskId) -> Option<&Arc<TaskSpec>> {
        self.tasks.iter().find(|t| &t.id == id)
    }
}

fn toml_message(e: &toml::de::Error) -> String {
    let message = e.message().trim().to_string();
    match e.span() {
        Some(span) => format!("{message} (at byte {})", span.start),
        None => message,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    name: String,
    base_branch: Option<String>,
    integration_branch: Option<String>,
    target_branch: Option<String>,
    max_depth: Option<u32>,
    integration_verify: Option<Vec<RawTier>>,
    merge_queue: Option<integration::RawMergeQueue>,
    budget: Option<budget::RawBudget>,
    forge: Option<forge::RawForge>,
    prices: Option<BTreeMap<String, prices::RawPrice>>,
    priority: Option<i64>,
    share: Option<u32>,
    max_parallel: Option<u32>,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    tasks: Vec<RawTask>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    command: Option<Command>,
    retries: Option<u32>,
    backoff_initial_ms: Option<u64>,
    backoff_multiplier: Option<f64>,
    backoff_max_ms: Option<u64>,
    idle_timeout_secs: Option<u32>,
    max_restarts: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    verify: Option<Vec<RawTier>>,
    strategy: Option<MergeStrategy>,
    on_conflict: Option<ConflictPolicy>,
    ownership: Option<OwnershipPolicy>,
    #[serde(default)]
    setup: Vec<String>,
    setup_on: Option<SetupOn>,
    on_empty: Option<OnEmpty>,
    agent: Option<AgentKind>,
    agent_path: Option<String>,
    agent_command: Option<Vec<String>>,
    model: Option<String>,
    max_turns: Option<u32>,
    max_budget_usd: Option<f64>,
    allowed_tools: Option<Vec<String>>,
    permission_mode: Option<String>,
    append_system_prompt: Option<String>,
    agent_instructions: Option<agent::RawInstructions>,
    extra_args: Option<Vec<String>>,
    permissions: Option<agent::RawPermissions>,
    review: Option<review::RawReview>,
    sandbox: Option<sandbox::RawSandbox>,
    limits: Option<limits::RawLimits>,
    secrets: Option<BTreeMap<String, secrets::RawSecret>>,
    budget_usd: Option<f64>,
    budget_tokens: Option<u64>,
    on_usage_limit: Option<OnUsageLimit>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: String,
    title: Option<String>,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    acceptance: Vec<String>,
    #[serde(default)]
    deps: Vec<String>,
    #[serde(default)]
    files: Vec<String>,
    verify: Option<Vec<RawTier>>,
    retries: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    command: Option<Command>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    idle_timeout_secs: Option<u32>,
    max_restarts: Option<u32>,
    strategy: Option<MergeStrategy>,
    on_conflict: Option<ConflictPolicy>,
    ownership: Option<OwnershipPolicy>,
    setup: Option<Vec<String>>,
    setup_on: Option<SetupOn>,
    on_empty: Option<OnEmpty>,
    agent: Option<AgentKind>,
    agent_path: Option<String>,
    agent_command: Option<Vec<String>>,
    model: Option<String>,
    max_turns: Option<u32>,
    max_budget_usd: Option<f64>,
    allowed_tools: Option<Vec<String>>,
    permission_mode: Option<String>,
    append_system_prompt: Option<String>,
    agent_instructions: Option<agent::RawInstructions>,
    extra_args: Option<Vec<String>>,
    permissions: Option<agent::RawPermissions>,
    /// A sub-plan file, relative to this plan's file: swarmctl inlines it
    /// as `subplan` before it submits the plan.
    plan: Option<String>,
    /// An inline sub-plan whose tasks share this plan's defaults.
    subtasks: Option<Vec<RawTask>>,
    /// A sub-plan with defaults of its own (an inlined `plan` file).
    subplan: Option<subplan::RawSubPlan>,
    /// Set by swarm, not by hand: the sub-plan's tasks were spawned by the
    /// agent running this task (see `plan/spawn.rs`).
    #[serde(default)]
    spawned: bool,
    /// Overrides the defaults' review; `"none"` opts out of it.
    review: Option<review::RawReview>,
    /// Overrides the defaults' sandbox, field by field.
    sandbox: Option<sandbox::RawSandbox>,
    /// Overrides the defaults' limits, field by field.
    limits: Option<limits::RawLimits>,
    /// Added to the defaults' secrets.
    secrets: Option<BTreeMap<String, secrets::RawSecret>>,
    budget_usd: Option<f64>,
    budget_tokens: Option<u64>,
    on_usage_limit: Option<OnUsageLimit>,
    priority: Option<i64>,
    estimate: Option<String>,
}

/// The agent fields of `[defaults]` and `[[tasks]]` (serde cannot flatten
/// them into a struct that denies unknown fields).
macro_rules! agent_fields {
    ($raw:expr) => {
        agent::RawAgentFields {
            agent: $raw.agent,
            agent_path: $raw.agent_path.clone(),
            agent_command: $raw.agent_command.clone(),
            model: $raw.model.clone(),
            max_turns: $raw.max_turns,
            max_budget_usd: $raw.max_budget_usd,
            allowed_tools: $raw.allowed_tools.clone(),
            permission_mode: $raw.permission_mode.clone(),
            append_system_prompt: $raw.append_system_prompt.clone(),
            agent_instructions: $raw.agent_instructions.clone(),
            extra_args: $raw.extra_args.clone(),
            permissions: $raw.permissions.clone(),
        }
    };
}

/// A worker command: a shell line (run with `sh -c`) or an argv array.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Command {
    Shell(String),
    Argv(Vec<String>),
}

impl Command {
    fn into_argv(self) -> Vec<String> {
        match self {
            Command::Shell(line) => vec!["sh".into(), "-c".into(), line],
            Command::Argv(argv) => argv,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    name: String,
    command: String,
    #[serde(default = "yes")]
    blocking: bool,
    #[serde(default = "default_tier_timeout")]
    timeout_secs: u32,
}

fn yes() -> bool {
    true
}

fn default_tier_timeout() -> u32 {
    600
}

/// Environment names a plan may not override: the sidecar owns them.
const RESERVED_ENV_PREFIX: &str = "SWARM_";

fn validate(raw: RawPlan) -> Result<Plan, PlanError> {
    // A plan names a root swarm; nested ids are given to child swarms only.
    check_id(&raw.name).map_err(|rule| err("name", rule))?;
    let swarm = SwarmId::new(raw.name.clone()).map_err(|rule| err("name", rule))?;
    let base_branch = raw.base_branch.unwrap_or_else(|| "main".to_string());
    check_branch(&base_branch).map_err(|rule| err("base_branch", rule))?;
    let integration_branch = raw.integration_branch.unwrap_or_else(|| format!("swarm/{swarm}/integration"));
    check_branch(&integration_branch).map_err(|rule| err("integration_branch", rule))?;
    if integration_branch == base_branch {
        return Err(err("integration_branch", "must differ from base_branch"));
    }
    let target_branch = raw.target_branch.unwrap_or_else(|| base_branch.clone());
    check_branch(&target_branch).map_err(|rule| err("target_branch", rule))?;
    if target_branch == integration_branch {
        return Err(err("target_branch", "must differ from integration_branch"));
    }
    // The swarm's own namespace holds its task branches; landing there
    // would move one of them.
    if target_branch.starts_with(&format!("swarm/{swarm}/")) {
        return Err(err(
            "target_branch",
            format!("must lie outside the swarm's own branches (swarm/{swarm}/)"),
        ));
    }

    let max_depth = raw.max_depth.unwrap_or(DEFAULT_MAX_DEPTH);
    if max_depth > MAX_DEPTH_LIMIT {
        return Err(err("max_depth", format!("must be at most {MAX_DEPTH_LIMIT}")));
    }
    let frame = subplan::Frame { swarm, base_branch, integration_branch, target_branch, depth: 0, max_depth };
    let integration = integration::validate(raw.integration_verify, raw.merge_queue)?;
    let budget = budget::swarm_budget(raw.budget.as_ref())?;
    let schedule = schedule::swarm(raw.priority, raw.share, raw.max_parallel)?;
    let forge = forge::validate(raw.forge.as_ref())?.map(Arc::new);
    let prices = Arc::new(prices::resolve(raw.prices.as_ref())?);
    let plan = validate_body(frame, &raw.defaults, &raw.tasks)?;
    Ok(Plan { integration: integration.map(Arc::new), budget, schedule, forge, prices, ..plan })
}

/// Validates the defaults and tasks of the plan `frame` names: the root
/// plan or, recursively, a sub-plan.
fn validate_body(frame: subplan::Frame, d: &RawDefaults, raw_tasks: &[RawTask]) -> Result<Plan, PlanError> {
    let subplan::Frame { swarm, base_branch, integration_branch, target_branch, .. } = frame.clone();
    if raw_tasks.is_empty() {
        return Err(err("tasks", "a plan needs at least one task"));
    }
    if raw_tasks.len() > MAX_TASKS {
        return Err(err("tasks", format!("at most {MAX_TASKS} tasks")));
    }
    check_labels("defaults.labels", &d.labels)?;
    check_env("defaults.env", &d.env)?;
    let default_verify = check_tiers("defaults.verify", d.verify.clone().unwrap_or_default())?;
    if d.command.is_some() && d.agent.is_some() {
        return Err(err("defaults.agent", "set command or agent, not both"));
    }
    let default_agent = agent_fields!(d);
    let default_command: Option<Arc<[String]>> = d.command.clone().map(|c| c.into_argv().into());
    let default_labels = Arc::new(d.labels.clone());
    let default_retry = RetryPolicy {
        max_retries: d.retries.unwrap_or(RetryPolicy::default().max_retries),
        initial_backoff_ms: d.backoff_initial_ms.unwrap_or(RetryPolicy::default().initial_backoff_ms),
        multiplier: d.backoff_multiplier.unwrap_or(RetryPolicy::default().multiplier),
        max_backoff_ms: d.backoff_max_ms.unwrap_or(RetryPolicy::default().max_backoff_ms),
    };
    if !(1.0..=10.0).contains(&default_retry.multiplier) {
        return Err(err("defaults.backoff_multiplier", "must be between 1.0 and 10.0"));
    }
    if default_retry.max_retries > 100 {
        return Err(err("defaults.retries", "must be at most 100"));
    }
    if default_retry.initial_backoff_ms > default_retry.max_backoff_ms {
        return Err(err("defaults.backoff_initial_ms", "must not exceed defaults.backoff_max_ms"));
    }

    let default_secrets = secrets::resolve("defaults.secrets", d.secrets.as_ref(), &BTreeMap::new(), &d.env)?;
    let mut default_sandbox =
        sandbox::resolve("defaults.sandbox", d.sandbox.as_ref(), &SandboxSpec::default())?;
    default_sandbox.limits = limits::resolve("defaults.limits", d.limits.as_ref(), &Limits::default())?;
    let default_sandbox = Arc::new(default_sandbox);
    let default_budget = budget::task_budget("defaults.", d.budget_usd, d.budget_tokens)?;
    let default_review = match &d.review {
        Some(r) => review::parse("defaults.review", r)?.map(Arc::new),
        None => None,
    };

    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, task) in raw_tasks.iter().enumerate() {
        check_id(&task.id).map_err(|rule| err(format!("tasks[{i}].id"), rule))?;
        if let Some(first) = index.insert(&task.id, i) {
            return Err(err(
                format!("tasks[{i}].id"),
                format!("duplicate task id {:?} (first at tasks[{first}])", task.id),
            ));
        }
    }

    // Task branches are `swarm/<swarm>/<task>`: none may be, or be a path
    // prefix of, a branch the swarm already uses (git refs cannot nest).
    let namespace = subplan::swarm_namespace(&swarm);
    let mut branch = String::new();
    for (i, task) in raw_tasks.iter().enumerate() {
        // One buffer for every task's branch: a big plan has tens of
        // thousands of tasks, and this check runs on each.
        branch.clear();
        branch.push_str(&namespace);
        branch.push_str(&task.id);
        for (field, other) in [
            ("base_branch", &base_branch),
            ("integration_branch", &integration_branch),
            ("target_branch", &target_branch),
        ] {
            if *other == branch || ref_nests(other, &branch) || ref_nests(&branch, other) {
                return Err(err(
                    format!("tasks[{i}].id"),
                    format!("task branch {branch:?} collides with {field} {other:?}"),
                ));
            }
        }
    }

    let mut tasks = Vec::with_capacity(raw_tasks.len());
    for (i, task) in raw_tasks.iter().enumerate() {
        let at = |field: &str| format!("tasks[{i}].{field}");
        let sub = subplan::child(&frame, i, task, d)?;
        let mut deps = Vec::with_capacity(task.deps.len());
        for (j, dep) in task.deps.iter().enumerate() {
            if !index.contains_key(dep.as_str()) {
                return Err(err(format!("tasks[{i}].deps[{j}]"), format!("unknown task {dep:?}")));
            }
            if dep == &task.id {
                return Err(err(format!("tasks[{i}].deps[{j}]"), "a task cannot depend on itself"));
            }
            let dep = TaskId::new(dep.clone()).map_err(|rule| err(format!("tasks[{i}].deps[{j}]"), rule))?;
            if deps.contains(&dep) {
                return Err(err(format!("tasks[{i}].deps[{j}]"), format!("duplicate dependency {dep:?}")));
            }
            deps.push(dep);
        }
        if task.files.is_empty() {
            return Err(err(at("files"), "a task must own at least one file glob"));
        }
        for (j, glob) in task.files.iter().enumerate() {
            check_glob(glob).map_err(|rule| err(format!("tasks[{i}].files[{j}]"), rule))?;
        }
        // Compiled as every reader of the globs will (`docs/` is `docs/**`).
        crate::globs::OwnedGlobs::new(&task.files).map_err(|e| err(at("files"), e.to_string()))?;
        check_text(&task.prompt, MAX_PROMPT_BYTES).map_err(|rule| err(at("prompt"), rule))?;
        check_text(&task.context, MAX_PROMPT_BYTES).map_err(|rule| err(at("context"), rule))?;
        let title = task.title.clone().unwrap_or_else(|| task.id.clone());
        check_text(&title, 200).map_err(|rule| err(at("title"), rule))?;
        check_labels(&at("labels"), &task.labels)?;
        check_env(&at("env"), &task.env)?;
        let verify = match &task.verify {
            Some(tiers) => check_tiers(&at("verify"), tiers.clone())?,
            None => default_verify.clone(),
        };
        let agent = agent::resolve(&format!("tasks[{i}]"), &agent_fields!(task), &default_agent)?;
        if task.command.is_some() && task.agent.is_some() {
            return Err(err(at("agent"), "set command or agent, not both"));
        }
        // A task's own command or agent beats the other one from the defaults.
        let (command, agent): (Arc<[String]>, _) = match (&task.command, &agent) {
            // A sub-swarm runs no worker of its own.
            _ if sub.is_some() => (Arc::new([]), None),
            (Some(c), _) => (c.clone().into_argv().into(), None),
            (None, Some(_)) => (Arc::new([]), agent),
            (None, _) => {
                let c = default_command.clone().ok_or_else(|| {
                    err(at("command"), "no worker command: set command or agent here or in [defaults]")
                })?;
                (c, None)
            }
        };
        if sub.is_none() && agent.is_none() && (command.is_empty() || command[0].trim().is_empty()) {
            return Err(err(at("command"), "must not be empty"));
        }
        let mut sandbox = match &task.sandbox {
            Some(raw) => Arc::new(sandbox::resolve(&at("sandbox"), Some(raw), &default_sandbox)?),
            None => default_sandbox.clone(),
        };
        if let Some(raw) = &task.limits {
            Arc::make_mut(&mut sandbox).limits =
                limits::resolve(&at("limits"), Some(raw), &default_sandbox.limits)?;
        }
        let mut labels = if task.labels.is_empty() {
            default_labels.clone()
        } else {
            let mut merged = d.labels.clone();
            merged.extend(task.labels.clone());
            Arc::new(merged)
        };
        if sandbox.mode == SandboxMode::Required && sub.is_none() {
            // Waits for a sidecar that enforces everything, as for a label it lacks.
            Arc::make_mut(&mut labels)
                .insert(sandbox::SANDBOX_LABEL.to_string(), sandbox::SANDBOX_ENFORCED.to_string());
        }
        let mut env = d.env.clone();
        env.extend(task.env.clone());
        let secrets = secrets::resolve(&at("secrets"), task.secrets.as_ref(), &default_secrets, &env)?;
        let own_budget = budget::task_budget(&at(""), task.budget_usd, task.budget_tokens)?;
        let budget = Budget {
            usd: own_budget.usd.or(default_budget.usd),
            tokens: own_budget.tokens.or(default_budget.tokens),
        };
        let mut retry = default_retry.clone();
        if let Some(r) = task.retries {
            if r > 100 {
                return Err(err(at("retries"), "must be at most 100"));
            }
            retry.max_retries = r;
        }
        tasks.push(Arc::new(TaskSpec {
            id: TaskId::new(task.id.clone()).map_err(|rule| err(at("id"), rule))?,
            title,
            prompt: task.prompt.clone(),
            context: task.context.clone(),
            acceptance: task.acceptance.clone(),
            deps,
            files: task.files.clone(),
            // Its child swarm's tasks verify their own work.
            verify: if sub.is_some() { Vec::new() } else { verify },
            retry,
            labels,
            command,
            env,
            idle_timeout_secs: task.idle_timeout_secs.or(d.idle_timeout_secs).unwrap_or(120),
            max_restarts: task.max_restarts.or(d.max_restarts).unwrap_or(2),
            strategy: task.strategy.or(d.strategy).unwrap_or_default(),
            on_conflict: task.on_conflict.or(d.on_conflict).unwrap_or_default(),
            ownership: task.ownership.or(d.ownership).unwrap_or_default(),
            setup: task.setup.clone().unwrap_or_else(|| d.setup.clone()),
            setup_on: task.setup_on.or(d.setup_on).unwrap_or_default(),
            on_empty: task.on_empty.or(d.on_empty).unwrap_or(match agent {
                Some(_) => OnEmpty::Fail,
                None => OnEmpty::Merge,
            }),
            agent: agent.map(Box::new),
            subplan: sub,
            review: match &task.review {
                Some(r) => review::parse(&at("review"), r)?.map(Arc::new),
                None => default_review.clone(),
            },
            sandbox,
            secrets,
            budget,
            on_usage_limit: task.on_usage_limit.or(d.on_usage_limit).unwrap_or_default(),
            priority: schedule::priority(&at("priority"), task.priority)?,
            estimate_ms: schedule::estimate(&at("estimate"), task.estimate.as_deref())?,
        }));
        if tasks.last().is_some_and(|t| t.idle_timeout_secs == 0) {
            return Err(err(at("idle_timeout_secs"), "must be at least 1"));
        }
    }

    if let Some(cycle) = find_cycle(&tasks) {
        let first = index.get(cycle[0].as_str()).copied().unwrap_or(0);
        let names: Vec<&str> = cycle.iter().map(|t| t.as_str()).collect();
        return Err(err(format!("tasks[{first}].deps"), format!("dependency cycle: {}", names.join(" -> "))));
    }

    Ok(Plan {
        swarm,
        base_branch,
        integration_branch,
        target_branch,
        tasks,
        max_depth: frame.max_depth,
        integration: None,
        budget: SwarmBudget::default(),
        schedule: Schedule::default(),
        forge: None,
        prices: Arc::default(),
    })
}

/// The branch a task's attempts work on (for a task with a sub-plan, its
/// child swarm's integration branch).
/// `inner` lies under `outer` as a directory (`a/b/c` under `a/b`): git
/// cannot hold both refs.
fn ref_nests(inner: &str, outer: &str) -> bool {
    inner.len() > outer.len() && inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/'
}

pub fn task_branch(swarm: &SwarmId, task: &str) -> String {
    format!("{}{task}", swarm_namespace(swarm))
}

fn check_labels(path: &str, labels: &BTreeMap<String, String>) -> Result<(), PlanError> {
    for (key, value) in labels {
        if key == sandbox::SANDBOX_LABEL {
            return Err(err(
                format!("{path}.{key}"),
                "the sandbox label is set by sidecars themselves; ask for it with sandbox = \"required\"",
            ));
        }
        check_label(key, value).map_err(|rule| err(format!("{path}.{key}"), rule))?;
    }
    Ok(())
}

/// Label keys follow the id pattern (plus `.` and `/` for namespacing);
/// values are short printable text.
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    let key_ok = !key.is_empty()
        && key.len() <= 63
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if !key_ok {
        return Err(format!("label key {key:?} must be 1-63 of [A-Za-z0-9._/-]"));
    }
    if value.len() > 63 || value.chars().any(|c| c.is_control()) {
        return Err(format!("label value {value:?} must be at most 63 printable characters"));
    }
    Ok(())
}

fn check_env(path: &str, env: &BTreeMap<String, String>) -> Result<(), PlanError> {
    for key in env.keys() {
        let ok = !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !key.starts_with(|c: char| c.is_ascii_digit());
        if !ok {
            return Err(err(
                format!("{path}.{key}"),
                "environment names must match ^[A-Za-z_][A-Za-z0-9_]*$",
            ));
        }
        if key.starts_with(RESERVED_ENV_PREFIX) || key == "TRACEPARENT" {
            return Err(err(format!("{path}.{key}"), "SWARM_* and TRACEPARENT are set by the sidecar"));
        }
    }
    Ok(())
}

fn check_tiers(path: &str, tiers: Vec<RawTier>) -> Result<Vec<VerifyTier>, PlanError> {
    let mut out: Vec<VerifyTier> = Vec::with_capacity(tiers.len());
    for (i, tier) in tiers.into_iter().enumerate() {
        check_id(&tier.name).map_err(|rule| err(format!("{path}[{i}].name"), rule))?;
        if out.iter().any(|t| t.name == tier.name) {
            return Err(err(format!("{path}[{i}].name"), format!("duplicate tier {:?}", tier.name)));
        }
        if tier.command.trim().is_empty() {
            return Err(err(format!("{path}[{i}].command"), "must not be empty"));
        }
        if tier.timeout_secs == 0 {
            return Err(err(format!("{path}[{i}].timeout_secs"), "must be at least 1"));
        }
        out.push(VerifyTier {
            name: tier.name,
            command: tier.command,
            blocking: tier.blocking,
            timeout_secs: tier.timeout_secs,
        });
    }
    Ok(out)
}

/// Returns one dependency cycle, first task repeated at the end.
fn find_cycle(tasks: &[Arc<TaskSpec>]) -> Option<Vec<TaskId>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnStack,
        Done,
    }
    let index: HashMap<&TaskId, usize> = tasks.iter().enumerate().map(|(i, t)| (&t.id, i)).collect();
    let mut marks = vec![Mark::New; tasks.len()];
    for root in 0..tasks.len() {
        if marks[root] != Mark::New {
            continue;
        }
        // Iterative DFS: (node, next dep to visit); the stack is the path.
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        marks[root] = Mark::OnStack;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(dep) = tasks[node].deps.get(*next) {
                *next += 1;
                let Some(&d) = index.get(dep) else { continue };
                match marks[d] {
                    Mark::New => {
                        marks[d] = Mark::OnStack;
                        stack.push((d, 0));
                    }
                    Mark::OnStack => {
                        let start = stack.iter().position(|(n, _)| *n == d).unwrap_or(0);
                        let mut cycle: Vec<TaskId> =
                            stack[start..].iter().map(|(n, _)| tasks[*n].id.clone()).collect();
                        cycle.push(tasks[d].id.clone());
                        return Some(cycle);
                    }
                    Mark::Done => {}
                }
            } else {
                marks[node] = Mark::Done;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
