//! What agent attempts spent.

use serde::Serialize;
use swarm_proto::v1;

/// What agent attempts spent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct UsageView {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    pub cost_usd: f64,
}

impl From<Option<&v1::Usage>> for UsageView {
    fn from(u: Option<&v1::Usage>) -> Self {
        let Some(u) = u else { return UsageView::default() };
        UsageView {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl From<&swarm_core::Usage> for UsageView {
    fn from(u: &swarm_core::Usage) -> Self {
        UsageView {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl From<&UsageView> for v1::Usage {
    fn from(u: &UsageView) -> Self {
        v1::Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl UsageView {
    fn tokens(&self) -> u64 {
        [self.input_tokens, self.output_tokens, self.cache_read_tokens, self.cache_creation_tokens]
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// `$0.42` for a table cell; `-` when nothing was spent.
    pub fn cost(&self) -> String {
        if self.tokens() == 0 && self.cost_usd == 0.0 { "-".into() } else { format!("${:.2}", self.cost_usd) }
    }

    /// `$0.42 (12,345 in, 678 out, 9,000 cache read, 0 cache write)`.
    pub fn text(&self) -> String {
        if self.tokens() == 0 && self.cost_usd == 0.0 {
            return String::new();
        }
        format!(
            "${:.4} ({} in, {} out, {} cache read, {} cache write)",
            self.cost_usd,
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_creation_tokens
        )
    }
}
