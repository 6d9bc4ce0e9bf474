//! Spending limits: what a task's agent attempts (all of them together) and
//! a whole swarm may spend, the swarm's burn-rate breaker, and what a task
//! does when its agent hits the provider's usage limit.
//!
//! ```toml
//! [budget]                  # the swarm, across every agent attempt
//! usd = 40.0
//! tokens = 5_000_000
//! max_usd_per_hour = 10.0   # the breaker: pause assignment past this rate
//!
//! [defaults]
//! budget_usd = 5.0          # each task, across its attempts
//! budget_tokens = 1_000_000
//! on_usage_limit = "wait"   # "wait" (default), "pause" the swarm, "fail" the task
//!
//! [[tasks]]
//! id = "api"
//! budget_usd = 8.0          # overrides the default
//! ```
//!
//! Tokens count every kind (input, output, cache reads and writes), as
//! [`Usage::total_tokens`](crate::Usage::total_tokens) does.

use std::fmt;

use serde::Deserialize;

use super::error::{PlanError, err};
use crate::usage::MAX_COST_USD;

/// A cap on money and tokens; `None`: no cap on that one.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Budget {
    pub usd: Option<f64>,
    pub tokens: Option<u64>,
}

impl Budget {
    pub fn is_unlimited(&self) -> bool {
        self.usd.is_none() && self.tokens.is_none()
    }

    /// What `spent` exceeds, if anything: `"usd"` or `"tokens"` with the
    /// numbers, for reasons and events. Reaching a cap counts as exceeding it.
    pub fn exceeded_by(&self, spent: &crate::Usage) -> Option<String> {
        if let Some(cap) = self.usd
            && spent.cost_usd >= cap
        {
            return Some(format!("spent ${:.2} of budget_usd ${cap:.2}", spent.cost_usd));
        }
        if let Some(cap) = self.tokens
            && spent.total_tokens() >= cap
        {
            return Some(format!("spent {} of budget_tokens {cap}", spent.total_tokens()));
        }
        None
    }
}

/// The swarm's own limits (the plan's `[budget]` table).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SwarmBudget {
    pub limit: Budget,
    /// The breaker: spending faster than this over the last hour pauses
    /// the swarm's agent assignments and asks the operator.
    pub max_usd_per_hour: Option<f64>,
}

/// What a task does when its agent hits the provider's usage limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnUsageLimit {
    /// Keep the work and resume after the limit resets.
    #[default]
    Wait,
    /// Keep the work and pause the whole swarm until the operator resumes it.
    Pause,
    /// Keep the work, and the task FAILS (the operator may retry it).
    Fail,
}

impl OnUsageLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            OnUsageLimit::Wait => "wait",
            OnUsageLimit::Pause => "pause",
            OnUsageLimit::Fail => "fail",
        }
    }
}

impl fmt::Display for OnUsageLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    usd: Option<f64>,
    tokens: Option<u64>,
    max_usd_per_hour: Option<f64>,
}

/// Checks a dollar amount given at `path`.
pub fn check_usd(path: &str, usd: f64) -> Result<f64, PlanError> {
    if !usd.is_finite() || usd <= 0.0 || usd > MAX_COST_USD {
        return Err(err(path, format!("must be more than 0 and at most {MAX_COST_USD}, got {usd}")));
    }
    Ok(usd)
}

/// Checks a token count given at `path`.
pub fn check_tokens(path: &str, tokens: u64) -> Result<u64, PlanError> {
    if tokens == 0 {
        return Err(err(path, "must be at least 1"));
    }
    Ok(tokens)
}

/// A task's budget fields, `prefix` naming them in errors (`defaults.` or
/// `tasks[3].`).
pub(super) fn task_budget(prefix: &str, usd: Option<f64>, tokens: Option<u64>) -> Result<Budget, PlanError> {
    Ok(Budget {
        usd: usd.map(|u| check_usd(&format!("{prefix}budget_usd"), u)).transpose()?,
        tokens: tokens.map(|t| check_tokens(&format!("{prefix}budget_tokens"), t)).transpose()?,
    })
}

/// The plan's `[budget]` table.
pub(super) fn swarm_budget(raw: Option<&RawBudget>) -> Result<SwarmBudget, PlanError> {
    let Some(raw) = raw else { return Ok(SwarmBudget::default()) };
    Ok(SwarmBudget {
        limit: Budget {
            usd: raw.usd.map(|u| check_usd("budget.usd", u)).transpose()?,
            tokens: raw.tokens.map(|t| check_tokens("budget.tokens", t)).transpose()?,
        },
        max_usd_per_hour: raw
            .max_usd_per_hour
            .map(|u| check_usd("budget.max_usd_per_hour", u))
            .transpose()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Usage;
    use crate::plan::Plan;

    const TASK: &str = "[[tasks]]\nid = \"a\"\nagent = \"claude\"\nfiles = [\"a\"]\n";

    #[test]
    fn budgets_come_from_the_table_the_defaults_and_the_task() {
        let plan = Plan::parse(&format!(
            "name = \"s\"\n[budget]\nusd = 40.0\ntokens = 5000\nmax_usd_per_hour = 10\n\
             [defaults]\nbudget_usd = 5.0\nbudget_tokens = 900\non_usage_limit = \"pause\"\n\
             {TASK}budget_usd = 8.0\n[[tasks]]\nid = \"b\"\nagent = \"claude\"\nfiles = [\"b\"]\non_usage_limit = \"fail\"\n"
        ))
        .expect("plan");
        assert_eq!(plan.budget.limit, Budget { usd: Some(40.0), tokens: Some(5000) });
        assert_eq!(plan.budget.max_usd_per_hour, Some(10.0));
        assert_eq!(plan.tasks[0].budget, Budget { usd: Some(8.0), tokens: Some(900) });
        assert_eq!(plan.tasks[0].on_usage_limit, OnUsageLimit::Pause);
        assert_eq!(plan.tasks[1].budget, Budget { usd: Some(5.0), tokens: Some(900) });
        assert_eq!(plan.tasks[1].on_usage_limit, OnUsageLimit::Fail);
        let plain = Plan::parse(&format!("name = \"s\"\n{TASK}")).expect("plan");
        assert!(plain.budget.limit.is_unlimited() && plain.tasks[0].budget.is_unlimited());
        assert_eq!(plain.tasks[0].on_usage_limit, OnUsageLimit::Wait);
    }

    #[test]
    fn bad_budgets_are_refused_naming_the_field() {
        for (doc, path) in [
            (format!("name = \"s\"\n[budget]\nusd = 0.0\n{TASK}"), "budget.usd"),
            (format!("name = \"s\"\n[budget]\ntokens = 0\n{TASK}"), "budget.tokens"),
            (format!("name = \"s\"\n[budget]\nmax_usd_per_hour = -1.0\n{TASK}"), "budget.max_usd_per_hour"),
            (format!("name = \"s\"\n[defaults]\nbudget_usd = nan\n{TASK}"), "defaults.budget_usd"),
            (format!("name = \"s\"\n{TASK}budget_tokens = 0\n"), "tasks[0].budget_tokens"),
            (format!("name = \"s\"\n{TASK}budget_usd = 1e9\n"), "tasks[0].budget_usd"),
            (format!("name = \"s\"\n{TASK}on_usage_limit = \"retry\"\n"), "tasks[0].on_usage_limit"),
            (format!("name = \"s\"\n[budget]\ndollars = 3\n{TASK}"), "budget.dollars"),
        ] {
            let e = Plan::parse(&doc).expect_err(path);
            assert_eq!(e.path, path, "{e}");
        }
    }

    #[test]
    fn a_budget_is_exceeded_once_it_is_reached() {
        let b = Budget { usd: Some(1.0), tokens: Some(100) };
        assert_eq!(b.exceeded_by(&Usage { cost_usd: 0.99, input_tokens: 99, ..Default::default() }), None);
        assert!(
            b.exceeded_by(&Usage { cost_usd: 1.0, ..Default::default() }).is_some_and(|s| s.contains("usd"))
        );
        assert!(
            b.exceeded_by(&Usage { output_tokens: 100, ..Default::default() })
                .is_some_and(|s| s.contains("tokens"))
        );
        assert_eq!(Budget::default().exceeded_by(&Usage { cost_usd: 1e6, ..Default::default() }), None);
    }
}
