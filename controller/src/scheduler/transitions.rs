//! Task transitions by name. A call site says where a task goes
//! (`core.to_merging(key, why)`), and every one passes through
//! [`Core::set_state`](super::core::Core), which checks the lifecycle
//! table (`TaskState::may_become`): an illegal move is refused and logged,
//! and the model refuses it with a typed error that tests read.

use swarm_core::{TaskKey, TaskState};

use super::core::Core;

macro_rules! named {
    ($($(#[$doc:meta])* $name:ident => $state:ident;)*) => {
        impl Core<'_> {
            $(
                $(#[$doc])*
                // A transition of the task `key`, not a conversion of the core.
                #[allow(clippy::wrong_self_convention)]
                pub fn $name(&mut self, key: &TaskKey, reason: &str) {
                    self.set_state(key, TaskState::$state, reason);
                }
            )*
        }
    };
}

named! {
    /// Runnable now: its dependencies are merged (`make_ready` checks).
    to_ready => Ready;
    /// An attempt of it was assigned.
    to_running => Running;
    /// An attempt (or a reviewer, or a child swarm) finished it.
    to_succeeded => Succeeded;
    /// Its success waits for a reviewer's decision.
    to_review => Review;
    /// Its result is being merged into the integration branch.
    to_merging => Merging;
    /// Its result is in the integration branch.
    to_merged => Merged;
    /// Its result did not merge cleanly.
    to_conflict => Conflict;
    /// It waits for something outside the swarm (exit 3, a budget).
    to_blocked => Blocked;
    /// It waits for the operator's answer (exit 4).
    to_escalated => Escalated;
    /// A reviewer turned its result down for good.
    to_rejected => Rejected;
    /// Out of retries, or failed by policy.
    to_failed => Failed;
    /// The operator cancelled it.
    to_cancelled => Cancelled;
}
