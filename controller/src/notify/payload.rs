//! What a webhook receives: one JSON body that a Slack or Discord incoming
//! webhook shows as a line of text, and that a program reads as the event.
//!
//! Slack reads `text`, Discord reads `content`; both ignore the other
//! fields. `event` is the same JSON `swarmctl watch -o json` and the
//! dashboard show (`swarm_view::EventView`), so a receiver parses one
//! shape wherever it meets an event.

use serde_json::Value;
use swarm_view::EventView;

use super::kinds::Kind;
use crate::store::EventRow;

/// Discord refuses `content` over 2000 characters; the rest of the
/// event is in `event` anyway.
const MAX_TEXT_CHARS: usize = 1900;

/// The body sent for `event`, which is a `kind` notification.
pub fn render(kind: Kind, event: &EventRow) -> Vec<u8> {
    let view = EventView::from(&crate::api::convert::event(event.clone()));
    let text = truncate(&line(kind, &view));
    let body = serde_json::json!({
        "text": text,
        "content": text,
        // A worker's question is the worker's text: it must not ping a
        // Discord channel with @everyone.
        "allowed_mentions": { "parse": [] },
        "notification": kind.as_str(),
        "event": view,
    });
    // A `Value` of strings and numbers always serializes.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// One line for a person: which swarm or task, what waits, and the
/// command that answers it.
pub fn line(kind: Kind, e: &EventView) -> String {
    let task = format!("{}/{}", e.swarm, e.task);
    let swarm = &e.swarm;
    let str_of = |k: &str| e.data.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    match kind {
        Kind::TaskQuestion if e.kind == "task.question" => {
            let options: Vec<&str> = match e.data.get("options").and_then(Value::as_array) {
                Some(list) => list.iter().filter_map(Value::as_str).collect(),
                None => Vec::new(),
            };
            let answer = if options.is_empty() { "ANSWER".to_string() } else { options.join("|") };
            format!(
                "{task} asks: {} — answer with `swarmctl answer {task} {answer} --question {}`",
                str_of("text"),
                str_of("question_id")
            )
        }
        Kind::TaskQuestion => format!(
            "{task} escalated ({}) — answer with `swarmctl answer {task} ANSWER`",
            or_message(str_of("reason"), e)
        ),
        Kind::TaskPermission => format!(
            "{task} asks permission: {} — `swarmctl answer {task} allow` or `swarmctl answer {task} deny [reason]`",
            str_of("text")
        ),
        Kind::TaskReview => {
            let files = e.data.get("files_changed").and_then(Value::as_array).map_or(0, Vec::len);
            format!(
                "{task} waits for your review ({files} file(s) changed on {}) — `swarmctl review {task} approve|request-changes|reject`",
                str_of("branch")
            )
        }
        Kind::TaskBudget => format!("{task}: {}", e.message),
        Kind::SwarmStalled => format!("{} — see `swarmctl describe swarm {swarm}`", e.message),
        Kind::SwarmPaused => format!("{} — `swarmctl resume {swarm}` lets it go on", e.message),
        Kind::BreakerTripped => {
            format!("{} — answer its budget question `resume`, or `swarmctl resume {swarm}`", e.message)
        }
        // A child swarm lands into its parent by itself.
        Kind::SwarmCompleted if swarm.contains('/') => format!("swarm {swarm} COMPLETED"),
        Kind::SwarmCompleted => format!("swarm {swarm} COMPLETED — land it with `swarmctl land {swarm}`"),
        Kind::SwarmFailed => {
            format!("swarm {swarm} FAILED — see `swarmctl get tasks --swarm {swarm}`")
        }
        Kind::SwarmBudget => e.message.clone(),
        Kind::PullRequest => e.message.clone(),
        Kind::ForgeError => format!("{} — see `swarmctl describe swarm {swarm}`", e.message),
        Kind::FeedbackUnrouted => format!("{} — the pull request waits for you", e.message),
    }
}

fn or_message(s: String, e: &EventView) -> String {
    if s.is_empty() { e.message.clone() } else { s }
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn row(kind: &str, message: &str, data: Value) -> EventRow {
        EventRow {
            id: 7,
            at: 1_700_000_000_000,
            swarm: "auth".into(),
            task: "api".into(),
            attempt: 1,
            worker: "w1".into(),
            kind: kind.into(),
            message: message.into(),
            data: data.to_string(),
        }
    }

    #[test]
    fn a_question_names_the_task_the_question_and_the_answer_command() {
        let e = row(
            "task.question",
            "question q1: Which DB?",
            serde_json::json!({ "question_id": "q1", "text": "Which DB?", "category": "design" }),
        );
        let body: Value = serde_json::from_slice(&render(Kind::TaskQuestion, &e)).unwrap();
        let text = body["text"].as_str().unwrap();
        assert_eq!(
            text,
            "auth/api asks: Which DB? — answer with `swarmctl answer auth/api ANSWER --question q1`"
        );
        assert_eq!(body["content"], body["text"], "Discord reads content");
        assert_eq!(body["notification"], "task.question");
        assert_eq!(body["event"]["id"], 7);
        assert_eq!(body["event"]["kind"], "task.question");
        assert_eq!(body["event"]["swarm"], "auth");
        assert_eq!(body["event"]["task"], "api");
        assert_eq!(body["event"]["attempt"], 1);
        assert_eq!(body["event"]["at_unix_ms"], 1_700_000_000_000i64);
        assert_eq!(body["event"]["data"]["question_id"], "q1", "the data is JSON, not a string");
        assert_eq!(body["allowed_mentions"]["parse"], serde_json::json!([]));
    }

    #[test]
    fn a_question_with_options_offers_them() {
        let e = row(
            "task.question",
            "",
            serde_json::json!({ "question_id": "h", "text": "Hash?", "options": ["argon2id", "bcrypt"] }),
        );
        let text = line(Kind::TaskQuestion, &EventView::from(&crate::api::convert::event(e)));
        assert!(text.contains("`swarmctl answer auth/api argon2id|bcrypt --question h`"), "{text}");
    }

    #[test]
    fn each_kind_says_what_to_do() {
        let escalated = row(
            "task.state",
            "RUNNING -> ESCALATED: design: which?",
            serde_json::json!({ "to": "ESCALATED", "reason": "design: which?" }),
        );
        let text = |k, e: &EventRow| line(k, &EventView::from(&crate::api::convert::event(e.clone())));
        assert_eq!(
            text(Kind::TaskQuestion, &escalated),
            "auth/api escalated (design: which?) — answer with `swarmctl answer auth/api ANSWER`"
        );
        let done = row("swarm.state", "swarm auth COMPLETED", serde_json::json!({ "state": "COMPLETED" }));
        assert_eq!(
            text(Kind::SwarmCompleted, &done),
            "swarm auth COMPLETED — land it with `swarmctl land auth`"
        );
        let mut child = done.clone();
        child.swarm = "app/auth".into();
        assert_eq!(text(Kind::SwarmCompleted, &child), "swarm app/auth COMPLETED");
        let review = row(
            "task.branch_report",
            "",
            serde_json::json!({ "branch": "swarm/auth/api", "files_changed": ["a", "b"], "reviewer": "operator" }),
        );
        assert!(
            text(Kind::TaskReview, &review).starts_with("auth/api waits for your review (2 file(s) changed")
        );
        let permission = row("task.question", "", serde_json::json!({ "text": "Bash wants cargo add" }));
        assert!(text(Kind::TaskPermission, &permission).contains("`swarmctl answer auth/api allow`"));
    }

    #[test]
    fn a_long_text_is_cut_for_discord_and_the_event_keeps_it_whole() {
        let long = "é".repeat(5000);
        let e = row("task.question", "", serde_json::json!({ "question_id": "q", "text": long }));
        let body: Value = serde_json::from_slice(&render(Kind::TaskQuestion, &e)).unwrap();
        let text = body["text"].as_str().unwrap();
        assert_eq!(text.chars().count(), MAX_TEXT_CHARS + 1);
        assert!(text.ends_with('…'));
        assert_eq!(body["event"]["data"]["text"].as_str().unwrap().chars().count(), 5000);
    }
}
