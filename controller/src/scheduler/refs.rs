//! Which refs a swarm owns, and landing.
//!
//! A swarm owns its integration branch and everything under
//! `swarm/<swarm>/` (its task branches). Nothing else in the repository is
//! moved, except by Land: fast-forward only, to a target outside every
//! swarm's refs. These checks live with the scheduler because it alone
//! knows every swarm; the merger moves refs only after them.

use swarm_core::SwarmId;
use swarm_core::plan::Plan;

use super::Effects;
use super::command::LandTarget;
use super::core::find_swarm;
use super::model::{Model, Swarm};
use crate::error::SchedError;

/// The prefix of a swarm's task branches (a child swarm's lie under
/// `swarm/<root>/<task>.sub/`, inside its root's).
fn namespace(swarm: &SwarmId) -> String {
    swarm_core::plan::swarm_namespace(swarm)
}

fn owns(swarm: &Swarm, branch: &str) -> bool {
    branch == swarm.plan.integration_branch || branch.starts_with(&namespace(&swarm.id))
}

/// Refuses a plan whose refs another swarm owns, or which would own
/// another swarm's refs. The plan of an existing swarm with the same id
/// is not compared with itself.
pub(super) fn check_plan_refs(model: &Model, plan: &Plan) -> Result<(), SchedError> {
    let ours = namespace(&plan.swarm);
    for other in model.swarms().values().filter(|s| s.id != plan.swarm) {
        let taken = |field: &str, branch: &str| {
            Err(SchedError::AlreadyExists(format!(
                "{field}: {branch:?} belongs to swarm {:?} (its integration branch or under swarm/{}/)",
                other.id.as_str(),
                other.id
            )))
        };
        if owns(other, &plan.integration_branch) {
            return taken("integration_branch", &plan.integration_branch);
        }
        if owns(other, &plan.target_branch) {
            return taken("target_branch", &plan.target_branch);
        }
        let theirs = &other.plan.integration_branch;
        if theirs == &plan.integration_branch || theirs.starts_with(&ours) {
            return Err(SchedError::AlreadyExists(format!(
                "integration_branch: swarm {:?} already uses {theirs:?}, which lies in this swarm's \
                     namespace {ours}",
                other.id.as_str()
            )));
        }
    }
    Ok(())
}

/// Resolves and checks Land's target: the plan's target branch, or an
/// explicit branch outside every swarm's refs.
pub(super) fn land_target(
    model: &Model,
    swarm: &str,
    target: Option<String>,
) -> Result<LandTarget, SchedError> {
    let s = find_swarm(model, swarm)?;
    let explicit = target.is_some();
    let target = target.unwrap_or_else(|| s.plan.target_branch.clone());
    if let Some(owner) = model.swarms().values().find(|o| owns(o, &target)) {
        return Err(SchedError::InvalidArgument {
            field: "target_branch".into(),
            rule: format!(
                "{target:?} belongs to swarm {:?} (its integration branch or under swarm/{}/); Land moves \
                     only branches outside every swarm",
                owner.id.as_str(),
                owner.id
            ),
        });
    }
    Ok(LandTarget { swarm: swarm.to_string(), target, head: s.integration_head.clone(), explicit })
}

/// Records a landing (or its failure) in the swarm's audit trail.
pub(super) fn record_land(
    model: &Model,
    swarm: &str,
    target: &str,
    outcome: Result<(String, String), String>,
    fx: &mut Effects,
) -> Result<(), SchedError> {
    find_swarm(model, swarm)?;
    let (kind, message, data) = match outcome {
        Ok((old, new)) => (
            "swarm.landed",
            format!("landed {target}: {old} -> {new} (fast-forward)"),
            serde_json::json!({ "target": target, "old": old, "new": new }),
        ),
        Err(reason) => (
            "swarm.land_failed",
            format!("landing {target} failed: {reason}"),
            serde_json::json!({ "target": target, "reason": reason }),
        ),
    };
    fx.event(swarm, "", 0, "", kind, message, data);
    Ok(())
}
