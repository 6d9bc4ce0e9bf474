//! `swarmctl report SWARM`: the swarm's progress report (`swarm_view::report`),
//! as markdown for people and `-o json` for scripts, with the reports of its
//! child swarms nested under the tasks that started them.

use swarm_proto::v1;
use swarm_view::report::{build, markdown, nest};

use crate::cli::Format;
use crate::client::{self, Client};
use crate::output::{now_ms, print_value};

pub async fn report(c: &mut Client, swarm_id: &str, format: Format) -> anyhow::Result<()> {
    let swarm = c.get_swarm(v1::GetSwarmRequest { swarm_id: swarm_id.to_string() }).await?.into_inner();
    let workers = client::all_workers(c).await?;
    let now = now_ms();
    let prefix = format!("{swarm_id}/");
    let descendants = client::all_swarms(c).await?.into_iter().filter(|s| s.id.starts_with(&prefix));
    let mut reports = Vec::new();
    for s in descendants.chain(std::iter::once(swarm)) {
        let tasks = client::all_tasks(c, &s.id).await?;
        reports.push(build(&s, &tasks, &workers, now));
    }
    let report = nest(swarm_id, reports).ok_or_else(|| anyhow::anyhow!("no report for swarm {swarm_id}"))?;
    print_value(&report, format, || markdown(&report))
}
