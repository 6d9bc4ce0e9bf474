//! The tools: each checks its arguments (an error names the argument and
//! the rule, and nothing is sent), makes one or a few Operator API calls,
//! and returns `swarm_view`'s JSON. A refusal of the Operator API (not
//! found, not allowed now, no permission) comes back as the tool's error
//! with the controller's words. The table of the tools by name
//! (`TOOL_NAMES`, `check_arguments`) is here, beside the router it must
//! match, above the checks and `wait` it calls.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Serialize;
use swarm_proto::v1;
use swarm_view::{SwarmView, TaskDetailView, TaskView};

use crate::args::{
    CancelArgs, LandArgs, ListTasksArgs, PlanArgs, ReviewArgs, SwarmArgs, TaskArgs, TextArgs, WaitArgs,
};
use crate::channel::{Operator, request};
use crate::checks::Cancel;
use crate::pages;
use crate::wait::Wait;

/// What a tool returns: its JSON, or why it did nothing.
pub type ToolResult = Result<CallToolResult, String>;

/// The events `describe_task` returns, the latest ones: enough to see what
/// happened lately without filling a model's context.
const DESCRIBE_EVENTS: usize = 30;

const INSTRUCTIONS: &str = "swarm runs a plan of coding tasks on a fleet of agents, each task in its own git \
worktree, merging finished tasks into the swarm's integration branch in dependency order. \
Write a plan (TOML), check it with check_plan, start it with create_swarm, then call wait \
(not a loop of report calls) until the swarm ends or needs you: answer questions with answer, \
decide reviews with review, steer running tasks with message, and land the integration \
branch with land when the swarm is COMPLETED. Tasks are named SWARM/TASK.";

#[derive(Clone)]
pub struct SwarmTools {
    op: Operator,
    tool_router: ToolRouter<SwarmTools>,
}

#[tool_router]
impl SwarmTools {
    pub fn new(op: Operator) -> SwarmTools {
        SwarmTools { op, tool_router: Self::tool_router() }
    }

    #[tool(description = "Validate a plan without starting it. Returns {valid: true, swarm, tasks} or \
                       {valid: false, error: {path, rule}} naming the field (e.g. tasks[2].deps[0]) \
                       and the rule it breaks. Changes nothing.")]
    async fn check_plan(&self, Parameters(args): Parameters<PlanArgs>) -> ToolResult {
        Ok(json(&args.check()))
    }

    #[tool(description = "Start a swarm from a plan (TOML). Returns the swarm and whether it was created \
                       (false: a swarm with this name and the same plan already exists, so calling \
                       again is safe). A bad plan is refused with the field and the rule.")]
    async fn create_swarm(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<PlanArgs>,
    ) -> ToolResult {
        let req = args.create()?;
        let resp = self.op.clone().create_swarm(request(&ctx, req)).await.map_err(refused)?.into_inner();
        let swarm = resp.swarm.unwrap_or_default();
        Ok(json(&serde_json::json!({ "created": resp.created, "swarm": SwarmView::from(&swarm) })))
    }

    #[tool(description = "A swarm's progress report: state, health (green/yellow/red) with reasons, each \
                       task's branch, state, progress and checklist, the integration queue, spending, \
                       and the reports of child swarms nested under the tasks that started them.")]
    async fn report(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<SwarmArgs>,
    ) -> ToolResult {
        let swarm_id = args.swarm_id()?;
        let op = self.op.clone();
        let req = request(&ctx, v1::GetSwarmRequest { swarm_id: swarm_id.clone() });
        let root = op.clone().get_swarm(req).await.map_err(refused)?.into_inner();
        let workers = pages::workers(&op, &ctx).await.map_err(refused)?;
        let prefix = format!("{swarm_id}/");
        let all = pages::swarms(&op, &ctx).await.map_err(refused)?;
        let now = swarm_view::text::now_ms();
        let mut reports = Vec::new();
        for s in all.into_iter().filter(|s| s.id.starts_with(&prefix)).chain(std::iter::once(root)) {
            let tasks = pages::tasks(&op, &ctx, &s.id, Vec::new()).await.map_err(refused)?;
            reports.push(swarm_view::report::build(&s, &tasks, &workers, now));
        }
        let report = swarm_view::report::nest(&swarm_id, reports).ok_or("swarm: no report")?;
        Ok(json(&report))
    }

    #[tool(description = "A swarm's tasks (optionally only those in the given states) as {tasks: [...]}, \
                          each with its state, reason, worker, progress, pending question and spending.")]
    async fn list_tasks(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<ListTasksArgs>,
    ) -> ToolResult {
        let (swarm_id, states) = args.request()?;
        let tasks = pages::tasks(&self.op, &ctx, &swarm_id, states).await.map_err(refused)?;
        // Structured content is an object: the list goes under a name.
        Ok(json(&serde_json::json!({ "tasks": tasks.iter().map(TaskView::from).collect::<Vec<_>>() })))
    }

    #[tool(description = "Everything about one task: its state and reason, prompt, every attempt (worker, \
                       outcome, verify tiers, summary, error), its branch report and review decisions, \
                       and its latest events.")]
    async fn describe_task(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<TaskArgs>,
    ) -> ToolResult {
        let task_id = args.task_id()?;
        let detail = self.op.clone().get_task(request(&ctx, v1::GetTaskRequest { task_id })).await;
        let mut view = TaskDetailView::from(&detail.map_err(refused)?.into_inner());
        view.keep_latest_events(DESCRIBE_EVENTS);
        Ok(json(&view))
    }

    #[tool(description = "Answer the question a task is waiting on (its pending_question): one of its \
                          options, the option's number, or free text. The task resumes with it.")]
    async fn answer(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<TextArgs>,
    ) -> ToolResult {
        let req = args.answer()?;
        let resp = self.op.clone().answer(request(&ctx, req)).await.map_err(refused)?.into_inner();
        Ok(task_json(resp.task))
    }

    #[tool(description = "Decide a task in REVIEW: approve (it goes on to merge), request-changes (a \
                          new attempt is asked to change what `message` says) or reject.")]
    async fn review(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<ReviewArgs>,
    ) -> ToolResult {
        let req = args.request()?;
        let resp = self.op.clone().review_task(request(&ctx, req)).await.map_err(refused)?.into_inner();
        Ok(task_json(resp.task))
    }

    #[tool(description = "Send a message to a RUNNING task's worker: its agent reads it as its next \
                          message (and it is written to the task's .swarm/messages/).")]
    async fn message(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<TextArgs>,
    ) -> ToolResult {
        let req = args.message()?;
        let resp = self.op.clone().send_message(request(&ctx, req)).await.map_err(refused)?.into_inner();
        Ok(json(&serde_json::json!({
            "message_id": resp.message_id,
            "task": resp.task.as_ref().map(TaskView::from),
        })))
    }

    #[tool(description = "Cancel a task (its running attempt is stopped) or, with `swarm`, every task of \
                          a swarm that has not ended. Merged work stays merged.")]
    async fn cancel(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<CancelArgs>,
    ) -> ToolResult {
        match args.request()? {
            Cancel::Task(req) => {
                let resp = self.op.clone().cancel_task(request(&ctx, req)).await.map_err(refused)?;
                Ok(task_json(resp.into_inner().task))
            }
            Cancel::Swarm(req) => {
                let resp = self.op.clone().cancel_swarm(request(&ctx, req)).await.map_err(refused)?;
                Ok(json(&serde_json::json!({ "cancelled": resp.into_inner().cancelled })))
            }
        }
    }

    #[tool(description = "Run a FAILED, BLOCKED, ESCALATED, CONFLICT or CANCELLED task again, with a \
                          fresh retry budget.")]
    async fn retry(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<TaskArgs>,
    ) -> ToolResult {
        let task_id = args.task_id()?;
        let resp = self.op.clone().retry_task(request(&ctx, v1::RetryTaskRequest { task_id })).await;
        Ok(task_json(resp.map_err(refused)?.into_inner().task))
    }

    #[tool(description = "Land a COMPLETED swarm: move its target branch (the plan's, or \
                          target_branch) to the integration branch's head, fast-forward only.")]
    async fn land(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<LandArgs>,
    ) -> ToolResult {
        let req = args.request()?;
        let resp = self.op.clone().land(request(&ctx, req)).await.map_err(refused)?.into_inner();
        Ok(json(&serde_json::json!({
            "target_branch": resp.target_branch,
            "old_commit": resp.old_commit,
            "new_commit": resp.new_commit,
        })))
    }

    #[tool(description = "Block until a swarm or a task reaches one of `states` (default: an end state), a \
                       task asks the operator a question, a task waits for the operator's review, or \
                       `timeout_secs` passes. Returns what happened ({reason: \
                       state|question|review|timeout, ...} with the swarm or task, and the questions \
                       or reviews waiting), so there is no need to poll. Call again after answering \
                       or reviewing to keep waiting.")]
    async fn wait(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(args): Parameters<WaitArgs>,
    ) -> ToolResult {
        let waited = Wait::from_args(args)?;
        let outcome = waited.run(&self.op, &ctx).await.map_err(refused)?;
        Ok(json(&outcome))
    }
}

/// The tools the server lists, by name.
#[cfg(test)]
fn listed() -> Vec<String> {
    SwarmTools::tool_router().list_all().into_iter().map(|t| t.name.to_string()).collect()
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SwarmTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("swarm", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

fn json(value: &impl Serialize) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => CallToolResult::structured_error(serde_json::json!({ "error": e.to_string() })),
    }
}

fn task_json(task: Option<v1::Task>) -> CallToolResult {
    json(&TaskView::from(&task.unwrap_or_default()))
}

/// The Operator API's refusal, in its words (they name the field and the
/// rule, or the state that does not allow the call).
pub(crate) fn refused(status: tonic::Status) -> String {
    let code = match status.code() {
        tonic::Code::NotFound => "not found",
        tonic::Code::InvalidArgument => "invalid argument",
        tonic::Code::FailedPrecondition => "not allowed now",
        tonic::Code::PermissionDenied => "permission denied",
        tonic::Code::Unauthenticated => "unauthenticated",
        tonic::Code::Unavailable => "controller unavailable",
        tonic::Code::ResourceExhausted => "too many requests",
        _ => "failed",
    };
    format!("{code}: {}", status.message())
}

/// The tools' names, as a model calls them.
pub const TOOL_NAMES: &[&str] = &[
    "check_plan",
    "create_swarm",
    "report",
    "list_tasks",
    "describe_task",
    "answer",
    "review",
    "message",
    "cancel",
    "retry",
    "land",
    "wait",
];

/// Reads `arguments` (a tool call's JSON) as the tool `name`'s input
/// schema says and checks them as the tool does, sending nothing.
pub fn check_arguments(name: &str, arguments: serde_json::Value) -> Result<(), String> {
    fn read<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, String> {
        serde_json::from_value(v).map_err(|e| format!("arguments: {e}"))
    }
    match name {
        "check_plan" => read::<PlanArgs>(arguments).map(|a| drop(a.check())),
        "create_swarm" => read::<PlanArgs>(arguments)?.create().map(drop),
        "report" => read::<SwarmArgs>(arguments)?.swarm_id().map(drop),
        "list_tasks" => read::<ListTasksArgs>(arguments)?.request().map(drop),
        "describe_task" | "retry" => read::<TaskArgs>(arguments)?.task_id().map(drop),
        "answer" => read::<TextArgs>(arguments)?.answer().map(drop),
        "message" => read::<TextArgs>(arguments)?.message().map(drop),
        "review" => read::<ReviewArgs>(arguments)?.request().map(drop),
        "cancel" => read::<CancelArgs>(arguments)?.request().map(drop),
        "land" => read::<LandArgs>(arguments)?.request().map(drop),
        "wait" => Wait::from_args(read::<WaitArgs>(arguments)?).map(drop),
        other => Err(format!("name: no tool {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_tool_the_server_lists_is_checked_here() {
        let mut listed = listed();
        listed.sort_unstable();
        let mut names: Vec<&str> = TOOL_NAMES.to_vec();
        names.sort_unstable();
        assert_eq!(listed, names);
    }

    #[test]
    fn bad_arguments_are_refused_naming_the_argument_and_the_rule() {
        let huge = format!("name = \"big\"\n# {}\n", "x".repeat(2 << 20));
        let refusals = [
            ("describe_task", json!({"task": "m"}), "task: "),
            ("cancel", json!({"task": "m/a", "swarm": "m"}), "task, swarm: give exactly one"),
            ("cancel", json!({}), "task, swarm: give exactly one"),
            (
                "list_tasks",
                json!({"swarm": "m", "states": ["DONE"]}),
                "states[0]: \"DONE\" is not a task state",
            ),
            ("review", json!({"task": "m/a", "decision": "maybe"}), "decision: must be approve"),
            ("review", json!({"task": "m/a", "decision": "request-changes"}), "message: required"),
            ("answer", json!({"task": "m/a", "text": " "}), "text: must not be empty"),
            ("message", json!({"task": "m/../a", "text": "hi"}), "task: "),
            ("land", json!({"swarm": "M A"}), "swarm: "),
            ("report", json!({"swarm": ""}), "swarm: "),
            ("wait", json!({"task": "m/a", "timeout_secs": 0}), "timeout_secs: must be at least 1"),
            ("wait", json!({"swarm": "m", "timeout_secs": 7200}), "timeout_secs: must be at most 3600"),
            ("wait", json!({"swarm": "m", "sleep": 1}), "unknown field `sleep`"),
            ("create_swarm", json!({"plan_toml": huge}), "plan_toml: "),
            ("retry", json!({"task": 7}), "arguments: "),
            ("nope", json!({}), "name: no tool"),
        ];
        for (tool, args, expected) in refusals {
            let text = check_arguments(tool, args).expect_err(tool);
            assert!(text.contains(expected), "{tool}: {text:?} should say {expected:?}");
        }
        assert_eq!(
            check_arguments("check_plan", json!({"plan_toml": "not toml ["})),
            Ok(()),
            "a finding, not an error"
        );
        assert_eq!(check_arguments("wait", json!({"task": "m/a", "states": ["merged"]})), Ok(()));
    }
}
