//! The scheduler's components, beside its core. Each owns one concern's
//! state (sessions, usage limits, sub-swarms, merge queues, reviews,
//! budgets, retention) and is handed a [`Core`](super::core::Core) for
//! each call. The dispatcher lends them as one value next to the core, so
//! a handler is a function over the two and needs nothing else of the
//! scheduler.

use super::{budget, limits, merge_queue, retention, review, sessions, subswarm};
use crate::merger::MergerHandle;

pub(super) struct Components {
    /// Who may claim which worker id; the audit's windows.
    pub sessions: sessions::Sessions,
    /// Agent usage limits holding agent tasks back.
    pub limits: limits::RateLimits,
    /// Sub-swarm tasks whose child swarm is being started.
    pub subswarms: subswarm::SubSwarms,
    /// Merge queues of swarms that verify their merged tree.
    pub merge_queues: merge_queue::Queues,
    /// Tasks in REVIEW waiting for a reviewer attempt.
    pub reviews: review::ReviewQueue,
    /// Budget stops sent, swarms found over budget, the breaker's windows.
    pub budgets: budget::Budgets,
    /// Forgets swarms that ended longer ago than the retention window.
    pub retention: retention::Retention,
    /// The merger thread, which the merge queues and sub-swarms hand jobs.
    pub merger: MergerHandle,
}

impl Components {
    pub fn new(merger: MergerHandle) -> Components {
        Components {
            sessions: Default::default(),
            limits: Default::default(),
            subswarms: Default::default(),
            merge_queues: Default::default(),
            reviews: Default::default(),
            budgets: Default::default(),
            retention: Default::default(),
            merger,
        }
    }
}
