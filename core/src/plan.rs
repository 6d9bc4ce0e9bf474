//! The plan file: a TOML document listing a swarm's tasks, their
//! dependencies, owned files, verification and worker command.
//!
//! Parsing happens in two steps: serde reads the raw document (unknown keys
//! are errors, with their path), then [`validate`] checks the rules that
//! span fields and builds the validated [`Plan`], a section at a time
//! (`defaults.rs`, `task.rs`, `graph.rs`, ...). Every error names the path
//! of the offending field and the rule it broke, e.g.
//! `tasks[3].deps[0]: unknown task "db"`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::ids::{SwarmId, TaskId};
use crate::names::{check_branch, check_id};

pub mod agent;
pub mod budget;
mod critical;
mod defaults;
mod error;
mod fields;
pub mod forge;
mod graph;
pub mod integration;
pub mod limits;
pub mod prices;
mod raw;
pub mod repo_rules;
pub mod review;
pub mod sandbox;
pub mod schedule;
pub mod secrets;
pub mod spawn;
mod spec;
pub mod subplan;
mod task;
pub use agent::{AgentInstructions, AgentKind, AgentSpec, Otherwise, PermissionPolicy, PermissionRule};
pub use budget::{Budget, OnUsageLimit, SwarmBudget};
pub use critical::{critical_paths, critical_paths_weighted};
pub use error::PlanError;
use error::err;
pub use forge::ForgeSpec;
pub use limits::Limits;
pub use prices::{Price, PriceTable};
pub use review::ReviewSpec;
pub use sandbox::{SandboxMode, SandboxSpec};
pub use schedule::Schedule;
pub use secrets::SecretSource;
pub use subplan::{DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT, swarm_namespace};

pub use fields::{VerifyTier, check_label};
pub use spec::{ConflictPolicy, MergeStrategy, OnEmpty, OwnershipPolicy, RetryPolicy, SetupOn, TaskSpec};

/// Largest plan we accept: bounds memory and work for input from a user or
/// the network.
pub const MAX_PLAN_BYTES: usize = 4 << 20;
pub const MAX_TASKS: usize = 50_000;
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;

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
    integration_verify: Option<Vec<fields::RawTier>>,
    merge_queue: Option<integration::RawMergeQueue>,
    budget: Option<budget::RawBudget>,
    forge: Option<forge::RawForge>,
    prices: Option<BTreeMap<String, prices::RawPrice>>,
    priority: Option<i64>,
    share: Option<u32>,
    max_parallel: Option<u32>,
    #[serde(default)]
    defaults: raw::RawDefaults,
    #[serde(default)]
    tasks: Vec<raw::RawTask>,
}

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
fn validate_body(
    frame: subplan::Frame,
    d: &raw::RawDefaults,
    raw_tasks: &[raw::RawTask],
) -> Result<Plan, PlanError> {
    if raw_tasks.is_empty() {
        return Err(err("tasks", "a plan needs at least one task"));
    }
    if raw_tasks.len() > MAX_TASKS {
        return Err(err("tasks", format!("at most {MAX_TASKS} tasks")));
    }
    let defaults = defaults::resolve(d)?;
    let index = graph::index(raw_tasks)?;
    graph::check_branches(&frame, raw_tasks)?;
    let mut tasks = Vec::with_capacity(raw_tasks.len());
    for (i, raw) in raw_tasks.iter().enumerate() {
        tasks.push(Arc::new(task::resolve(&frame, i, raw, &defaults, &index)?));
    }
    graph::check_cycles(&tasks, &index)?;
    let subplan::Frame { swarm, base_branch, integration_branch, target_branch, max_depth, .. } = frame;
    Ok(Plan {
        swarm,
        base_branch,
        integration_branch,
        target_branch,
        tasks,
        max_depth,
        integration: None,
        budget: SwarmBudget::default(),
        schedule: Schedule::default(),
        forge: None,
        prices: Arc::default(),
    })
}

/// The branch a task's attempts work on (for a task with a sub-plan, its
/// child swarm's integration branch).
pub fn task_branch(swarm: &SwarmId, task: &str) -> String {
    format!("{}{task}", swarm_namespace(swarm))
}

#[cfg(test)]
mod tests;
