//! Finding the leader among several controller URLs.
//!
//! A highly available deployment runs one leading controller and standbys.
//! A standby answers every call except gRPC health with `UNAVAILABLE`,
//! message "not the leader", and names the leader's URL in the
//! `swarm-leader` response metadata (empty while it knows none). Clients
//! are given every controller's URL, comma-separated; [`Controllers`]
//! says which one to try next: a leader a standby named first, otherwise
//! the next URL of the list, and after a whole round of failures the
//! caller backs off before the next round. The sidecar's reconnect loop
//! and swarmctl both choose through it, so they agree on the order.

use tonic::Status;
use tonic::transport::Endpoint;

use crate::client::ClientError;

/// Response metadata in which a standby names the leader's URL.
pub const LEADER_HEADER: &str = "swarm-leader";
/// The message of a standby's refusal.
pub const NOT_LEADER: &str = "not the leader";

/// Splits a comma-separated `--controller` value into URLs. Each must be
/// an `http://` or `https://` URL; an empty entry is refused rather than
/// skipped, because it usually means a variable expanded to nothing.
pub fn parse_urls(raw: &str) -> Result<Vec<String>, ClientError> {
    let mut urls: Vec<String> = Vec::new();
    for (i, entry) in raw.split(',').enumerate() {
        let url = entry.trim();
        check_url(url).map_err(|rule| {
            ClientError::Config(format!("--controller {raw:?}: URL {} {url:?}: {rule}", i + 1))
        })?;
        if !urls.iter().any(|u| u == url) {
            urls.push(url.to_string());
        }
    }
    Ok(urls)
}

fn check_url(url: &str) -> Result<(), String> {
    if url.is_empty() {
        return Err("is empty".into());
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("must start with http:// or https://".into());
    }
    Endpoint::from_shared(url.to_string()).map(|_| ()).map_err(|e| e.to_string())
}

/// When `status` is a standby's refusal: `Some(leader)`, where `leader` is
/// the URL it named, if it named a usable one.
pub fn standby_refusal(status: &Status) -> Option<Option<String>> {
    if status.code() != tonic::Code::Unavailable {
        return None;
    }
    let hint = status.metadata().get(LEADER_HEADER);
    if hint.is_none() && !status.message().contains(NOT_LEADER) {
        return None;
    }
    let leader = hint
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|url| check_url(url).is_ok())
        .map(str::to_string);
    Some(leader)
}

/// Where the URL being tried came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    List(usize),
    Hint,
}

/// The controllers a client may talk to, and which one to try next.
#[derive(Debug, Clone)]
pub struct Controllers {
    urls: Vec<String>,
    /// The list entry tried next when no leader was named.
    next: usize,
    /// A leader named by a standby (or the last leader, when it is not in
    /// the list), tried before the list.
    hint: Option<String>,
    trying: Source,
    /// Failures since the last success or back-off.
    failures: usize,
    /// Hints followed since the last success or back-off: two standbys
    /// that name each other (or a stale leader) must not loop forever.
    hops: usize,
}

impl Controllers {
    /// `urls` must not be empty (see [`parse_urls`]).
    pub fn new(urls: Vec<String>) -> Controllers {
        Controllers { urls, next: 0, hint: None, trying: Source::List(0), failures: 0, hops: 0 }
    }

    /// Parses a comma-separated `--controller` value.
    pub fn parse(raw: &str) -> Result<Controllers, ClientError> {
        parse_urls(raw).map(Controllers::new)
    }

    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The URL to try now.
    pub fn current(&mut self) -> String {
        if let Some(url) = self.hint.clone() {
            self.trying = Source::Hint;
            return url;
        }
        let i = self.next % self.urls.len().max(1);
        self.trying = Source::List(i);
        self.urls.get(i).cloned().unwrap_or_default()
    }

    /// The URL last returned by [`Controllers::current`] answered as the
    /// leader: it is tried first the next time.
    pub fn succeeded(&mut self) {
        match self.trying {
            Source::List(i) => self.next = i,
            Source::Hint => {}
        }
        self.failures = 0;
        self.hops = 0;
    }

    /// The URL last returned by [`Controllers::current`] could not be used:
    /// unreachable, or a standby that named `leader` (or none). True when
    /// a whole round failed and the caller should back off before trying
    /// again; a named leader is tried at once.
    pub fn failed(&mut self, leader: Option<String>) -> bool {
        let tried = self.hint.take();
        if let Source::List(i) = self.trying {
            self.next = (i + 1) % self.urls.len().max(1);
        }
        self.failures += 1;
        let max_hops = self.urls.len() + 2;
        if let Some(url) = leader.filter(|url| Some(url) != tried.as_ref() && self.hops < max_hops) {
            self.hops += 1;
            self.hint = Some(url);
            return false;
        }
        if self.failures >= self.urls.len().max(1) + self.hops {
            self.failures = 0;
            self.hops = 0;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const A: &str = "http://10.0.0.1:7420";
    const B: &str = "http://10.0.0.2:7420";
    const C: &str = "http://10.0.0.3:7420";

    fn three() -> Controllers {
        Controllers::parse(&format!("{A}, {B},{C}")).unwrap()
    }

    #[test]
    fn urls_are_split_trimmed_and_checked() {
        assert_eq!(parse_urls(&format!(" {A} ,{B},{A}")).unwrap(), vec![A, B]);
        let err = parse_urls(&format!("{A},,{B}")).unwrap_err().to_string();
        assert!(err.contains("URL 2 \"\": is empty"), "{err}");
        let err = parse_urls("10.0.0.1:7420").unwrap_err().to_string();
        assert!(err.contains("must start with http:// or https://"), "{err}");
    }

    #[test]
    fn unreachable_urls_are_tried_in_order_then_back_off() {
        let mut c = three();
        assert_eq!(c.current(), A);
        assert!(!c.failed(None));
        assert_eq!(c.current(), B);
        assert!(!c.failed(None));
        assert_eq!(c.current(), C);
        assert!(c.failed(None), "a whole round failed");
        assert_eq!(c.current(), A);
    }

    #[test]
    fn a_named_leader_is_tried_next_and_remembered() {
        let mut c = three();
        assert_eq!(c.current(), A);
        assert!(!c.failed(Some(C.into())));
        assert_eq!(c.current(), C);
        c.succeeded();
        assert_eq!(c.current(), C, "the leader is tried first after it goes away");
        assert!(!c.failed(None));
        assert_eq!(c.current(), B, "then the list, where it left off");
        let mut c = three();
        c.current();
        c.failed(None);
        assert_eq!(c.current(), B);
        c.succeeded();
        assert_eq!(c.current(), B, "a leader from the list is tried first next time");
    }

    #[test]
    fn standbys_naming_each_other_do_not_loop() {
        let mut c = three();
        let mut backed_off = false;
        for _ in 0..20 {
            let url = c.current();
            let other = if url == A { B } else { A };
            if c.failed(Some(other.into())) {
                backed_off = true;
                break;
            }
        }
        assert!(backed_off, "ping-pong between two standbys ends in a back-off");
    }

    #[test]
    fn a_standby_refusal_is_recognised_with_its_hint() {
        let mut s = Status::unavailable(NOT_LEADER);
        assert_eq!(standby_refusal(&s), Some(None));
        s.metadata_mut().insert(LEADER_HEADER, B.parse().unwrap());
        assert_eq!(standby_refusal(&s), Some(Some(B.to_string())));
        s.metadata_mut().insert(LEADER_HEADER, "".parse().unwrap());
        assert_eq!(standby_refusal(&s), Some(None), "an empty hint names no leader");
        assert_eq!(standby_refusal(&Status::unavailable("connection refused")), None);
        assert_eq!(standby_refusal(&Status::internal(NOT_LEADER)), None);
    }
}
