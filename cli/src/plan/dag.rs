//! What `swarmctl plan` shows of a plan and of the run that wrote it: the
//! task graph in dependency order with owned files and estimates, the
//! critical path, and the planner's turns, tokens and dollars (from Claude
//! Code's stream: its `result` message, or the assistant messages' usage
//! when it ended without one).

use std::fmt::Write as _;

use serde_json::Value;
use swarm_core::plan::{Plan, critical_paths};
use swarm_view::text::duration_text;

/// What planning cost, as the agent reported it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Cost {
    pub turns: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: f64,
    pub session: String,
    /// The agent's last words, for a planner that proposed nothing.
    pub last_message: Option<String>,
}

impl Cost {
    /// Reads one line of Claude Code's stream-json output; anything else is skipped.
    pub fn read_line(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line) else { return };
        let n = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str) {
            Some("system") => {
                if let Some(s) = v.get("session_id").and_then(Value::as_str) {
                    self.session = one_line(s);
                }
            }
            Some("assistant") => {
                self.turns += 1;
                let usage = v.pointer("/message/usage");
                if let Some(u) = usage {
                    self.input_tokens += n(u, "input_tokens");
                    self.output_tokens += n(u, "output_tokens");
                    self.cache_read_tokens += n(u, "cache_read_input_tokens");
                }
                let text = v.pointer("/message/content").and_then(Value::as_array).and_then(|c| {
                    c.iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .next_back()
                        .map(str::to_string)
                });
                if text.is_some() {
                    self.last_message = text;
                }
            }
            Some("result") => {
                // The CLI's own totals replace the running sums.
                self.turns = u32::try_from(n(&v, "num_turns")).unwrap_or(self.turns).max(self.turns);
                if let Some(u) = v.get("usage") {
                    self.input_tokens = n(u, "input_tokens").max(self.input_tokens);
                    self.output_tokens = n(u, "output_tokens").max(self.output_tokens);
                    self.cache_read_tokens = n(u, "cache_read_input_tokens").max(self.cache_read_tokens);
                }
                if let Some(c) = v.get("total_cost_usd").and_then(Value::as_f64).filter(|c| c.is_finite()) {
                    self.cost_usd = c.max(0.0);
                }
                if let Some(r) = v.get("result").and_then(Value::as_str) {
                    self.last_message = Some(r.to_string());
                }
            }
            _ => {}
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} turns, {} tokens in ({} cached), {} out, ${:.4}{}",
            self.turns,
            self.input_tokens + self.cache_read_tokens,
            self.cache_read_tokens,
            self.output_tokens,
            self.cost_usd,
            if self.session.is_empty() { String::new() } else { format!(", session {}", self.session) }
        )
    }
}

/// The task graph as text: one line per task in dependency order, the
/// critical path, and the planner's cost.
pub fn render(plan: &Plan, cost: &Cost) -> String {
    let known: Vec<u64> = plan.tasks.iter().filter_map(|t| t.estimate_ms).collect();
    let unknown = if known.is_empty() { 0 } else { known.iter().sum::<u64>() / known.len() as u64 };
    let paths = critical_paths(&plan.tasks, unknown);
    let mut out = format!("swarm {}: {} tasks\n", plan.swarm.as_str(), plan.tasks.len());
    for (i, t) in dependency_order(plan).into_iter().map(|i| (i, &plan.tasks[i])) {
        let deps = if t.deps.is_empty() {
            String::new()
        } else {
            format!("  after {}", t.deps.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", "))
        };
        let estimate = t.estimate_ms.map(|ms| format!("  ~{}", duration_text(ms))).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}  [{}]{deps}{estimate}  (path {})",
            t.id.as_str(),
            t.files.join(", "),
            duration_text(paths[i])
        );
    }
    let _ = writeln!(out, "critical path: {}", critical_chain(plan, &paths).join(" -> "));
    let _ = writeln!(out, "planning: {}", cost.summary());
    out
}

/// Every task after its dependencies, ties in plan order.
fn dependency_order(plan: &Plan) -> Vec<usize> {
    let mut placed = vec![false; plan.tasks.len()];
    let mut order = Vec::new();
    while order.len() < plan.tasks.len() {
        let before = order.len();
        for (i, t) in plan.tasks.iter().enumerate() {
            let ready =
                t.deps.iter().all(|d| plan.tasks.iter().position(|o| &o.id == d).is_none_or(|j| placed[j]));
            if !placed[i] && ready {
                placed[i] = true;
                order.push(i);
            }
        }
        if order.len() == before {
            break; // a cycle: the parser refuses those, so this is unreachable
        }
    }
    order
}

/// The heaviest chain: from the task with the longest path below it, each
/// step to the dependent whose path is longest.
fn critical_chain(plan: &Plan, paths: &[u64]) -> Vec<String> {
    let roots = (0..plan.tasks.len()).filter(|&i| plan.tasks[i].deps.is_empty());
    let Some(mut at) = roots.max_by_key(|&i| paths[i]) else { return Vec::new() };
    let mut chain = vec![plan.tasks[at].id.as_str().to_string()];
    while let Some(next) = (0..plan.tasks.len())
        .filter(|&j| plan.tasks[j].deps.contains(&plan.tasks[at].id))
        .max_by_key(|&j| paths[j])
    {
        chain.push(plan.tasks[next].id.as_str().to_string());
        at = next;
        if chain.len() > plan.tasks.len() {
            break;
        }
    }
    chain
}

/// Hostile text as one short line.
pub fn one_line(s: &str) -> String {
    let flat: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let mut cut: String = flat.trim().chars().take(300).collect();
    if flat.trim().chars().count() > 300 {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_lists_tasks_after_their_deps_and_names_the_critical_path() {
        let plan = Plan::parse(
            r#"
name = "p"
[defaults]
command = "true"
[[tasks]]
id = "api"
files = ["src/api/**"]
deps = ["schema"]
estimate = "30m"
[[tasks]]
id = "schema"
files = ["src/schema/**"]
estimate = "10m"
[[tasks]]
id = "docs"
files = ["docs/**"]
estimate = "5m"
"#,
        )
        .expect("plan");
        let text = render(&plan, &Cost { turns: 3, cost_usd: 0.5, ..Cost::default() });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "swarm p: 3 tasks");
        assert!(lines[1].starts_with("  schema  [src/schema/**]  ~10m"), "{text}");
        assert!(lines[2].starts_with("  docs  [docs/**]  ~5m"), "{text}");
        assert!(lines[3].starts_with("  api  [src/api/**]  after schema  ~30m"), "{text}");
        assert!(text.contains("critical path: schema -> api"), "{text}");
        assert!(text.contains("planning: 3 turns"), "{text}");
    }

    #[test]
    fn cost_comes_from_the_stream_and_the_result_wins() {
        let mut c = Cost::default();
        for l in [
            r#"{"type":"system","subtype":"init","session_id":"s-1"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Reading."}],"usage":{"input_tokens":10,"output_tokens":2,"cache_read_input_tokens":5}}}"#,
            "not json",
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Read"}],"usage":{"input_tokens":20,"output_tokens":3}}}"#,
        ] {
            c.read_line(l);
        }
        assert_eq!((c.turns, c.input_tokens, c.output_tokens, c.cache_read_tokens), (2, 30, 5, 5));
        assert_eq!(c.last_message.as_deref(), Some("Reading."));
        c.read_line(r#"{"type":"result","num_turns":4,"total_cost_usd":0.25,"usage":{"input_tokens":40,"output_tokens":9},"result":"Proposed."}"#);
        assert_eq!((c.turns, c.input_tokens, c.output_tokens), (4, 40, 9));
        assert_eq!(c.cost_usd, 0.25);
        assert_eq!(c.session, "s-1");
        assert!(
            c.summary().starts_with("4 turns, 45 tokens in (5 cached), 9 out, $0.2500, session s-1"),
            "{}",
            c.summary()
        );
    }
}
