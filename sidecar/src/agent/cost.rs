//! Dollars for an agent's tokens while it runs. An agent's own bill comes
//! late or never (Claude Code's `total_cost_usd` with each turn's
//! `result`, an ACP agent's `usage_update` when it sends one, nothing from
//! Codex), so a dollar budget could only be checked when a process ended.
//! Here every API call the agent reports is priced from its tokens with
//! the attempt's [`PriceTable`] (the plan's `prices` over the built-in
//! families) as it arrives; the agent's own figure, when it comes,
//! replaces the estimate of everything it covers.
//!
//! A model the table does not name is priced as the fallback family, and
//! the attempt's log says so once per model.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use swarm_core::Usage;
use swarm_core::plan::PriceTable;
use swarm_core::plan::prices::{FALLBACK, PriceSource};

use super::AgentEvent;

/// Models noted as unpriced at most; past that they are priced silently.
const MAX_NOTED: usize = 64;

/// The attempt's price table, and the models it already said it cannot
/// price (kept across the attempt's processes).
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    table: Arc<PriceTable>,
    noted: HashSet<String>,
}

impl Pricing {
    pub fn new(table: Arc<PriceTable>) -> Pricing {
        Pricing { table, noted: HashSet::new() }
    }

    /// What `u`'s tokens cost on `model`; the first time a model is priced
    /// by the fallback, a note for the log tail says so.
    pub fn cost(&mut self, model: &str, u: &Usage, out: &mut Vec<AgentEvent>) -> f64 {
        if u.total_tokens() == 0 {
            return 0.0;
        }
        let (usd, source) = self.table.estimate(model, u);
        if source == PriceSource::Fallback && self.noted.len() < MAX_NOTED && self.noted.insert(model.into())
        {
            let name =
                if model.is_empty() { "the agent's model (unnamed)".into() } else { format!("{model:?}") };
            let note = format!(
                "no price for {name} in the price table; estimating its cost at {} prices until the \
                 agent reports its own (set the plan's prices to price it)",
                FALLBACK.0
            );
            tracing::warn!(model, "{note}");
            out.push(AgentEvent::Note(super::clip(&note, 300)));
        }
        usd
    }
}

/// One Claude Code process's spending, from its stream-json output.
///
/// Every assistant line of one API call repeats the call's `message.id`
/// and usage (text and each parallel tool use arrive as separate lines),
/// so a call counts once, at the largest value seen per field (the SDK's
/// cost-tracking notes: the last of a group is the accurate one), and is
/// priced by its `message.model`. A `result`'s `usage` covers only its own
/// turn (since the previous result) while its `total_cost_usd` is the
/// process's running total: so results' tokens are summed, each replacing
/// the live count of its turn, and the cost is the latest total plus the
/// estimate of the calls since.
#[derive(Debug, Default)]
pub struct ClaudeSpend {
    pricing: Pricing,
    /// The current turn's API calls by message id, each priced.
    turn: HashMap<String, Usage>,
    /// Tokens of this process's results, summed.
    results: Usage,
    /// The latest result's `total_cost_usd` (cumulative for the process).
    reported: f64,
    /// Estimates of finished turns whose result named no total.
    unreported: f64,
}

impl ClaudeSpend {
    pub fn new(pricing: Pricing) -> ClaudeSpend {
        ClaudeSpend { pricing, ..ClaudeSpend::default() }
    }

    /// An assistant message: its call's usage, priced. True when it
    /// changed what the process spent.
    pub fn message(&mut self, msg: &Value, out: &mut Vec<AgentEvent>) -> bool {
        let (Some(id), Some(u)) = (msg.get("id").and_then(Value::as_str), msg.get("usage")) else {
            return false;
        };
        let seen = self.turn.get(id).copied().unwrap_or_default();
        let mut now = max_usage(&seen, &usage_of(u));
        if now == seen {
            return false;
        }
        let model = msg.get("model").and_then(Value::as_str).unwrap_or_default();
        now.cost_usd = self.pricing.cost(model, &now, out);
        self.turn.insert(id.to_string(), now);
        true
    }

    /// A `result`: the turn's tokens as the result counts them, and the
    /// agent's own total, which replaces every estimate before it.
    pub fn result(&mut self, v: &Value) {
        let live = self.live();
        self.turn.clear();
        match v.get("usage") {
            Some(u) => self.results.add(&usage_of(u)),
            None => self.results.add(&Usage { cost_usd: 0.0, ..live }),
        }
        match v.get("total_cost_usd").and_then(Value::as_f64).filter(|c| c.is_finite() && *c >= 0.0) {
            Some(total) => {
                self.reported = self.reported.max(total.min(swarm_core::usage::MAX_COST_USD));
                self.unreported = 0.0;
            }
            None => self.unreported += live.cost_usd,
        }
    }

    /// The calls of the turn in progress, summed with their estimate.
    fn live(&self) -> Usage {
        let mut u = Usage::default();
        for t in self.turn.values() {
            u.add(t);
        }
        u
    }

    /// The process's usage so far.
    pub fn usage(&self) -> Usage {
        let live = self.live();
        let mut u = self.results;
        u.add(&live);
        u.cost_usd = (self.reported + self.unreported + live.cost_usd).min(swarm_core::usage::MAX_COST_USD);
        u
    }

    /// A new process reports only its own spending; what was noted stays.
    pub fn new_process(&mut self) {
        *self = ClaudeSpend { pricing: std::mem::take(&mut self.pricing), ..ClaudeSpend::default() };
    }
}

/// Claude's (and the Messages API's) usage object.
pub fn usage_of(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cache_creation_tokens: n("cache_creation_input_tokens"),
        cost_usd: 0.0,
    }
}

fn max_usage(a: &Usage, b: &Usage) -> Usage {
    Usage {
        input_tokens: a.input_tokens.max(b.input_tokens),
        output_tokens: a.output_tokens.max(b.output_tokens),
        cache_read_tokens: a.cache_read_tokens.max(b.cache_read_tokens),
        cache_creation_tokens: a.cache_creation_tokens.max(b.cache_creation_tokens),
        cost_usd: a.cost_usd,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use swarm_core::plan::Price;

    use super::*;

    fn notes(out: &[AgentEvent]) -> Vec<&str> {
        out.iter().filter_map(|e| if let AgentEvent::Note(n) = e { Some(n.as_str()) } else { None }).collect()
    }

    fn message(id: &str, model: &str, input: u64, output: u64) -> Value {
        json!({"id": id, "model": model, "usage": {"input_tokens": input, "output_tokens": output}})
    }

    #[test]
    fn each_call_is_priced_by_its_model_once() {
        let mut s = ClaudeSpend::default();
        let mut out = Vec::new();
        assert!(s.message(&message("m1", "claude-sonnet-4-5-20250929", 100_000, 1), &mut out));
        assert!(!s.message(&message("m1", "claude-sonnet-4-5-20250929", 100_000, 1), &mut out), "a repeat");
        assert!((s.usage().cost_usd - (0.3 + 0.000015)).abs() < 1e-9, "{:?}", s.usage());
        assert!(s.message(&message("m1", "claude-sonnet-4-5-20250929", 100_000, 1_000), &mut out));
        assert!((s.usage().cost_usd - 0.315).abs() < 1e-9, "the call's largest usage: {:?}", s.usage());
        s.message(&message("m2", "claude-haiku-4-5", 1_000_000, 0), &mut out);
        assert!((s.usage().cost_usd - 1.315).abs() < 1e-9, "{:?}", s.usage());
        assert_eq!(s.usage().input_tokens, 1_100_000);
        assert!(notes(&out).is_empty(), "known models: {out:?}");
    }

    #[test]
    fn an_unknown_model_is_priced_as_the_fallback_and_noted_once() {
        let mut p = Pricing::default();
        let mut out = Vec::new();
        let u = Usage { input_tokens: 1_000_000, ..Usage::default() };
        assert_eq!(p.cost("mystery-1", &u, &mut out), FALLBACK.1.input);
        p.cost("mystery-1", &u, &mut out);
        p.cost("", &u, &mut out);
        let n = notes(&out);
        assert_eq!(n.len(), 2, "once per model: {n:?}");
        assert!(n[0].contains("\"mystery-1\"") && n[0].contains("opus prices"), "{n:?}");
        assert!(n[1].contains("unnamed"), "{n:?}");
    }

    #[test]
    fn the_plans_prices_are_used() {
        let own = Price { input: 1.0, output: 2.0, cache_write: 1.0, cache_read: 0.5 };
        let table = PriceTable::new("prices", vec![("mystery".into(), own)]).expect("a table");
        let mut p = Pricing::new(Arc::new(table));
        let mut out = Vec::new();
        let u = Usage { input_tokens: 1_000_000, cache_read_tokens: 2_000_000, ..Usage::default() };
        assert_eq!(p.cost("mystery-1", &u, &mut out), 2.0);
        assert!(out.is_empty(), "priced by the plan: {out:?}");
    }

    #[test]
    fn the_agents_total_replaces_the_estimate_and_later_calls_add_to_it() {
        let mut s = ClaudeSpend::default();
        let mut out = Vec::new();
        s.message(&message("m1", "claude-sonnet-4", 1_000_000, 0), &mut out);
        assert!((s.usage().cost_usd - 3.0).abs() < 1e-9);
        s.result(&json!({"total_cost_usd": 2.5, "usage": {"input_tokens": 1_000_000, "output_tokens": 7}}));
        let u = s.usage();
        assert_eq!((u.cost_usd, u.input_tokens, u.output_tokens), (2.5, 1_000_000, 7), "reconciled");
        s.message(&message("m2", "claude-sonnet-4", 1_000_000, 0), &mut out);
        assert!((s.usage().cost_usd - 5.5).abs() < 1e-9, "the next turn's estimate adds to the total");
        s.result(&json!({"subtype": "error_during_execution"}));
        assert!((s.usage().cost_usd - 5.5).abs() < 1e-9, "no total: the estimate stands");
        assert_eq!(s.usage().input_tokens, 2_000_000, "the live tokens stand for the result's");
        s.result(&json!({"total_cost_usd": 4.0}));
        assert_eq!(s.usage().cost_usd, 4.0, "a total covers the turns before it");
        s.new_process();
        assert!(s.usage().is_zero());
    }
}
