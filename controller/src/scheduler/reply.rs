//! How the scheduler answers a caller: after the turn's commit, so no one
//! sees a change the store does not hold, or at once for a read that
//! comes before any change.

use super::command::Reply;
use super::core::Effects;
use crate::error::SchedError;

/// Replies after the batch commits, so a caller never sees a change the
/// store does not hold.
pub(super) fn after_commit<T: Send + 'static>(
    fx: &mut Effects,
    reply: Reply<T>,
    value: Result<T, SchedError>,
) {
    fx.replies.push(Box::new(move || {
        let _ = reply.send(value);
    }));
}

/// Replies to a read. The model is what the store holds until the turn's
/// first change (every turn starts from a committed state: replies and
/// acks of the previous turn left only after its commit), so a read that
/// comes first in its turn is answered at once; one after a change waits
/// for the commit like everything else, and never shows what may not last.
pub(super) fn read<T: Send + 'static>(fx: &mut Effects, reply: Reply<T>, value: Result<T, SchedError>) {
    if fx.untouched() {
        let _ = reply.send(value);
    } else {
        fx.replies.push(Box::new(move || {
            let _ = reply.send(value);
        }));
    }
}

#[cfg(test)]
mod tests {
    use swarm_core::TaskKey;

    use super::*;

    #[test]
    fn a_read_before_any_change_is_answered_at_once_and_after_one_waits_for_the_commit() {
        let mut fx = Effects::default();
        let (reply, mut rx) = tokio::sync::oneshot::channel::<Result<u32, SchedError>>();
        read(&mut fx, reply, Ok(1));
        assert!(matches!(rx.try_recv(), Ok(Ok(1))), "nothing changed yet: answered at once");
        fx.dirty_tasks.insert(TaskKey::parse("s/a").expect("key"));
        let (reply, mut rx) = tokio::sync::oneshot::channel::<Result<u32, SchedError>>();
        read(&mut fx, reply, Ok(2));
        assert!(rx.try_recv().is_err(), "after a change the read waits for the commit");
        for r in std::mem::take(&mut fx.replies) {
            r();
        }
        assert!(matches!(rx.try_recv(), Ok(Ok(2))));
    }
}
