//! A swarm's pull request as people read it: the title from the swarm, the
//! body from its branch report (tasks, who did what, verification, tokens
//! and cost), read through the Operator API like every other view.

use swarm_proto::v1;
use swarm_proto::v1::operator_service_server::OperatorService as _;
use swarm_view::report;
use tonic::{Request, Status};

use crate::api::operator::OperatorApi;
use crate::api::pages;

/// GitHub refuses a pull request body over 65,536 characters.
const MAX_BODY_CHARS: usize = 60_000;

/// The marker that says which swarm a pull request belongs to.
pub fn marker(swarm: &str) -> String {
    format!("<!-- swarm:{swarm} -->")
}

pub fn title(swarm: &str, done: u32, total: u32) -> String {
    format!("swarm {swarm}: {done}/{total} tasks")
}

/// The report of `swarm` and its child swarms as markdown, with a link to
/// the dashboard when there is one.
pub async fn body(reads: &OperatorApi, swarm: &str, dashboard: Option<&str>) -> Result<String, Status> {
    let root = reads.get_swarm(Request::new(v1::GetSwarmRequest { swarm_id: swarm.to_string() })).await?;
    let root = root.into_inner();
    let workers = pages::workers(reads).await?;
    let prefix = format!("{swarm}/");
    let children = pages::swarms(reads).await?.into_iter().filter(|s| s.id.starts_with(&prefix));
    let now = swarm_view::text::now_ms();
    let mut reports = Vec::new();
    for s in children.chain(std::iter::once(root)) {
        let tasks = pages::tasks(reads, &s.id).await?;
        reports.push(report::build(&s, &tasks, &workers, now));
    }
    let Some(mut report) = report::nest(swarm, reports) else {
        return Err(Status::not_found(format!("swarm {swarm}: no report")));
    };
    // The pull request is what this line would describe.
    report.forge = None;
    let mut md = report::markdown(&report);
    if let Some(url) = dashboard {
        md.push_str(&format!("\nLive: {url}\n"));
    }
    md.push_str("\n---\nOpened by swarm. Review comments on a file reach the task that owns it.\n");
    md.push_str(&marker(swarm));
    md.push('\n');
    if md.chars().count() > MAX_BODY_CHARS {
        let cut: String = md.chars().take(MAX_BODY_CHARS).collect();
        md =
            format!("{cut}\n\n… (clipped; the whole report: `swarmctl report {swarm}`)\n{}\n", marker(swarm));
    }
    Ok(md)
}
