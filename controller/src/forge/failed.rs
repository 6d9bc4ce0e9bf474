//! Why a forge sync stopped, as the operator reads it, and whether time
//! may mend it (a retry with back-off or at the forge's reset) or only a
//! person (a refusal).

use std::time::SystemTime;

use swarm_forge::{ForgeError, PushError};
use tokio::time::Instant;

/// When a failed sync is tried again.
#[derive(Debug, Clone, Copy)]
pub(super) enum Retry {
    Backoff,
    /// The forge said when (a rate limit's reset).
    At(Instant),
}

/// Why a sync stopped, as the operator reads it.
pub(super) struct Failed {
    pub message: String,
    pub retry: Option<Retry>,
}

impl Failed {
    /// Wrong settings or a refusal: nothing changes until someone acts.
    pub(super) fn settled(message: impl Into<String>) -> Failed {
        Failed { message: message.into(), retry: None }
    }

    /// The scheduler is gone: the controller is stopping.
    pub(super) fn stopping() -> Failed {
        Failed { message: "the scheduler stopped".into(), retry: Some(Retry::Backoff) }
    }
}

impl From<ForgeError> for Failed {
    fn from(e: ForgeError) -> Failed {
        let retry = match e.retry_at() {
            Some(at) => Some(Retry::At(instant_at(at))),
            None if e.is_retryable() => Some(Retry::Backoff),
            None => None,
        };
        Failed { message: e.to_string(), retry }
    }
}

impl From<PushError> for Failed {
    fn from(e: PushError) -> Failed {
        let retry = e.is_retryable().then_some(Retry::Backoff);
        Failed { message: e.to_string(), retry }
    }
}

fn instant_at(at: SystemTime) -> Instant {
    let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
    Instant::now() + wait
}
