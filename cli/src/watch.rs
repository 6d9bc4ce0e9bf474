//! `watch` and `logs`: the event stream, followed across controller
//! restarts.

use std::time::Duration;

use futures::StreamExt as _;
use swarm_core::TaskKey;
use swarm_proto::v1;

use crate::cli::{LogsArgs, WatchArgs};
use crate::client::{self, connect};
use crate::exit::Usage;
use crate::ops::task_events;
use crate::output::{EventView, print_event};

/// First wait before reconnecting; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Streams events after `--since` (or from now), replayed then live, until
/// `--limit` events were printed; across a controller restart it
/// reconnects and resumes after the last event printed.
pub async fn watch(url: &client::Target, args: WatchArgs) -> anyhow::Result<()> {
    let swarm_id = match &args.swarm {
        Some(s) => client::swarm_id(s)?,
        None => String::new(),
    };
    if args.limit == Some(0) {
        return Ok(());
    }
    let start = if args.from_now {
        Cursor::FromNow
    } else {
        Cursor::After { id: args.since, wait: args.wait_for_after }
    };
    let mut printed = 0u64;
    follow(url, &swarm_id, start, |event| {
        print_event(&EventView::from(event), args.out.output)?;
        printed += 1;
        Ok(args.limit.is_none_or(|limit| printed < limit))
    })
    .await
}

/// Prints a task's events (or, with `--worker-output`, its worker's
/// output); with `-f`, keeps following new ones.
pub async fn logs(url: &client::Target, args: LogsArgs) -> anyhow::Result<()> {
    if args.worker_output {
        return crate::attempt_log::print(url, &args).await;
    }
    let task_id = client::task_id(&args.task)?;
    let key = TaskKey::parse(&task_id).map_err(Usage)?;
    let events = task_events(url, &task_id).await?;
    let mut last = 0;
    for e in &events {
        print_event(e, args.out.output)?;
        last = last.max(e.id);
    }
    if !args.follow {
        return Ok(());
    }
    follow(url, key.swarm.as_str(), Cursor::After { id: last, wait: false }, |event| {
        if event.task_id == key.task.as_str() {
            print_event(&EventView::from(event), args.out.output)?;
        }
        Ok(true)
    })
    .await
}

/// Where [`follow`] asks the stream to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    /// After the newest event; the controller names its id, and that id is
    /// the cursor from then on.
    FromNow,
    /// After event `id`; `wait`: also when the controller has not reached it.
    After { id: u64, wait: bool },
}

impl Cursor {
    fn request(self, swarm_id: &str) -> v1::WatchRequest {
        let swarm_id = swarm_id.to_string();
        match self {
            Cursor::FromNow => v1::WatchRequest { swarm_id, from_now: true, ..Default::default() },
            Cursor::After { id, wait } => {
                v1::WatchRequest { after_event_id: id, swarm_id, wait_for_after: wait, from_now: false }
            }
        }
    }

    /// The cursor once the controller said where a `from_now` stream
    /// starts (its `swarm-watch-after` header), so a reconnect before the
    /// first event misses nothing. A controller that does not say leaves
    /// it from now.
    fn started(self, header: Option<&str>) -> Cursor {
        match (self, header.and_then(|h| h.parse::<u64>().ok())) {
            (Cursor::FromNow, Some(id)) => Cursor::After { id, wait: false },
            (cursor, _) => cursor,
        }
    }

    /// Past `id`, once an event with that id was handled.
    fn past(self, id: u64) -> Cursor {
        match self {
            Cursor::FromNow => Cursor::After { id, wait: false },
            Cursor::After { wait, .. } => Cursor::After { id, wait },
        }
    }

    /// Whether an event with `id` was handled already.
    fn seen(self, id: u64) -> bool {
        matches!(self, Cursor::After { id: after, .. } if id <= after)
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cursor::FromNow => write!(f, "from now"),
            Cursor::After { id, .. } => write!(f, "after event {id}"),
        }
    }
}

/// Feeds `on_event` every event after `after`, in order, once each, until
/// it returns false. When the controller goes away (a restart, a dropped
/// connection, a stream it ends) this reconnects with backoff and asks for
/// the events after the last one handled, so nothing is skipped or
/// repeated; event ids are dense and increasing, so the id is a complete
/// resume point. Errors a retry cannot fix (a bad argument, no permission)
/// end it.
async fn follow(
    url: &client::Target,
    swarm_id: &str,
    mut after: Cursor,
    mut on_event: impl FnMut(&v1::Event) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let broken = match stream_once(url, swarm_id, &mut after, &mut on_event, &mut backoff).await {
            Ok(Flow::Done) => return Ok(()),
            Ok(Flow::Ended) => "the controller ended the stream".to_string(),
            Err(e) if client::retryable(&e) => e.to_string(),
            Err(e) => return Err(e),
        };
        eprintln!("watch: {broken}; reconnecting in {} ms ({after})", backoff.as_millis());
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

enum Flow {
    /// `on_event` asked to stop.
    Done,
    /// The server closed the stream without an error.
    Ended,
}

async fn stream_once(
    url: &client::Target,
    swarm_id: &str,
    after: &mut Cursor,
    on_event: &mut impl FnMut(&v1::Event) -> anyhow::Result<bool>,
    backoff: &mut Duration,
) -> anyhow::Result<Flow> {
    let mut c = connect(url).await?;
    let response = c.watch(after.request(swarm_id)).await?;
    let header = response
        .metadata()
        .get(swarm_controller::api::watch::STARTS_AFTER_HEADER)
        .and_then(|v| v.to_str().ok());
    *after = after.started(header);
    let mut stream = response.into_inner();
    // Connected: the next failure starts its backoff afresh.
    *backoff = FIRST_BACKOFF;
    while let Some(event) = stream.next().await {
        let event = event?;
        if after.seen(event.id) {
            continue; // never twice, whatever a server replays
        }
        *after = after.past(event.id);
        if !on_event(&event)? {
            return Ok(Flow::Done);
        }
    }
    Ok(Flow::Ended)
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn from_now_is_asked_as_a_flag_never_as_a_cursor_value() {
        let req = Cursor::FromNow.request("s");
        assert!(req.from_now && req.after_event_id == 0 && !req.wait_for_after, "{req:?}");
        let req = Cursor::After { id: u64::MAX, wait: true }.request("s");
        assert!(!req.from_now && req.after_event_id == u64::MAX && req.wait_for_after, "{req:?}");
    }

    #[test]
    fn from_now_becomes_the_cursor_the_controller_names() {
        assert_eq!(Cursor::FromNow.started(Some("42")), Cursor::After { id: 42, wait: false });
        assert_eq!(Cursor::FromNow.started(None), Cursor::FromNow, "an older controller");
        assert_eq!(Cursor::FromNow.started(Some("x")), Cursor::FromNow);
        let at = Cursor::After { id: 7, wait: true };
        assert_eq!(at.started(Some("42")), at, "a cursor stays the client's");
    }

    #[test]
    fn an_event_moves_the_cursor_and_is_never_handled_twice() {
        assert!(!Cursor::FromNow.seen(0));
        let c = Cursor::FromNow.past(5);
        assert!(c.seen(5) && c.seen(1) && !c.seen(6));
        assert_eq!(Cursor::After { id: 1, wait: true }.past(9), Cursor::After { id: 9, wait: true });
    }
}
