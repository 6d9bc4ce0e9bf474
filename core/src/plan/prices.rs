//! What an agent's tokens cost: a price table per model family, so that a
//! sidecar can put a dollar figure on every API call as it happens (an
//! agent's own bill, where it reports one, comes only when a turn or a
//! process ends) and a dollar budget is enforced while the agent runs.
//!
//! ```toml
//! [prices."claude-sonnet-4"]   # dollars per million tokens
//! input = 3.0
//! output = 15.0
//! cache_write = 3.75           # unset: the input price
//! cache_read = 0.30            # unset: the input price
//!
//! [prices."*"]                 # any model no entry and no built-in family names
//! input = 5.0
//! output = 25.0
//! ```
//!
//! A key names a model family: it matches every model id that contains it
//! (case does not matter), and the longest matching key wins, so
//! `claude-opus-4-5` is priced apart from `claude-opus-4`. The plan's
//! entries are looked at before the built-in [`BUILT_IN`] table. A model
//! neither names is priced as [`FALLBACK`], the dearest family, so an
//! unknown model is stopped early rather than late; the estimate is
//! replaced by the agent's own total wherever the agent reports one.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{PlanError, err};
use crate::Usage;
use crate::usage::MAX_COST_USD;

/// The key of the plan's entry for models nothing else names.
pub const ANY_MODEL: &str = "*";
/// At most this many entries in a plan's `prices`.
pub const MAX_PRICES: usize = 128;
/// Longest key of a plan's `prices`.
pub const MAX_KEY: usize = 128;
/// Highest price per million tokens a plan may set: far above any real
/// model's, low enough that a million tokens can never cost more than a
/// report may claim.
pub const MAX_PRICE: f64 = 10_000.0;

/// Dollars per million tokens of each kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Writing the prompt cache.
    pub cache_write: f64,
    /// Reading the prompt cache.
    pub cache_read: f64,
}

impl Price {
    const fn new(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Price {
        Price { input, output, cache_write, cache_read }
    }

    /// What `u`'s tokens cost, in dollars (at most [`MAX_COST_USD`]).
    pub fn cost(&self, u: &Usage) -> f64 {
        let dollars = (u.input_tokens as f64 * self.input
            + u.output_tokens as f64 * self.output
            + u.cache_creation_tokens as f64 * self.cache_write
            + u.cache_read_tokens as f64 * self.cache_read)
            / 1_000_000.0;
        if dollars.is_finite() { dollars.clamp(0.0, MAX_COST_USD) } else { MAX_COST_USD }
    }

    /// Checks each price: a finite number from 0 to [`MAX_PRICE`]; the
    /// error names the field (`<path>.output`).
    pub fn check(&self, path: &str) -> Result<(), PlanError> {
        let fields = [
            ("input", self.input),
            ("output", self.output),
            ("cache_write", self.cache_write),
            ("cache_read", self.cache_read),
        ];
        for (name, v) in fields {
            if !v.is_finite() || !(0.0..=MAX_PRICE).contains(&v) {
                return Err(err(
                    format!("{path}.{name}"),
                    format!("must be a number from 0 to {MAX_PRICE} (dollars per million tokens), got {v}"),
                ));
            }
        }
        Ok(())
    }
}

const OPUS_4: Price = Price::new(15.0, 75.0, 18.75, 1.50);
const OPUS_4_5: Price = Price::new(5.0, 25.0, 6.25, 0.50);
const SONNET: Price = Price::new(3.0, 15.0, 3.75, 0.30);
const HAIKU_4_5: Price = Price::new(1.0, 5.0, 1.25, 0.10);
const HAIKU_3_5: Price = Price::new(0.80, 4.0, 1.0, 0.08);
const HAIKU_3: Price = Price::new(0.25, 1.25, 0.30, 0.03);
// OpenAI bills no cache writes: those tokens are input.
const GPT_5: Price = Price::new(1.25, 10.0, 1.25, 0.125);
const GPT_5_MINI: Price = Price::new(0.25, 2.0, 0.25, 0.025);
const GPT_5_NANO: Price = Price::new(0.05, 0.40, 0.05, 0.005);
const GPT_5_PRO: Price = Price::new(15.0, 120.0, 15.0, 15.0);
const GPT_5_2: Price = Price::new(1.75, 14.0, 1.75, 0.175);

/// The project's prices by model family (list prices, standard context;
/// a cache write is Anthropic's five-minute one). A bare family name
/// (`opus`, `codex`) carries that family's dearest generation here, for an
/// alias or a generation the table does not know yet.
pub const BUILT_IN: &[(&str, Price)] = &[
    ("claude-opus-4-5", OPUS_4_5),
    ("claude-opus-4-1", OPUS_4),
    ("claude-opus-4", OPUS_4),
    ("claude-3-opus", OPUS_4),
    ("opus", OPUS_4),
    ("claude-sonnet-4-5", SONNET),
    ("claude-sonnet-4", SONNET),
    ("claude-3-7-sonnet", SONNET),
    ("claude-3-5-sonnet", SONNET),
    ("sonnet", SONNET),
    ("claude-haiku-4-5", HAIKU_4_5),
    ("claude-3-5-haiku", HAIKU_3_5),
    ("claude-3-haiku", HAIKU_3),
    ("haiku", HAIKU_4_5),
    ("gpt-5", GPT_5),
    ("gpt-5-codex", GPT_5),
    ("gpt-5.1", GPT_5),
    ("gpt-5.1-codex", GPT_5),
    ("gpt-5-mini", GPT_5_MINI),
    ("gpt-5-codex-mini", GPT_5_MINI),
    ("gpt-5.1-codex-mini", GPT_5_MINI),
    ("gpt-5-nano", GPT_5_NANO),
    ("gpt-5-pro", GPT_5_PRO),
    ("gpt-5.2", GPT_5_2),
    // Codex's output does not name its model: with no `model` in the
    // plan its tokens are priced as this.
    ("codex", GPT_5_2),
];

/// What a model that neither the plan nor [`BUILT_IN`] names is priced as:
/// Claude Opus 4's prices, the dearest of the families agents commonly run.
pub const FALLBACK: (&str, Price) = ("opus", OPUS_4);

/// Where a model's price came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriceSource {
    /// The plan's `prices` entry with this key (`*` included).
    Plan(String),
    /// The built-in family with this key.
    BuiltIn(&'static str),
    /// Nothing named the model: [`FALLBACK`].
    Fallback,
}

/// The plan's `prices`, over the built-in table. The default holds no
/// entry of its own: the built-in table alone.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    /// Lower-cased keys, sorted.
    entries: Vec<(String, Price)>,
}

impl PriceTable {
    /// A table of `entries` (key, price), checked as the plan's are; the
    /// error's path starts with `path` (`prices`).
    pub fn new(path: &str, entries: Vec<(String, Price)>) -> Result<PriceTable, PlanError> {
        if entries.len() > MAX_PRICES {
            return Err(err(path, format!("at most {MAX_PRICES} entries, got {}", entries.len())));
        }
        let mut checked: BTreeMap<String, Price> = BTreeMap::new();
        for (key, price) in entries {
            let at = format!("{path}.{key:?}");
            check_key(&key).map_err(|rule| err(&at, rule))?;
            price.check(&at)?;
            if checked.insert(key.to_ascii_lowercase(), price).is_some() {
                return Err(err(at, "names the same models as another entry (keys ignore case)"));
            }
        }
        Ok(PriceTable { entries: checked.into_iter().collect() })
    }

    /// The plan's own entries (lower-cased keys, sorted).
    pub fn entries(&self) -> &[(String, Price)] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The price of `model` (an API model id such as
    /// `claude-sonnet-4-5-20250929`, or an alias) and where it came from.
    pub fn lookup(&self, model: &str) -> (Price, PriceSource) {
        let model = model.to_ascii_lowercase();
        if let Some((key, price)) = longest(self.entries.iter().map(|(k, p)| (k.as_str(), *p)), &model) {
            return (price, PriceSource::Plan(key.to_string()));
        }
        if let Some((key, price)) = longest(BUILT_IN.iter().copied(), &model) {
            return (price, PriceSource::BuiltIn(key));
        }
        match self.entries.iter().find(|(k, _)| k == ANY_MODEL) {
            Some((_, price)) => (*price, PriceSource::Plan(ANY_MODEL.to_string())),
            None => (FALLBACK.1, PriceSource::Fallback),
        }
    }

    /// What `u`'s tokens cost on `model`, and where its price came from.
    pub fn estimate(&self, model: &str, u: &Usage) -> (f64, PriceSource) {
        let (price, source) = self.lookup(model);
        (price.cost(u), source)
    }
}

/// The longest key of `entries` that `model` contains (`*` never does);
/// of two as long, the first.
fn longest<'a>(entries: impl Iterator<Item = (&'a str, Price)>, model: &str) -> Option<(&'a str, Price)> {
    entries.filter(|(k, _)| *k != ANY_MODEL && model.contains(*k)).fold(None, |best, e| match best {
        Some(b @ (k, _)) if k.len() >= e.0.len() => Some(b),
        _ => Some(e),
    })
}

/// A key of `prices`: `*`, or a model id or family of 1 to [`MAX_KEY`]
/// printable characters without spaces.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(format!("a model name must be 1 to {MAX_KEY} bytes"));
    }
    if key.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("a model name must not contain spaces or control characters".into());
    }
    if key != ANY_MODEL && key.contains('*') {
        return Err(format!("{ANY_MODEL:?} stands alone: a key matches every model id containing it"));
    }
    Ok(())
}

/// One entry of the plan's `prices`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrice {
    input: f64,
    output: f64,
    cache_write: Option<f64>,
    cache_read: Option<f64>,
}

/// The plan's `prices` table, validated.
pub(super) fn resolve(raw: Option<&BTreeMap<String, RawPrice>>) -> Result<PriceTable, PlanError> {
    let Some(raw) = raw else { return Ok(PriceTable::default()) };
    let entries = raw
        .iter()
        .map(|(k, r)| {
            let price = Price {
                input: r.input,
                output: r.output,
                cache_write: r.cache_write.unwrap_or(r.input),
                cache_read: r.cache_read.unwrap_or(r.input),
            };
            (k.clone(), price)
        })
        .collect();
    PriceTable::new("prices", entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;

    fn tokens(input: u64, output: u64, cache_write: u64, cache_read: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_creation_tokens: cache_write,
            cache_read_tokens: cache_read,
            cost_usd: 0.0,
        }
    }

    #[test]
    fn a_known_family_is_priced_by_its_longest_key() {
        let t = PriceTable::default();
        let u = tokens(1_000_000, 100_000, 10_000, 1_000_000);
        let (usd, from) = t.estimate("claude-sonnet-4-5-20250929", &u);
        assert_eq!(from, PriceSource::BuiltIn("claude-sonnet-4-5"));
        assert!((usd - (3.0 + 1.5 + 0.0375 + 0.30)).abs() < 1e-9, "{usd}");
        assert_eq!(t.lookup("claude-opus-4-5-20251101").0, OPUS_4_5, "not the older opus's price");
        assert_eq!(t.lookup("claude-opus-4-1-20250805").0, OPUS_4);
        assert_eq!(t.lookup("us.anthropic.claude-3-5-haiku-20241022-v1:0").0, HAIKU_3_5);
        assert_eq!(t.lookup("Claude-Haiku-4-5").1, PriceSource::BuiltIn("claude-haiku-4-5"));
        assert_eq!(t.lookup("gpt-5.1-codex-mini").0, GPT_5_MINI);
        assert_eq!(t.lookup("gpt-5.1-codex-max").0, GPT_5);
        assert_eq!(t.lookup("gpt-5.2-codex").0, GPT_5_2);
        assert_eq!(t.lookup("gpt-5-codex").0, GPT_5, "not the bare codex family's");
        // Every built-in key is priced by its own entry, not a longer or earlier one.
        for (key, price) in BUILT_IN {
            assert_eq!(t.lookup(key), (*price, PriceSource::BuiltIn(key)), "{key}");
        }
        assert_eq!(t.lookup("sonnet").0, SONNET, "an alias");
    }

    #[test]
    fn an_unknown_model_falls_back_to_the_dearest_family_unless_the_plan_prices_it() {
        let t = PriceTable::default();
        let (price, from) = t.lookup("llama-4-maverick");
        assert_eq!((price, from), (FALLBACK.1, PriceSource::Fallback));
        assert_eq!(t.lookup("").1, PriceSource::Fallback);
        let any = Price::new(0.5, 1.0, 0.5, 0.5);
        let t = PriceTable::new("prices", vec![("*".into(), any)]).expect("a table");
        assert_eq!(t.lookup("llama-4-maverick"), (any, PriceSource::Plan("*".into())));
        assert_eq!(t.lookup("claude-sonnet-4").1, PriceSource::BuiltIn("claude-sonnet-4"), "* is last");
    }

    #[test]
    fn the_plans_prices_override_the_built_in_ones() {
        let plan = Plan::parse(
            "name = \"p\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n\
             [prices.\"Claude-Sonnet\"]\ninput = 1.0\noutput = 2.0\ncache_read = 0.1\n",
        )
        .expect("a plan");
        let (price, from) = plan.prices.lookup("claude-sonnet-4-5-20250929");
        assert_eq!(from, PriceSource::Plan("claude-sonnet".into()), "the plan's key first, however short");
        assert_eq!(price, Price::new(1.0, 2.0, 1.0, 0.1), "an unset cache write costs the input price");
        assert_eq!(plan.prices.lookup("claude-opus-4").1, PriceSource::BuiltIn("claude-opus-4"));
        let (usd, _) = plan.prices.estimate("claude-sonnet-4", &tokens(2_000_000, 500_000, 0, 0));
        assert!((usd - 3.0).abs() < 1e-9, "{usd}");
    }

    #[test]
    fn bad_prices_are_refused_naming_the_field() {
        let parse = |prices: &str| {
            Plan::parse(&format!("name = \"p\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n{prices}"))
                .map(|_| ())
                .expect_err("refused")
                .to_string()
        };
        let e = parse("[prices.\"gpt-5\"]\ninput = -1.0\noutput = 2.0\n");
        assert!(e.starts_with("prices.\"gpt-5\".input: must be a number from 0"), "{e}");
        let e = parse("[prices.x]\ninput = 1.0\noutput = inf\n");
        assert!(e.starts_with("prices.\"x\".output: must be a number"), "{e}");
        let e = parse("[prices.x]\ninput = 1.0\noutput = 1.0\ncache_read = nan\n");
        assert!(e.starts_with("prices.\"x\".cache_read:"), "{e}");
        let e = parse("[prices.x]\ninput = 1.0\n");
        assert!(e.contains("output"), "a missing output price: {e}");
        let e = parse("[prices.x]\ninput = 1.0\noutput = 1.0\ncache = 1.0\n");
        assert!(e.starts_with("prices.x") && e.contains("unknown field"), "{e}");
        let e = parse("[prices.\"a b\"]\ninput = 1.0\noutput = 1.0\n");
        assert!(e.starts_with("prices.\"a b\": a model name must not contain spaces"), "{e}");
        let e = parse("[prices.\"gpt*\"]\ninput = 1.0\noutput = 1.0\n");
        assert!(e.contains("stands alone"), "{e}");
        let e = parse("[prices.GPT]\ninput = 1.0\noutput = 1.0\n[prices.gpt]\ninput = 1.0\noutput = 1.0\n");
        assert!(e.contains("keys ignore case"), "{e}");
    }

    #[test]
    fn a_cost_is_never_more_than_a_report_may_claim() {
        let dear = Price::new(MAX_PRICE, MAX_PRICE, MAX_PRICE, MAX_PRICE);
        let u = tokens(u64::MAX, u64::MAX, u64::MAX, u64::MAX);
        assert_eq!(dear.cost(&u), MAX_COST_USD);
        assert_eq!(dear.cost(&Usage::default()), 0.0);
    }
}
