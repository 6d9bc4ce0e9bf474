//! A scripted Anthropic Messages API on 127.0.0.1, so that the real
//! Claude Code CLI (or any client of the API) runs offline against answers
//! a test wrote down.
//!
//! A conversation picks its [`Script`] by a marker in its first user
//! message (`SCRIPT: <name>`, see [`marker`]); the step it gets is the
//! number of assistant messages already in the request. That keeps the
//! server stateless: a process that resumes a session sends the
//! conversation so far and goes on with the same script. (The CLI leaves
//! out of the conversation the synthetic assistant message it writes for a
//! failed call, so an error step is asked for again by the next request;
//! [`Step::limit_lifting_after`] scripts a limit that lifts.)
//!
//! What the CLI 2.1.x sends (logged while writing this): `POST
//! /v1/messages?beta=true` with `"stream": true`, `x-api-key` or
//! `Authorization: Bearer`, `anthropic-version`, `anthropic-beta`; with
//! `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` unset also `HEAD /api/hello`.
//! Requests without a marker (side calls) get a short text; unknown paths
//! a 404; every request is recorded, parsed, for the test to read back.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use crate::scripted_api::{Log, Parts, Running, json_response, summary_line};

/// What a conversation's first user message says to pick its script.
pub const MARKER: &str = "SCRIPT: ";
/// Largest request body accepted; the CLI's first request (system prompt
/// and tool schemas) is ~100 KiB and grows with the conversation.
const MAX_BODY: usize = 16 << 20;
/// How deep [`Step::Dynamic`] steps may return further dynamic steps.
const MAX_DYNAMIC_DEPTH: usize = 8;

/// The text that selects `script`, for a task's prompt.
pub fn marker(script: &str) -> String {
    format!("{MARKER}{script}")
}

/// Token counts of one answer, as the API reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

impl Default for Tokens {
    fn default() -> Tokens {
        Tokens { input: 10, output: 5, cache_read: 0, cache_creation: 0 }
    }
}

/// One answer of a script.
#[derive(Clone)]
pub enum Step {
    /// An assistant message: text first, then tool uses (ids generated);
    /// `stop_reason` is `tool_use` when there are any, else `end_turn`.
    Reply { text: Option<String>, tools: Vec<(String, Value)>, usage: Tokens },
    /// An HTTP error with its headers and JSON body.
    Error { status: u16, headers: Vec<(String, String)>, body: Value },
    /// Decided when the request arrives.
    Dynamic(Arc<dyn Fn(&Request) -> Step + Send + Sync>),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Reply { text, tools, usage } => {
                let names: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
                write!(f, "Reply({text:?}, tools {names:?}, {usage:?})")
            }
            Step::Error { status, .. } => write!(f, "Error({status})"),
            Step::Dynamic(_) => f.write_str("Dynamic"),
        }
    }
}

impl Step {
    /// An assistant message of plain text: the turn ends.
    pub fn text(text: &str) -> Step {
        Step::Reply { text: Some(text.to_string()), tools: Vec::new(), usage: Tokens::default() }
    }

    /// One tool use.
    pub fn tool(name: &str, input: Value) -> Step {
        Step::tools(&[(name, input)])
    }

    /// Parallel tool uses in one message.
    pub fn tools(tools: &[(&str, Value)]) -> Step {
        let tools = tools.iter().map(|(n, i)| (n.to_string(), i.clone())).collect();
        Step::Reply { text: None, tools, usage: Tokens::default() }
    }

    /// Text before this reply's tool uses.
    pub fn say(mut self, said: &str) -> Step {
        if let Step::Reply { text, .. } = &mut self {
            *text = Some(said.to_string());
        }
        self
    }

    /// This reply's token counts.
    pub fn usage(mut self, tokens: Tokens) -> Step {
        if let Step::Reply { usage, .. } = &mut self {
            *usage = tokens;
        }
        self
    }

    /// An HTTP error: `{"type":"error","error":{"type":kind,"message":message}}`.
    pub fn error(status: u16, kind: &str, message: &str) -> Step {
        let body = json!({"type": "error", "error": {"type": kind, "message": message}});
        Step::Error { status, headers: Vec::new(), body }
    }

    /// Adds a response header to an error.
    pub fn header(mut self, name: &str, value: &str) -> Step {
        if let Step::Error { headers, .. } = &mut self {
            headers.push((name.to_ascii_lowercase(), value.to_string()));
        }
        self
    }

    /// The server tells the client not to retry (`x-should-retry: false`,
    /// which the CLI honours); without it the CLI retries 5xx and 429 up to
    /// ten times with backoff, minutes in all.
    pub fn final_error(self) -> Step {
        self.header("x-should-retry", "false")
    }

    /// 500 `api_error`, not to be retried.
    pub fn server_error() -> Step {
        Step::error(500, "api_error", "Internal server error").final_error()
    }

    /// 529 `overloaded_error`, not to be retried.
    pub fn overloaded() -> Step {
        Step::error(529, "overloaded_error", "Overloaded").final_error()
    }

    /// 429 `rate_limit_error` with `retry-after` and the
    /// `anthropic-ratelimit-unified-*` headers of a subscriber's five-hour
    /// limit that resets at `reset_unix_s`. A CLI logged in with an API key
    /// ignores the unified headers; one with an OAuth token turns them into
    /// a `rate_limit_event` and a "You've hit your limit" result.
    pub fn rate_limited(reset_unix_s: u64) -> Step {
        let retry_after = reset_unix_s.saturating_sub(unix_now_s()).max(1).to_string();
        let reset = reset_unix_s.to_string();
        Step::error(429, "rate_limit_error", "This request would exceed your account's rate limit.")
            .header("retry-after", &retry_after)
            .header("anthropic-ratelimit-unified-status", "rejected")
            .header("anthropic-ratelimit-unified-reset", &reset)
            .header("anthropic-ratelimit-unified-representative-claim", "five_hour")
            .header("anthropic-ratelimit-unified-5h-status", "rejected")
            .header("anthropic-ratelimit-unified-5h-reset", &reset)
            .header("anthropic-ratelimit-unified-5h-utilization", "1.0")
            .header("anthropic-ratelimit-unified-fallback", "unavailable")
            .header("anthropic-ratelimit-unified-overage-status", "rejected")
            .header("anthropic-ratelimit-unified-overage-disabled-reason", "org_level_disabled")
            .final_error()
    }

    /// A usage limit that lifts `secs` after it is first met: the reset is
    /// fixed when the CLI first reaches this step (however long a loaded
    /// machine took to get there), the limit is answered until then, and
    /// `after` from then on. The reset, once fixed, is in the returned cell.
    pub fn limit_lifting_after(secs: u64, after: Step) -> (Step, Arc<std::sync::OnceLock<u64>>) {
        let reset = Arc::new(std::sync::OnceLock::new());
        let cell = reset.clone();
        let step = Step::dynamic(move |_| {
            let at = *cell.get_or_init(|| unix_now_s() + secs);
            if unix_now_s() < at { Step::rate_limited(at) } else { after.clone() }
        });
        (step, reset)
    }

    /// A step computed from the request (e.g. echoing a tool's result).
    pub fn dynamic(f: impl Fn(&Request) -> Step + Send + Sync + 'static) -> Step {
        Step::Dynamic(Arc::new(f))
    }

    /// A file tool's step whose `file_path` is made absolute (under the
    /// CLI's working directory) when the request comes.
    pub fn file(tool: &'static str, path: &'static str, input: Value) -> Step {
        Step::dynamic(move |r| {
            let mut input = input.clone();
            input["file_path"] = Value::String(r.abs(path));
            Step::tool(tool, input)
        })
    }
}

/// Seconds since the epoch.
pub fn unix_now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
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
    /// Path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Lower-case names; a repeated header keeps its last value.
    pub headers: BTreeMap<String, String>,
    /// The JSON body; `Null` without one or when it is not JSON.
    pub body: Value,
    /// The script its first user message named, for a Messages request.
    pub script: Option<String>,
    /// The step it was answered with (assistant messages so far).
    pub step: Option<usize>,
    /// The status it was answered with.
    pub status: u16,
    /// When it arrived, unix ms.
    pub unix_ms: u64,
}

/// A `tool_result` block the client sent back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_use_id: String,
    /// The tool the assistant called with that id, when the request holds it.
    pub tool: String,
    /// The result's text (text blocks joined).
    pub content: String,
    pub is_error: bool,
}

impl Request {
    pub fn is_messages(&self) -> bool {
        self.method == "POST" && self.path.split('?').next() == Some("/v1/messages")
    }

    pub fn messages(&self) -> &[Value] {
        self.body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every tool result in the conversation, oldest first.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        let mut names = BTreeMap::new();
        let mut out = Vec::new();
        for m in self.messages() {
            for b in m.get("content").and_then(Value::as_array).into_iter().flatten() {
                match b.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        names.insert(str_of(b, "id"), str_of(b, "name"));
                    }
                    Some("tool_result") => {
                        let id = str_of(b, "tool_use_id");
                        out.push(ToolResult {
                            tool: names.get(&id).cloned().unwrap_or_default(),
                            content: text_of(b.get("content").unwrap_or(&Value::Null)),
                            is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                            tool_use_id: id,
                        });
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// `path` under the CLI's working directory, as a model writes file paths.
    pub fn abs(&self, path: &str) -> String {
        let cwd = self.working_directory().expect("the system prompt names the working directory");
        format!("{cwd}/{path}")
    }

    /// The directory the client works in, as Claude Code says it
    /// ("Primary working directory: ..."): in the `system` field, a system
    /// message, or (for some models) a reminder in the first user message.
    pub fn working_directory(&self) -> Option<String> {
        const SAYS: &str = "Primary working directory: ";
        let system = self.body.get("system").map(text_of).unwrap_or_default();
        let messages = self
            .messages()
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .chain(self.messages().iter().find(|m| m.get("role").and_then(Value::as_str) == Some("user")))
            .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)));
        std::iter::once(system).chain(messages).find_map(|t| {
            let at = t.find(SAYS)? + SAYS.len();
            t[at..].lines().next().map(|l| l.trim().to_string())
        })
    }

    /// The text of every user message, joined by newlines.
    pub fn user_text(&self) -> String {
        let texts: Vec<String> = self
            .messages()
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(|m| text_of(m.get("content").unwrap_or(&Value::Null)))
            .collect();
        texts.join("\n")
    }
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// A content value's text: a string, or the `text` of its blocks (a
/// tool_result's blocks included).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let parts: Vec<String> = blocks
                .iter()
                .map(|b| match b.get("type").and_then(Value::as_str) {
                    Some("text") => str_of(b, "text"),
                    Some("tool_result") => text_of(b.get("content").unwrap_or(&Value::Null)),
                    _ => String::new(),
                })
                .filter(|t| !t.is_empty())
                .collect();
            parts.join("\n")
        }
        _ => String::new(),
    }
}

struct Shared {
    scripts: BTreeMap<String, Vec<Step>>,
    log: Log<Request>,
    next_id: AtomicU64,
}

/// The running server; it stops when dropped.
pub struct MessagesApi {
    shared: Arc<Shared>,
    server: Running,
}

impl MessagesApi {
    /// Starts the server on a free port of 127.0.0.1, on its own thread
    /// and runtime so that sync and async tests alike can use it.
    pub fn start(scripts: Vec<Script>) -> MessagesApi {
        let mut by_name = BTreeMap::new();
        for s in scripts {
            assert!(by_name.insert(s.name.clone(), s.steps).is_none(), "two scripts named {}", s.name);
        }
        let shared = Arc::new(Shared { scripts: by_name, log: Log::new(), next_id: AtomicU64::new(1) });
        let app = axum::Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(shared.clone());
        MessagesApi { server: Running::start("messages-api", app), shared }
    }

    /// `http://127.0.0.1:PORT`, what `ANTHROPIC_BASE_URL` should say.
    pub fn url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    pub fn port(&self) -> u16 {
        self.server.addr.port()
    }

    /// Every request so far (at most the first 2000), oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.log.all()
    }

    /// The Messages requests of conversations on `script`.
    pub fn requests_of(&self, script: &str) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_messages() && r.script.as_deref() == Some(script))
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
        (Method::POST, "/v1/messages") => messages(&shared, &mut req, id),
        (Method::POST, "/v1/messages/count_tokens") => {
            // A rough count: what matters is that the call succeeds.
            json_response(200, &json!({"input_tokens": (body.len() / 4).max(1)}), &[])
        }
        (Method::GET | Method::HEAD, _) => json_response(200, &json!({}), &[]),
        _ => json_response(404, &api_error("not_found_error", "no such endpoint in the test server"), &[]),
    };
    req.status = response.status().as_u16();
    if let Ok(v) = HeaderValue::from_str(&format!("req_test_{id:08}")) {
        response.headers_mut().insert("request-id", v);
    }
    shared.log.record(req);
    response
}

fn api_error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The script named by the first user message's marker.
fn script_of(req: &Request) -> Option<String> {
    let first = req.messages().iter().find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    let text = text_of(first.get("content")?);
    let at = text.find(MARKER)? + MARKER.len();
    let name: String = text[at..].chars().take_while(|c| is_name_char(*c)).collect();
    (!name.is_empty()).then_some(name)
}

fn messages(shared: &Shared, req: &mut Request, id: u64) -> Response {
    if !req.body.is_object() {
        return json_response(400, &api_error("invalid_request_error", "the body is not a JSON object"), &[]);
    }
    let Some(name) = script_of(req) else {
        // A side call (a title, a summary): anything harmless will do.
        return reply(req, id, None, &Step::text("OK."));
    };
    let step =
        req.messages().iter().filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant")).count();
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
    reply(req, id, Some((&name, step)), &s)
}

fn reply(req: &Request, id: u64, at: Option<(&str, usize)>, step: &Step) -> Response {
    let (text, tools, usage) = match step {
        Step::Reply { text, tools, usage } => (text, tools, usage),
        Step::Error { status, headers, body } => return json_response(*status, body, headers),
        Step::Dynamic(_) => {
            let msg = "dynamic steps nested too deep";
            return json_response(500, &api_error("api_error", msg), &[]);
        }
    };
    let mut blocks = Vec::new();
    if let Some(t) = text {
        blocks.push(json!({"type": "text", "text": t}));
    }
    for (n, (name, input)) in tools.iter().enumerate() {
        blocks.push(
            json!({"type": "tool_use", "id": format!("toolu_{id:08}_{n}"), "name": name, "input": input}),
        );
    }
    let stop = if tools.is_empty() { "end_turn" } else { "tool_use" };
    let message_id = match at {
        Some((script, step)) => format!("msg_{script}_{step}_{id:08}"),
        None => format!("msg_side_{id:08}"),
    };
    let model = req.body.get("model").cloned().unwrap_or_else(|| json!("claude-test"));
    let usage_json = json!({
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "cache_read_input_tokens": usage.cache_read,
        "cache_creation_input_tokens": usage.cache_creation,
    });
    if req.body.get("stream").and_then(Value::as_bool) != Some(true) {
        let m = json!({
            "id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": null, "usage": usage_json,
        });
        return json_response(200, &m, &[]);
    }
    let mut start_usage = usage_json;
    start_usage["output_tokens"] = json!(1);
    let mut events = vec![
        sse(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage,
            }}),
        ),
        sse("ping", &json!({"type": "ping"})),
    ];
    for (index, b) in blocks.iter().enumerate() {
        // Each block's payload arrives in two deltas, so a client that does
        // not join them is caught.
        let (start, deltas) = if b["type"] == "text" {
            let (a, z) = halves(b["text"].as_str().unwrap_or_default());
            let d = |t: &str| json!({"type": "text_delta", "text": t});
            (json!({"type": "text", "text": ""}), vec![d(a), d(z)])
        } else {
            let input = b["input"].to_string();
            let (a, z) = halves(&input);
            let d = |t: &str| json!({"type": "input_json_delta", "partial_json": t});
            (json!({"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}), vec![d(a), d(z)])
        };
        events.push(sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        for delta in deltas {
            events.push(sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push(sse("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
    }
    events.push(sse(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": usage.output}}),
    ));
    events.push(sse("message_stop", &json!({"type": "message_stop"})));
    let stream = tokio_stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// `s` cut in two at a character boundary near its middle.
fn halves(s: &str) -> (&str, &str) {
    let mut at = s.len() / 2;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    s.split_at(at)
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    /// POSTs `body` with HTTP/1.1 and `Connection: close`; (status, body).
    fn post(api: &MessagesApi, path: &str, body: &Value) -> (u16, String) {
        let mut s = std::net::TcpStream::connect(api.server.addr).unwrap();
        let body = body.to_string();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let status = out.split(' ').nth(1).unwrap().parse().unwrap();
        (status, out.split_once("\r\n\r\n").unwrap().1.to_string())
    }

    fn conversation(assistants: usize, stream: bool) -> Value {
        let mut messages =
            vec![json!({"role": "user", "content": [{"type": "text", "text": "go SCRIPT: s1"}]})];
        for n in 0..assistants {
            messages.push(json!({"role": "system", "content": "reminder"}));
            messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{n}"), "name": "Bash", "input": {}}]}));
            messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{n}"), "content": [{"type": "text", "text": format!("out {n}")}], "is_error": n == 1}]}));
        }
        json!({"model": "m", "stream": stream, "messages": messages})
    }

    #[test]
    fn the_step_is_the_number_of_assistant_messages_and_every_request_is_recorded() {
        let echo = Step::dynamic(|r| Step::text(&r.tool_results().last().unwrap().content));
        let api = MessagesApi::start(vec![Script::new(
            "s1",
            vec![Step::tool("Bash", json!({"command": "ls"})), echo, Step::server_error()],
        )]);
        let (status, body) = post(&api, "/v1/messages?beta=true", &conversation(0, true));
        assert_eq!(status, 200);
        let kinds: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        assert_eq!(
            kinds,
            ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta"]
                .into_iter()
                .chain(["content_block_stop", "message_delta", "message_stop"])
                .collect::<Vec<_>>()
        );
        assert!(body.contains(r#""stop_reason":"tool_use""#), "{body}");

        let (status, body) = post(&api, "/v1/messages", &conversation(1, false));
        assert_eq!(status, 200);
        let m: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(m["content"][0]["text"], "out 0", "a dynamic step read the request");
        assert_eq!(m["stop_reason"], "end_turn");

        let (status, body) = post(&api, "/v1/messages", &conversation(2, false));
        assert_eq!(status, 500, "{body}");
        let (status, _) = post(&api, "/v1/messages", &conversation(3, false));
        assert_eq!(status, 400, "past the script's end");
        let side = json!({"model": "m", "messages": [{"role": "user", "content": "title this"}]});
        assert_eq!(post(&api, "/v1/messages", &side).0, 200);

        let recorded = api.requests();
        assert_eq!(recorded.len(), 5);
        let steps: Vec<Option<usize>> = recorded.iter().map(|r| r.step).collect();
        assert_eq!(steps, [Some(0), Some(1), Some(2), Some(3), None]);
        let results = recorded[2].tool_results();
        assert_eq!((results[1].tool.as_str(), results[1].is_error), ("Bash", true));
        assert_eq!(api.requests_of("s1").len(), 4);
    }
}
