//! Permission requests: decided by the policy, or asked of the operator
//! one at a time (the controller holds one open question per task; the
//! rest wait in a queue), answered on the agent's stdin, and recorded in
//! the attempt log and as a Status report. The agent's own questions to
//! the user take the same queue, one operator question per question, and
//! its pre-tool hook is answered from the policy's hard rules alone.

use tokio::time::Instant;

use super::{Driver, Perm};
use crate::agent::policy::Decision;
use crate::agent::{AskedQuestion, Verdict, clip};
use crate::report::Event;

/// The category of a permission question, as the controller knows it.
const PERMISSION: &str = "permission";
/// The category of a question the agent put to the user.
const QUESTION: &str = "question";

/// Whether a question id names a request of an agent process (which dies
/// with it), not a question of the worker's status file.
pub fn is_agent_request(question_id: &str) -> bool {
    question_id.starts_with("perm-") || question_id.starts_with("ask-")
}

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
                let question_id = format!("perm-{}", self.perm_count);
                self.enqueue(Perm {
                    question_id,
                    request_id,
                    tool,
                    input,
                    asked: Vec::new(),
                    answers: Vec::new(),
                });
            }
        }
    }

    /// The agent asks the user: each of its questions goes to the operator
    /// in turn, and the answers go back together.
    pub(super) async fn on_user_question(
        &mut self,
        request_id: String,
        input: serde_json::Value,
        asked: Vec<AskedQuestion>,
    ) {
        let tool = "AskUserQuestion".to_string();
        if let Some(why) = self.policy.forbids(&tool, &input) {
            return self.reply(&request_id, &tool, &input, Verdict::Deny(why.clone()), &why).await;
        }
        self.perm_count += 1;
        let question_id = format!("ask-{}-1", self.perm_count);
        self.enqueue(Perm { question_id, request_id, tool, input, asked, answers: Vec::new() });
    }

    /// Before a tool runs, whatever the agent's own permission mode would
    /// decide: what the task may never do is denied here; anything else is
    /// left to the agent's flow (and to `on_permission` if it asks).
    pub(super) async fn on_tool_hook(&mut self, request_id: String, tool: String, input: serde_json::Value) {
        let deny = self.policy.forbids(&tool, &input);
        if let Some(why) = &deny {
            self.audit(&format!("permission denied: {} ({why})", describe(&tool, &input))).await;
        }
        match self.agent.hook_reply(&request_id, deny.as_deref()) {
            Some(line) => self.write(&line).await,
            None => self.log("this agent takes no hook replies").await,
        }
    }

    fn enqueue(&mut self, p: Perm) {
        if self.asking.is_none() {
            self.ask(p);
        } else {
            self.perm_queue.push_back(p);
        }
    }

    fn ask(&mut self, p: Perm) {
        let (text, category, options) = match p.asked.get(p.answers.len()) {
            Some(q) => (question_text(q, p.answers.len(), p.asked.len()), QUESTION, q.options.clone()),
            None => (
                format!(
                    "{}\n\nAnswer \"allow\", or \"deny\" with an optional reason.",
                    describe(&p.tool, &p.input)
                ),
                PERMISSION,
                Vec::new(),
            ),
        };
        self.journal(Event::Question {
            attempt: self.s.attempt.clone(),
            id: p.question_id.clone(),
            text,
            category: category.into(),
            options,
        });
        self.asking = Some(p);
    }

    pub(super) async fn resolve_permission(&mut self, answer: &str) {
        let Some(mut p) = self.asking.take() else { return };
        if let Some(q) = p.asked.get(p.answers.len()) {
            let picked = q.answer(answer);
            self.log(&format!("the operator answered {}: {}", p.question_id, clip(&picked, 500))).await;
            p.answers.push((q.text.clone(), picked));
            self.last_activity = Instant::now();
            if p.answers.len() < p.asked.len() {
                let next = p.answers.len() + 1;
                p.question_id = match p.question_id.rsplit_once('-') {
                    Some((base, _)) => format!("{base}-{next}"),
                    None => format!("{}-{next}", p.question_id),
                };
                self.ask(p);
                return;
            }
            match self.agent.answer_reply(&p.request_id, &p.input, &p.answers) {
                Some(line) => self.write(&line).await,
                None => self.log("this agent takes no answers to its questions").await,
            }
            if let Some(next) = self.perm_queue.pop_front() {
                self.ask(next);
            }
            return;
        }
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
        self.audit(&message).await;
        match self.agent.permission_reply(request_id, &v, input) {
            Some(line) => self.write(&line).await,
            None => self.log("this agent takes no permission replies").await,
        }
    }

    /// A decision on the agent's tool use, in the attempt log and the
    /// task's event log.
    pub(super) async fn audit(&mut self, message: &str) {
        self.log(message).await;
        self.journal(Event::note(&self.s.attempt, message.to_string()));
    }
}

/// "[Database] Which one? (question 1 of 2)" and its numbered choices.
fn question_text(q: &AskedQuestion, index: usize, of: usize) -> String {
    let mut text = String::new();
    if !q.header.is_empty() {
        text.push_str(&format!("[{}] ", q.header));
    }
    text.push_str(q.text.trim());
    if of > 1 {
        text.push_str(&format!(" (question {} of {of})", index + 1));
    }
    if !q.options.is_empty() {
        text.push('\n');
        for (i, o) in q.options.iter().enumerate() {
            text.push_str(&format!("\n  {}. {o}", i + 1));
        }
        let pick = if q.multi_select { "one or more options (comma-separated)" } else { "an option" };
        text.push_str(&format!("\n\nAnswer with {pick} by number or label, or in your own words."));
    }
    text
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
