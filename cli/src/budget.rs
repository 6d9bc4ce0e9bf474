//! `budget`, `pause` and `resume`: a swarm's spending and whether it starts
//! new attempts.

use swarm_proto::v1;

use crate::cli::Format;
use crate::client::{self, connect};
use crate::exit::Usage;
use crate::output::{SwarmView, TaskView, print_one};

/// `budget SWARM|SWARM/TASK --set USD [--tokens N] [--max-usd-per-hour X]`.
pub async fn set(
    url: &client::Target,
    target: &str,
    (usd, tokens, max_usd_per_hour): (Option<f64>, Option<u64>, Option<f64>),
    format: Format,
) -> anyhow::Result<()> {
    let task = target.contains('/');
    if task {
        client::task_id(target)?;
    } else {
        client::swarm_id(target)?;
    }
    if usd.is_none() && tokens.is_none() && max_usd_per_hour.is_none() {
        return Err(Usage("give --set USD, --tokens N or --max-usd-per-hour X".into()).into());
    }
    if task && max_usd_per_hour.is_some() {
        return Err(Usage("--max-usd-per-hour is set on a swarm, not a task".into()).into());
    }
    let mut c = connect(url).await?;
    let req = v1::SetBudgetRequest { target: target.to_string(), usd, tokens, max_usd_per_hour };
    let resp = c.set_budget(req).await?.into_inner();
    match resp.task {
        Some(t) => print_one(&TaskView::from(&t), format),
        None => print_one(&SwarmView::from(&resp.swarm.unwrap_or_default()), format),
    }
}

pub async fn pause(
    url: &client::Target,
    swarm: &str,
    stop: bool,
    reason: String,
    format: Format,
) -> anyhow::Result<()> {
    let swarm_id = client::swarm_id(swarm)?;
    let mut c = connect(url).await?;
    let resp = c.pause_swarm(v1::PauseSwarmRequest { swarm_id, stop, reason }).await?.into_inner();
    print_one(&SwarmView::from(&resp.swarm.unwrap_or_default()), format)
}

pub async fn resume(url: &client::Target, swarm: &str, format: Format) -> anyhow::Result<()> {
    let swarm_id = client::swarm_id(swarm)?;
    let mut c = connect(url).await?;
    let resp = c.resume_swarm(v1::ResumeSwarmRequest { swarm_id }).await?.into_inner();
    print_one(&SwarmView::from(&resp.swarm.unwrap_or_default()), format)
}

/// The swarm's budget in a line for `describe`; empty without one.
pub fn describe(s: &SwarmView) -> String {
    let mut parts = Vec::new();
    if s.budget_usd > 0.0 {
        parts.push(format!("${:.2}", s.budget_usd));
    }
    if s.budget_tokens > 0 {
        parts.push(format!("{} tokens", s.budget_tokens));
    }
    if s.max_usd_per_hour > 0.0 {
        parts.push(format!("breaker ${:.2}/h (last hour ${:.2})", s.max_usd_per_hour, s.usd_last_hour));
    }
    parts.join(", ")
}
