//! Permission requests: decided by the policy, or asked of the operator
//! one at a time (the controller holds one open question per task; the
//! rest wait in a queue), answered on the agent's stdin, and recorded in
//! the attempt log and as a Status report.

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use tokio::time::Instant;

use super::{Driver, Perm};
use crate::agent::policy::Decision;
use crate::agent::{Verdict, clip};

impl Driver<'_, '_> {
    pub(super) async fn on_permission(&mut self, request_id: String, tool: String, input: serde_json::Value) {
        match self.policy.decide(&tool, &input) {
            Decision::Allow { why } => self.reply(&request_id, &tool, &input, Verdict::Allow, &why).await,
            Decision::Deny { why } => {
                let v = Verdict::Deny(why.clone());
                self.reply(&request_id, &tool, &input, v, &why).await
            }
            Decision::Ask => {
                self.perm_count += 1;
                let p = Perm { question_id: format!("perm-{}", self.perm_count), request_id, tool, input };
                if self.asking.is_none() {
                    self.ask(p);
                } else {
                    self.perm_queue.push_back(p);
                }
            }
        }
    }

    fn ask(&mut self, p: Perm) {
        self.journal(Body::Question(v1::Question {
            attempt: Some(self.s.attempt.clone()),
            question_id: p.question_id.clone(),
            text: format!(
                "{}\n\nAnswer \"allow\", or \"deny\" with an optional reason.",
                describe(&p.tool, &p.input)
            ),
            category: "permission".into(),
        }));
        self.asking = Some(p);
    }

    pub(super) async fn resolve_permission(&mut self, answer: &str) {
        let Some(p) = self.asking.take() else { return };
        let a = answer.trim();
        let verdict = if a.eq_ignore_ascii_case("allow") || a.eq_ignore_ascii_case("yes") {
            Verdict::Allow
        } else {
            let reason =
                a.get(4..).filter(|_| a.to_ascii_lowercase().starts_with("deny")).unwrap_or("").trim();
            Verdict::Deny(if reason.is_empty() {
                "denied by the operator".into()
            } else {
                clip(reason, 1000)
            })
        };
        let why = format!("the operator answered {}", p.question_id);
        self.reply(&p.request_id, &p.tool, &p.input, verdict, &why).await;
        self.last_activity = Instant::now();
        if let Some(next) = self.perm_queue.pop_front() {
            self.ask(next);
        }
    }

    pub(super) async fn on_cancelled(&mut self, request_id: &str) {
        if self.asking.as_ref().is_some_and(|p| p.request_id == request_id) {
            let p = self.asking.take();
            self.log(&format!("the agent withdrew {}", p.map(|p| p.question_id).unwrap_or_default())).await;
            if let Some(next) = self.perm_queue.pop_front() {
                self.ask(next);
            }
        } else {
            self.perm_queue.retain(|p| p.request_id != request_id);
        }
    }

    async fn reply(
        &mut self,
        request_id: &str,
        tool: &str,
        input: &serde_json::Value,
        v: Verdict,
        why: &str,
    ) {
        let what = describe(tool, input);
        let message = match &v {
            Verdict::Allow => format!("permission allowed: {what} ({why})"),
            Verdict::Deny(reason) => format!("permission denied: {what} ({reason})"),
        };
        self.log(&message).await;
        self.journal(Body::Status(v1::Status {
            attempt: Some(self.s.attempt.clone()),
            status: v1::WorkerStatus::Note as i32,
            message,
        }));
        match self.agent.permission_reply(request_id, &v, input) {
            Some(line) => self.write(&line).await,
            None => self.log("this agent takes no permission replies").await,
        }
    }
}

/// "Bash wants to run: cargo publish", "Edit wants to change src/x.rs".
pub fn describe(tool: &str, input: &serde_json::Value) -> String {
    let s = |k: &str| input.get(k).and_then(serde_json::Value::as_str);
    match (tool, s("command"), s("file_path").or_else(|| s("notebook_path")), s("url")) {
        ("Bash", Some(c), _, _) => format!("Bash wants to run: {}", clip(c, 2000)),
        ("Edit" | "Write" | "MultiEdit" | "NotebookEdit", _, Some(p), _) => {
            format!("{tool} wants to change {}", clip(p, 500))
        }
        (_, _, Some(p), _) => format!("{tool} wants to use {}", clip(p, 500)),
        (_, _, _, Some(u)) => format!("{tool} wants to fetch {}", clip(u, 500)),
        _ => format!("{} wants to run with {}", clip(tool, 128), clip(&input.to_string(), 1000)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn permission_questions_name_the_tool_and_its_input() {
        assert_eq!(
            describe("Bash", &json!({"command": "cargo publish"})),
            "Bash wants to run: cargo publish"
        );
        assert_eq!(describe("Edit", &json!({"file_path": "src/x.rs"})), "Edit wants to change src/x.rs");
        assert_eq!(
            describe("WebFetch", &json!({"url": "https://x.io"})),
            "WebFetch wants to fetch https://x.io"
        );
        assert!(describe("mcp__gh__pr", &json!({"n": 1})).contains("{\"n\":1}"));
    }
}
