//! `wait`: blocks until a swarm or a task is in one of the wanted states,
//! or a task asks the operator or waits for the operator's review, or the
//! time is up — so an orchestrating
//! agent makes one call instead of polling.
//!
//! It subscribes to the swarm's events *before* reading the state, then
//! reads the state again after each event of the swarm: a change between
//! the read and the subscription cannot be missed. A stream the controller
//! ends (a restart) is opened again until the deadline.

use std::time::Duration;

use futures::StreamExt as _;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::Serialize;
use swarm_proto::v1;
use swarm_view::{SwarmView, TaskView};
use tokio::time::Instant;
use tonic::Status;

use crate::args::WaitArgs;
use crate::channel::{Operator, request};
use crate::checks::{parse_each, swarm_arg, swarm_state, task_arg, task_state};
use crate::pages;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Between attempts to open the event stream again after the controller
/// went away.
const RECONNECT: Duration = Duration::from_millis(500);

/// What is waited on, checked.
pub struct Wait {
    target: Target,
    states: Vec<i32>,
    timeout: Duration,
}

enum Target {
    Swarm(String),
    Task { swarm: String, task: String },
}

/// What `wait` returns.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// `state` (in a wanted state), `question` (a task waits on the
    /// operator's answer), `review` (a task waits on the operator's
    /// review) or `timeout`.
    pub reason: &'static str,
    pub waited_secs: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swarm: Option<SwarmView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskView>,
    /// The tasks whose question waits for an answer, when `reason` is
    /// `question`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub questions: Vec<TaskView>,
    /// The tasks in REVIEW whose gate is the operator, when `reason` is
    /// `review`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reviews: Vec<TaskView>,
}

impl Wait {
    pub fn from_args(args: WaitArgs) -> Result<Wait, String> {
        let target = match (args.swarm, args.task) {
            (Some(swarm), None) => Target::Swarm(swarm_arg("swarm", &swarm)?),
            (None, Some(task)) => {
                let full = task_arg("task", &task)?;
                let (swarm, task) = full.rsplit_once('/').ok_or("task: expected SWARM/TASK")?;
                Target::Task { swarm: swarm.to_string(), task: task.to_string() }
            }
            _ => return Err("swarm, task: give exactly one of them".into()),
        };
        let states = match (&target, args.states.is_empty()) {
            (Target::Swarm(_), true) => vec![
                v1::SwarmState::Completed as i32,
                // Its work is done; people's part on the pull request may take days.
                v1::SwarmState::Landing as i32,
                v1::SwarmState::Failed as i32,
                v1::SwarmState::Cancelled as i32,
            ],
            (Target::Task { .. }, true) => vec![
                v1::TaskState::Merged as i32,
                v1::TaskState::Failed as i32,
                v1::TaskState::Cancelled as i32,
                v1::TaskState::Rejected as i32,
            ],
            (Target::Swarm(_), false) => parse_each(&args.states, swarm_state)?,
            (Target::Task { .. }, false) => parse_each(&args.states, task_state)?,
        };
        let timeout = match args.timeout_secs {
            None => DEFAULT_TIMEOUT,
            Some(0) => return Err("timeout_secs: must be at least 1".into()),
            Some(s) if Duration::from_secs(s) > MAX_TIMEOUT => {
                return Err(format!("timeout_secs: must be at most {}", MAX_TIMEOUT.as_secs()));
            }
            Some(s) => Duration::from_secs(s),
        };
        Ok(Wait { target, states, timeout })
    }

    fn swarm(&self) -> &str {
        match &self.target {
            Target::Swarm(s) | Target::Task { swarm: s, .. } => s,
        }
    }

    pub async fn run(&self, op: &Operator, ctx: &RequestContext<RoleServer>) -> Result<Outcome, Status> {
        let started = Instant::now();
        let deadline = started + self.timeout;
        loop {
            let mut events = self.subscribe(op, ctx).await?;
            loop {
                if let Some(mut outcome) = self.check(op, ctx).await? {
                    outcome.waited_secs = started.elapsed().as_secs_f64();
                    return Ok(outcome);
                }
                // Read again after the next event of the swarm; a dropped
                // stream is opened again, the time is up at the deadline.
                let next = tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return self.timed_out(op, ctx, started).await,
                    _ = ctx.ct.cancelled() => return Err(Status::cancelled("the client cancelled the wait")),
                    next = events.next() => next,
                };
                match next {
                    Some(Ok(_)) => continue,
                    Some(Err(status)) if !retryable(&status) => return Err(status),
                    _ => break,
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return self.timed_out(op, ctx, started).await,
                _ = tokio::time::sleep(RECONNECT) => {}
            }
        }
    }

    async fn subscribe(
        &self,
        op: &Operator,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<tonic::Streaming<v1::Event>, Status> {
        let req =
            v1::WatchRequest { swarm_id: self.swarm().to_string(), from_now: true, ..Default::default() };
        Ok(op.clone().watch(request(ctx, req)).await?.into_inner())
    }

    /// The outcome, if the wait is over now.
    async fn check(
        &self,
        op: &Operator,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Option<Outcome>, Status> {
        match &self.target {
            Target::Swarm(swarm_id) => {
                let req = v1::GetSwarmRequest { swarm_id: swarm_id.clone() };
                let swarm = op.clone().get_swarm(request(ctx, req)).await?.into_inner();
                if self.states.contains(&swarm.state) {
                    return Ok(Some(outcome("state", Some(&swarm), None)));
                }
                let tasks = pages::tasks(op, ctx, swarm_id, Vec::new()).await?;
                let asking: Vec<TaskView> =
                    tasks.iter().filter(|t| !t.pending_question.is_empty()).map(TaskView::from).collect();
                if !asking.is_empty() {
                    let mut o = outcome("question", Some(&swarm), None);
                    o.questions = asking;
                    return Ok(Some(o));
                }
                let mut reviews = Vec::new();
                for t in tasks.iter().filter(|t| t.state == v1::TaskState::Review as i32) {
                    let req = v1::GetTaskRequest { task_id: format!("{}/{}", t.swarm_id, t.id) };
                    let detail = op.clone().get_task(request(ctx, req)).await?.into_inner();
                    if awaits_operator_review(&detail) {
                        reviews.push(TaskView::from(t));
                    }
                }
                if !reviews.is_empty() {
                    let mut o = outcome("review", Some(&swarm), None);
                    o.reviews = reviews;
                    return Ok(Some(o));
                }
                Ok(None)
            }
            Target::Task { swarm, task } => {
                let req = v1::GetTaskRequest { task_id: format!("{swarm}/{task}") };
                let detail = op.clone().get_task(request(ctx, req)).await?.into_inner();
                let t = detail.task.clone().unwrap_or_default();
                if self.states.contains(&t.state) {
                    return Ok(Some(outcome("state", None, Some(&t))));
                }
                if !t.pending_question.is_empty() {
                    let mut o = outcome("question", None, Some(&t));
                    o.questions = vec![TaskView::from(&t)];
                    return Ok(Some(o));
                }
                if awaits_operator_review(&detail) {
                    let mut o = outcome("review", None, Some(&t));
                    o.reviews = vec![TaskView::from(&t)];
                    return Ok(Some(o));
                }
                Ok(None)
            }
        }
    }

    async fn timed_out(
        &self,
        op: &Operator,
        ctx: &RequestContext<RoleServer>,
        started: Instant,
    ) -> Result<Outcome, Status> {
        let mut o = match &self.target {
            Target::Swarm(swarm_id) => {
                let req = v1::GetSwarmRequest { swarm_id: swarm_id.clone() };
                let swarm = op.clone().get_swarm(request(ctx, req)).await?.into_inner();
                outcome("timeout", Some(&swarm), None)
            }
            Target::Task { swarm, task } => {
                let req = v1::GetTaskRequest { task_id: format!("{swarm}/{task}") };
                let t = op.clone().get_task(request(ctx, req)).await?.into_inner().task.unwrap_or_default();
                outcome("timeout", None, Some(&t))
            }
        };
        o.waited_secs = started.elapsed().as_secs_f64();
        Ok(o)
    }
}

fn outcome(reason: &'static str, swarm: Option<&v1::Swarm>, task: Option<&v1::Task>) -> Outcome {
    Outcome {
        reason,
        waited_secs: 0.0,
        swarm: swarm.map(SwarmView::from),
        task: task.map(TaskView::from),
        questions: Vec::new(),
        reviews: Vec::new(),
    }
}

/// In REVIEW behind a gate only the operator opens (an agent or command
/// reviewer decides by itself).
fn awaits_operator_review(detail: &v1::TaskDetail) -> bool {
    let in_review = detail.task.as_ref().is_some_and(|t| t.state == v1::TaskState::Review as i32);
    in_review && detail.branch_report.as_ref().is_some_and(|b| b.reviewer == "operator")
}

/// A stream that broke because the controller went away, not because the
/// request was wrong.
fn retryable(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Cancelled
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(swarm: Option<&str>, task: Option<&str>, states: &[&str], timeout: Option<u64>) -> WaitArgs {
        WaitArgs {
            swarm: swarm.map(String::from),
            task: task.map(String::from),
            states: states.iter().map(|s| s.to_string()).collect(),
            timeout_secs: timeout,
        }
    }

    #[test]
    fn bad_arguments_name_the_argument_and_the_rule() {
        let err = |a| Wait::from_args(a).err().unwrap_or_default();
        assert!(err(args(None, None, &[], None)).starts_with("swarm, task: give exactly one"));
        assert!(err(args(Some("s"), Some("s/a"), &[], None)).starts_with("swarm, task:"));
        assert!(err(args(None, Some("nope"), &[], None)).starts_with("task: "));
        assert!(
            err(args(Some("s"), None, &["MERGED"], None))
                .starts_with("states[0]: \"MERGED\" is not a swarm state")
        );
        assert!(err(args(None, Some("s/a"), &["merged", "DONE"], None)).starts_with("states[1]: \"DONE\""));
        assert!(err(args(Some("s"), None, &[], Some(0))).starts_with("timeout_secs: must be at least 1"));
        assert!(
            err(args(Some("s"), None, &[], Some(86_400))).starts_with("timeout_secs: must be at most 3600")
        );
        let w = Wait::from_args(args(None, Some("s/a"), &["review", "MERGED"], Some(5))).expect("valid");
        assert_eq!(w.states, vec![v1::TaskState::Review as i32, v1::TaskState::Merged as i32]);
        assert_eq!(w.swarm(), "s");
    }
}
