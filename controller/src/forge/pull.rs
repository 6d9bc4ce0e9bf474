//! A pull request as the swarm records it: its number, address and state
//! (`draft`, `open`, `closed`, `merged`) and, once merged, the commit.

use swarm_forge::{PullRequest, PullState};

use crate::scheduler::PullRecord;

/// Whether the pull request is still open (a draft or ready).
pub(super) fn is_open(pull: &PullRecord) -> bool {
    matches!(pull.state.as_str(), "draft" | "open")
}

pub(super) fn pull_state_name(state: PullState, draft: bool) -> &'static str {
    match (state, draft) {
        (PullState::Open, true) => "draft",
        (PullState::Open, false) => "open",
        (PullState::Closed, _) => "closed",
        (PullState::Merged, _) => "merged",
    }
}

pub(super) fn record(pull: &PullRequest) -> PullRecord {
    PullRecord {
        number: pull.number,
        url: pull.url.clone(),
        state: pull_state_name(pull.state, pull.draft).into(),
        merge_commit: match pull.state {
            PullState::Merged => pull.merge_commit_sha.clone().unwrap_or_default(),
            _ => String::new(),
        },
    }
}
