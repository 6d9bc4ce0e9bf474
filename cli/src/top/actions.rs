//! The operator's actions from `top`: the same RPCs `answer`, `retry`,
//! `cancel` and `drain` send, run off the drawing loop; each reports back
//! one line for the status bar.

use swarm_proto::v1;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument as _;

use super::feed::Update;
use crate::client::{Target, connect};
use crate::exit::Failure;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Answer { task: String, text: String },
    Retry { task: String },
    Cancel { task: String },
    Drain { worker: String },
}

impl Op {
    /// What the confirmation prompt asks about, and the status bar names.
    pub fn describe(&self) -> String {
        match self {
            Op::Answer { task, .. } => format!("answer {task}"),
            Op::Retry { task } => format!("retry {task}"),
            Op::Cancel { task } => format!("cancel {task}"),
            Op::Drain { worker } => format!("drain worker {worker}"),
        }
    }
}

/// Runs `op` as a task of `set`, whose owner waits for it before exiting;
/// the result arrives as [`Update::Done`].
pub fn spawn(set: &mut JoinSet<()>, target: Target, op: Op, tx: mpsc::Sender<Update>) {
    let span = match &op {
        Op::Answer { task, .. } | Op::Retry { task } | Op::Cancel { task } => {
            tracing::info_span!("top.action", action = %op.describe(), task = %task)
        }
        Op::Drain { worker } => tracing::info_span!("top.action", action = %op.describe(), worker = %worker),
    };
    set.spawn(
        async move {
            let what = op.describe();
            let done = match run(&target, op).await {
                Ok(outcome) => Ok(format!("{what}: {outcome}")),
                Err(e) => Err(format!("{what}: {}", Failure::from_error(&e).message)),
            };
            let _ = tx.send(Update::Done(done)).await;
        }
        .instrument(span),
    );
}

async fn run(target: &Target, op: Op) -> anyhow::Result<String> {
    let mut c = connect(target).await?;
    let state = |t: Option<v1::Task>| crate::output::task_state(t.unwrap_or_default().state);
    Ok(match op {
        Op::Answer { task, text } => {
            let req = v1::AnswerRequest { task_id: task, question_id: String::new(), text };
            format!("sent; task is {}", state(c.answer(req).await?.into_inner().task))
        }
        Op::Retry { task } => {
            let resp = c.retry_task(v1::RetryTaskRequest { task_id: task }).await?.into_inner();
            format!("task is {}", state(resp.task))
        }
        Op::Cancel { task } => {
            let req =
                v1::CancelTaskRequest { task_id: task, reason: "cancelled by the operator (top)".into() };
            format!("task is {}", state(c.cancel_task(req).await?.into_inner().task))
        }
        Op::Drain { worker } => {
            c.drain_worker(v1::DrainWorkerRequest { worker_id: worker }).await?;
            "draining: no new tasks go to it".to_string()
        }
    })
}
