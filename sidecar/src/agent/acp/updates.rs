//! `session/update` notifications and the end of a turn, in the driver's
//! terms: tool calls are steps, a completed edit gives its files, the
//! agent's plan gives the percent done, its text gives notes and the
//! turn's answer, a `usage_update`'s cost the money spent.

use std::collections::HashMap;

use agent_client_protocol_schema::v1 as schema;
use serde_json::Value;
use swarm_core::Usage;

use super::permission::Call;
use crate::agent::{AgentEvent, RateLimit, TurnEnd, clip, now_unix_ms, step_for_tool, usage_limit_in_text};

/// Tool calls followed at once at most; past that a new one is not
/// followed (its files come with the commit, not the progress).
const MAX_TOOLS: usize = 1024;
/// The turn's answer kept at most (the end of a long answer is cut).
const MAX_TEXT: usize = 16 * 1024;
/// A streamed line longer than this is noted in pieces.
const MAX_LINE: usize = 4096;

/// What the current turn has said so far.
#[derive(Debug, Default, Clone)]
pub(super) struct Turn {
    /// Tool calls followed until they complete, by id.
    tools: HashMap<String, Call>,
    /// The agent's text since its last tool call: the turn's answer.
    text: String,
    /// Streamed text after the last newline, noted when the line ends.
    partial: String,
}

impl Turn {
    pub(super) fn start(&mut self) {
        self.text.clear();
        self.partial.clear();
    }

    /// Maps one update; returns the session's cost when it reports one.
    pub(super) fn on_update(&mut self, u: &Value, out: &mut Vec<AgentEvent>) -> Option<f64> {
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or_default();
        let bad =
            |e: serde_json::Error| AgentEvent::Unparseable(format!("{kind}: {}", clip(&e.to_string(), 300)));
        match kind {
            "agent_message_chunk" => {
                if let Some(text) = u.pointer("/content/text").and_then(Value::as_str) {
                    self.on_text(text, out);
                }
            }
            "tool_call" => match serde_json::from_value::<schema::ToolCall>(u.clone()) {
                Ok(t) => self.on_tool(schema::ToolCallUpdate::from(t), true, out),
                Err(e) => out.push(bad(e)),
            },
            "tool_call_update" => match serde_json::from_value::<schema::ToolCallUpdate>(u.clone()) {
                Ok(t) => self.on_tool(t, false, out),
                Err(e) => out.push(bad(e)),
            },
            "plan" => match serde_json::from_value::<schema::Plan>(u.clone()) {
                Ok(p) => {
                    let done =
                        p.entries.iter().filter(|e| e.status == schema::PlanEntryStatus::Completed).count();
                    out.push(AgentEvent::Todo {
                        done: u32::try_from(done).unwrap_or(u32::MAX),
                        total: u32::try_from(p.entries.len()).unwrap_or(u32::MAX),
                    });
                }
                Err(e) => out.push(bad(e)),
            },
            "usage_update" => return usage_cost(u),
            // Thoughts, the user's own text, commands, modes, anything newer.
            _ => {}
        }
        None
    }

    fn on_text(&mut self, text: &str, out: &mut Vec<AgentEvent>) {
        if self.text.len() < MAX_TEXT {
            let room = MAX_TEXT - self.text.len();
            self.text.push_str(swarm_core::names::truncate(text, room));
        }
        for piece in text.split_inclusive('\n') {
            let ended = piece.ends_with('\n');
            if self.partial.len() < MAX_LINE {
                let room = MAX_LINE - self.partial.len();
                self.partial.push_str(swarm_core::names::truncate(piece, room));
            }
            if ended || self.partial.len() >= MAX_LINE {
                self.flush(out);
            }
        }
    }

    /// The streamed line so far as a note.
    fn flush(&mut self, out: &mut Vec<AgentEvent>) {
        let line = std::mem::take(&mut self.partial);
        if !line.trim().is_empty() {
            out.push(AgentEvent::Note(clip(&line, 300)));
        }
    }

    fn on_tool(&mut self, t: schema::ToolCallUpdate, new: bool, out: &mut Vec<AgentEvent>) {
        self.flush(out);
        // The answer is what the agent says after its last tool call.
        self.text.clear();
        let id = clip(&t.tool_call_id.0, 256);
        let known = self.tools.contains_key(&id);
        // An update of a call no longer followed (completed, or past the
        // bound) names nothing new unless it brings a title.
        if !known && ((!new && t.fields.title.is_none()) || self.tools.len() >= MAX_TOOLS) {
            return;
        }
        let call = self.tools.entry(id.clone()).or_default();
        let untitled = call.title.is_empty();
        call.merge(&t.fields);
        if !known || (untitled && !call.title.is_empty()) {
            let (name, input) = call.policy_input();
            let step = match step_for_tool(&name, &input) {
                s if s == name => clip(&format!("{name}: {}", call.title), 300),
                s => s,
            };
            out.push(AgentEvent::Step(step));
        }
        match t.fields.status {
            Some(schema::ToolCallStatus::Completed) => {
                let edit =
                    matches!(
                        call.kind,
                        Some(schema::ToolKind::Edit | schema::ToolKind::Delete | schema::ToolKind::Move)
                    ) || matches!(call.tool().as_str(), "Edit" | "Write" | "MultiEdit" | "NotebookEdit");
                let paths = std::mem::take(&mut call.paths);
                self.tools.remove(&id);
                if edit && !paths.is_empty() {
                    out.push(AgentEvent::FilesChanged(paths));
                }
            }
            // A failed edit changed nothing.
            Some(schema::ToolCallStatus::Failed) => {
                self.tools.remove(&id);
            }
            _ => {}
        }
    }

    /// The end of a prompt from its response's `stopReason`.
    pub(super) fn end(&mut self, result: &Value) -> TurnEnd {
        let mut notes = Vec::new();
        self.flush(&mut notes);
        let text = self.text.trim().to_string();
        let reason = result.get("stopReason").and_then(Value::as_str).unwrap_or("");
        let failure = match reason {
            "end_turn" => None,
            "cancelled" => Some("the turn was cancelled"),
            "refusal" => Some("the agent refused to go on"),
            "max_tokens" => Some("the agent reached its maximum number of tokens"),
            "max_turn_requests" => Some("the agent reached its maximum number of requests in one turn"),
            _ => Some("the turn ended with an unknown stopReason"),
        };
        // An agent may end a turn normally with an API error as its text.
        let rate_limit = usage_limit_in_text(&text, now_unix_ms());
        match failure {
            None => TurnEnd { ok: rate_limit.is_none(), text, rate_limit },
            Some(why) => {
                let why = format!("{why} ({})", clip(reason, 64));
                let text = if text.is_empty() { why } else { format!("{why}: {}", clip(&text, 4000)) };
                TurnEnd { ok: false, text, rate_limit }
            }
        }
    }

    /// A turn that ended with an error instead of a `stopReason`.
    pub(super) fn failed(&mut self, why: String) -> TurnEnd {
        let now = now_unix_ms();
        let rate_limit: Option<RateLimit> =
            usage_limit_in_text(&why, now).or_else(|| usage_limit_in_text(&self.text, now));
        TurnEnd { ok: false, text: clip(&why, 4000), rate_limit }
    }
}

/// A `usage_update`'s cumulative cost, in dollars only.
fn usage_cost(u: &Value) -> Option<f64> {
    let cost = u.get("cost")?;
    if cost.get("currency").and_then(Value::as_str) != Some("USD") {
        return None;
    }
    let amount = cost.get("amount").and_then(Value::as_f64)?;
    (amount.is_finite() && amount >= 0.0).then(|| amount.min(swarm_core::usage::MAX_COST_USD))
}

/// Tokens a prompt response reports for its turn (`usage`, not yet part of
/// the stable protocol; absent for most agents).
pub(super) fn turn_usage(result: &Value) -> Usage {
    let Some(u) = result.get("usage") else { return Usage::default() };
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("inputTokens"),
        output_tokens: n("outputTokens"),
        cache_read_tokens: n("cachedReadTokens"),
        cache_creation_tokens: n("cachedWriteTokens"),
        cost_usd: 0.0,
    }
}
