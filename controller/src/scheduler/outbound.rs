//! Handing messages to sidecars' sessions without blocking the scheduler.
//! The messages themselves, and the queue type a session holds, are data
//! of the model's sessions, so they live with it (`model::messages`): the
//! model imports nothing else of the scheduler.

use flume::TrySendError;

use super::model::Session;
pub use super::model::messages::{
    AgentAssign, AssignSpec, AttemptHandle, CloseCode, Outbound, OutboundRx, OutboundTx, VerifyMergeSpec,
};
use crate::metrics::Metrics;

/// A session's queue holding at most `capacity` messages.
pub fn outbound_queue(capacity: usize) -> (OutboundTx, OutboundRx) {
    flume::bounded(capacity)
}

/// Queues `message` for a sidecar without blocking the scheduler. A full
/// queue means the sidecar is not keeping up: rather than drop the message
/// (a lost Assign would leave its attempt ASSIGNED while heartbeats keep
/// the lease alive) the session is closed, so the sidecar reconnects and
/// its Hello re-sends what is current. A closed queue needs nothing: the
/// stream already ended and the sidecar's Disconnected is on its way.
pub(crate) fn deliver(session: &Session, message: Outbound, metrics: &Metrics) {
    if session.closed.is_cancelled() {
        return; // already closed; the Hello of the next session catches up
    }
    match session.tx.try_send(message) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            tracing::warn!(session = session.id, "sidecar outbound queue full; closing the session");
            metrics.sessions_closed_full.inc();
            session.closed.cancel();
        }
        Err(TrySendError::Disconnected(_)) => {
            tracing::debug!(session = session.id, "sidecar stream already closed");
        }
    }
}
