//! Rate-limited audit events for what a peer can repeat at will: fenced
//! reports, refused Hellos, sequence gaps, denied calls.
//!
//! The audit log is durable and every event in it costs a write, so a peer
//! that repeats a refused request must not be able to grow it at the rate it
//! sends. Per client and kind, the first occurrence in a window is recorded
//! in full; the rest are counted and summarized in one event when the window
//! ends ("412 fenced reports from w3 in the last 60 s"). Metrics still count
//! every occurrence.

use std::collections::HashMap;

/// How long one window lasts.
pub const WINDOW_MS: u64 = 60_000;

/// What to do with one occurrence.
#[derive(Debug, PartialEq, Eq)]
pub enum Hit {
    /// Record it in full (the first of its window).
    Record,
    /// Counted; a summary follows when the window ends.
    Suppressed,
}

/// The occurrences a window held beyond its first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub client: String,
    pub kind: &'static str,
    pub suppressed: u64,
    pub window_ms: u64,
}

impl Summary {
    pub fn message(&self) -> String {
        format!(
            "{} more {} from {} in the last {} s",
            self.suppressed,
            self.kind.replace(['.', '_'], " "),
            self.client,
            self.window_ms / 1000
        )
    }
}

#[derive(Debug)]
struct Window {
    opened_at: u64,
    suppressed: u64,
}

/// Windows per (client, kind). Time is passed in, so tests need no clock.
#[derive(Debug)]
pub struct Aggregator {
    window_ms: u64,
    open: HashMap<(String, &'static str), Window>,
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator::new(WINDOW_MS)
    }
}

impl Aggregator {
    pub fn new(window_ms: u64) -> Aggregator {
        Aggregator { window_ms: window_ms.max(1), open: HashMap::new() }
    }

    /// Notes one occurrence at `now_ms`. A window that has ended is summed
    /// up first (returned), so nothing counted is ever lost.
    pub fn hit(&mut self, client: &str, kind: &'static str, now_ms: u64) -> (Hit, Option<Summary>) {
        let key = (client.to_string(), kind);
        match self.open.get_mut(&key) {
            Some(w) if now_ms.saturating_sub(w.opened_at) < self.window_ms => {
                w.suppressed = w.suppressed.saturating_add(1);
                (Hit::Suppressed, None)
            }
            previous => {
                let summary = previous.filter(|w| w.suppressed > 0).map(|w| Summary {
                    client: client.to_string(),
                    kind,
                    suppressed: w.suppressed,
                    window_ms: self.window_ms,
                });
                self.open.insert(key, Window { opened_at: now_ms, suppressed: 0 });
                (Hit::Record, summary)
            }
        }
    }

    /// Ends every window older than the window length: returns the
    /// summaries of those that suppressed something, and forgets them all,
    /// so memory stays bounded by the clients of one window.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Summary> {
        let window = self.window_ms;
        let mut out = Vec::new();
        self.open.retain(|(client, kind), w| {
            if now_ms.saturating_sub(w.opened_at) < window {
                return true;
            }
            if w.suppressed > 0 {
                out.push(Summary {
                    client: client.clone(),
                    kind,
                    suppressed: w.suppressed,
                    window_ms: window,
                });
            }
            false
        });
        out.sort_by(|a, b| (&a.client, a.kind).cmp(&(&b.client, b.kind)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_window_is_recorded_and_the_rest_summed_up_once() {
        let mut a = Aggregator::new(1000);
        assert_eq!(a.hit("w3", "report.fenced", 0), (Hit::Record, None));
        for t in 1..=411 {
            assert_eq!(a.hit("w3", "report.fenced", t), (Hit::Suppressed, None));
        }
        assert_eq!(a.hit("w4", "report.fenced", 5).0, Hit::Record, "clients are apart");
        assert!(a.expire(999).is_empty(), "the window is still open");
        let s = a.expire(1000);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].suppressed, 411);
        assert_eq!(s[0].message(), "411 more report fenced from w3 in the last 1 s");
        assert!(a.expire(5000).is_empty(), "summed up once");
        assert_eq!(a.hit("w3", "report.fenced", 5000), (Hit::Record, None));
    }

    #[test]
    fn a_hit_after_the_window_carries_the_summary_it_ends() {
        let mut a = Aggregator::new(1000);
        a.hit("w", "k", 0);
        a.hit("w", "k", 10);
        let (hit, summary) = a.hit("w", "k", 2000);
        assert_eq!(hit, Hit::Record);
        assert_eq!(summary.map(|s| s.suppressed), Some(1));
    }
}
