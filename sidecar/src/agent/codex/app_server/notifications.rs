//! What Codex tells its client as a turn runs: items (commands, edits,
//! tool calls, messages) as steps and changed files, its plan as the
//! percent done, token totals as priced usage, rate-limit windows, and
//! how the turn ended.

use std::collections::HashMap;

use serde_json::Value;
use swarm_core::Usage;

use crate::agent::cost::Pricing;
use crate::agent::{AgentEvent, RateLimit, TurnEnd, clip, now_unix_ms, unix_to_ms, usage_limit_in_text};

/// Items of one turn remembered for the approvals that name them.
const MAX_ITEMS: usize = 1024;
/// Paths of one edit at most.
const MAX_PATHS: usize = 256;
/// A command longer than this is not remembered (its approval must name it).
const MAX_COMMAND: usize = 64 << 10;
/// Codex's error code for a turn stopped by the account's usage limit.
const USAGE_LIMIT: &str = "usageLimitExceeded";

#[derive(Debug, Default, Clone)]
pub(super) struct Items {
    /// Files of the edits announced this turn, by item id.
    changes: HashMap<String, Vec<String>>,
    /// Commands announced this turn, by item id.
    commands: HashMap<String, String>,
    last_message: String,
    /// The newest rate-limit windows: when the exhausted one resets.
    limit: Option<RateLimit>,
    /// A usage-limit error came in this turn.
    limited: bool,
}

impl Items {
    pub(super) fn new_turn(&mut self) {
        self.changes.clear();
        self.commands.clear();
        self.last_message.clear();
        self.limited = false;
    }

    /// The command an approval is about: its own, or its item's, as the
    /// script the shell runs (see [`script_of`]).
    pub(super) fn command(&self, params: &Value) -> Option<String> {
        let command = match params.get("command").and_then(Value::as_str) {
            Some(c) => c,
            None => self.commands.get(str_at(params, "itemId"))?,
        };
        Some(script_of(command))
    }

    /// The files an edit approval is about, from the item that announced it.
    pub(super) fn paths(&self, params: &Value) -> Vec<String> {
        self.changes.get(str_at(params, "itemId")).cloned().unwrap_or_default()
    }

    pub(super) fn on_notification(
        &mut self,
        method: &str,
        params: &Value,
        tokens: &mut Tokens,
        out: &mut Vec<AgentEvent>,
    ) {
        match method {
            "item/started" | "item/completed" => {
                if let Some(item) = params.get("item") {
                    self.item(item, method == "item/completed", out);
                }
            }
            "thread/tokenUsage/updated" => {
                if let Some(u) = params.get("tokenUsage") {
                    tokens.update(u, out);
                }
            }
            "account/rateLimits/updated" => {
                if let Some(r) = params.get("rateLimits").and_then(exhausted_window) {
                    self.limit = Some(r);
                }
            }
            "turn/plan/updated" => {
                if let Some(steps) = params.get("plan").and_then(Value::as_array) {
                    let done = steps.iter().filter(|s| str_at(s, "status") == "completed").count();
                    out.push(AgentEvent::Todo {
                        done: u32::try_from(done).unwrap_or(u32::MAX),
                        total: u32::try_from(steps.len()).unwrap_or(u32::MAX),
                    });
                }
            }
            "error" => self.on_error(params, out),
            // Deltas (not sent: see QUIET), statuses, warnings, anything newer.
            _ => {}
        }
    }

    fn on_error(&mut self, params: &Value, out: &mut Vec<AgentEvent>) {
        let msg = params.pointer("/error/message").and_then(Value::as_str).unwrap_or("error");
        let retrying = params.get("willRetry").and_then(Value::as_bool) == Some(true);
        if is_usage_limit(params.get("error"), msg) {
            self.limited = true;
            let limit = self.limit_now(msg);
            out.push(AgentEvent::RateLimited(limit));
        }
        if retrying {
            out.push(AgentEvent::Note(clip(&format!("retrying: {msg}"), 300)));
        } else {
            out.push(AgentEvent::Error(clip(msg, 4096)));
        }
    }

    /// When the limit that stopped a turn lifts: the exhausted window's
    /// reset, else what the message says, else unknown.
    fn limit_now(&self, msg: &str) -> RateLimit {
        self.limit.clone().or_else(|| usage_limit_in_text(msg, now_unix_ms())).unwrap_or_default()
    }

    fn item(&mut self, item: &Value, done: bool, out: &mut Vec<AgentEvent>) {
        let id = str_at(item, "id");
        match str_at(item, "type") {
            "commandExecution" if !done => {
                let command = str_at(item, "command");
                out.push(AgentEvent::Step(clip(&format!("Bash: {command}"), 300)));
                if !id.is_empty() && command.len() <= MAX_COMMAND && self.commands.len() < MAX_ITEMS {
                    self.commands.insert(clip(id, 256), command.to_string());
                }
            }
            "fileChange" => {
                let paths: Vec<String> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .map(|cs| cs.iter().take(MAX_PATHS).filter_map(|c| c.get("path")?.as_str()))
                    .into_iter()
                    .flatten()
                    .map(str::to_string)
                    .collect();
                if !done {
                    if !id.is_empty() && self.changes.len() < MAX_ITEMS {
                        self.changes.insert(clip(id, 256), paths);
                    }
                } else if str_at(item, "status") == "completed"
                    && let Some(first) = paths.first()
                {
                    let more =
                        if paths.len() > 1 { format!(" (+{} more)", paths.len() - 1) } else { String::new() };
                    out.push(AgentEvent::Step(clip(&format!("Edit {first}{more}"), 300)));
                    out.push(AgentEvent::FilesChanged(paths));
                }
            }
            "mcpToolCall" if !done => out.push(AgentEvent::Step(clip(
                &format!("{}.{}", str_at(item, "server"), str_at(item, "tool")),
                300,
            ))),
            "webSearch" if !done => {
                out.push(AgentEvent::Step(clip(&format!("WebSearch: {}", str_at(item, "query")), 300)))
            }
            "agentMessage" if done => {
                self.last_message = str_at(item, "text").trim().to_string();
                if let Some(first) = self.last_message.lines().find(|l| !l.trim().is_empty()) {
                    out.push(AgentEvent::Note(clip(first, 300)));
                }
            }
            _ => {}
        }
    }

    /// How a `turn/completed` turn ended.
    pub(super) fn turn_end(&mut self, turn: &Value) -> TurnEnd {
        let text = std::mem::take(&mut self.last_message);
        match str_at(turn, "status") {
            "completed" => TurnEnd { ok: true, text, rate_limit: None },
            "interrupted" => TurnEnd { ok: false, text: "the turn was interrupted".into(), rate_limit: None },
            status => {
                let error = turn.get("error");
                let msg = error.and_then(|e| e.get("message")).and_then(Value::as_str);
                let msg = msg.map_or_else(|| format!("the turn ended {}", clip(status, 64)), str::to_string);
                let limited = self.limited || is_usage_limit(error, &msg);
                let rate_limit = limited.then(|| self.limit_now(&msg));
                TurnEnd { ok: false, text: clip(&msg, 4096), rate_limit }
            }
        }
    }
}

/// Codex runs a model's command as `/bin/bash -lc '<script>'` and names
/// it so; the script is the whole of what runs, and what a rule like
/// `Bash(cargo test:*)` is written against. Anything else stays as it is.
pub(super) fn script_of(command: &str) -> String {
    const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash"];
    match shlex::split(command).as_deref() {
        Some([shell, flag, script])
            if SHELLS.contains(&shell.rsplit('/').next().unwrap_or_default())
                && matches!(flag.as_str(), "-c" | "-lc") =>
        {
            script.clone()
        }
        _ => command.to_string(),
    }
}

fn str_at<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn is_usage_limit(error: Option<&Value>, msg: &str) -> bool {
    let info = error.and_then(|e| e.get("codexErrorInfo"));
    info.and_then(Value::as_str) == Some(USAGE_LIMIT)
        || info
            .and_then(|i| i.pointer("/responseTooManyFailedAttempts/httpStatusCode"))
            .and_then(Value::as_u64)
            == Some(429)
        || usage_limit_in_text(msg, 0).is_some()
}

/// The window of a rate-limit snapshot that is used up, with its reset;
/// None while every window has room.
fn exhausted_window(snapshot: &Value) -> Option<RateLimit> {
    ["primary", "secondary"]
        .iter()
        .filter_map(|k| Some((*k, snapshot.get(*k)?)))
        .filter(|(_, w)| w.get("usedPercent").and_then(Value::as_f64).is_some_and(|p| p >= 100.0))
        .map(|(k, w)| RateLimit {
            reset_unix_ms: w.get("resetsAt").and_then(Value::as_u64).and_then(unix_to_ms).unwrap_or(0),
            kind: window_name(k, w.get("windowDurationMins").and_then(Value::as_u64)),
        })
        .max_by_key(|r| r.reset_unix_ms)
}

fn window_name(slot: &str, minutes: Option<u64>) -> String {
    match minutes {
        Some(300) => "five_hour".into(),
        Some(10080) => "seven_day".into(),
        Some(m) => format!("{m}_minutes"),
        None => slot.to_string(),
    }
}

/// Token counts as Codex reports them (input includes the cached part).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Breakdown {
    input: u64,
    cached: u64,
    output: u64,
}

impl Breakdown {
    fn of(v: Option<&Value>) -> Breakdown {
        let n = |k: &str| v.and_then(|v| v.get(k)).and_then(Value::as_u64).unwrap_or(0);
        Breakdown { input: n("inputTokens"), cached: n("cachedInputTokens"), output: n("outputTokens") }
    }

    fn minus(self, o: Breakdown) -> Breakdown {
        Breakdown {
            input: self.input.saturating_sub(o.input),
            cached: self.cached.saturating_sub(o.cached),
            output: self.output.saturating_sub(o.output),
        }
    }
}

/// This process's usage from the thread's running totals. A resumed
/// thread's totals include the calls of earlier processes: what stood
/// before this process's first call (its total less that call) is theirs.
#[derive(Debug, Default, Clone)]
pub(super) struct Tokens {
    pricing: Pricing,
    /// The model the tokens are priced as.
    model: String,
    before: Option<Breakdown>,
    counted: Breakdown,
    usage: Usage,
}

impl Tokens {
    pub(super) fn new(pricing: Pricing, model: String) -> Tokens {
        Tokens { pricing, model, ..Tokens::default() }
    }

    pub(super) fn set_model(&mut self, model: String) {
        self.model = model;
    }

    pub(super) fn new_process(&mut self) {
        self.before = None;
        self.counted = Breakdown::default();
        self.usage = Usage::default();
    }

    fn update(&mut self, token_usage: &Value, out: &mut Vec<AgentEvent>) {
        let total = Breakdown::of(token_usage.get("total"));
        let before = *self.before.get_or_insert_with(|| total.minus(Breakdown::of(token_usage.get("last"))));
        let ours = total.minus(before);
        let new = ours.minus(self.counted);
        if new == Breakdown::default() {
            return;
        }
        self.counted = ours;
        let cached = new.cached.min(new.input);
        let mut call = Usage {
            input_tokens: new.input - cached,
            output_tokens: new.output,
            cache_read_tokens: cached,
            cache_creation_tokens: 0,
            cost_usd: 0.0,
        };
        call.cost_usd = self.pricing.cost(&self.model, &call, out);
        self.usage.add(&call);
        out.push(AgentEvent::Usage(self.usage));
    }
}
