//! Watch: replay from the store, then live events, with no gap and no
//! duplicate across the switch.
//!
//! The scheduler publishes an event only after the commit that wrote it.
//! Subscribing inside the scheduler returns the id of the last committed
//! event together with a receiver of every later one, so events up to that
//! id are read from the store and every later one comes from the receiver.
//! A receiver that falls behind re-reads the store from its cursor.

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
/// `after` for a stream of the events committed from now on only.
pub const FROM_NOW: u64 = u64::MAX;

pub async fn watch(
    shared: Shared,
    after: u64,
    swarm: Option<String>,
) -> Result<Pin<Box<dyn Stream<Item = Result<v1::Event, Status>> + Send>>, Status> {
    let (reply, rx) = oneshot::channel();
    shared.send(Command::Subscribe { reply }).await?;
    let (last_committed, live) = rx.await.map_err(|_| Status::unavailable("scheduler stopped"))?;
    let after = if after == FROM_NOW { last_committed } else { after };
    let (tx, out) = mpsc::channel(256);
    let span = tracing::info_span!("watch", after, last_committed, swarm = swarm.as_deref().unwrap_or(""));
    let sh = shared.clone();
    shared.tasks.spawn(
        async move {
            if let Err(status) = pump(sh, after, last_committed, swarm, live, &tx).await {
                let _ = tx.send(Err(status)).await;
            }
        }
        .instrument(span),
    );
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(out)))
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
