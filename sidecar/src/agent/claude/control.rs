//! The control protocol: the sidecar's `control_response`s on stdin, and
//! the CLI's `control_request`s (permission asks, hook callbacks,
//! `AskUserQuestion`) read into events.

use serde_json::{Value, json};

use super::super::{AgentEvent, AskedQuestion, clip};
use super::{ASK_USER_QUESTION, MAX_OPTIONS, MAX_QUESTIONS, PRE_TOOL_USE_HOOK, str_at};

pub(super) fn control_success(request_id: &str, response: Value) -> String {
    let m = json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    });
    format!("{m}\n")
}

pub(super) fn control_request(v: &Value, out: &mut Vec<AgentEvent>) {
    let (Some(id), Some(req)) = (str_at(v, "request_id"), v.get("request")) else {
        out.push(AgentEvent::Unparseable("control_request without request_id or request".into()));
        return;
    };
    let subtype = str_at(req, "subtype").unwrap_or_default();
    let input = req.get("input").cloned().unwrap_or_else(|| json!({}));
    match (subtype, str_at(req, "tool_name")) {
        ("can_use_tool", Some(ASK_USER_QUESTION)) => match asked_questions(&input) {
            Some(questions) => {
                out.push(AgentEvent::UserQuestion { request_id: id.to_string(), input, questions })
            }
            None => out.push(AgentEvent::PermissionRequest {
                request_id: id.to_string(),
                tool: ASK_USER_QUESTION.into(),
                input,
            }),
        },
        ("can_use_tool", Some(tool)) => out.push(AgentEvent::PermissionRequest {
            request_id: id.to_string(),
            tool: tool.to_string(),
            input,
        }),
        ("hook_callback", _) if str_at(req, "callback_id") == Some(PRE_TOOL_USE_HOOK) => {
            out.push(AgentEvent::ToolHook {
                request_id: id.to_string(),
                tool: str_at(&input, "tool_name").unwrap_or_default().to_string(),
                input: input.get("tool_input").cloned().unwrap_or_else(|| json!({})),
            })
        }
        _ => out.push(AgentEvent::UnsupportedControl {
            request_id: id.to_string(),
            subtype: subtype.to_string(),
        }),
    }
}

/// The questions of an `AskUserQuestion` input; None when it has none
/// that can be put to the operator (then it is an ordinary permission).
fn asked_questions(input: &Value) -> Option<Vec<AskedQuestion>> {
    let list = input.get("questions")?.as_array()?;
    let questions: Vec<AskedQuestion> = list
        .iter()
        .take(MAX_QUESTIONS)
        .filter_map(|q| {
            // The answer is keyed by the question's exact text.
            let text = str_at(q, "question").filter(|t| !t.trim().is_empty())?.to_string();
            let options = q
                .get("options")
                .and_then(Value::as_array)
                .map(|o| o.iter().filter_map(|o| str_at(o, "label")).take(MAX_OPTIONS).map(|l| clip(l, 200)))
                .map(Iterator::collect)
                .unwrap_or_default();
            Some(AskedQuestion {
                text,
                header: str_at(q, "header").map(|h| clip(h, 100)).unwrap_or_default(),
                options,
                multi_select: q.get("multiSelect").and_then(Value::as_bool).unwrap_or(false),
            })
        })
        .collect();
    (!questions.is_empty()).then_some(questions)
}
