//! What the forge component writes: the outcome of one sync of a swarm's
//! branch and pull request, kept in the swarm's `control` (so it survives
//! a restart with no table of its own) and announced by an event when
//! something the operator would want to hear changed. The component only
//! reports; whether anything changed is decided here.

use swarm_core::SwarmId;

use super::core::{Core, find_swarm};
use super::model::ForgeState;
use crate::error::SchedError;

/// Records `next` as swarm `id`'s forge state.
pub(super) fn synced(core: &mut Core, id: &SwarmId, next: ForgeState) -> Result<(), SchedError> {
    let swarm = find_swarm(core.model, id.as_str())?;
    if swarm.plan.forge.is_none() {
        return Err(SchedError::FailedPrecondition(format!("swarm {id} has no [forge]")));
    }
    let before = swarm.control.forge.as_deref().cloned().unwrap_or_default();
    if before == next {
        return Ok(());
    }
    let _span = tracing::info_span!("swarm.forge", swarm = %id, pushed = %next.pushed).entered();
    let announce = events(id, &before, &next);
    let stored = next.clone();
    core.edit_swarm(id, move |s| s.control.forge = Some(Box::new(stored)));
    for (kind, message, data) in announce {
        tracing::info!(kind, "{message}");
        core.fx.event(id.as_str(), "", 0, "", kind, message, data);
    }
    Ok(())
}

/// The events a change from `before` to `next` is worth.
fn events(
    id: &SwarmId,
    before: &ForgeState,
    next: &ForgeState,
) -> Vec<(&'static str, String, serde_json::Value)> {
    let mut out = Vec::new();
    if !next.pushed.is_empty() && next.pushed != before.pushed {
        out.push((
            "swarm.pushed",
            format!("swarm {id} pushed {}", short(&next.pushed)),
            serde_json::json!({ "commit": next.pushed }),
        ));
    }
    if let Some(pull) = &next.pull
        && before.pull.as_ref().is_none_or(|b| b.number != pull.number || b.state != pull.state)
    {
        let verb = match before.pull.as_ref() {
            Some(b) if b.number == pull.number => "is now",
            _ => "opened as",
        };
        out.push((
            "swarm.pull_request",
            format!("swarm {id} {verb} pull request #{} ({}): {}", pull.number, pull.state, pull.url),
            serde_json::json!({ "number": pull.number, "url": pull.url, "state": pull.state }),
        ));
    }
    if !next.error.is_empty() && next.error != before.error {
        out.push((
            "swarm.forge_error",
            format!("swarm {id}: forge: {}", next.error),
            serde_json::json!({ "error": next.error }),
        ));
    }
    out
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
