//! OpenAI Codex through `codex exec --json`: the prompt is read from stdin
//! (`-`), one turn runs, JSONL events come out, the process exits. A
//! follow-up message is a new process, `codex exec ... resume <thread> -`
//! (options go before the subcommand: `--json` and `--model` are global
//! there, the rest belong to `exec`).
//!
//! Codex can ask nothing in exec mode: it runs with `approval_policy =
//! "never"` and the sandbox mode the parent module explains, unless the
//! plan's `extra_args` set them. It reports no cost, only tokens per turn
//! (`turn.completed.usage`); its `input_tokens` include the cached ones,
//! which are reported here as cache reads, as Claude counts them. Those
//! tokens are priced with the attempt's price table as the plan's `model`
//! (its output does not name one), or as the `codex` family without one.

use serde_json::Value;
use swarm_core::Usage;
use swarm_core::plan::AgentKind;

use super::{DEFAULT_MODEL, mcp_overrides, sandbox_mode, user_sets};
use crate::agent::cost::Pricing;
use crate::agent::{
    Agent, AgentConfig, AgentEvent, FollowUp, Opening, RateLimit, TurnEnd, Verdict, clip, now_unix_ms,
    usage_limit_in_text,
};

#[derive(Debug, Default)]
pub struct Codex {
    /// Tokens of this process's completed turns, with their estimated cost.
    usage: Usage,
    last_message: String,
    rate_limit: Option<RateLimit>,
    pricing: Pricing,
    /// The model its tokens are priced as.
    model: String,
    /// swarm's sandbox confines the process (see the parent module).
    confined: bool,
}

impl Codex {
    pub fn new(cfg: &AgentConfig, pricing: Pricing, confined: bool) -> Codex {
        let model = cfg.model.clone().unwrap_or_else(|| DEFAULT_MODEL.to_string());
        Codex { pricing, model, confined, ..Codex::default() }
    }
}

impl Agent for Codex {
    fn kind(&self) -> AgentKind {
        AgentKind::Codex
    }

    fn argv(&self, cfg: &AgentConfig, resume: Option<&str>) -> Vec<String> {
        let mut v = vec![cfg.program.clone(), "exec".into(), "--json".into()];
        if let Some(m) = &cfg.model {
            v.extend(["--model".into(), m.clone()]);
        }
        if let Some(server) = &cfg.mcp {
            v.extend(mcp_overrides(server));
        }
        if !user_sets(&cfg.extra_args, "sandbox_mode") {
            v.extend(["-c".into(), format!("sandbox_mode=\"{}\"", sandbox_mode(self.confined))]);
        }
        if !user_sets(&cfg.extra_args, "approval_policy") {
            v.extend(["-c".into(), "approval_policy=\"never\"".into()]);
        }
        v.extend(cfg.extra_args.iter().cloned());
        if let Some(s) = resume {
            v.extend(["resume".into(), s.to_string()]);
        }
        v.push("-".into());
        v
    }

    fn opening(&mut self, prompt: &str, _resume: Option<&str>) -> Opening {
        Opening { input: prompt.to_string(), close: true }
    }

    fn follow_up(&self) -> FollowUp {
        FollowUp::Resume
    }

    fn user_message(&mut self, text: &str) -> String {
        text.to_string()
    }

    fn permission_reply(&mut self, _: &str, _: &Verdict, _: &Value) -> Option<String> {
        None
    }

    fn refuse_control(&self, _: &str) -> Option<String> {
        None
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let v = match crate::agent::json_object(line) {
            Ok(v) => v,
            Err(unparseable) => return vec![unparseable],
        };
        let mut out = Vec::new();
        match v.get("type").and_then(Value::as_str).unwrap_or_default() {
            "thread.started" => {
                if let Some(id) = str_at(&v, "thread_id").filter(|s| !s.is_empty()) {
                    out.push(AgentEvent::SessionStarted(id.to_string()));
                }
            }
            "turn.completed" => self.turn_completed(&v, &mut out),
            "turn.failed" => {
                let msg = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("turn failed");
                self.turn_failed(msg, &mut out);
            }
            "item.started" | "item.updated" | "item.completed" => {
                let done = v.get("type").and_then(Value::as_str) == Some("item.completed");
                if let Some(item) = v.get("item") {
                    self.item(item, done, &mut out);
                }
            }
            "error" => {
                let msg = str_at(&v, "message").unwrap_or("error");
                if let Some(r) = usage_limit_in_text(msg, now_unix_ms()) {
                    self.rate_limit = Some(r.clone());
                    out.push(AgentEvent::RateLimited(r));
                }
                out.push(AgentEvent::Error(clip(msg, 4096)));
            }
            // `codex exec` cannot take an answer in the same turn; the
            // question shows in the log tail, and the model goes on.
            "request_user_input" => {
                let questions: Vec<&str> = v
                    .get("questions")
                    .and_then(Value::as_array)
                    .map(|qs| qs.iter().filter_map(|q| str_at(q, "question")).collect())
                    .unwrap_or_default();
                if !questions.is_empty() {
                    out.push(AgentEvent::Note(clip(
                        &format!("the agent asks: {}", questions.join(" / ")),
                        500,
                    )));
                }
            }
            // turn.started, item.plan.delta, anything newer.
            _ => {}
        }
        out
    }

    fn new_process(&mut self) {
        let (pricing, model) = (std::mem::take(&mut self.pricing), std::mem::take(&mut self.model));
        *self = Codex { pricing, model, confined: self.confined, ..Codex::default() };
    }
}

fn str_at<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

impl Codex {
    fn turn_completed(&mut self, v: &Value, out: &mut Vec<AgentEvent>) {
        if let Some(u) = v.get("usage") {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            let cached = n("cached_input_tokens");
            let mut turn = Usage {
                input_tokens: n("input_tokens").saturating_sub(cached),
                output_tokens: n("output_tokens"),
                cache_read_tokens: cached,
                cache_creation_tokens: 0,
                cost_usd: 0.0,
            };
            turn.cost_usd = self.pricing.cost(&self.model, &turn, out);
            self.usage.add(&turn);
            out.push(AgentEvent::Usage(self.usage));
        }
        let text = std::mem::take(&mut self.last_message);
        match self.rate_limit.take() {
            Some(r) => out.push(AgentEvent::TurnEnded(TurnEnd { ok: false, text, rate_limit: Some(r) })),
            None => out.push(AgentEvent::TurnEnded(TurnEnd { ok: true, text, rate_limit: None })),
        }
    }

    fn turn_failed(&mut self, msg: &str, out: &mut Vec<AgentEvent>) {
        let rate_limit = usage_limit_in_text(msg, now_unix_ms()).or_else(|| self.rate_limit.take());
        out.push(AgentEvent::TurnEnded(TurnEnd { ok: false, text: clip(msg, 4096), rate_limit }));
    }

    fn item(&mut self, item: &Value, done: bool, out: &mut Vec<AgentEvent>) {
        let s = |k: &str| str_at(item, k).unwrap_or_default();
        match s("type") {
            "agent_message" if done => {
                self.last_message = s("text").trim().to_string();
                if let Some(first) = self.last_message.lines().find(|l| !l.trim().is_empty()) {
                    out.push(AgentEvent::Note(clip(first, 300)));
                }
            }
            "command_execution" if !done => {
                out.push(AgentEvent::Step(clip(&format!("Bash: {}", s("command")), 300)))
            }
            "file_change" if done && s("status") == "completed" => {
                let paths: Vec<String> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .map(|cs| cs.iter().filter_map(|c| str_at(c, "path")).map(str::to_string).collect())
                    .unwrap_or_default();
                if let Some(first) = paths.first() {
                    let more =
                        if paths.len() > 1 { format!(" (+{} more)", paths.len() - 1) } else { String::new() };
                    out.push(AgentEvent::Step(clip(&format!("Edit {first}{more}"), 300)));
                    out.push(AgentEvent::FilesChanged(paths));
                }
            }
            "mcp_tool_call" if !done => {
                out.push(AgentEvent::Step(clip(&format!("{}.{}", s("server"), s("tool")), 300)));
            }
            "web_search" if !done => {
                out.push(AgentEvent::Step(clip(&format!("WebSearch: {}", s("query")), 300)))
            }
            "todo_list" => {
                if let Some(items) = item.get("items").and_then(Value::as_array) {
                    let done = items
                        .iter()
                        .filter(|i| i.get("completed").and_then(Value::as_bool) == Some(true))
                        .count();
                    out.push(AgentEvent::Todo {
                        done: u32::try_from(done).unwrap_or(u32::MAX),
                        total: u32::try_from(items.len()).unwrap_or(u32::MAX),
                    });
                }
            }
            "error" => out.push(AgentEvent::Note(clip(&format!("error: {}", s("message")), 300))),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker_mcp::StdioServer;

    fn cfg() -> AgentConfig {
        AgentConfig {
            model: Some("gpt-5-codex".into()),
            extra_args: vec!["--sandbox".into(), "workspace-write".into()],
            ..AgentConfig::of_kind(AgentKind::Codex)
        }
    }

    #[test]
    fn swarms_tools_are_given_as_mcp_servers_overrides_in_toml() {
        let server = StdioServer {
            command: "/opt/swarm sidecar".into(),
            args: vec!["__mcp-bridge".into()],
            env: vec![("SWARM_MCP_TOKEN".into(), "t\"0k".into())],
        };
        let argv = Codex::default().argv(&AgentConfig { mcp: Some(server), ..cfg() }, None);
        let overrides: Vec<&str> = argv
            .windows(2)
            .filter(|w| w[0] == "-c" && w[1].starts_with("mcp_servers."))
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            overrides,
            [
                r#"mcp_servers.swarm.command="/opt/swarm sidecar""#,
                r#"mcp_servers.swarm.args=["__mcp-bridge"]"#,
                r#"mcp_servers.swarm.env={ "SWARM_MCP_TOKEN" = "t\"0k" }"#,
            ]
        );
        // Each value is TOML, as Codex parses a `-c key=value`.
        for o in overrides {
            let (key, value) = o.split_once('=').expect("key=value");
            let doc = format!("{} = {value}", key.rsplit('.').next().expect("key"));
            toml::from_str::<toml::Table>(&doc).unwrap_or_else(|e| panic!("{o}: {e}"));
        }
    }

    #[test]
    fn argv_fresh_and_resumed() {
        let mut c = Codex::default();
        assert_eq!(
            c.argv(&cfg(), None).join(" "),
            "codex exec --json --model gpt-5-codex -c approval_policy=\"never\" --sandbox workspace-write -"
        );
        assert_eq!(
            c.argv(&cfg(), Some("th-1")).join(" "),
            "codex exec --json --model gpt-5-codex -c approval_policy=\"never\" --sandbox workspace-write resume th-1 -"
        );
        let confined = Codex::new(&AgentConfig::of_kind(AgentKind::Codex), Pricing::default(), true);
        assert_eq!(
            confined.argv(&AgentConfig::of_kind(AgentKind::Codex), None).join(" "),
            "codex exec --json -c sandbox_mode=\"danger-full-access\" -c approval_policy=\"never\" -",
            "swarm's sandbox is the floor"
        );
        assert_eq!(c.opening("task", None), Opening { input: "task".into(), close: true });
        assert_eq!(c.follow_up(), FollowUp::Resume);
    }

    #[test]
    fn a_turn_parses_into_events() {
        let mut c = Codex::new(&cfg(), Pricing::default(), false);
        let lines = [
            r#"{"type":"thread.started","thread_id":"th-1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.started","item":{"id":"i0","type":"reasoning","text":"thinking"}}"#,
            r#"{"type":"item.started","item":{"id":"i1","type":"command_execution","command":"bash -lc 'cargo test'","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"cargo test","aggregated_output":"ok","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"i2","type":"file_change","changes":[{"path":"/w/src/a.rs","kind":"update"},{"path":"src/b.rs","kind":"add"}],"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"i3","type":"file_change","changes":[{"path":"src/c.rs","kind":"add"}],"status":"failed"}}"#,
            r#"{"type":"item.updated","item":{"id":"i4","type":"todo_list","items":[{"text":"a","completed":true},{"text":"b","completed":false}]}}"#,
            r#"{"type":"item.started","item":{"id":"i5","type":"mcp_tool_call","server":"gh","tool":"pr","arguments":{},"result":null,"error":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"i6","type":"error","message":"minor"}}"#,
            r#"{"type":"item.completed","item":{"id":"i7","type":"agent_message","text":"All done.\nDetails"}}"#,
            r#"{"type":"item.plan.delta","item_id":"x","delta":"..."}"#,
            r#"{"type":"request_user_input","id":"t1","call_id":"c1","questions":[{"id":"q","header":"DB","question":"Which database?","options":[{"label":"SQLite","description":""}]}]}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":7,"reasoning_output_tokens":3}}"#,
        ];
        let ev: Vec<AgentEvent> = lines.iter().flat_map(|l| c.parse_line(l)).collect();
        assert_eq!(ev[0], AgentEvent::SessionStarted("th-1".into()));
        assert!(ev.contains(&AgentEvent::Step("Bash: bash -lc 'cargo test'".into())));
        assert!(ev.contains(&AgentEvent::FilesChanged(vec!["/w/src/a.rs".into(), "src/b.rs".into()])));
        assert!(
            !ev.contains(&AgentEvent::FilesChanged(vec!["src/c.rs".into()])),
            "a failed patch changed nothing"
        );
        assert!(ev.contains(&AgentEvent::Todo { done: 1, total: 2 }));
        assert!(ev.contains(&AgentEvent::Step("gh.pr".into())));
        assert!(ev.contains(&AgentEvent::Note("error: minor".into())));
        assert!(ev.contains(&AgentEvent::Note("the agent asks: Which database?".into())));
        let u = ev
            .iter()
            .find_map(|e| if let AgentEvent::Usage(u) = e { Some(*u) } else { None })
            .expect("usage");
        assert_eq!((u.input_tokens, u.cache_read_tokens, u.output_tokens), (60, 40, 7));
        // gpt-5's prices: $1.25, $0.125 cached and $10 out per million.
        assert!((u.cost_usd - (60.0 * 1.25 + 40.0 * 0.125 + 7.0 * 10.0) / 1e6).abs() < 1e-12, "{u:?}");
        assert!(!ev.iter().any(|e| matches!(e, AgentEvent::Note(n) if n.contains("price"))), "a known model");
        assert_eq!(
            ev.last(),
            Some(&AgentEvent::TurnEnded(TurnEnd {
                ok: true,
                text: "All done.\nDetails".into(),
                rate_limit: None
            }))
        );
        c.new_process();
        let ev = c.parse_line(r#"{"type":"turn.completed","usage":{"input_tokens":1000000}}"#);
        let next = Usage { input_tokens: 1_000_000, cost_usd: 1.25, ..Usage::default() };
        assert!(ev.contains(&AgentEvent::Usage(next)), "a new process keeps the model: {ev:?}");
    }

    #[test]
    fn failures_and_usage_limits() {
        let mut c = Codex::default();
        let ev = c.parse_line(r#"{"type":"turn.failed","error":{"message":"model refused"}}"#);
        assert_eq!(
            ev,
            vec![AgentEvent::TurnEnded(TurnEnd {
                ok: false,
                text: "model refused".into(),
                rate_limit: None
            })]
        );
        let ev = c
            .parse_line(r#"{"type":"error","message":"You've hit your usage limit. Try again in 3 hours."}"#);
        assert!(matches!(&ev[0], AgentEvent::RateLimited(r) if r.reset_unix_ms > 0));
        let ev = c.parse_line(r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#);
        assert!(matches!(&ev[0], AgentEvent::TurnEnded(t) if t.rate_limit.is_some()), "{ev:?}");
        let ev = c.parse_line(
            r#"{"type":"turn.failed","error":{"message":"unexpected status 429 Too Many Requests"}}"#,
        );
        assert!(matches!(&ev[0], AgentEvent::TurnEnded(t) if t.rate_limit.is_some()));
    }

    #[test]
    fn hostile_lines_never_panic() {
        let mut c = Codex::default();
        for l in [
            "",
            "}",
            "7",
            r#"{"type":"item.completed"}"#,
            r#"{"type":"item.completed","item":5}"#,
            r#"{"type":"item.completed","item":{"type":"file_change","status":"completed","changes":[1,{"path":2}]}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":-4,"cached_input_tokens":99}}"#,
            r#"{"type":"turn.failed"}"#,
            r#"{"type":"error"}"#,
            r#"{"type":"thread.started"}"#,
        ] {
            let _ = c.parse_line(l);
        }
        assert!(matches!(c.parse_line("nope").as_slice(), [AgentEvent::Unparseable(_)]));
    }
}
