//! The agent's calls to swarm's tools (see [`crate::worker_mcp`]), answered
//! by the driver, which owns the attempt: a progress call is journaled as
//! a status report and sent as Progress; `ask` is journaled as a question
//! and answered when the operator's answer arrives (the idle timer counts
//! the wait as the operator's, not the agent's); `escalate` and
//! `checkpoint` end the attempt once the agent's turn ends, with its work
//! kept for the resumed session; `context` is read from the assignment;
//! `reply` is journaled for the controller, which posts it on the pull
//! request thread if that thread was handed to this task.

use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::Driver;
use crate::report::{Event, Report, StatusKind};
use crate::status::WorkerStatus;
use crate::worker_mcp::{ToolCall, ToolRequest};

/// How long an agent may go on after `escalate` or `checkpoint` before it
/// is stopped: long enough to say a last word and end its turn.
const WIND_DOWN: Duration = Duration::from_secs(60);
/// Marks the questions asked through the `ask` tool.
pub const TOOL_ASK_PREFIX: &str = "tool-ask-";
/// How long `context` waits for the controller's part.
const CONTEXT_TIMEOUT: Duration = Duration::from_secs(10);

/// How the agent itself ended the attempt through a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Checkpoint { summary: String, next_action: String },
    Escalate { category: String, detail: String },
}

/// Where a tool's result goes.
type ToolReply = oneshot::Sender<Result<serde_json::Value, String>>;

/// A question the `ask` tool is waiting on.
pub(super) struct PendingAsk {
    pub id: String,
    reply: oneshot::Sender<Result<serde_json::Value, String>>,
}

impl Driver<'_, '_> {
    pub(super) async fn on_tool(&mut self, call: ToolCall) {
        self.last_activity = Instant::now();
        let ToolCall { request, reply } = call;
        let tool = request.name();
        let span = tracing::info_span!("tool", tool, attempt = %self.label());
        if let Some((ending, _)) = &self.ending {
            let what = match ending {
                Ending::Checkpoint { .. } => "checkpointed",
                Ending::Escalate { .. } => "escalated",
            };
            let _ = reply.send(Err(format!("this attempt has {what} and is ending: end your turn")));
            return;
        }
        let result = match request {
            // Answered when the operator's answer comes, not now.
            ToolRequest::Ask { question, choices } => {
                return span.in_scope(|| self.tool_ask(question, choices, reply));
            }
            ToolRequest::Context => Ok(self.tool_context().instrument(span).await),
            // Answered when the controller has answered (or the children
            // are done), off the driver's loop.
            ToolRequest::Spawn { plan_toml } => return self.tool_spawn(plan_toml, reply, span),
            ToolRequest::WaitChildren { timeout } => return self.tool_wait_children(timeout, reply, span),
            ToolRequest::Progress { step, percent, note } => {
                span.in_scope(|| self.tool_progress(step, percent, note))
            }
            ToolRequest::Escalate { category, detail } => {
                span.in_scope(|| self.end_by_tool(Ending::Escalate { category: category.clone(), detail }));
                Ok(json!({
                    "escalated": category,
                    "next": "End your turn now. Your work is kept; this session resumes with the \
                             operator's answer.",
                }))
            }
            ToolRequest::Reply { thread, text } => {
                span.in_scope(|| tracing::info!(%thread, "the agent replies on the pull request"));
                self.journal(Event::ForgeReply { attempt: self.s.attempt.clone(), thread, text });
                Ok(json!({
                    "queued": true,
                    "next": "swarm posts it on that thread of the pull request, if the thread was given \
                             to this task.",
                }))
            }
            ToolRequest::Checkpoint { summary, next_action } => {
                span.in_scope(|| self.end_by_tool(Ending::Checkpoint { summary, next_action }));
                Ok(json!({
                    "checkpointed": true,
                    "next": "End your turn now. swarm commits your work and resumes this session later.",
                }))
            }
        };
        self.log(&format!("{tool}: {}", if result.is_ok() { "answered" } else { "refused" })).await;
        let _ = reply.send(result);
    }

    fn tool_progress(
        &mut self,
        step: String,
        percent: Option<u32>,
        note: String,
    ) -> Result<serde_json::Value, String> {
        if !step.is_empty() {
            self.step = step.clone();
        }
        if let Some(p) = percent {
            self.percent = p;
        }
        if !note.is_empty() {
            self.push_tail(note.clone());
        }
        let percent_text = percent.map(|p| format!("{p}% ")).unwrap_or_default();
        let message = match (step.is_empty(), note.is_empty()) {
            (false, false) => format!("{percent_text}{step}: {note}"),
            (false, true) => format!("{percent_text}{step}"),
            (true, _) => format!("{percent_text}{note}"),
        };
        self.journal(Event::Status {
            attempt: self.s.attempt.clone(),
            status: StatusKind::Worker(WorkerStatus::Working),
            message: message.trim().to_string(),
        });
        self.send_progress();
        Ok(json!({ "recorded": true }))
    }

    fn tool_ask(
        &mut self,
        question: String,
        choices: Vec<String>,
        reply: oneshot::Sender<Result<serde_json::Value, String>>,
    ) {
        self.tool_asks_made += 1;
        let id = format!("{TOOL_ASK_PREFIX}{}", self.tool_asks_made);
        tracing::info!(question = %id, "the agent asks the operator");
        self.journal(Event::Question {
            attempt: self.s.attempt.clone(),
            id: id.clone(),
            text: question,
            category: "question".into(),
            options: choices,
        });
        self.tool_asks.push(PendingAsk { id, reply });
    }

    /// Answers a pending `ask`; false when `id` is not one.
    pub(super) fn answer_tool_ask(&mut self, id: &str, text: &str) -> bool {
        let Some(i) = self.tool_asks.iter().position(|a| a.id == id) else { return false };
        let ask = self.tool_asks.swap_remove(i);
        self.last_activity = Instant::now();
        let _ = ask.reply.send(Ok(json!({ "answer": text.trim() })));
        true
    }

    fn tool_spawn(&mut self, plan_toml: String, reply: ToolReply, span: tracing::Span) {
        let Some(children) = self.s.children.clone() else {
            let _ = reply.send(Err("this attempt cannot spawn child tasks (a reviewer's)".into()));
            return;
        };
        let note = format!("the agent spawns child tasks ({} bytes of plan)", plan_toml.len());
        self.journal(Event::note(&self.s.attempt, note));
        tracing::info!(parent: &span, bytes = plan_toml.len(), "the agent spawns child tasks");
        let (tx, attempt) = (self.ch.tx.clone(), self.s.attempt.clone());
        tokio::spawn(
            async move {
                let result = children.spawn(plan_toml).await;
                let note = match &result {
                    Ok(v) => format!("child swarm {} started", v["child"].as_str().unwrap_or_default()),
                    Err(e) => format!("spawn refused: {e}"),
                };
                let _ = tx.send(Report::Journaled(Event::note(&attempt, note)));
                let _ = reply.send(result);
            }
            .instrument(span),
        );
    }

    fn tool_wait_children(&mut self, timeout: Duration, reply: ToolReply, span: tracing::Span) {
        let Some(children) = self.s.children.clone() else {
            let _ = reply.send(Err("this attempt has no child tasks (a reviewer's)".into()));
            return;
        };
        let (tx, attempt) = (self.ch.tx.clone(), self.s.attempt.clone());
        tokio::spawn(
            async move {
                let result = children.wait(timeout).await;
                let note = match &result {
                    Ok(w) if w.merged => format!(
                        "the children's work is merged into the worktree ({})",
                        w.result["merge_commit"].as_str().unwrap_or_default()
                    ),
                    Ok(w) => format!(
                        "wait_children: the child is {}",
                        w.result["state"].as_str().unwrap_or_default()
                    ),
                    Err(e) => format!("wait_children failed: {e}"),
                };
                let _ = tx.send(Report::Journaled(Event::note(&attempt, note)));
                let _ = reply.send(result.map(|w| w.result));
            }
            .instrument(span),
        );
    }

    fn end_by_tool(&mut self, ending: Ending) {
        let note = match &ending {
            Ending::Checkpoint { summary, .. } => format!("the agent checkpoints: {summary}"),
            Ending::Escalate { category, detail } => format!("the agent escalates ({category}): {detail}"),
        };
        self.journal(Event::note(&self.s.attempt, note));
        self.ending = Some((ending, Instant::now()));
    }

    /// The ending to return now: the agent's turn is over, or it has had
    /// its wind-down.
    pub(super) fn tool_end_due(&self) -> Option<Ending> {
        let (ending, since) = self.ending.as_ref()?;
        (!self.turn_open || self.proc.is_none() || since.elapsed() >= WIND_DOWN).then(|| ending.clone())
    }

    /// The assignment's view, and the swarm around the task as the
    /// controller has it now; without the controller the agent still gets
    /// the first part, and is told why the rest is missing. (`&mut`: the
    /// attempt's future must be Send, and the driver is Send, not Sync.)
    async fn tool_context(&mut self) -> serde_json::Value {
        let mut context = json!({
            "attempt": self.label(),
            "task": self.s.task_text,
            "owned_files": self.s.owned_globs,
            "branch": self.s.branch,
            "base_commit": self.s.base_commit,
        });
        let asked = tokio::time::timeout(CONTEXT_TIMEOUT, self.s.link.task_context(&self.s.attempt)).await;
        match asked {
            Ok(Ok(now)) => {
                context["dependencies"] = now.dependencies.iter().map(context_task).collect();
                context["siblings"] = now.siblings.iter().map(context_task).collect();
            }
            Ok(Err(status)) => context["swarm_unavailable"] = json!(status.message()),
            Err(_) => context["swarm_unavailable"] = json!("the controller did not answer in time"),
        }
        context
    }
}

fn context_task(t: &swarm_proto::v1::ContextTask) -> serde_json::Value {
    let state =
        swarm_proto::v1::TaskState::try_from(t.state).unwrap_or(swarm_proto::v1::TaskState::Unspecified);
    json!({
        "id": t.id,
        "title": t.title,
        "state": state.as_str_name().trim_start_matches("TASK_STATE_"),
        "reason": t.reason,
        "summary": t.summary,
        "owned_files": t.owned_globs,
    })
}

impl Driver<'_, '_> {
    fn label(&self) -> String {
        let a = &self.s.attempt;
        format!("{}#{}", a.task, a.number)
    }
}

impl ToolRequest {
    fn name(&self) -> &'static str {
        match self {
            ToolRequest::Progress { .. } => "progress",
            ToolRequest::Ask { .. } => "ask",
            ToolRequest::Escalate { .. } => "escalate",
            ToolRequest::Checkpoint { .. } => "checkpoint",
            ToolRequest::Context => "context",
            ToolRequest::Spawn { .. } => "spawn",
            ToolRequest::WaitChildren { .. } => "wait_children",
            ToolRequest::Reply { .. } => "reply",
        }
    }
}
