//! One `[[tasks]]` entry: a check per field, each naming `tasks[i].<field>`
//! and the rule it broke, then the task's own settings over the defaults.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::agent::{self, AgentSpec};
use super::budget::{self, Budget};
use super::defaults::Defaults;
use super::error::{PlanError, err};
use super::fields::{check_env, check_labels, check_tiers};
use super::raw::RawTask;
use super::sandbox::{self, SandboxMode, SandboxSpec};
use super::spec::{OnEmpty, RetryPolicy, TaskSpec};
use super::{MAX_PROMPT_BYTES, Plan, limits, review, schedule, secrets, subplan};
use crate::ids::TaskId;
use crate::names::{check_glob, check_text};

/// The labels a sidecar must carry, shared with the defaults' when equal.
type Labels = Arc<BTreeMap<String, String>>;

/// Checks task `i` and resolves it over the defaults `d`. `index` maps
/// every task id of the plan body to its position.
pub(super) fn resolve(
    frame: &subplan::Frame,
    i: usize,
    task: &RawTask,
    d: &Defaults<'_>,
    index: &HashMap<&str, usize>,
) -> Result<TaskSpec, PlanError> {
    let at = |field: &str| format!("tasks[{i}].{field}");
    let sub = subplan::child(frame, i, task, d.raw)?;
    let deps = deps(i, task, index)?;
    files(i, task)?;
    let title = texts(i, task)?;
    check_labels(&at("labels"), &task.labels)?;
    check_env(&at("env"), &task.env)?;
    let verify = match &task.verify {
        Some(tiers) => check_tiers(&at("verify"), tiers.clone())?,
        None => d.verify.clone(),
    };
    let (command, agent) = worker(i, task, d, sub.as_ref())?;
    let (sandbox, labels) = confinement(i, task, d, sub.is_some())?;
    let mut env = d.raw.env.clone();
    env.extend(task.env.clone());
    let secrets = secrets::resolve(&at("secrets"), task.secrets.as_ref(), &d.secrets, &env)?;
    let budget = budget(i, task, d)?;
    let retry = retry(i, task, d)?;
    let raw = d.raw;
    let spec = TaskSpec {
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
        idle_timeout_secs: task.idle_timeout_secs.or(raw.idle_timeout_secs).unwrap_or(120),
        max_restarts: task.max_restarts.or(raw.max_restarts).unwrap_or(2),
        strategy: task.strategy.or(raw.strategy).unwrap_or_default(),
        on_conflict: task.on_conflict.or(raw.on_conflict).unwrap_or_default(),
        ownership: task.ownership.or(raw.ownership).unwrap_or_default(),
        setup: task.setup.clone().unwrap_or_else(|| raw.setup.clone()),
        setup_on: task.setup_on.or(raw.setup_on).unwrap_or_default(),
        on_empty: task.on_empty.or(raw.on_empty).unwrap_or(match agent {
            Some(_) => OnEmpty::Fail,
            None => OnEmpty::Merge,
        }),
        agent: agent.map(Box::new),
        subplan: sub,
        review: match &task.review {
            Some(r) => review::parse(&at("review"), r)?.map(Arc::new),
            None => d.review.clone(),
        },
        sandbox,
        secrets,
        budget,
        on_usage_limit: task.on_usage_limit.or(raw.on_usage_limit).unwrap_or_default(),
        priority: schedule::priority(&at("priority"), task.priority)?,
        estimate_ms: schedule::estimate(&at("estimate"), task.estimate.as_deref())?,
    };
    if spec.idle_timeout_secs == 0 {
        return Err(err(at("idle_timeout_secs"), "must be at least 1"));
    }
    Ok(spec)
}

/// `deps`: known tasks, not itself, each once.
fn deps(i: usize, task: &RawTask, index: &HashMap<&str, usize>) -> Result<Vec<TaskId>, PlanError> {
    let mut deps = Vec::with_capacity(task.deps.len());
    for (j, dep) in task.deps.iter().enumerate() {
        let at = || format!("tasks[{i}].deps[{j}]");
        if !index.contains_key(dep.as_str()) {
            return Err(err(at(), format!("unknown task {dep:?}")));
        }
        if dep == &task.id {
            return Err(err(at(), "a task cannot depend on itself"));
        }
        let dep = TaskId::new(dep.clone()).map_err(|rule| err(at(), rule))?;
        if deps.contains(&dep) {
            return Err(err(at(), format!("duplicate dependency {dep:?}")));
        }
        deps.push(dep);
    }
    Ok(deps)
}

/// `files`: at least one glob, each valid alone and all compiled together.
fn files(i: usize, task: &RawTask) -> Result<(), PlanError> {
    if task.files.is_empty() {
        return Err(err(format!("tasks[{i}].files"), "a task must own at least one file glob"));
    }
    for (j, glob) in task.files.iter().enumerate() {
        check_glob(glob).map_err(|rule| err(format!("tasks[{i}].files[{j}]"), rule))?;
    }
    // Compiled as every reader of the globs will (`docs/` is `docs/**`).
    crate::globs::OwnedGlobs::new(&task.files)
        .map_err(|e| err(format!("tasks[{i}].files"), e.to_string()))?;
    Ok(())
}

/// `prompt`, `context` and `title` (the id when unset); returns the title.
fn texts(i: usize, task: &RawTask) -> Result<String, PlanError> {
    let at = |field: &str| format!("tasks[{i}].{field}");
    check_text(&task.prompt, MAX_PROMPT_BYTES).map_err(|rule| err(at("prompt"), rule))?;
    check_text(&task.context, MAX_PROMPT_BYTES).map_err(|rule| err(at("context"), rule))?;
    let title = task.title.clone().unwrap_or_else(|| task.id.clone());
    check_text(&title, 200).map_err(|rule| err(at("title"), rule))?;
    Ok(title)
}

/// What runs the task: its argv, or its agent (with an empty argv). A
/// task's own command or agent beats the other one from the defaults; a
/// task with a sub-plan runs neither.
fn worker(
    i: usize,
    task: &RawTask,
    d: &Defaults<'_>,
    sub: Option<&Arc<Plan>>,
) -> Result<(Arc<[String]>, Option<AgentSpec>), PlanError> {
    let at = |field: &str| format!("tasks[{i}].{field}");
    let agent = agent::resolve(&format!("tasks[{i}]"), &task.agent, &d.raw.agent)?;
    if task.command.is_some() && task.agent.agent.is_some() {
        return Err(err(at("agent"), "set command or agent, not both"));
    }
    let (command, agent): (Arc<[String]>, _) = match (&task.command, &agent) {
        // A sub-swarm runs no worker of its own.
        _ if sub.is_some() => (Arc::new([]), None),
        (Some(c), _) => (c.clone().into_argv().into(), None),
        (None, Some(_)) => (Arc::new([]), agent),
        (None, _) => {
            let c = d.command.clone().ok_or_else(|| {
                err(at("command"), "no worker command: set command or agent here or in [defaults]")
            })?;
            (c, None)
        }
    };
    if sub.is_none() && agent.is_none() && (command.is_empty() || command[0].trim().is_empty()) {
        return Err(err(at("command"), "must not be empty"));
    }
    Ok((command, agent))
}

/// `sandbox` and `limits` over the defaults', and the labels a sidecar
/// must carry (a required sandbox waits for a sidecar that enforces
/// everything, as for a label it lacks).
fn confinement(
    i: usize,
    task: &RawTask,
    d: &Defaults<'_>,
    has_subplan: bool,
) -> Result<(Arc<SandboxSpec>, Labels), PlanError> {
    let at = |field: &str| format!("tasks[{i}].{field}");
    let mut sandbox = match &task.sandbox {
        Some(raw) => Arc::new(sandbox::resolve(&at("sandbox"), Some(raw), &d.sandbox)?),
        None => d.sandbox.clone(),
    };
    if let Some(raw) = &task.limits {
        Arc::make_mut(&mut sandbox).limits = limits::resolve(&at("limits"), Some(raw), &d.sandbox.limits)?;
    }
    let mut labels = if task.labels.is_empty() {
        d.labels.clone()
    } else {
        let mut merged = d.raw.labels.clone();
        merged.extend(task.labels.clone());
        Arc::new(merged)
    };
    if sandbox.mode == SandboxMode::Required && !has_subplan {
        Arc::make_mut(&mut labels)
            .insert(sandbox::SANDBOX_LABEL.to_string(), sandbox::SANDBOX_ENFORCED.to_string());
    }
    Ok((sandbox, labels))
}

/// `budget_usd` and `budget_tokens`, each over the defaults'.
fn budget(i: usize, task: &RawTask, d: &Defaults<'_>) -> Result<Budget, PlanError> {
    let own = budget::task_budget(&format!("tasks[{i}]."), task.budget_usd, task.budget_tokens)?;
    Ok(Budget { usd: own.usd.or(d.budget.usd), tokens: own.tokens.or(d.budget.tokens) })
}

/// `retries` over the defaults' policy.
fn retry(i: usize, task: &RawTask, d: &Defaults<'_>) -> Result<RetryPolicy, PlanError> {
    let mut retry = d.retry.clone();
    if let Some(r) = task.retries {
        if r > 100 {
            return Err(err(format!("tasks[{i}].retries"), "must be at most 100"));
        }
        retry.max_retries = r;
    }
    Ok(retry)
}
