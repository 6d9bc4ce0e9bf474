//! A scripted OpenAI Responses API on 127.0.0.1, so that the real Codex
//! CLI runs offline against answers a test wrote down.
//!
//! A conversation picks its [`Script`] by a marker in its user input
//! (`SCRIPT: <name>`, see [`marker`]); the step it gets is the number of
//! model responses already in the request's `input` (see [`step_of`]).
//! That keeps the server stateless: Codex 0.147 with a custom provider
//! sends no `previous_response_id` and resends the whole conversation with
//! every request, so a resumed session goes on with the same script.
//!
//! What Codex 0.147 does with it (learnt by `tests/real_codex_cli.rs`):
//! - Requests: `POST /v1/responses`, `"stream": true`, `"store": false`,
//!   `parallel_tool_calls: false`, `include: ["reasoning.encrypted_content"]`,
//!   the whole conversation in `input`, no `previous_response_id`. With
//!   `-m gpt-5.5` the tools are `exec_command` (function, `{"cmd": ...}`),
//!   `write_stdin`, `update_plan`, `request_user_input` (function),
//!   `apply_patch` (custom, freeform: the call is a `custom_tool_call` with
//!   the patch text as `input`), `view_image`, goals, `tool_search`,
//!   `web_search`. Tool results come back as `function_call_output` /
//!   `custom_tool_call_output`; exec_command's output is text starting
//!   `Chunk ID: ...\nWall time: ...\nProcess exited with code 0\n...`.
//! - SSE: `event: <type>\ndata: <json>\n\n`; Codex acts on
//!   `response.output_item.done` items and `response.completed`
//!   (`response.id` and `usage` required); data that is not JSON is skipped;
//!   a body ending without `response.completed` is the error "stream
//!   disconnected before completion: stream closed before
//!   response.completed".
//! - `codex exec --json` sums a turn's responses into `turn.completed`
//!   `usage`: `input_tokens` (cached included), `cached_input_tokens`,
//!   `cache_write_input_tokens` (0), `output_tokens`, `reasoning_output_tokens`.
//! - A 429 whose body is `{"error": {"type": "usage_limit_reached",
//!   "plan_type": .., "resets_at": <unix s>}}` is not retried; exec prints
//!   `{"type":"error","message":M}` then `{"type":"turn.failed","error":
//!   {"message":M}}` and exits non-zero, M = "You've hit your usage limit.
//!   Visit https://chatgpt.com/codex/settings/usage to purchase more
//!   credits or try again at 8:56 PM." (plan `pro`): the reset only as a
//!   local wall-clock time, no date when it is today, no zone. The
//!   `x-codex-primary-*` headers (`used-percent`, `window-minutes`,
//!   `reset-at`) feed rate-limit snapshots (app-server's
//!   `account/rateLimits/updated`), not the message. (By its source, a 429
//!   of another body is retried, then "exceeded retry limit, last status:
//!   429 ..."; not run here.)
//! - A 500 (retries 0) prints M = "We're currently experiencing high
//!   demand, which may cause temporary errors." the same way.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use crate::scripted_api::{Log, Parts, Running, json_response, summary_line};

pub use crate::messages_api::{MARKER, marker, unix_now_s};

/// Largest request body accepted (instructions and tool schemas are tens
/// of KiB and the conversation grows).
const MAX_BODY: usize = 16 << 20;
/// How deep [`Step::Dynamic`] steps may return further dynamic steps.
const MAX_DYNAMIC_DEPTH: usize = 8;

/// Token counts of one response, as `response.completed` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// All input tokens, the cached ones included.
    pub input: u64,
    pub cached: u64,
    /// All output tokens, the reasoning ones included.
    pub output: u64,
    pub reasoning: u64,
}

impl Default for Usage {
    fn default() -> Usage {
        Usage { input: 10, cached: 0, output: 5, reasoning: 0 }
    }
}

/// A tool call of a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// A `function_call` item: `arguments` is a JSON string.
    Function { name: String, arguments: String },
    /// A `custom_tool_call` item (freeform tools, e.g. `apply_patch`).
    Custom { name: String, input: String },
    /// A `tool_search_call` Codex runs itself (`execution: "client"`):
    /// MCP tools are offered only through it, and a `tool_search_output`
    /// with the matching tools comes back.
    ToolSearch { query: String },
    /// A `function_call` of a tool a search returned, in its namespace.
    Namespaced { namespace: String, name: String, arguments: String },
}

/// One answer of a script.
#[derive(Clone)]
pub enum Step {
    /// A response: a reasoning item, an assistant message, then tool calls
    /// (call ids generated), each present when given.
    Reply { reasoning: Option<String>, text: Option<String>, calls: Vec<Call>, usage: Usage },
    /// An HTTP error with its headers and JSON body.
    Error { status: u16, headers: Vec<(String, String)>, body: Value },
    /// A 200 event stream that breaks off: an event whose data is not JSON,
    /// then the end of the body without `response.completed`.
    Malformed,
    /// Decided when the request arrives.
    Dynamic(Arc<dyn Fn(&Request) -> Step + Send + Sync>),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Reply { text, calls, usage, .. } => write!(f, "Reply({text:?}, {calls:?}, {usage:?})"),
            Step::Error { status, .. } => write!(f, "Error({status})"),
            Step::Malformed => f.write_str("Malformed"),
            Step::Dynamic(_) => f.write_str("Dynamic"),
        }
    }
}

impl Step {
    fn empty() -> Step {
        Step::Reply { reasoning: None, text: None, calls: Vec::new(), usage: Usage::default() }
    }

    /// An assistant message: the turn ends.
    pub fn text(text: &str) -> Step {
        Step::empty().say(text)
    }

    /// One `function_call` whose arguments are `arguments` serialized.
    pub fn call(name: &str, arguments: Value) -> Step {
        Step::empty().and_call(name, arguments)
    }

    /// `exec_command` running `cmd` (Codex's shell tool).
    pub fn exec(cmd: &str) -> Step {
        Step::call("exec_command", json!({"cmd": cmd}))
    }

    /// `apply_patch` as Codex 0.147 offers it to gpt-5-codex: a freeform
    /// tool whose input is the patch text.
    pub fn apply_patch(patch: &str) -> Step {
        Step::empty().and_custom("apply_patch", patch)
    }

    /// A `tool_search_call` for `query` (see [`Call::ToolSearch`]).
    pub fn tool_search(query: &str) -> Step {
        let mut step = Step::empty();
        if let Step::Reply { calls, .. } = &mut step {
            calls.push(Call::ToolSearch { query: query.to_string() });
        }
        step
    }

    /// A `function_call` of `name` in `namespace` (a searched-for tool).
    pub fn namespaced_call(namespace: &str, name: &str, arguments: Value) -> Step {
        let mut step = Step::empty();
        if let Step::Reply { calls, .. } = &mut step {
            let (namespace, name) = (namespace.to_string(), name.to_string());
            calls.push(Call::Namespaced { namespace, name, arguments: arguments.to_string() });
        }
        step
    }

    /// A further `function_call` in the same response.
    pub fn and_call(mut self, name: &str, arguments: Value) -> Step {
        if let Step::Reply { calls, .. } = &mut self {
            calls.push(Call::Function { name: name.to_string(), arguments: arguments.to_string() });
        }
        self
    }

    /// A further `custom_tool_call` in the same response.
    pub fn and_custom(mut self, name: &str, input: &str) -> Step {
        if let Step::Reply { calls, .. } = &mut self {
            calls.push(Call::Custom { name: name.to_string(), input: input.to_string() });
        }
        self
    }

    /// The assistant message of this reply.
    pub fn say(mut self, said: &str) -> Step {
        if let Step::Reply { text, .. } = &mut self {
            *text = Some(said.to_string());
        }
        self
    }

    /// A reasoning item (its summary) before the rest of this reply.
    pub fn think(mut self, summary: &str) -> Step {
        if let Step::Reply { reasoning, .. } = &mut self {
            *reasoning = Some(summary.to_string());
        }
        self
    }

    /// This reply's token counts.
    pub fn usage(mut self, tokens: Usage) -> Step {
        if let Step::Reply { usage, .. } = &mut self {
            *usage = tokens;
        }
        self
    }

    /// An HTTP error: `{"error": {"type": kind, "code": kind, "message": message}}`.
    pub fn error(status: u16, kind: &str, message: &str) -> Step {
        let body = json!({"error": {"type": kind, "code": kind, "message": message}});
        Step::Error { status, headers: Vec::new(), body }
    }

    /// Adds a response header to an error.
    pub fn header(mut self, name: &str, value: &str) -> Step {
        if let Step::Error { headers, .. } = &mut self {
            headers.push((name.to_ascii_lowercase(), value.to_string()));
        }
        self
    }

    /// 500 `server_error`.
    pub fn server_error() -> Step {
        Step::error(500, "server_error", "Internal server error")
    }

    /// 429 of a ChatGPT plan's usage limit that resets at `reset_unix_s`:
    /// the body Codex turns into its usage-limit error (`type`
    /// `usage_limit_reached`, `plan_type`, `resets_at`) and the
    /// `x-codex-primary-*` headers of a five-hour window used up.
    pub fn usage_limit(reset_unix_s: u64) -> Step {
        let body = json!({"error": {
            "type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "plan_type": "pro",
            "resets_at": reset_unix_s,
            "resets_in_seconds": reset_unix_s.saturating_sub(unix_now_s()),
        }});
        let reset = reset_unix_s.to_string();
        let after = reset_unix_s.saturating_sub(unix_now_s()).to_string();
        Step::Error { status: 429, headers: Vec::new(), body }
            .header("x-codex-primary-used-percent", "100")
            .header("x-codex-primary-window-minutes", "300")
            .header("x-codex-primary-reset-at", &reset)
            .header("x-codex-primary-reset-after-seconds", &after)
            .header("x-codex-secondary-used-percent", "40")
            .header("x-codex-secondary-window-minutes", "10080")
            .header("retry-after", &after)
    }

    /// A step computed from the request (e.g. echoing a tool's output).
    pub fn dynamic(f: impl Fn(&Request) -> Step + Send + Sync + 'static) -> Step {
        Step::Dynamic(Arc::new(f))
    }
}

/// A named list of steps.
#[derive(Debug, Clone)]
pub struct Script {
    pub name: String,
    pub steps: Vec<Step>,
}

impl Script {
    /// `name` must be what [`marker`] writes: letters, digits, `-`, `_`.
    pub fn new(name: &str, steps: Vec<Step>) -> Script {
        assert!(name.chars().all(is_name_char) && !name.is_empty(), "script name {name:?}");
        Script { name: name.to_string(), steps }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, e.g. `/v1/responses`.
    pub path: String,
    /// Lower-case names; a repeated header keeps its last value.
    pub headers: BTreeMap<String, String>,
    /// The JSON body; `Null` without one or when it is not JSON.
    pub body: Value,
    /// The script its user input named, for a Responses request.
    pub script: Option<String>,
    /// The step it was answered with.
    pub step: Option<usize>,
    /// The status it was answered with.
    pub status: u16,
    /// When it arrived, unix ms.
    pub unix_ms: u64,
}

/// A tool call's output the client sent back.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput {
    pub call_id: String,
    /// The tool the model called with that id, when the request holds it.
    pub tool: String,
    /// The output's text (a string, or the text of its content items).
    pub output: String,
}

impl Request {
    pub fn is_responses(&self) -> bool {
        self.method == "POST" && self.path.split('?').next() == Some("/v1/responses")
    }

    pub fn input(&self) -> &[Value] {
        self.body.get("input").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
    }

    /// The names of the tools offered, with their kind (`function`, `custom`, ...).
    pub fn tools(&self) -> Vec<(String, String)> {
        let tools = self.body.get("tools").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        tools.iter().map(|t| (str_of(t, "name"), str_of(t, "type"))).collect()
    }

    /// Every tool output in the conversation, oldest first.
    pub fn call_outputs(&self) -> Vec<CallOutput> {
        let mut names = BTreeMap::new();
        let mut out = Vec::new();
        for item in self.input() {
            match item.get("type").and_then(Value::as_str) {
                Some("function_call" | "custom_tool_call") => {
                    names.insert(str_of(item, "call_id"), str_of(item, "name"));
                }
                Some("function_call_output" | "custom_tool_call_output") => {
                    let call_id = str_of(item, "call_id");
                    out.push(CallOutput {
                        tool: names.get(&call_id).cloned().unwrap_or_default(),
                        output: text_of(item.get("output").unwrap_or(&Value::Null)),
                        call_id,
                    });
                }
                _ => {}
            }
        }
        out
    }

    /// The text of every user message, joined by newlines.
    pub fn user_text(&self) -> String {
        let texts: Vec<String> = self
            .input()
            .iter()
            .filter(|i| i.get("role").and_then(Value::as_str) == Some("user"))
            .map(|i| text_of(i.get("content").unwrap_or(&Value::Null)))
            .collect();
        texts.join("\n")
    }
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// A content value's text: a string, or the `text` of its items.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> =
                items.iter().map(|i| str_of(i, "text")).filter(|t| !t.is_empty()).collect();
            parts.join("\n")
        }
        _ => String::new(),
    }
}

/// How many model responses `input` already holds: runs of items the model
/// produced (reasoning, assistant messages, tool calls). A tool's output
/// between two calls of one response (Codex may record a call's output
/// before the next call of the same response) does not split it: the
/// server's call ids name the response they came from.
pub fn step_of(input: &[Value]) -> usize {
    let mut steps = 0;
    let mut in_run = false;
    let mut last_response: Option<String> = None;
    for item in input {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        let role = item.get("role").and_then(Value::as_str);
        let from_model = matches!(
            kind,
            "reasoning" | "function_call" | "custom_tool_call" | "local_shell_call" | "tool_search_call"
        ) || (kind == "message" && role == Some("assistant"));
        if !from_model {
            in_run = false;
            continue;
        }
        let response = response_of_call(item.get("call_id").and_then(Value::as_str).unwrap_or_default());
        let same = match (&response, &last_response) {
            (Some(r), Some(last)) => r == last,
            (None, _) => in_run,
            (Some(_), None) => in_run,
        };
        if !same {
            steps += 1;
        }
        in_run = true;
        if response.is_some() {
            last_response = response;
        }
    }
    steps
}

/// The response a call id of this server names: `call_<response>_<n>`.
fn response_of_call(call_id: &str) -> Option<String> {
    let rest = call_id.strip_prefix("call_")?;
    let (response, _) = rest.rsplit_once('_')?;
    Some(response.to_string())
}

struct Shared {
    scripts: BTreeMap<String, Vec<Step>>,
    log: Log<Request>,
    next_id: AtomicU64,
}

/// The running server; it stops when dropped.
pub struct ResponsesApi {
    shared: Arc<Shared>,
    server: Running,
}

impl ResponsesApi {
    /// Starts the server on a free port of 127.0.0.1, on its own thread
    /// and runtime so that sync and async tests alike can use it.
    pub fn start(scripts: Vec<Script>) -> ResponsesApi {
        let mut by_name = BTreeMap::new();
        for s in scripts {
            assert!(by_name.insert(s.name.clone(), s.steps).is_none(), "two scripts named {}", s.name);
        }
        let shared = Arc::new(Shared { scripts: by_name, log: Log::new(), next_id: AtomicU64::new(1) });
        let app = axum::Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(shared.clone());
        ResponsesApi { server: Running::start("responses-api", app), shared }
    }

    /// `http://127.0.0.1:PORT/v1`, a provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr)
    }

    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    /// Every request so far (at most the first 2000), oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.log.all()
    }

    /// The Responses requests of conversations on `script`.
    pub fn requests_of(&self, script: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_responses() && r.script.as_deref() == Some(script))
            .collect()
    }

    /// Requests received beyond what was kept.
    pub fn dropped(&self) -> u64 {
        self.shared.log.dropped()
    }

    /// One line per request, for failure messages.
    pub fn summary(&self) -> String {
        let lines: Vec<String> = self
            .requests()
            .iter()
            .map(|r| summary_line(&r.method, &r.path, r.script.as_deref(), r.step, r.status))
            .collect();
        lines.join("\n")
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parts = Parts::of(&method, &uri, &headers, &body);
    let mut req = Request {
        method: parts.method,
        path: parts.path,
        headers: parts.headers,
        body: parts.body,
        script: None,
        step: None,
        status: 0,
        unix_ms: parts.unix_ms,
    };
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let mut response = match (method, uri.path()) {
        (Method::POST, "/v1/responses") => responses(&shared, &mut req, id),
        // The model list: an empty one leaves Codex with its built-in models.
        (Method::GET, "/v1/models") => json_response(200, &json!({"object": "list", "data": []}), &[]),
        _ => json_response(404, &api_error("not_found", "no such endpoint in the test server"), &[]),
    };
    req.status = response.status().as_u16();
    if let Ok(v) = format!("req_test_{id:08}").parse() {
        response.headers_mut().insert("x-request-id", v);
    }
    shared.log.record(req);
    response
}

fn api_error(kind: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "code": kind, "message": message}})
}

/// The script the first user input naming one names.
fn script_of(req: &Request) -> Option<String> {
    let text = req.user_text();
    let at = text.find(MARKER)? + MARKER.len();
    let name: String = text[at..].chars().take_while(|c| is_name_char(*c)).collect();
    (!name.is_empty()).then_some(name)
}

fn responses(shared: &Shared, req: &mut Request, id: u64) -> Response {
    if !req.body.is_object() {
        return json_response(400, &api_error("invalid_request_error", "the body is not a JSON object"), &[]);
    }
    let Some(name) = script_of(req) else {
        // A side call (a title, a summary): anything harmless will do.
        return reply(req, id, &Step::text("OK."));
    };
    let step = step_of(req.input());
    req.script = Some(name.clone());
    req.step = Some(step);
    let Some(steps) = shared.scripts.get(&name) else {
        let msg = format!("the test server has no script named {name:?}");
        return json_response(400, &api_error("invalid_request_error", &msg), &[]);
    };
    let Some(mut s) = steps.get(step).cloned() else {
        let msg = format!("script {name} has {} steps; the conversation asked for step {step}", steps.len());
        return json_response(400, &api_error("invalid_request_error", &msg), &[]);
    };
    for _ in 0..MAX_DYNAMIC_DEPTH {
        match s {
            Step::Dynamic(f) => s = f(req),
            _ => break,
        }
    }
    reply(req, id, &s)
}

fn reply(req: &Request, id: u64, step: &Step) -> Response {
    let (reasoning, text, calls, usage) = match step {
        Step::Reply { reasoning, text, calls, usage } => (reasoning, text, calls, usage),
        Step::Error { status, headers, body } => return json_response(*status, body, headers),
        Step::Malformed => {
            let broken = format!(
                "event: response.created\ndata: {{\"type\": \"response.created\", \"response\": {{\"id\": \"resp_{id:08}\"\n\nevent: response.output_text.delta\ndata: not json at all\n\n"
            );
            return sse_response(vec![broken]);
        }
        Step::Dynamic(_) => {
            return json_response(500, &api_error("server_error", "dynamic steps nested too deep"), &[]);
        }
    };
    let response_id = format!("resp_{id:08}");
    let model = req.body.get("model").cloned().unwrap_or_else(|| json!("gpt-test"));
    let mut events = vec![sse(&json!({"type": "response.created", "response": {
        "id": response_id, "object": "response", "status": "in_progress", "model": model, "output": [],
    }}))];
    let mut items = Vec::new();
    if let Some(summary) = reasoning {
        items.push(json!({"type": "reasoning", "id": format!("rs_{id:08}"),
            "summary": [{"type": "summary_text", "text": summary}]}));
    }
    if let Some(t) = text {
        items.push(json!({"type": "message", "role": "assistant", "id": format!("msg_{id:08}"),
            "status": "completed", "content": [{"type": "output_text", "text": t, "annotations": []}]}));
    }
    for (n, call) in calls.iter().enumerate() {
        let call_id = format!("call_{id:08}_{n}");
        items.push(match call {
            Call::Function { name, arguments } => {
                json!({"type": "function_call", "id": format!("fc_{id:08}_{n}"),
                "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"})
            }
            Call::Custom { name, input } => {
                json!({"type": "custom_tool_call", "id": format!("ctc_{id:08}_{n}"),
                "call_id": call_id, "name": name, "input": input, "status": "completed"})
            }
            Call::ToolSearch { query } => {
                json!({"type": "tool_search_call", "id": format!("tsc_{id:08}_{n}"), "call_id": call_id,
                "execution": "client", "status": "completed", "arguments": {"query": query}})
            }
            Call::Namespaced { namespace, name, arguments } => {
                json!({"type": "function_call", "id": format!("fc_{id:08}_{n}"), "call_id": call_id,
                "namespace": namespace, "name": name, "arguments": arguments, "status": "completed"})
            }
        });
    }
    for (index, item) in items.iter().enumerate() {
        events.extend(item_events(index, item));
    }
    events.push(sse(&json!({"type": "response.completed", "response": {
        "id": response_id, "object": "response", "status": "completed", "model": model, "output": items,
        "usage": {
            "input_tokens": usage.input,
            "input_tokens_details": {"cached_tokens": usage.cached},
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": usage.input + usage.output,
        },
    }})));
    sse_response(events)
}

/// `output_item.added`, the text in two deltas for a message (so that a
/// client which does not join them is caught), `output_item.done`.
fn item_events(index: usize, item: &Value) -> Vec<String> {
    let mut added = item.clone();
    let is_message = item["type"] == "message";
    if is_message {
        added["content"] = json!([]);
        added["status"] = json!("in_progress");
    }
    let mut events =
        vec![sse(&json!({"type": "response.output_item.added", "output_index": index, "item": added}))];
    if is_message {
        let text = item["content"][0]["text"].as_str().unwrap_or_default();
        let mut at = text.len() / 2;
        while !text.is_char_boundary(at) {
            at += 1;
        }
        let (a, z) = text.split_at(at);
        for delta in [a, z] {
            events.push(sse(&json!({"type": "response.output_text.delta", "item_id": item["id"],
                "output_index": index, "content_index": 0, "delta": delta})));
        }
    }
    events.push(sse(&json!({"type": "response.output_item.done", "output_index": index, "item": item})));
    events
}

fn sse(data: &Value) -> String {
    format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap_or("message"))
}

fn sse_response(events: Vec<String>) -> Response {
    let stream = tokio_stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}
