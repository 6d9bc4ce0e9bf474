//! The tools as the agent sees them: names, descriptions and input
//! schemas written for a model, arguments checked here (an error names
//! the argument and the rule, and nothing reaches the driver), then one
//! [`ToolCall`] to the driver, whose reply is the tool's result.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{ServerHandler, ServiceExt as _, tool, tool_handler, tool_router};
use serde::Deserialize;
use swarm_core::plan::spawn::MAX_FRAGMENT_BYTES;
use swarm_proto::limits::{MAX_CATEGORY, MAX_OPTION, MAX_OPTIONS, MAX_REPLY, MAX_STEP, MAX_TEXT};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};

use super::{ToolCall, ToolRequest};
use crate::children::{DEFAULT_WAIT, MAX_WAIT};

type ToolResult = Result<CallToolResult, String>;

/// The escalation categories of the worker protocol: what kind of
/// ambiguity stops the task, so the operator knows what is asked of them.
pub const ESCALATION_CATEGORIES: &[&str] = &["ambiguous_spec", "dependency_missing", "verification_unclear"];

const INSTRUCTIONS: &str = "Your line to swarm, which runs this task as one attempt in a swarm of coding \
agents and merges your commit when you finish. Report progress with progress; ask the operator with ask \
(it waits for the answer) instead of guessing; call escalate when the task cannot be done as specified; \
call checkpoint to stop now and be resumed later in this session with your work kept; call context for \
the task, what finished before it and the files you own. To split a large task, spawn child tasks that \
other agents run in parallel and wait_children for their work. When your task's feedback comes from a \
pull request's reviewer, answer them on its thread with reply. To finish, end your turn: swarm commits \
your changes.";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressArgs {
    /// What you are doing now, in a few words ("writing the parser tests").
    #[serde(default)]
    pub step: String,
    /// How far the task is, 0 to 100.
    #[serde(default)]
    pub percent: Option<u32>,
    /// Anything the operator should know (a decision taken, a surprise).
    #[serde(default)]
    pub note: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskArgs {
    /// The question for the operator, with what they need to answer it.
    pub question: String,
    /// Answers to choose from, if the question has a few (at most 16); the
    /// operator may still answer in their own words.
    #[serde(default)]
    pub choices: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EscalateArgs {
    /// ambiguous_spec: the task is unclear or contradicts itself;
    /// dependency_missing: something it needs is not there;
    /// verification_unclear: you cannot tell whether it is done.
    pub category: String,
    /// What exactly is wrong and what you would need to go on.
    pub detail: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArgs {
    /// What is done so far.
    pub summary: String,
    /// What to do first when the work resumes.
    pub next_action: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnArgs {
    /// The child tasks, each as a plan's task: `id` (lowercase letters,
    /// digits, `-`), `title`, `prompt` (what to do, self-contained: the
    /// child's agent knows only this), `files` (the globs it owns, each
    /// inside the files this task owns, no two children sharing a path
    /// unless one depends on the other) and `deps` (ids of other children
    /// that must merge first). They run as this task's agent does unless a
    /// task sets its own `agent`, `model` or `command`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<serde_json::Map<String, serde_json::Value>>>")]
    pub tasks: Option<Vec<serde_json::Value>>,
    /// The same tasks as TOML `[[tasks]]` tables, instead of `tasks`.
    #[serde(default)]
    pub plan_toml: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitChildrenArgs {
    /// How long to wait before returning with the children still running,
    /// in seconds (default 600, at most 3600). Call again to keep waiting.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyArgs {
    /// The thread as your task's feedback names it, e.g. `review-comment:123`.
    pub thread: String,
    /// What to say to the reviewer (Markdown): what you changed, or why not.
    pub text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Clone)]
pub struct WorkerTools {
    calls: mpsc::Sender<ToolCall>,
    tool_router: ToolRouter<WorkerTools>,
}

/// Serves one connection until the agent closes it.
pub async fn serve<S>(stream: S, calls: mpsc::Sender<ToolCall>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let tools = WorkerTools { calls, tool_router: WorkerTools::tool_router() };
    match tools.serve(stream).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::warn!(error = %e, "the agent's MCP session did not start"),
    }
}

#[tool_router]
impl WorkerTools {
    #[tool(
        description = "Tell the operator how far the task is: the current step, a percentage and a note. \
                          Shows in the swarm's event log and progress report. Returns at once."
    )]
    async fn progress(&self, Parameters(args): Parameters<ProgressArgs>) -> ToolResult {
        self.call(args.request()?).await
    }

    #[tool(description = "Ask the operator a question and wait for the answer, which this call returns \
                          ({answer}). Use it instead of guessing when the task leaves a decision open. \
                          It may take minutes or hours; that is expected.")]
    async fn ask(&self, Parameters(args): Parameters<AskArgs>) -> ToolResult {
        self.call(args.request()?).await
    }

    #[tool(description = "Stop and hand the task to the operator because it cannot be done as specified. \
                          category: ambiguous_spec, dependency_missing or verification_unclear. Your work so \
                          far is kept, and this session resumes with the operator's answer. After this \
                          call, end your turn.")]
    async fn escalate(&self, Parameters(args): Parameters<EscalateArgs>) -> ToolResult {
        self.call(args.request()?).await
    }

    #[tool(description = "Stop now and resume later in this same session: swarm commits your work so far \
                          as a work-in-progress commit and runs the task again from it. Use it to hand \
                          over at a clean point. After this call, end your turn.")]
    async fn checkpoint(&self, Parameters(args): Parameters<CheckpointArgs>) -> ToolResult {
        self.call(args.request()?).await
    }

    #[tool(
        description = "The task as swarm gave it (with the summaries of the tasks it depends on, earlier \
                          attempts' failures and the operator's answers), the files this task owns (edits \
                          elsewhere are refused), its attempt, branch and base commit."
    )]
    async fn context(&self, Parameters(_): Parameters<NoArgs>) -> ToolResult {
        self.call(ToolRequest::Context).await
    }

    #[tool(description = "Split this task: start child tasks that other agents run in parallel, each in \
                          its own worktree, while you keep yours. Give each child part of the files this \
                          task owns. Returns at once with the child swarm; then call wait_children, which \
                          merges their work into your worktree when they are done. Calling spawn again \
                          with the same tasks retries the failed ones.")]
    async fn spawn(&self, Parameters(args): Parameters<SpawnArgs>) -> ToolResult {
        self.call(args.request()?).await
    }

    #[tool(description = "Wait for the tasks you spawned. When they have all merged, their work is \
                          merged into your worktree (your own work is committed first) and this returns \
                          each task's state and summary. Also returns when one fails, when they wait on \
                          the operator, or after timeout_secs; then you decide what to do.")]
    async fn wait_children(&self, Parameters(args): Parameters<WaitChildrenArgs>) -> ToolResult {
        self.call(args.request()?).await
    }

    #[tool(description = "Answer a reviewer on the pull request: thread is the one your task's feedback \
                          names (\"thread `review-comment:123`\"), text what you did about it or why not. \
                          swarm posts it on that thread once your work is pushed; only threads given to \
                          this task are answered. Returns at once.")]
    async fn reply(&self, Parameters(args): Parameters<ReplyArgs>) -> ToolResult {
        self.call(args.request()?).await
    }
}

/// A tool's arguments as the driver gets them, checked: each error names
/// the argument and the rule.
trait Checked {
    fn request(self) -> Result<ToolRequest, String>;
}

impl Checked for ProgressArgs {
    fn request(self) -> Result<ToolRequest, String> {
        let step = bounded("step", self.step, MAX_STEP)?;
        let note = bounded("note", self.note, MAX_TEXT)?;
        if let Some(p) = self.percent.filter(|p| *p > 100) {
            return Err(format!("percent: must be 0 to 100, got {p}"));
        }
        if step.is_empty() && note.is_empty() && self.percent.is_none() {
            return Err("step, percent or note: give at least one".into());
        }
        Ok(ToolRequest::Progress { step, percent: self.percent, note })
    }
}

impl Checked for AskArgs {
    fn request(self) -> Result<ToolRequest, String> {
        let question = required("question", self.question, MAX_TEXT)?;
        if self.choices.len() > MAX_OPTIONS {
            return Err(format!("choices: at most {MAX_OPTIONS}, got {}", self.choices.len()));
        }
        let choices = self
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, c)| required(&format!("choices[{i}]"), c, MAX_OPTION))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ToolRequest::Ask { question, choices })
    }
}

impl Checked for EscalateArgs {
    fn request(self) -> Result<ToolRequest, String> {
        let category = self.category.trim().to_string();
        if category.len() > MAX_CATEGORY || !ESCALATION_CATEGORIES.contains(&category.as_str()) {
            return Err(format!("category: must be one of {}", ESCALATION_CATEGORIES.join(", ")));
        }
        let detail = required("detail", self.detail, MAX_TEXT)?;
        Ok(ToolRequest::Escalate { category, detail })
    }
}

impl Checked for CheckpointArgs {
    fn request(self) -> Result<ToolRequest, String> {
        let summary = required("summary", self.summary, MAX_TEXT)?;
        let next_action = required("next_action", self.next_action, MAX_TEXT)?;
        Ok(ToolRequest::Checkpoint { summary, next_action })
    }
}

impl Checked for ReplyArgs {
    fn request(self) -> Result<ToolRequest, String> {
        swarm_proto::limits::check_reply_thread(&self.thread).map_err(|rule| format!("thread: {rule}"))?;
        let text = required("text", self.text, MAX_REPLY)?;
        Ok(ToolRequest::Reply { thread: self.thread, text })
    }
}

impl Checked for NoArgs {
    fn request(self) -> Result<ToolRequest, String> {
        Ok(ToolRequest::Context)
    }
}

impl Checked for SpawnArgs {
    fn request(self) -> Result<ToolRequest, String> {
        spawn_fragment(self).map(|plan_toml| ToolRequest::Spawn { plan_toml })
    }
}

impl Checked for WaitChildrenArgs {
    fn request(self) -> Result<ToolRequest, String> {
        let secs = self.timeout_secs.unwrap_or(DEFAULT_WAIT.as_secs());
        if secs == 0 || secs > MAX_WAIT.as_secs() {
            return Err(format!("timeout_secs: must be 1 to {}, got {secs}", MAX_WAIT.as_secs()));
        }
        Ok(ToolRequest::WaitChildren { timeout: Duration::from_secs(secs) })
    }
}

/// The tools' names, as the agent calls them.
pub const TOOL_NAMES: &[&str] =
    &["progress", "ask", "escalate", "checkpoint", "context", "spawn", "wait_children", "reply"];

/// What the tool `name` sends the driver for `arguments` (a tool call's
/// JSON), read as its input schema says and checked as the tool checks
/// it; for the fuzzer, which reaches every tool's checks without a
/// session.
pub fn request_for(name: &str, arguments: serde_json::Value) -> Result<ToolRequest, String> {
    fn checked<T: Checked + serde::de::DeserializeOwned>(
        v: serde_json::Value,
    ) -> Result<ToolRequest, String> {
        serde_json::from_value::<T>(v).map_err(|e| format!("arguments: {e}"))?.request()
    }
    match name {
        "progress" => checked::<ProgressArgs>(arguments),
        "ask" => checked::<AskArgs>(arguments),
        "escalate" => checked::<EscalateArgs>(arguments),
        "checkpoint" => checked::<CheckpointArgs>(arguments),
        "context" => checked::<NoArgs>(arguments),
        "spawn" => checked::<SpawnArgs>(arguments),
        "wait_children" => checked::<WaitChildrenArgs>(arguments),
        "reply" => checked::<ReplyArgs>(arguments),
        other => Err(format!("name: no tool {other:?}")),
    }
}

impl WorkerTools {
    async fn call(&self, request: ToolRequest) -> ToolResult {
        let (reply, answer) = oneshot::channel();
        let gone = || "swarm is no longer running this attempt".to_string();
        self.calls.send(ToolCall { request, reply }).await.map_err(|_| gone())?;
        let value = answer.await.map_err(|_| gone())??;
        Ok(CallToolResult::structured(value))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for WorkerTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(super::SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// The spawn's tasks as the TOML fragment the controller reads: given
/// either way, not both; the controller checks them as a plan.
fn spawn_fragment(args: SpawnArgs) -> Result<String, String> {
    let text = match (args.tasks, args.plan_toml) {
        (Some(_), Some(_)) => return Err("tasks or plan_toml: give one, not both".into()),
        (None, None) => return Err("tasks: give the child tasks (or plan_toml)".into()),
        (None, Some(text)) => text,
        (Some(tasks), None) => {
            let table = serde_json::json!({ "tasks": tasks });
            toml::to_string(&table).map_err(|e| format!("tasks: cannot be written as a plan: {e}"))?
        }
    };
    if text.len() > MAX_FRAGMENT_BYTES {
        return Err(format!("tasks: at most {MAX_FRAGMENT_BYTES} bytes of plan, got {}", text.len()));
    }
    Ok(text)
}

fn bounded(field: &str, text: String, max: usize) -> Result<String, String> {
    let text = text.trim().to_string();
    if text.len() > max {
        return Err(format!("{field}: at most {max} bytes, got {}", text.len()));
    }
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(format!("{field}: must not contain control characters"));
    }
    Ok(text)
}

fn required(field: &str, text: String, max: usize) -> Result<String, String> {
    let text = bounded(field, text, max)?;
    if text.is_empty() {
        return Err(format!("{field}: must not be empty"));
    }
    Ok(text)
}
