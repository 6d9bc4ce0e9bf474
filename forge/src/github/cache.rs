//! The conditional-request cache: for each URL read, the last `ETag` and
//! the body parsed from it. GitHub answers a matching `If-None-Match` with
//! 304 and does not count it against the rate limit, so a controller that
//! polls a pull request's checks and comments every few seconds spends
//! almost none of its quota on polls that find nothing new.
//!
//! Bounded in entries and in the bytes of the bodies behind them; the
//! least recently used entry goes first.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use reqwest::Url;

/// A cached value of any parsed type; the reader downcasts it to the type
/// it stored for that URL.
pub(crate) type Value = Arc<dyn Any + Send + Sync>;

/// What was cached for a URL.
#[derive(Clone)]
pub(crate) struct Hit {
    pub etag: String,
    pub value: Value,
    /// The page's `rel="next"` link, which a 304 does not repeat.
    pub next: Option<Url>,
}

struct Entry {
    hit: Hit,
    cost: usize,
    used: u64,
}

pub(crate) struct EtagCache {
    entries: HashMap<String, Entry>,
    bytes: usize,
    tick: u64,
    max_entries: usize,
    max_bytes: usize,
}

impl EtagCache {
    pub fn new(max_entries: usize, max_bytes: usize) -> EtagCache {
        EtagCache { entries: HashMap::new(), bytes: 0, tick: 0, max_entries, max_bytes }
    }

    pub fn get(&mut self, url: &str) -> Option<Hit> {
        self.tick += 1;
        let entry = self.entries.get_mut(url)?;
        entry.used = self.tick;
        Some(entry.hit.clone())
    }

    /// Caches `hit` for `url`; `body_len` is the size of the body it was
    /// parsed from, what the entry is charged. A body larger than the
    /// whole budget is not cached.
    pub fn insert(&mut self, url: &str, hit: Hit, body_len: usize) {
        self.remove(url);
        let cost = body_len + url.len() + hit.etag.len();
        if cost > self.max_bytes || self.max_entries == 0 {
            return;
        }
        while self.entries.len() >= self.max_entries || self.bytes + cost > self.max_bytes {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) else {
                break;
            };
            self.remove(&oldest);
        }
        self.tick += 1;
        self.bytes += cost;
        self.entries.insert(url.to_string(), Entry { hit, cost, used: self.tick });
    }

    pub fn remove(&mut self, url: &str) {
        if let Some(e) = self.entries.remove(url) {
            self.bytes -= e.cost;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hit(n: u32) -> Hit {
        Hit { etag: format!("\"{n}\""), value: Arc::new(n), next: None }
    }

    #[test]
    fn the_cache_is_bounded_in_entries_and_bytes_and_evicts_the_least_recently_used() {
        let mut c = EtagCache::new(2, 1000);
        c.insert("a", hit(1), 10);
        c.insert("b", hit(2), 10);
        assert!(c.get("a").is_some()); // a is now newer than b
        c.insert("c", hit(3), 10);
        assert!(c.get("b").is_none(), "b was least recently used");
        assert_eq!(*c.get("a").unwrap().value.downcast::<u32>().unwrap(), 1);
        assert_eq!(c.len(), 2);

        let mut c = EtagCache::new(100, 100);
        c.insert("a", hit(1), 60);
        c.insert("b", hit(2), 60);
        assert!(c.get("a").is_none(), "over the byte budget");
        c.insert("huge", hit(3), 1000);
        assert!(c.get("huge").is_none(), "larger than the budget: not cached");
        assert!(c.get("b").is_some());
        c.insert("b", hit(4), 10);
        assert_eq!(c.bytes, 10 + 1 + 3);
    }
}
