//! `[defaults]`: checked once, then resolved into what every task falls
//! back on, shared (`Arc`) rather than copied into each task.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::budget::{self, Budget};
use super::error::{PlanError, err};
use super::fields::VerifyTier;
use super::fields::{check_env, check_labels, check_tiers};
use super::limits::{self, Limits};
use super::raw::RawDefaults;
use super::review::{self, ReviewSpec};
use super::sandbox::{self, SandboxSpec};
use super::secrets::{self, SecretSource};
use super::spec::RetryPolicy;

/// The defaults a task falls back on, checked.
pub(super) struct Defaults<'a> {
    /// The table as written: tasks merge their own fields over it.
    pub raw: &'a RawDefaults,
    pub verify: Vec<VerifyTier>,
    pub command: Option<Arc<[String]>>,
    pub labels: Arc<BTreeMap<String, String>>,
    pub retry: RetryPolicy,
    pub secrets: BTreeMap<String, SecretSource>,
    pub sandbox: Arc<SandboxSpec>,
    pub budget: Budget,
    pub review: Option<Arc<ReviewSpec>>,
}

/// Checks `[defaults]` and resolves what tasks share from it.
pub(super) fn resolve(d: &RawDefaults) -> Result<Defaults<'_>, PlanError> {
    check_labels("defaults.labels", &d.labels)?;
    check_env("defaults.env", &d.env)?;
    let verify = check_tiers("defaults.verify", d.verify.clone().unwrap_or_default())?;
    if d.command.is_some() && d.agent.agent.is_some() {
        return Err(err("defaults.agent", "set command or agent, not both"));
    }
    let retry = retry(d)?;
    let secrets = secrets::resolve("defaults.secrets", d.secrets.as_ref(), &BTreeMap::new(), &d.env)?;
    let mut sandbox = sandbox::resolve("defaults.sandbox", d.sandbox.as_ref(), &SandboxSpec::default())?;
    sandbox.limits = limits::resolve("defaults.limits", d.limits.as_ref(), &Limits::default())?;
    let budget = budget::task_budget("defaults.", d.budget_usd, d.budget_tokens)?;
    let review = match &d.review {
        Some(r) => review::parse("defaults.review", r)?.map(Arc::new),
        None => None,
    };
    Ok(Defaults {
        raw: d,
        verify,
        command: d.command.clone().map(|c| c.into_argv().into()),
        labels: Arc::new(d.labels.clone()),
        retry,
        secrets,
        sandbox: Arc::new(sandbox),
        budget,
        review,
    })
}

/// The retry policy: backoff fields over the built-in policy.
fn retry(d: &RawDefaults) -> Result<RetryPolicy, PlanError> {
    let base = RetryPolicy::default();
    let retry = RetryPolicy {
        max_retries: d.retries.unwrap_or(base.max_retries),
        initial_backoff_ms: d.backoff_initial_ms.unwrap_or(base.initial_backoff_ms),
        multiplier: d.backoff_multiplier.unwrap_or(base.multiplier),
        max_backoff_ms: d.backoff_max_ms.unwrap_or(base.max_backoff_ms),
    };
    if !(1.0..=10.0).contains(&retry.multiplier) {
        return Err(err("defaults.backoff_multiplier", "must be between 1.0 and 10.0"));
    }
    if retry.max_retries > 100 {
        return Err(err("defaults.retries", "must be at most 100"));
    }
    if retry.initial_backoff_ms > retry.max_backoff_ms {
        return Err(err("defaults.backoff_initial_ms", "must not exceed defaults.backoff_max_ms"));
    }
    Ok(retry)
}
