//! Verifying the merged result: a plan's `integration_verify` tiers and its
//! `[merge_queue]` settings.
//!
//! Each task's own `verify` runs on its branch alone; two branches that pass
//! alone can still break the build together. With `integration_verify`,
//! succeeded tasks go through a merge queue that merges a batch in memory
//! and runs these tiers on the merged tree before the integration ref
//! moves. Without it, results merge as soon as they succeed.
//!
//! ```toml
//! [[integration_verify]]
//! name = "build"
//! command = "cargo check"
//!
//! [merge_queue]
//! max_batch = 8                    # default 8, at most 64
//! max_parallel = 4                 # batches verified at once; default: every idle verifier, up to 8
//! labels = { role = "verify" }     # which sidecars verify; any by default
//! sandbox = { read = ["~/.rustup"], write = ["~/.cargo/registry"] }
//! ```
//!
//! The tiers run the tasks' merged code, so they run in the worker sandbox
//! too, with the scratch directory of the merged tree as their worktree.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{PlanError, err};
use super::fields::{RawTier, VerifyTier, check_labels, check_tiers};

/// The default and the largest batch a merge queue verifies at once.
pub const DEFAULT_MAX_BATCH: u32 = 8;
pub const MAX_BATCH_LIMIT: u32 = 64;
/// Batches verified at once when the plan does not say: one per idle
/// verifier, up to this many (each is stacked on the ones ahead of it, so
/// a failure near the front wastes the verifications behind it).
pub const AUTO_MAX_PARALLEL: u32 = 8;
pub const MAX_PARALLEL_LIMIT: u32 = 32;

/// How a swarm verifies its merged results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegrationVerify {
    /// Run on the merged tree, in order, like a task's `verify`.
    pub tiers: Vec<VerifyTier>,
    /// The most tasks verified together.
    pub max_batch: u32,
    /// The most batches verified at once; 0: one per idle verifier, up to
    /// [`AUTO_MAX_PARALLEL`].
    pub max_parallel: u32,
    /// Labels a sidecar must carry (equal values) to verify; empty: any.
    pub labels: BTreeMap<String, String>,
    /// How the tiers are confined.
    pub sandbox: super::SandboxSpec,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMergeQueue {
    max_batch: Option<u32>,
    max_parallel: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    sandbox: Option<super::sandbox::RawSandbox>,
}

/// Validates the plan's `integration_verify` and `merge_queue`; `None` when
/// the plan gives no tiers (results then merge as they succeed), and a
/// `merge_queue` table without tiers is refused, since it would do nothing.
pub(super) fn validate(
    tiers: Option<Vec<RawTier>>,
    queue: Option<RawMergeQueue>,
) -> Result<Option<IntegrationVerify>, PlanError> {
    let Some(tiers) = tiers else {
        if queue.is_some() {
            return Err(err("merge_queue", "needs integration_verify tiers to verify the merged tree"));
        }
        return Ok(None);
    };
    if tiers.is_empty() {
        return Err(err("integration_verify", "needs at least one tier (or leave it out)"));
    }
    let tiers = check_tiers("integration_verify", tiers)?;
    let queue = queue.unwrap_or_default();
    let max_batch = queue.max_batch.unwrap_or(DEFAULT_MAX_BATCH);
    if max_batch == 0 || max_batch > MAX_BATCH_LIMIT {
        return Err(err("merge_queue.max_batch", format!("must be between 1 and {MAX_BATCH_LIMIT}")));
    }
    let max_parallel = queue.max_parallel.unwrap_or(0);
    if queue.max_parallel.is_some() && !(1..=MAX_PARALLEL_LIMIT).contains(&max_parallel) {
        return Err(err("merge_queue.max_parallel", format!("must be between 1 and {MAX_PARALLEL_LIMIT}")));
    }
    check_labels("merge_queue.labels", &queue.labels)?;
    let sandbox = super::sandbox::resolve(
        "merge_queue.sandbox",
        queue.sandbox.as_ref(),
        &super::SandboxSpec::default(),
    )?;
    Ok(Some(IntegrationVerify { tiers, max_batch, max_parallel, labels: queue.labels, sandbox }))
}

#[cfg(test)]
mod tests {
    use crate::plan::Plan;

    const TASKS: &str = "[[tasks]]\nid = \"a\"\ncommand = \"true\"\nfiles = [\"a.txt\"]\n";

    fn parse(head: &str) -> Result<Plan, crate::plan::PlanError> {
        Plan::parse(&format!("name = \"s\"\n{TASKS}\n{head}"))
    }

    #[test]
    fn integration_verify_parses_tiers_batch_and_labels() {
        let plan = parse(
            "[[integration_verify]]\nname = \"build\"\ncommand = \"make\"\n\
             [merge_queue]\nmax_batch = 4\nmax_parallel = 3\nlabels = { role = \"verify\" }\n",
        )
        .expect("valid");
        let iv = plan.integration.expect("set");
        assert_eq!(iv.tiers.len(), 1);
        assert_eq!(iv.tiers[0].name, "build");
        assert_eq!((iv.max_batch, iv.max_parallel), (4, 3));
        assert_eq!(iv.labels.get("role").map(String::as_str), Some("verify"));
    }

    #[test]
    fn without_integration_verify_there_is_no_queue() {
        assert!(parse("").expect("valid").integration.is_none());
    }

    #[test]
    fn bad_merge_queue_settings_name_the_field_and_rule() {
        let e = parse("[merge_queue]\nmax_batch = 4\n").expect_err("no tiers");
        assert_eq!(e.path, "merge_queue");
        let e =
            parse("[[integration_verify]]\nname = \"b\"\ncommand = \"x\"\n[merge_queue]\nmax_batch = 0\n")
                .expect_err("zero");
        assert_eq!(e.path, "merge_queue.max_batch");
        for bad in ["0", "33"] {
            let e = parse(&format!(
                "[[integration_verify]]\nname = \"b\"\ncommand = \"x\"\n[merge_queue]\nmax_parallel = {bad}\n"
            ))
            .expect_err("out of range");
            assert_eq!(e.path, "merge_queue.max_parallel");
            assert!(e.rule.contains("between 1 and 32"), "{}", e.rule);
        }
        let e = parse("[[integration_verify]]\nname = \"b\"\ncommand = \"  \"\n").expect_err("empty command");
        assert_eq!(e.path, "integration_verify[0].command");
        let e = parse("[[integration_verify]]\nname = \"b\"\ncommand = \"x\"\n[merge_queue]\nlabels = { \"bad key\" = \"v\" }\n")
            .expect_err("label");
        assert!(e.path.starts_with("merge_queue.labels"), "{}", e.path);
    }
}
