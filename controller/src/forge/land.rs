//! `merge = "auto"`: the pull request is merged by swarm once every task
//! of the swarm merged (the swarm is LANDING), every check on the pushed commit has passed and no reviewer's
//! latest review asks for changes. The forge has the last word (branch
//! protection, required reviews): a merge it refuses is shown with its
//! reason and waits for people; nothing is forced.

use swarm_core::plan::forge::MergeMode;
use swarm_forge::{Check, Forge, MergeMethod, MergeOutcome, ReviewState};

use super::failed::Failed;
use super::watch::Watch;
use crate::scheduler::views::ForgeTarget;
use crate::scheduler::{ForgeState, SwarmState};

/// The repository's allowed method is not known in advance: each is tried
/// in turn while the forge says the one tried is not allowed.
const METHODS: [MergeMethod; 3] = [MergeMethod::Merge, MergeMethod::Squash, MergeMethod::Rebase];

impl Watch<'_> {
    /// Merges the open pull request `number` when it may go; whether it did.
    pub(super) async fn auto_merge(
        &mut self,
        t: &ForgeTarget,
        state: &mut ForgeState,
        forge: &dyn Forge,
        number: u64,
        checks: &[Check],
    ) -> Result<bool, Failed> {
        let ready = state.pull.as_ref().is_some_and(|p| p.state == "open");
        if t.spec.merge != MergeMode::Auto || t.state != SwarmState::Landing || !ready {
            return Ok(false);
        }
        if checks.iter().any(|c| !c.state.is_passing()) || changes_requested(forge, number).await? {
            return Ok(false);
        }
        // Tried once per commit and set of checks: a refusal for a required
        // check not reported yet is tried again when the checks change.
        let key = format!("merge:{}:{}", state.pushed, state.checks);
        if !self.seen_new(&key) {
            return Ok(false);
        }
        for method in METHODS {
            match forge.merge_pull(number, &state.pushed, method).await? {
                MergeOutcome::Merged { sha } => {
                    tracing::info!(number, %sha, method = method.as_str(), "pull request merged");
                    let pull = forge.get_pull(number).await?;
                    state.pull = Some(super::pull::record(&pull));
                    return Ok(true);
                }
                MergeOutcome::Refused { status, message }
                    if status == 405 && message.contains("not allowed") =>
                {
                    continue;
                }
                MergeOutcome::Refused { status, message } => {
                    let message = swarm_forge::text::shown(&message, 500);
                    return Err(Failed::settled(format!(
                        "the forge refused to merge #{number} ({status}): {message}"
                    )));
                }
            }
        }
        Err(Failed::settled(format!("the forge allows no merge method for #{number}")))
    }
}

/// Whether some reviewer's latest review asks for changes.
async fn changes_requested(forge: &dyn Forge, number: u64) -> Result<bool, Failed> {
    let mut latest = std::collections::HashMap::new();
    for review in forge.reviews(number).await? {
        if matches!(
            review.state,
            ReviewState::Approved | ReviewState::ChangesRequested | ReviewState::Dismissed
        ) {
            latest.insert(review.author.clone(), review.state);
        }
    }
    Ok(latest.values().any(|s| *s == ReviewState::ChangesRequested))
}
