//! `swarmctl run`: an embedded controller and local sidecars, then the
//! swarm followed to its end.

mod controller;
mod forge;
mod progress;
pub mod sidecar_mode;
pub mod sidecars;
mod state;
mod summary;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use swarm_core::plan::Plan;
use swarm_proto::v1;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::RunArgs;
use crate::client::{Client, Target, connect, read_plan};
use crate::exit::{self, Usage};
use controller::LocalController;
pub use controller::Serve;
use progress::Progress;
use sidecars::{Flags, Sidecars};
pub use summary::{Outcome, outcome};

pub async fn run(args: RunArgs) -> anyhow::Result<u8> {
    swarm_sidecar::harden_process();
    let (text, plan) = read_plan(&args.plan)?;
    let (text, plan) = match forge::with_flags(text, plan.forge.is_some(), &args)? {
        text if args.forge.is_some() => {
            let plan = Plan::parse(&text).map_err(|e| Usage(format!("--forge: {e}")))?;
            (text, plan)
        }
        text => (text, plan),
    };
    let repo = check_repo(&args.repo)?;
    if let Some(at) = args.ui {
        controller::check_ui(at)?;
    }
    let notify = args.notify.config().map_err(|e| Usage(e.to_string()))?;
    let live = !args.plain && std::io::stdout().is_terminal();
    let labels: BTreeMap<String, String> = args.labels.into_iter().collect();
    let mut effective = labels.clone();
    if swarm_sidecar::sandbox::probe().is_full() {
        // The local sidecars label themselves so (see `sandbox = "required"`).
        use swarm_core::plan::sandbox::{SANDBOX_ENFORCED, SANDBOX_LABEL};
        effective.insert(SANDBOX_LABEL.to_string(), SANDBOX_ENFORCED.to_string());
    }
    for spec in &plan.tasks {
        let missing: Vec<String> = spec
            .labels
            .iter()
            .filter(|(k, v)| effective.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "warning: task {} needs labels the local sidecars lack ({}); add --label, or attach a sidecar that has them",
                spec.id,
                missing.join(", ")
            );
        }
    }
    // Refused here, before anything starts, rather than by each sidecar.
    let worker_user = args.worker_user.map(|u| u.for_this_process()).transpose()?.flatten();
    let serve = Serve { metrics_listen: args.metrics_listen, ui_listen: args.ui, notify };
    let mut session = Session::start(&repo, args.workers, &labels, &serve, worker_user.as_ref()).await?;
    let result = session.drive_from(&text, &plan, live, &BTreeMap::new(), args.origin.map(|o| *o)).await;
    // A controller that stopped on its own (its store failed, a thread
    // died) is the error to report, whatever the drive saw.
    session.stop().await?;
    let code = match result {
        Ok(Ended::Finished(outcome)) => outcome.code(),
        Ok(Ended::Interrupted) => {
            eprintln!("interrupted: sidecars and controller stopped; run the same command again to resume");
            exit::INTERRUPTED
        }
        Err(e) => return Err(e),
    };
    Ok(code)
}

/// Validates `--repo`: an existing git work tree.
pub fn check_repo(repo: &Path) -> anyhow::Result<PathBuf> {
    let repo = repo.canonicalize().map_err(|e| Usage(format!("--repo {}: {e}", repo.display())))?;
    if !repo.join(".git").exists() {
        return Err(Usage(format!("--repo {}: not a git repository (no .git)", repo.display())).into());
    }
    Ok(repo)
}

pub enum Ended {
    Finished(Outcome),
    Interrupted,
}

/// The controller and sidecars of one local run.
pub struct Session {
    controller: LocalController,
    sidecars: Sidecars,
    /// The embedded controller, with this run's admin token.
    pub target: Target,
    pub log_dir: PathBuf,
    labels: BTreeMap<String, String>,
}

impl Session {
    pub async fn start(
        repo: &Path,
        workers: u32,
        labels: &BTreeMap<String, String>,
        serve: &Serve,
        worker_user: Option<&swarm_sidecar::sandbox::WorkerUser>,
    ) -> anyhow::Result<Session> {
        let log_dir = repo.join(".git").join("swarm").join("logs");
        std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        let controller = LocalController::start(repo, &log_dir.join("controller.log"), serve).await?;
        let url = controller.url();
        // Before the sidecars: an older run's worktrees move first, each
        // under its worker's liveness lock.
        let started = state::workspaces(repo, worker_user).and_then(|ws| {
            Sidecars::start(
                &url,
                controller.sidecar_token(),
                repo,
                &ws,
                workers,
                &Flags { labels, worker_user: worker_user.map(|u| u.name.as_str()) },
                &log_dir,
            )
        });
        let sidecars = match started {
            Ok(s) => s,
            Err(e) => {
                let _ = controller.shutdown().await;
                return Err(e);
            }
        };
        let target = controller.operator_target();
        let session = Session { controller, sidecars, target, log_dir, labels: labels.clone() };
        if let Err(e) = session.wait_for_workers(workers as usize).await {
            let _ = session.stop().await;
            return Err(e);
        }
        Ok(session)
    }

    /// Waits (bounded) until every local sidecar has connected, so the first
    /// ready tasks start side by side.
    async fn wait_for_workers(&self, count: usize) -> anyhow::Result<()> {
        let mut client = connect(&self.target).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let workers = crate::client::all_workers(&mut client).await?;
            let connected = workers.iter().filter(|w| w.connected && w.id.starts_with("local-")).count();
            if connected >= count {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!(
                    "only {connected} of {count} sidecars connected within 30s; see {}",
                    self.log_dir.display()
                );
            }
            // A cheap read on loopback: a short pause lets the plan go in
            // within milliseconds of the last sidecar's Hello.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Submits the plan (resuming an existing swarm) and follows it until
    /// nothing can move without the operator, or Ctrl-C.
    pub async fn drive(
        &mut self,
        plan_text: &str,
        plan: &Plan,
        live: bool,
        answers: &BTreeMap<String, String>,
    ) -> anyhow::Result<Ended> {
        self.drive_from(plan_text, plan, live, answers, None).await
    }

    /// [`Session::drive`] for a plan a planner wrote: `origin` (the goal,
    /// the planner's session and cost) is recorded on the swarm.
    pub async fn drive_from(
        &mut self,
        plan_text: &str,
        plan: &Plan,
        live: bool,
        answers: &BTreeMap<String, String>,
        origin: Option<v1::SwarmOrigin>,
    ) -> anyhow::Result<Ended> {
        let mut client = connect(&self.target).await?;
        let request = v1::CreateSwarmRequest { plan_toml: plan_text.to_string(), origin };
        let resp = client.create_swarm(request).await?;
        let resp = resp.into_inner();
        let swarm = resp.swarm.unwrap_or_default();
        if resp.created {
            eprintln!(
                "swarm {} created: {} tasks on {}",
                swarm.id,
                plan.tasks.len(),
                swarm.integration_branch
            );
        } else {
            eprintln!("swarm {} exists: resuming", swarm.id);
        }
        // Read back from the controller's answer: what it recorded.
        if let Some(origin) = &swarm.origin {
            let by = swarm_view::OriginView::from(origin).planned_by();
            eprintln!("swarm {}: its goal is recorded, planned by {by}", swarm.id);
        }
        eprintln!("logs: {}", self.log_dir.display());
        let stopped = self.controller.stopped();
        let ended =
            follow(&mut client, &mut self.sidecars, plan, &self.labels, live, answers, stopped).await?;
        if let Ended::Finished(outcome) = &ended {
            summary::print(&mut client, plan, outcome).await?;
            if plan.forge.is_some() && outcome.completed() {
                forge::wait(&mut client, &swarm.id).await?;
            }
        }
        Ok(ended)
    }

    /// Stops the sidecars and the controller; an error if the controller
    /// had stopped on its own.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.sidecars.stop(Duration::from_secs(15)).await;
        self.controller.shutdown().await
    }
}

/// What `run --goal` records on the swarm it planned: the goal, the
/// planning agent, its session and what planning cost (`issue_url` when
/// the goal came from an issue).
pub fn planned_origin(
    goal: &str,
    agent: &str,
    cost: &crate::plan::dag::Cost,
    issue_url: Option<&str>,
) -> v1::SwarmOrigin {
    // The controller refuses control characters in a goal and a session id
    // that is not a plain token; neither is worth failing the run over.
    let goal = goal.chars().map(|c| if c.is_control() && c != '\n' && c != '\t' { ' ' } else { c }).collect();
    let session =
        swarm_proto::convert::session_id_from_wire("planner_session", &cost.session).unwrap_or_default();
    v1::SwarmOrigin {
        goal,
        planner_agent: agent.to_string(),
        planner_session: session,
        planner_usage: Some(v1::Usage {
            input_tokens: cost.input_tokens,
            output_tokens: cost.output_tokens,
            cache_read_tokens: cost.cache_read_tokens,
            cache_creation_tokens: 0,
            cost_usd: cost.cost_usd,
        }),
        issue_url: issue_url.unwrap_or_default().to_string(),
    }
}

async fn follow(
    client: &mut Client,
    sidecars: &mut Sidecars,
    plan: &Plan,
    labels: &BTreeMap<String, String>,
    live: bool,
    answers: &BTreeMap<String, String>,
    controller_stopped: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Ended> {
    let swarm_id = plan.swarm.to_string();
    tokio::pin!(controller_stopped);
    let mut stream = client
        .watch(v1::WatchRequest { after_event_id: 0, swarm_id: swarm_id.clone(), ..Default::default() })
        .await?
        .into_inner();
    let mut progress = Progress::new(live, plan.tasks.len());
    let mut answered: BTreeMap<String, String> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let ended = loop {
        tokio::select! {
            _ = sigint.recv() => break Ended::Interrupted,
            _ = sigterm.recv() => break Ended::Interrupted,
            // The reason comes from the controller's shutdown, in `run`.
            _ = &mut controller_stopped => anyhow::bail!("the embedded controller stopped"),
            event = stream.next() => match event {
                Some(Ok(event)) => progress.event(&event),
                Some(Err(status)) => return Err(status).context("watching the swarm"),
                None => anyhow::bail!("the controller closed the event stream"),
            },
            _ = tick.tick() => {
                // The swarm's state first: the tasks read after it are at
                // least as new, so a COMPLETED swarm never meets a stale
                // MERGING task in the summary.
                let swarm = client.get_swarm(v1::GetSwarmRequest { swarm_id: swarm_id.clone() }).await?.into_inner();
                let state = v1::SwarmState::try_from(swarm.state).unwrap_or(v1::SwarmState::Unspecified);
                let tasks = crate::client::all_tasks(client, &swarm_id).await?;
                progress.tasks(&tasks);
                let dead = sidecars.exited();
                if !dead.is_empty() && dead.len() == sidecars.len() {
                    let (id, status) = &dead[0];
                    anyhow::bail!("every sidecar exited ({id}: {status}); see {}/{id}.log", sidecars.log_dir.display());
                }
                let notes = answer_questions(client, &swarm_id, &tasks, answers, &mut answered).await?;
                for note in &notes {
                    progress.note(note);
                }
                // An answer just sent moves the swarm on; the state read
                // before it is stale.
                if !notes.is_empty() {
                    continue;
                }
                if let Some(outcome) = outcome(plan, state, &tasks, labels, |t| answers.contains_key(t) && !answered.contains_key(t)) {
                    if state == v1::SwarmState::Stalled {
                        progress.note(&format!("swarm {swarm_id} STALLED: {}", swarm.stalled_reason));
                    }
                    if state == v1::SwarmState::Paused {
                        progress.note(&format!("swarm {swarm_id} PAUSED: {}", swarm.paused_reason));
                    }
                    // Drain events already sent, so the plain log is complete.
                    while let Ok(Some(Ok(event))) = tokio::time::timeout(Duration::from_millis(100), stream.next()).await {
                        progress.event(&event);
                    }
                    break Ended::Finished(outcome);
                }
            }
        }
    };
    progress.finish();
    Ok(ended)
}

/// Answers each ESCALATED task that has an answer prepared (the demo's).
async fn answer_questions(
    client: &mut Client,
    swarm_id: &str,
    tasks: &[v1::Task],
    answers: &BTreeMap<String, String>,
    answered: &mut BTreeMap<String, String>,
) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    for t in tasks {
        let Some(text) = answers.get(&t.id) else { continue };
        if t.state != v1::TaskState::Escalated as i32 || t.pending_question.is_empty() {
            continue;
        }
        if answered.get(&t.id) == Some(&t.pending_question) {
            continue;
        }
        let task_id = format!("{swarm_id}/{}", t.id);
        notes.push(format!("answering {task_id}: {:?} -> {text:?}", t.pending_question));
        let req = v1::AnswerRequest { task_id, question_id: String::new(), text: text.clone() };
        client.answer(req).await?;
        answered.insert(t.id.clone(), t.pending_question.clone());
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planned_origin_carries_the_planners_run_and_nothing_the_controller_would_refuse() {
        let cost = crate::plan::dag::Cost {
            input_tokens: 10,
            output_tokens: 2,
            cache_read_tokens: 7,
            cost_usd: 0.25,
            session: "0b1e-42".into(),
            ..Default::default()
        };
        let o = planned_origin("add a flag\r\n\tand docs\u{1b}[2J", "claude", &cost, Some("https://x/i/1"));
        assert_eq!(o.goal, "add a flag \n\tand docs [2J");
        assert_eq!((o.planner_agent.as_str(), o.planner_session.as_str()), ("claude", "0b1e-42"));
        let u = o.planner_usage.unwrap_or_default();
        assert_eq!((u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cost_usd), (10, 2, 7, 0.25));
        assert_eq!(o.issue_url, "https://x/i/1");
        // A session id that is not a plain token is dropped, not sent.
        let odd = crate::plan::dag::Cost { session: "a b;c".into(), ..Default::default() };
        assert_eq!(planned_origin("g", "acp", &odd, None).planner_session, "");
    }
}
