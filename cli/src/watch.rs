//! `watch` and `logs`: the event stream.

use futures::StreamExt as _;
use swarm_core::TaskKey;
use swarm_proto::v1;

use crate::cli::{LogsArgs, WatchArgs};
use crate::client::{self, connect};
use crate::exit::Usage;
use crate::ops::task_events;
use crate::output::{EventView, print_event};

/// Streams events after `--since`, replayed then live, until the stream
/// ends or `--limit` events were printed.
pub async fn watch(url: &client::Target, args: WatchArgs) -> anyhow::Result<()> {
    let swarm_id = match &args.swarm {
        Some(s) => client::swarm_id(s)?,
        None => String::new(),
    };
    if args.limit == Some(0) {
        return Ok(());
    }
    let mut c = connect(url).await?;
    let mut stream = c.watch(v1::WatchRequest { after_event_id: args.since, swarm_id }).await?.into_inner();
    let mut printed = 0u64;
    while let Some(event) = stream.next().await {
        print_event(&EventView::from(&event?), args.out.output)?;
        printed += 1;
        if args.limit.is_some_and(|limit| printed >= limit) {
            break;
        }
    }
    Ok(())
}

/// Prints a task's events; with `-f`, keeps following new ones.
pub async fn logs(url: &client::Target, args: LogsArgs) -> anyhow::Result<()> {
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
    let mut c = connect(url).await?;
    let req = v1::WatchRequest { after_event_id: last, swarm_id: key.swarm.to_string() };
    let mut stream = c.watch(req).await?.into_inner();
    while let Some(event) = stream.next().await {
        let event = event?;
        if event.task_id == key.task.as_str() {
            print_event(&EventView::from(&event), args.out.output)?;
        }
    }
    Ok(())
}
