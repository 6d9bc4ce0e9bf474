//! Watch: replay from the store, then live events, with no gap and no
//! duplicate across the switch.
//!
//! The scheduler publishes an event only after the commit that wrote it.
//! Subscribing inside the scheduler returns the id of the last committed
//! event together with a receiver of every later one, so events up to that
//! id are read from the store and every later one comes from the receiver.
//! A receiver that falls behind re-reads the store from its cursor.
//!
//! A cursor beyond the newest committed event is refused (see
//! [`Start::resolve`]); one that waits for it skips the replay and takes
//! only live events with larger ids.

use std::pin::Pin;

use futures::Stream;
use swarm_proto::v1;
use tokio::sync::{broadcast, mpsc, oneshot};
use tonic::Status;
use tracing::Instrument;

use super::{Shared, convert};
use crate::scheduler::Command;
use crate::store::{EventRow, Reader};

const PAGE: usize = 1000;

/// The response header with the id a stream starts after: a `from_now`
/// client reconnects with it when no event arrived yet, so it misses none.
pub const STARTS_AFTER_HEADER: &str = "swarm-watch-after";

/// Where a stream starts, as the request asked. "From now" is its own
/// case, not a cursor value, so every `u64` is a cursor a client may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// After the newest committed event.
    FromNow,
    /// After event `id`. `wait`: also when the store has not reached it.
    After { id: u64, wait: bool },
}

impl Start {
    /// The id the stream starts after, given the newest committed event.
    /// A cursor beyond it means the client saw events this store does not
    /// hold (it was restored from an older backup, or the client talks to
    /// another controller): waiting could take forever and would skip the
    /// ids the store reuses, so it fails unless the client asked to wait.
    pub fn resolve(self, newest: u64) -> Result<u64, Status> {
        match self {
            Start::FromNow => Ok(newest),
            Start::After { id, wait } if id <= newest || wait => Ok(id),
            Start::After { id, .. } => Err(Status::out_of_range(format!(
                "after_event_id: event {id} is beyond the newest committed event {newest} (a store \
                 restored from an older backup, or another controller); watch again with \
                 after_event_id={newest} (swarmctl watch --after {newest}) or with from_now \
                 (swarmctl watch --from-now), or set wait_for_after (--wait-for-after) to wait for \
                 events after {id}"
            ))),
        }
    }
}

/// A stream of the events after `start`, and the id it starts after.
pub async fn watch(
    shared: Shared,
    start: Start,
    swarm: Option<String>,
) -> Result<(u64, Pin<Box<dyn Stream<Item = Result<v1::Event, Status>> + Send>>), Status> {
    let span = tracing::info_span!(
        "watch",
        ?start,
        after = tracing::field::Empty,
        last_committed = tracing::field::Empty,
        swarm = swarm.as_deref().unwrap_or("")
    );
    let (reply, rx) = oneshot::channel();
    shared.send(Command::Subscribe { reply }).instrument(span.clone()).await?;
    let (last_committed, live) = rx.await.map_err(|_| Status::unavailable("scheduler stopped"))?;
    span.record("last_committed", last_committed);
    let after = span.in_scope(|| {
        start.resolve(last_committed).inspect_err(|status| tracing::info!(%status, "watch refused"))
    })?;
    span.record("after", after);
    let (tx, out) = mpsc::channel(256);
    let sh = shared.clone();
    shared.tasks.spawn(
        async move {
            if let Err(status) = pump(sh, after, last_committed, swarm, live, &tx).await {
                let _ = tx.send(Err(status)).await;
            }
        }
        .instrument(span),
    );
    Ok((after, Box::pin(tokio_stream::wrappers::ReceiverStream::new(out))))
}

type Tx = mpsc::Sender<Result<v1::Event, Status>>;

/// Sends store events in `(cursor, up_to]`; returns the new cursor, or
/// `None` if the client went away.
async fn replay(
    shared: &Shared,
    mut cursor: u64,
    up_to: u64,
    swarm: &Option<String>,
    tx: &Tx,
) -> Result<Option<u64>, Status> {
    loop {
        let store = shared.store.clone();
        let sw = swarm.clone();
        let from = cursor;
        let page = tokio::task::spawn_blocking(move || -> Result<Vec<EventRow>, String> {
            let mut reader = Reader::open(&store).map_err(|e| e.to_string())?;
            reader.read_events(from, up_to, sw.as_deref(), PAGE).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(Status::unavailable)?;
        let full = page.len() == PAGE;
        for e in page {
            cursor = e.id;
            if tx.send(Ok(convert::event(e))).await.is_err() {
                return Ok(None);
            }
        }
        if !full {
            // Filtered pages can skip ids: everything up to `up_to` is done.
            return Ok(Some(cursor.max(up_to)));
        }
    }
}

async fn pump(
    shared: Shared,
    after: u64,
    last_committed: u64,
    swarm: Option<String>,
    mut live: broadcast::Receiver<std::sync::Arc<EventRow>>,
    tx: &Tx,
) -> Result<(), Status> {
    let mut cursor = after;
    if after < last_committed {
        match replay(&shared, after, last_committed, &swarm, tx).await? {
            Some(c) => cursor = c,
            None => return Ok(()),
        }
    }
    loop {
        let received = tokio::select! {
            _ = shared.shutdown.cancelled() => return Ok(()),
            _ = tx.closed() => return Ok(()),
            r = live.recv() => r,
        };
        match received {
            Ok(e) => {
                if e.id <= cursor {
                    continue;
                }
                cursor = e.id;
                // A swarm's events include its child swarms' (`app/auth`).
                if swarm.as_deref().is_some_and(|s| !in_swarm(s, &e.swarm)) {
                    continue;
                }
                if tx.send(Ok(convert::event((*e).clone()))).await.is_err() {
                    return Ok(());
                }
            }
            Err(broadcast::error::RecvError::Lagged(skipped)) => {
                tracing::debug!(skipped, "watcher lagged; catching up from the store");
                // Everything published so far is committed, so the store
                // holds it; the receiver's retained events <= cursor are
                // skipped above.
                let up_to = last_id(&shared).await?;
                match replay(&shared, cursor, up_to, &swarm, tx).await? {
                    Some(c) => cursor = c,
                    None => return Ok(()),
                }
            }
            Err(broadcast::error::RecvError::Closed) => return Ok(()),
        }
    }
}

async fn last_id(shared: &Shared) -> Result<u64, Status> {
    let store = shared.store.clone();
    tokio::task::spawn_blocking(move || -> Result<u64, String> {
        Reader::open(&store).and_then(|mut r| r.last_event_id()).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| Status::internal(e.to_string()))?
    .map_err(Status::unavailable)
}

/// Is `event_swarm` the swarm `watched` or one of its child swarms?
fn in_swarm(watched: &str, event_swarm: &str) -> bool {
    event_swarm == watched || event_swarm.strip_prefix(watched).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_up_to_the_newest_event_starts_there() {
        for id in [0, 1, 99, 100] {
            assert_eq!(Start::After { id, wait: false }.resolve(100).ok(), Some(id));
        }
        assert_eq!(Start::After { id: 0, wait: false }.resolve(0).ok(), Some(0), "an empty store");
    }

    #[test]
    fn from_now_starts_after_the_newest_event() {
        assert_eq!(Start::FromNow.resolve(100).ok(), Some(100));
        assert_eq!(Start::FromNow.resolve(0).ok(), Some(0));
    }

    #[test]
    fn a_cursor_beyond_the_newest_event_is_out_of_range_and_says_how_to_resume() {
        for id in [101, 1_100, u64::MAX] {
            let status = Start::After { id, wait: false }.resolve(100).expect_err("beyond the newest");
            assert_eq!(status.code(), tonic::Code::OutOfRange, "{id}");
            let m = status.message();
            assert!(m.starts_with("after_event_id: "), "names the field: {m}");
            assert!(m.contains(&format!("event {id} ")), "names the cursor: {m}");
            assert!(m.contains("newest committed event 100 "), "names the newest id: {m}");
            assert!(m.contains("--after 100") && m.contains("--from-now"), "says how to resume: {m}");
        }
    }

    #[test]
    fn a_cursor_beyond_the_newest_event_that_asks_to_wait_starts_at_it() {
        for id in [101, u64::MAX] {
            assert_eq!(Start::After { id, wait: true }.resolve(100).ok(), Some(id));
        }
    }

    #[test]
    fn a_child_swarm_is_in_its_parent() {
        assert!(in_swarm("app", "app"));
        assert!(in_swarm("app", "app/auth"));
        assert!(!in_swarm("app", "apps"));
        assert!(!in_swarm("app/auth", "app"));
    }
}
