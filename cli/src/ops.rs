//! Operator commands: one RPC each, printed in the chosen format.

use serde::Serialize;
use swarm_proto::v1;

use crate::cli::{Command, DescribeWhat, GetWhat};
use crate::client::{self, connect, read_plan};
use crate::exit::Usage;
use crate::output::{
    self, EventView, SwarmView, TaskDetailView, TaskView, WorkerView, print_list, print_one, print_value,
};

pub async fn run(url: &client::Target, command: Command) -> anyhow::Result<()> {
    match command {
        Command::Create { plan, out } => create(url, &plan, out.output).await,
        Command::Get { what } => get(url, what).await,
        Command::Describe { what } => describe(url, what).await,
        Command::Cancel { task, swarm, reason, out } => cancel(url, task, swarm, reason, out.output).await,
        Command::Retry { task, out } => {
            let task_id = client::task_id(&task)?;
            let mut c = connect(url).await?;
            let resp = c.retry_task(v1::RetryTaskRequest { task_id }).await?.into_inner();
            print_task(resp.task, out.output)
        }
        Command::Review { task, decision, message, out } => {
            crate::review::run(url, &task, &decision, &message, out.output).await
        }
        Command::Answer { task, text, question, out } => {
            let task_id = client::task_id(&task)?;
            if text.trim().is_empty() {
                return Err(Usage("answer text must not be empty".into()).into());
            }
            let mut c = connect(url).await?;
            let question_id = question.unwrap_or_default();
            let resp = c.answer(v1::AnswerRequest { task_id, question_id, text }).await?.into_inner();
            print_task(resp.task, out.output)
        }
        Command::Message { task, text, out } => {
            let task_id = client::task_id(&task)?;
            if text.trim().is_empty() {
                return Err(Usage("message text must not be empty".into()).into());
            }
            let mut c = connect(url).await?;
            let resp = c.send_message(v1::SendMessageRequest { task_id, text }).await?.into_inner();
            eprintln!("message {} sent", resp.message_id);
            print_task(resp.task, out.output)
        }
        Command::Report { swarm, html, out } => {
            let swarm_id = client::swarm_id(&swarm)?;
            let mut c = connect(url).await?;
            match html {
                Some(file) => crate::report::html(&mut c, &swarm_id, &file).await,
                None => crate::report::report(&mut c, &swarm_id, out.output).await,
            }
        }
        Command::Budget { target, usd, tokens, max_usd_per_hour, out } => {
            crate::budget::set(url, &target, (usd, tokens, max_usd_per_hour), out.output).await
        }
        Command::Pause { swarm, stop, reason, out } => {
            crate::budget::pause(url, &swarm, stop, reason, out.output).await
        }
        Command::Resume { swarm, out } => crate::budget::resume(url, &swarm, out.output).await,
        Command::Drain { worker, out } => {
            let mut c = connect(url).await?;
            let resp = c.drain_worker(v1::DrainWorkerRequest { worker_id: worker }).await?.into_inner();
            print_one(&WorkerView::from(&resp.worker.unwrap_or_default()), out.output)
        }
        Command::Land { swarm, target, out } => land(url, &swarm, target, out.output).await,
        Command::Run(_)
        | Command::Demo(_)
        | Command::Plan(_)
        | Command::Completions { .. }
        | Command::Certs(_)
        | Command::Token(_)
        | Command::Sandbox { .. }
        | Command::Check(_)
        | Command::Watch(_)
        | Command::Top(_)
        | Command::Mcp
        | Command::Logs(_) => Err(anyhow::anyhow!("not an operator command")),
    }
}

async fn create(
    url: &client::Target,
    plan: &std::path::Path,
    format: crate::cli::Format,
) -> anyhow::Result<()> {
    let (text, _) = read_plan(plan)?;
    let mut c = connect(url).await?;
    let resp = c.create_swarm(v1::CreateSwarmRequest { plan_toml: text, origin: None }).await?.into_inner();
    let swarm = resp.swarm.unwrap_or_default();
    let view = SwarmView::from(&swarm);
    if format == crate::cli::Format::Table {
        let verb = if resp.created { "created" } else { "unchanged (already exists)" };
        println!("swarm {} {verb}", view.id);
        Ok(())
    } else {
        print_one(&view, format)
    }
}

async fn cancel(
    url: &client::Target,
    task: Option<String>,
    swarm: Option<String>,
    reason: String,
    format: crate::cli::Format,
) -> anyhow::Result<()> {
    let mut c = connect(url).await?;
    match (task, swarm) {
        (Some(task), None) => {
            let task_id = client::task_id(&task)?;
            let resp = c.cancel_task(v1::CancelTaskRequest { task_id, reason }).await?.into_inner();
            print_task(resp.task, format)
        }
        (None, Some(swarm)) => {
            let swarm_id = client::swarm_id(&swarm)?;
            let resp = c.cancel_swarm(v1::CancelSwarmRequest { swarm_id: swarm_id.clone(), reason }).await?;
            let cancelled = resp.into_inner().cancelled;
            #[derive(Serialize)]
            struct Cancelled {
                swarm: String,
                cancelled: u32,
            }
            print_value(&Cancelled { swarm: swarm_id.clone(), cancelled }, format, || {
                format!("swarm {swarm_id}: {cancelled} task(s) cancelled")
            })
        }
        _ => Err(Usage("give either SWARM/TASK or --swarm S".into()).into()),
    }
}

async fn land(
    url: &client::Target,
    swarm: &str,
    target: Option<String>,
    format: crate::cli::Format,
) -> anyhow::Result<()> {
    let swarm_id = client::swarm_id(swarm)?;
    let mut c = connect(url).await?;
    let req = v1::LandRequest { swarm_id, target_branch: target.unwrap_or_default() };
    let resp = c.land(req).await?.into_inner();
    #[derive(Serialize)]
    struct Landed {
        target_branch: String,
        old_commit: String,
        new_commit: String,
    }
    let landed = Landed {
        target_branch: resp.target_branch,
        old_commit: resp.old_commit,
        new_commit: resp.new_commit,
    };
    print_value(&landed, format, || {
        format!(
            "{}: {} -> {}",
            landed.target_branch,
            output::short_commit(&landed.old_commit),
            output::short_commit(&landed.new_commit)
        )
    })
}

fn print_task(task: Option<v1::Task>, format: crate::cli::Format) -> anyhow::Result<()> {
    print_one(&TaskView::from(&task.unwrap_or_default()), format)
}

async fn get(url: &client::Target, what: GetWhat) -> anyhow::Result<()> {
    match what {
        GetWhat::Swarms { out } => {
            let mut c = connect(url).await?;
            let swarms = client::all_swarms(&mut c).await?;
            let views: Vec<SwarmView> = swarms.iter().map(SwarmView::from).collect();
            print_list(&views, out.output)
        }
        GetWhat::Tasks { swarm, out } => {
            let swarm_id = swarm.as_deref().map(client::swarm_id).transpose()?;
            let mut c = connect(url).await?;
            // ListTasks answers for one swarm, so "all" is every swarm's
            // tasks in turn, in the order ListSwarms gives.
            let swarm_ids = match swarm_id {
                Some(id) => vec![id],
                None => client::all_swarms(&mut c).await?.into_iter().map(|s| s.id).collect(),
            };
            let mut tasks = Vec::new();
            for id in &swarm_ids {
                tasks.extend(client::all_tasks(&mut c, id).await?);
            }
            let views: Vec<TaskView> = tasks.iter().map(TaskView::from).collect();
            print_list(&views, out.output)
        }
        GetWhat::Workers { out } => {
            let mut c = connect(url).await?;
            let workers = client::all_workers(&mut c).await?;
            let views: Vec<WorkerView> = workers.iter().map(WorkerView::from).collect();
            print_list(&views, out.output)
        }
    }
}

async fn describe(url: &client::Target, what: DescribeWhat) -> anyhow::Result<()> {
    match what {
        DescribeWhat::Task { task, out } => {
            let task_id = client::task_id(&task)?;
            let mut c = connect(url).await?;
            let detail = c.get_task(v1::GetTaskRequest { task_id }).await?.into_inner();
            let view = TaskDetailView::from(&detail);
            print_value(&view, out.output, || output::describe_text(&view))
        }
        DescribeWhat::Swarm { swarm, out } => {
            let swarm_id = client::swarm_id(&swarm)?;
            let mut c = connect(url).await?;
            let s = c.get_swarm(v1::GetSwarmRequest { swarm_id: swarm_id.clone() }).await?.into_inner();
            let tasks = v1::ListTasksResponse {
                tasks: client::all_tasks(&mut c, &swarm_id).await?,
                ..Default::default()
            };
            #[derive(Serialize)]
            struct SwarmDetail {
                swarm: SwarmView,
                tasks: Vec<TaskView>,
                durations: swarm_view::Timings,
            }
            let views: Vec<TaskView> = tasks.tasks.iter().map(TaskView::from).collect();
            let detail = SwarmDetail {
                swarm: SwarmView::from(&s),
                durations: swarm_view::Timings::of(&views, output::now_ms()),
                tasks: views,
            };
            print_value(&detail, out.output, || {
                let mut table = output::plain_table();
                table.set_header(<TaskView as output::Row>::header().to_vec());
                for t in &detail.tasks {
                    table.add_row(output::Row::cells(t));
                }
                let stalled = if detail.swarm.stalled_reason.is_empty() {
                    String::new()
                } else {
                    format!(
                        "Stalled:     {}\nNeeds you:   {}\n",
                        detail.swarm.stalled_reason,
                        detail.swarm.stalled_tasks.join(", ")
                    )
                };
                let (origin, cost) = origin_and_cost(&detail.swarm);
                let paused = if detail.swarm.paused_reason.is_empty() {
                    String::new()
                } else {
                    format!("Paused:      {}\n", detail.swarm.paused_reason)
                };
                let budget = crate::budget::describe(&detail.swarm);
                let budget =
                    if budget.is_empty() { String::new() } else { format!("Budget:      {budget}\n") };
                let forge = match &detail.swarm.forge {
                    Some(f) => format!("Forge:       {}\n", f.line()),
                    None => String::new(),
                };
                format!(
                    "Swarm:       {}\nState:       {}\n{origin}{stalled}{paused}Base:        {}\nIntegration: {} at {}\n{forge}{cost}{budget}\n{table}\n\n{}",
                    detail.swarm.id,
                    detail.swarm.state,
                    detail.swarm.base_branch,
                    detail.swarm.integration_branch,
                    output::short_commit(&detail.swarm.integration_head),
                    output::durations_text(&detail.durations),
                )
            })
        }
    }
}

/// `describe swarm`'s lines on where the swarm came from and what it spent:
/// a planned swarm's goal and planner, and its own cost, which then says
/// that planning is not in it.
fn origin_and_cost(s: &SwarmView) -> (String, String) {
    let cost = s.usage.text();
    let cost = match (cost.is_empty(), &s.origin) {
        (true, _) => String::new(),
        (false, None) => format!("Cost:        {cost}\n"),
        (false, Some(_)) => format!("Cost:        {cost} ({})\n", swarm_view::origin::PLANNING_EXCLUDED),
    };
    let Some(o) = &s.origin else { return (String::new(), cost) };
    let issue =
        if o.issue_url.is_empty() { String::new() } else { format!("Issue:       {}\n", o.issue_url) };
    let origin =
        format!("Goal:        {}\nPlanned by:  {}\n{issue}", o.goal_lines("             "), o.planned_by());
    (origin, cost)
}

/// Used by `logs` without -f: the task's stored events.
pub async fn task_events(url: &client::Target, task_id: &str) -> anyhow::Result<Vec<EventView>> {
    let mut c = connect(url).await?;
    let detail = c.get_task(v1::GetTaskRequest { task_id: task_id.to_string() }).await?.into_inner();
    Ok(detail.events.iter().map(EventView::from).collect())
}
