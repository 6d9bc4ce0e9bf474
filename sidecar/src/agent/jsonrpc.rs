//! JSON-RPC 2.0 as the protocol agents (ACP servers, `codex app-server`)
//! speak on stdio, one message a line: what a client writes back and how
//! it reads what the agent sent. Every message is the agent's, so ids and
//! error texts are bounded before they are echoed or reported.

use serde_json::{Value, json};

use super::{AgentEvent, clip};

/// JSON-RPC's "method not found".
pub(super) const METHOD_NOT_FOUND: i32 = -32601;
/// JSON-RPC's "invalid params".
pub(super) const INVALID_PARAMS: i32 = -32602;

/// A JSON-RPC id the reply can echo: a number or a bounded string.
pub(super) fn valid_id(id: &Value) -> bool {
    id.is_i64() || id.is_u64() || id.as_str().is_some_and(|s| s.len() <= 256)
}

/// A session or thread id we hand back in requests and keep in the session file.
pub(super) fn session_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && !id.chars().any(char::is_control)
}

pub(super) fn line(v: &Value) -> String {
    format!("{v}\n")
}

pub(super) fn reply(id: &Value, result: Value) -> AgentEvent {
    AgentEvent::Send(line(&json!({"jsonrpc": "2.0", "id": id, "result": result})))
}

pub(super) fn error_reply(id: &Value, code: i32, message: &str) -> AgentEvent {
    AgentEvent::Send(line(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})))
}

/// A JSON-RPC error object as text for a report.
pub(super) fn error_text(error: Option<&Value>) -> String {
    let Some(e) = error else { return "no error given".into() };
    let message = e.get("message").and_then(Value::as_str).unwrap_or("no message");
    let data = match e.get("data") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => format!(" ({})", clip(s, 1000)),
        Some(d) => format!(" ({})", clip(&d.to_string(), 1000)),
    };
    let code = e.get("code").and_then(Value::as_i64).map(|c| format!(" [{c}]")).unwrap_or_default();
    format!("{}{data}{code}", clip(message, 2000))
}

/// What one line from the agent is.
pub(super) enum Message<'a> {
    Request { id: &'a Value, method: &'a str, params: &'a Value },
    Notification { method: &'a str, params: Option<&'a Value> },
    Response { id: &'a Value, result: Result<&'a Value, String> },
}

/// Sorts a parsed line; the event saying why when it is none of the three.
pub(super) fn classify(v: &Value) -> Result<Message<'_>, AgentEvent> {
    static NULL: Value = Value::Null;
    let id = v.get("id");
    match (v.get("method").and_then(Value::as_str), id) {
        (Some(method), Some(id)) if valid_id(id) => {
            Ok(Message::Request { id, method, params: v.get("params").unwrap_or(&NULL) })
        }
        (Some(_), Some(_)) => Err(AgentEvent::Unparseable("a request id must be a number or string".into())),
        (Some(method), None) => Ok(Message::Notification { method, params: v.get("params") }),
        (None, Some(id)) if v.get("result").is_some() || v.get("error").is_some() => {
            let result = match v.get("result").filter(|_| v.get("error").is_none()) {
                Some(r) => Ok(r),
                None => Err(error_text(v.get("error"))),
            };
            Ok(Message::Response { id, result })
        }
        _ => Err(AgentEvent::Unparseable("not a JSON-RPC request, notification or response".into())),
    }
}
