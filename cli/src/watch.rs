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

/// Streams events after `--since`, replayed then live, until `--limit`
/// events were printed; across a controller restart it reconnects and
/// resumes after the last event printed.
pub async fn watch(url: &client::Target, args: WatchArgs) -> anyhow::Result<()> {
    let swarm_id = match &args.swarm {
        Some(s) => client::swarm_id(s)?,
        None => String::new(),
    };
    if args.limit == Some(0) {
        return Ok(());
    }
    let mut printed = 0u64;
    follow(url, &swarm_id, args.since, |event| {
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
    follow(url, key.swarm.as_str(), last, |event| {
        if event.task_id == key.task.as_str() {
            print_event(&EventView::from(event), args.out.output)?;
        }
        Ok(true)
    })
    .await
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
    mut after: u64,
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
        eprintln!("watch: {broken}; reconnecting in {} ms (after event {after})", backoff.as_millis());
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
    after: &mut u64,
    on_event: &mut impl FnMut(&v1::Event) -> anyhow::Result<bool>,
    backoff: &mut Duration,
) -> anyhow::Result<Flow> {
    let mut c = connect(url).await?;
    let req =
        v1::WatchRequest { after_event_id: *after, swarm_id: swarm_id.to_string(), ..Default::default() };
    let mut stream = c.watch(req).await?.into_inner();
    // Connected: the next failure starts its backoff afresh.
    *backoff = FIRST_BACKOFF;
    while let Some(event) = stream.next().await {
        let event = event?;
        if event.id <= *after {
            continue; // never twice, whatever a server replays
        }
        *after = event.id;
        if !on_event(&event)? {
            return Ok(Flow::Done);
        }
    }
    Ok(Flow::Ended)
}
