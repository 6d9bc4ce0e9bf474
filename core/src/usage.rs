//! What an agent spent: tokens by kind and money. Summed per attempt, task
//! and swarm.

use serde::{Deserialize, Serialize};

/// Largest cost one report may claim; anything above is a broken or
/// hostile peer, not a real bill.
pub const MAX_COST_USD: f64 = 1_000_000.0;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_creation_tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
}

impl Usage {
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// Adds `other`, saturating: sums of peer-reported numbers must not wrap.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(other.cache_read_tokens);
        self.cache_creation_tokens = self.cache_creation_tokens.saturating_add(other.cache_creation_tokens);
        self.cost_usd += other.cost_usd;
    }

    /// Takes `other` away again (a running total replaced by a newer one),
    /// saturating at zero.
    pub fn sub(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_sub(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_sub(other.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_sub(other.cache_read_tokens);
        self.cache_creation_tokens = self.cache_creation_tokens.saturating_sub(other.cache_creation_tokens);
        self.cost_usd = (self.cost_usd - other.cost_usd).max(0.0);
    }

    /// Checks numbers a peer reported.
    pub fn check(&self) -> Result<(), String> {
        if !self.cost_usd.is_finite() || self.cost_usd < 0.0 || self.cost_usd > MAX_COST_USD {
            return Err(format!("cost_usd must be between 0 and {MAX_COST_USD}, got {}", self.cost_usd));
        }
        Ok(())
    }

    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_creation_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_saturate_and_bad_costs_are_refused() {
        let mut u = Usage { input_tokens: u64::MAX - 1, cost_usd: 0.5, ..Default::default() };
        u.add(&Usage { input_tokens: 5, output_tokens: 2, cost_usd: 0.25, ..Default::default() });
        assert_eq!(u.input_tokens, u64::MAX);
        assert_eq!(u.output_tokens, 2);
        assert_eq!(u.cost_usd, 0.75);
        for bad in [f64::NAN, f64::INFINITY, -0.01, MAX_COST_USD * 2.0] {
            assert!(Usage { cost_usd: bad, ..Default::default() }.check().is_err(), "{bad}");
        }
    }
}
