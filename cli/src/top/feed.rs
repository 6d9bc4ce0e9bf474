//! What feeds the model: the Watch stream, followed across controller
//! restarts, and the list RPCs. Every task is listed only at the start,
//! after a reconnect, when a swarm appears, and every [`FULL_EVERY`] as a
//! resync; in between, events move the tasks, and when events arrive (and
//! once a second, since progress is not an event) a delta fetches the
//! swarms, the workers and only the RUNNING tasks. A viewer of a
//! 10,000-task swarm so costs the controller a list of what runs, not of
//! every task, each second.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use swarm_proto::v1;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::model::{Delta, Link, Snapshot};
use crate::client::{self, Target, connect};
use crate::exit::Failure;

/// First wait before reconnecting; doubles up to [`MAX_BACKOFF`], as
/// `swarmctl watch` does.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Lists are fetched at least this often, for progress and heartbeats.
const LIST_EVERY: Duration = Duration::from_secs(1);
/// Shortest gap between two fetches: a burst of events costs one fetch.
const LIST_GAP: Duration = Duration::from_millis(200);
/// Every task is listed again at least this often, for what changes
/// without a `task.state` event (attempts, merge commits, a missed event).
const FULL_EVERY: Duration = Duration::from_secs(15);

pub enum Update {
    Event(v1::Event),
    Link(Link),
    Snapshot(Snapshot),
    Delta(Delta),
    ListError(String),
    /// An operator action finished: what to tell the operator.
    Done(Result<String, String>),
}

/// The two feeds, stopped by `cancel`.
pub struct Feeds {
    wake: Arc<Wake>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

/// What the Watch feed tells the list feed.
#[derive(Default)]
struct Wake {
    refresh: Notify,
    /// The next fetch lists every task (set on every (re)connection).
    full: AtomicBool,
}

impl Feeds {
    pub fn spawn(
        target: Target,
        swarm: String,
        since: u64,
        tx: mpsc::Sender<Update>,
        cancel: CancellationToken,
    ) -> Feeds {
        let wake = Arc::new(Wake::default());
        let span = tracing::info_span!("top.watch", swarm = %swarm);
        let watch = tokio::spawn(
            follow(target.clone(), swarm.clone(), since, tx.clone(), wake.clone(), cancel.clone())
                .instrument(span),
        );
        let span = tracing::info_span!("top.lists", swarm = %swarm);
        let lists = tokio::spawn(poll_lists(target, swarm, tx, wake.clone(), cancel).instrument(span));
        Feeds { wake, handles: vec![watch, lists] }
    }

    /// Asks for a fetch now (after an operator action).
    pub fn refresh(&self) {
        self.wake.refresh.notify_one();
    }

    /// Waits for both feeds to notice their cancellation.
    pub async fn join(self) {
        for h in self.handles {
            let _ = h.await;
        }
    }
}

/// Follows Watch after `after` until cancelled: reconnects with backoff
/// and resumes after the last event passed on, so the events pane has no
/// gap and no repeat across a restart. Unlike `swarmctl watch`, a refusal
/// (no permission, an unknown swarm) does not end it: the header shows
/// the reason while it keeps trying, and the operator quits with `q`.
async fn follow(
    target: Target,
    swarm: String,
    mut after: u64,
    tx: mpsc::Sender<Update>,
    wake: Arc<Wake>,
    cancel: CancellationToken,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let once = stream_once(&target, &swarm, &mut after, &tx, &wake, &mut backoff);
        let reason = tokio::select! {
            () = cancel.cancelled() => return,
            r = once => match r {
                Ok(()) => "the controller ended the stream".to_string(),
                Err(e) => Failure::from_error(&e).message,
            },
        };
        let link = Link::Retrying { reason, in_ms: backoff.as_millis() as u64 };
        if tx.send(Update::Link(link)).await.is_err() {
            return;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn stream_once(
    target: &Target,
    swarm: &str,
    after: &mut u64,
    tx: &mpsc::Sender<Update>,
    wake: &Wake,
    backoff: &mut Duration,
) -> anyhow::Result<()> {
    let mut c = connect(target).await?;
    let req = v1::WatchRequest { after_event_id: *after, swarm_id: swarm.to_string(), ..Default::default() };
    let mut stream = c.watch(req).await?.into_inner();
    *backoff = FIRST_BACKOFF;
    // A reconnect may follow a restart that changed anything: list afresh.
    wake.full.store(true, Ordering::Relaxed);
    wake.refresh.notify_one();
    if tx.send(Update::Link(Link::Live)).await.is_err() {
        return Ok(());
    }
    while let Some(event) = stream.next().await {
        let event = event?;
        if event.id <= *after {
            continue; // never twice, whatever a server replays
        }
        *after = event.id;
        wake.refresh.notify_one();
        if tx.send(Update::Event(event)).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// Fetches when told to, or every [`LIST_EVERY`]: every task when a full
/// list is due, else a delta; the next fetch waits at least [`LIST_GAP`]
/// or twice as long as the last one took, so a big swarm is not fetched
/// back to back.
async fn poll_lists(
    target: Target,
    swarm: String,
    tx: mpsc::Sender<Update>,
    wake: Arc<Wake>,
    cancel: CancellationToken,
) {
    let mut client: Option<client::Client> = None;
    // The swarms the last full list had, and when it was made.
    let mut listed: Option<(HashSet<String>, Instant)> = None;
    loop {
        let started = Instant::now();
        let full = wake.full.swap(false, Ordering::Relaxed)
            || listed.as_ref().is_none_or(|(_, at)| at.elapsed() >= FULL_EVERY);
        let update = match fetch(&target, &swarm, &mut client, full, &mut listed).await {
            Ok(update) => update,
            Err(e) => {
                client = None;
                // Whatever was missed meanwhile, the next list has.
                listed = None;
                Update::ListError(Failure::from_error(&e).message)
            }
        };
        if tx.send(update).await.is_err() {
            return;
        }
        let gap = LIST_GAP.max(started.elapsed() * 2);
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(gap) => {}
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = wake.refresh.notified() => {}
            () = tokio::time::sleep(LIST_EVERY.saturating_sub(gap)) => {}
        }
    }
}

/// One fetch: a snapshot of everything when `full`, or when a swarm the
/// last one did not have appears (its tasks are unknown); else a delta.
async fn fetch(
    target: &Target,
    swarm: &str,
    client: &mut Option<client::Client>,
    full: bool,
    listed: &mut Option<(HashSet<String>, Instant)>,
) -> anyhow::Result<Update> {
    let c = match client {
        Some(c) => c,
        None => client.insert(connect(target).await?),
    };
    let mut swarms = client::all_swarms(c).await?;
    if !swarm.is_empty() {
        swarms.retain(|s| s.id == swarm);
    }
    let known = listed.as_ref().map(|(ids, _)| ids);
    let new_swarm = known.is_none_or(|ids| swarms.iter().any(|s| !ids.contains(&s.id)));
    // ListTasks lists one swarm at a time.
    let mut tasks = Vec::new();
    if full || new_swarm {
        for s in &swarms {
            tasks.extend(client::all_tasks(c, &s.id).await?);
        }
        let workers = client::all_workers(c).await?;
        *listed = Some((swarms.iter().map(|s| s.id.clone()).collect(), Instant::now()));
        return Ok(Update::Snapshot(Snapshot { swarms, tasks, workers }));
    }
    for s in &swarms {
        tasks.extend(client::tasks_in_states(c, &s.id, &[v1::TaskState::Running]).await?);
    }
    let workers = client::all_workers(c).await?;
    Ok(Update::Delta(Delta { swarms, running: tasks, workers }))
}
