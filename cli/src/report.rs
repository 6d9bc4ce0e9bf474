//! `swarmctl report SWARM`: the swarm's progress report (`swarm_view::report`),
//! as markdown for people and `-o json` for scripts, with the reports of its
//! child swarms nested under the tasks that started them. `--html` writes
//! it as one self-contained page with each swarm's timeline
//! (`swarm_view::timeline`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use swarm_proto::v1;
use swarm_view::report::{Report, build, markdown, nest};
use swarm_view::timeline::{self, Timeline};

use crate::cli::Format;
use crate::client::{self, Client};
use crate::output::{now_ms, print_value};

/// Once the events up to the newest have been asked for, a replay silent
/// this long has sent all of this swarm's (the stream filters out other
/// swarms' events, so their ids never arrive to say so).
const QUIET: Duration = Duration::from_secs(1);
/// However many events a swarm has, reading them stops after this long.
const EVENTS_DEADLINE: Duration = Duration::from_secs(120);
const MAX_EVENTS: usize = 500_000;

pub async fn report(c: &mut Client, swarm_id: &str, format: Format) -> anyhow::Result<()> {
    let (report, _) = gather(c, swarm_id).await?;
    print_value(&report, format, || markdown(&report))
}

/// The report and the timelines as one HTML page, to `file` (`-`: stdout).
pub async fn html(c: &mut Client, swarm_id: &str, file: &Path) -> anyhow::Result<()> {
    let (report, swarms) = gather(c, swarm_id).await?;
    let workers = client::all_workers(c).await?;
    let mut timelines = Vec::new();
    for (swarm, tasks) in &swarms {
        timelines.push(timeline_of(c, swarm, tasks, &workers).await?);
    }
    let page = swarm_view::timeline_html::page(&report, &timelines);
    if file == Path::new("-") {
        print!("{page}");
        return Ok(());
    }
    std::fs::write(file, page).with_context(|| format!("--html: writing {}", file.display()))?;
    eprintln!("report of {swarm_id} written to {}", file.display());
    Ok(())
}

/// The nested report, and each swarm of it with its tasks.
async fn gather(c: &mut Client, swarm_id: &str) -> anyhow::Result<(Report, Vec<(v1::Swarm, Vec<v1::Task>)>)> {
    let swarm = c.get_swarm(v1::GetSwarmRequest { swarm_id: swarm_id.to_string() }).await?.into_inner();
    let workers = client::all_workers(c).await?;
    let now = now_ms();
    let prefix = format!("{swarm_id}/");
    let descendants = client::all_swarms(c).await?.into_iter().filter(|s| s.id.starts_with(&prefix));
    let mut reports = Vec::new();
    let mut swarms = Vec::new();
    for s in descendants.chain(std::iter::once(swarm)) {
        let tasks = client::all_tasks(c, &s.id).await?;
        reports.push(build(&s, &tasks, &workers, now));
        swarms.push((s, tasks));
    }
    let report = nest(swarm_id, reports).ok_or_else(|| anyhow::anyhow!("no report for swarm {swarm_id}"))?;
    Ok((report, swarms))
}

async fn timeline_of(
    c: &mut Client,
    swarm: &v1::Swarm,
    tasks: &[v1::Task],
    workers: &[v1::Worker],
) -> anyhow::Result<Timeline> {
    let mut attempts = Vec::new();
    for t in tasks {
        let req = v1::GetTaskRequest { task_id: format!("{}/{}", swarm.id, t.id) };
        let detail = c.get_task(req).await?.into_inner();
        attempts.extend(detail.attempts.into_iter().map(|a| (t.id.clone(), a)));
    }
    let events = swarm_events(c, &swarm.id).await?;
    let source =
        timeline::Source { swarm, tasks, attempts: &attempts, events: &events, workers, now: now_ms() };
    Ok(timeline::build(&source))
}

/// The swarm's events so far, oldest first: the newest event's id is what
/// a `from_now` stream says it starts after; a replay from the start is
/// read until it passes that id or falls quiet.
async fn swarm_events(c: &mut Client, swarm: &str) -> anyhow::Result<Vec<v1::Event>> {
    let now = v1::WatchRequest { swarm_id: swarm.to_string(), from_now: true, ..Default::default() };
    let newest = c
        .watch(now)
        .await?
        .metadata()
        .get(swarm_controller::api::watch::STARTS_AFTER_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let replay = v1::WatchRequest { swarm_id: swarm.to_string(), ..Default::default() };
    let mut stream = c.watch(replay).await?.into_inner();
    let started = Instant::now();
    let mut events = Vec::new();
    while events.len() < MAX_EVENTS && started.elapsed() < EVENTS_DEADLINE {
        let Ok(next) = tokio::time::timeout(QUIET, stream.next()).await else { break };
        let Some(event) = next else { break };
        let event = event?;
        let last = event.id >= newest;
        // A child swarm's events come with its parent's; each has its own timeline.
        if event.swarm_id == swarm && event.id <= newest {
            events.push(event);
        }
        if last {
            break;
        }
    }
    Ok(events)
}
