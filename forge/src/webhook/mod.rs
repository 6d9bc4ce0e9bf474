//! GitHub's webhook deliveries: is this really from GitHub ([`verify`]),
//! and what does it say ([`parse`]).
//!
//! A delivery is a POST with `X-GitHub-Event` (the event name),
//! `X-GitHub-Delivery` (a GUID, the same on a redelivery, so a receiver
//! can drop duplicates) and `X-Hub-Signature-256: sha256=<hex>`, the
//! HMAC-SHA256 of the raw body under the hook's secret. Verify first, on
//! the raw bytes, then parse: nothing in an unverified body is looked at.
//!
//! The seven events swarm reacts to become typed [`Inbound`] values, with
//! text clipped and stripped of control sequences; any other event is
//! [`Inbound::Ignored`]. A payload of a known event that does not have the
//! documented shape is an error, not a guess.

mod payload;

use ring::hmac;

pub use crate::error::WebhookError;
use crate::provider::{Check, CheckState, Comment, PullRequest, Review, ReviewComment};

/// Largest body accepted. GitHub allows up to 25 MB, but the events swarm
/// reads are tens of KiB; a body past this is refused, not parsed.
pub const BODY_MAX: usize = 1024 * 1024;

/// Checks `X-Hub-Signature-256` against `body` in constant time.
pub fn verify(secret: &[u8], body: &[u8], signature_header: &str) -> Result<(), WebhookError> {
    if secret.is_empty() {
        return Err(WebhookError::EmptySecret);
    }
    let header = signature_header.trim();
    if header.is_empty() {
        return Err(WebhookError::MissingSignature);
    }
    let hex = header.strip_prefix("sha256=").ok_or(WebhookError::MalformedSignature("no sha256= prefix"))?;
    let tag = decode_hex(hex).ok_or(WebhookError::MalformedSignature("not 64 hex digits"))?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::verify(&key, body, &tag).map_err(|_| WebhookError::BadSignature)
}

fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// What every delivery carries besides its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// `X-GitHub-Delivery`: the same on a redelivery.
    pub delivery: String,
    /// `owner/repo`, when the event is about a repository.
    pub repository: Option<String>,
    /// Who caused the event.
    pub sender: Option<String>,
}

/// A verified delivery, typed. More events may be added.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inbound {
    /// `check_run`: a check run was created, completed, re-requested...
    CheckRun { meta: Meta, action: String, head_sha: String, check: Check, pulls: Vec<u64> },
    /// `check_suite`: all the runs of one app on one commit.
    CheckSuite {
        meta: Meta,
        action: String,
        head_sha: String,
        head_branch: Option<String>,
        state: CheckState,
        pulls: Vec<u64>,
    },
    /// `status`: a commit status was set.
    Status { meta: Meta, sha: String, check: Check },
    /// `pull_request`: opened, edited, closed (merged or not), synchronize...
    PullRequest { meta: Meta, action: String, pull: PullRequest },
    /// `issue_comment`: on an issue or, with `on_pull`, a pull request.
    IssueComment { meta: Meta, action: String, number: u64, on_pull: bool, comment: Comment },
    /// `pull_request_review`: submitted, edited, dismissed.
    Review { meta: Meta, action: String, number: u64, review: Review },
    /// `pull_request_review_comment`: a comment on the diff.
    ReviewComment { meta: Meta, action: String, number: u64, comment: ReviewComment },
    /// Any other event (`ping`, `push`, ...): nothing swarm reads.
    Ignored { meta: Meta, event: String },
}

impl Inbound {
    pub fn meta(&self) -> &Meta {
        match self {
            Inbound::CheckRun { meta, .. }
            | Inbound::CheckSuite { meta, .. }
            | Inbound::Status { meta, .. }
            | Inbound::PullRequest { meta, .. }
            | Inbound::IssueComment { meta, .. }
            | Inbound::Review { meta, .. }
            | Inbound::ReviewComment { meta, .. }
            | Inbound::Ignored { meta, .. } => meta,
        }
    }
}

/// Types a delivery: `event` is `X-GitHub-Event`, `delivery` is
/// `X-GitHub-Delivery`, `body` the raw (already verified) body.
pub fn parse(event: &str, delivery: &str, body: &[u8]) -> Result<Inbound, WebhookError> {
    check_event(event)?;
    check_delivery(delivery)?;
    if body.len() > BODY_MAX {
        return Err(WebhookError::TooLarge { limit: BODY_MAX });
    }
    payload::parse(event, delivery, body)
}

/// Event names are lowercase words joined by `_`.
fn check_event(event: &str) -> Result<(), WebhookError> {
    if event.is_empty() || event.len() > 64 || !event.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        return Err(WebhookError::InvalidHeader {
            what: "X-GitHub-Event",
            message: "an event name is 1 to 64 lowercase letters and '_'".into(),
        });
    }
    Ok(())
}

/// A delivery id is a GUID: hex digits and dashes (letters and digits
/// accepted, for other forges and test servers), 8 to 64 long.
fn check_delivery(delivery: &str) -> Result<(), WebhookError> {
    let ok = (8..=64).contains(&delivery.len())
        && delivery.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !delivery.starts_with('-');
    if !ok {
        return Err(WebhookError::InvalidHeader {
            what: "X-GitHub-Delivery",
            message: "a delivery id is 8 to 64 letters, digits and '-'".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
