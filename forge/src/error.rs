//! The crate's errors, one enum per concern: talking to the forge's API
//! ([`ForgeError`]), pushing with git ([`PushError`]) and receiving its
//! webhooks ([`WebhookError`]). Every message says what went wrong; any
//! text in them that came from the forge is already stripped of control
//! characters, clipped, and free of the token.

use std::time::SystemTime;

use crate::time::unix_seconds;

/// What went wrong talking to the forge's API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForgeError {
    /// 401: the token is missing, expired or revoked.
    #[error("{what}: the forge refused the token (401): {message}")]
    Unauthorized { what: String, message: String },
    /// 403 that is not a rate limit: the token lacks a permission.
    #[error("{what}: forbidden (403): {message}")]
    Forbidden { what: String, message: String },
    /// 404 (or 410): no such repository, pull request, job or user, or
    /// the token may not see it (GitHub answers 404 for both).
    #[error("{what}: not found (404)")]
    NotFound { what: String },
    /// 422: the forge refused the request as invalid, with its reasons.
    #[error("{what}: refused as invalid (422): {message}")]
    Invalid { what: String, message: String },
    /// 409: the request conflicts with the current state.
    #[error("{what}: conflict (409): {message}")]
    Conflict { what: String, message: String },
    /// A primary (quota exhausted until `until`) or secondary (too fast;
    /// `until` from `retry-after`, else one minute) rate limit.
    #[error(
        "{} rate limit reached; retry at unix {}",
        if *secondary { "secondary" } else { "primary" },
        unix_seconds(*until)
    )]
    RateLimited { until: SystemTime, secondary: bool },
    /// 5xx, a timeout, or no connection: the forge may be back later.
    #[error("{what}: the forge is unavailable: {message}")]
    Unavailable { what: String, status: Option<u16>, message: String, retry_at: Option<SystemTime> },
    /// Any other status this client does not expect.
    #[error("{what}: unexpected HTTP {status}: {message}")]
    Status { what: String, status: u16, message: String },
    /// A body larger than the cap for its kind; it was not read further.
    #[error("{what}: the response is larger than {limit} bytes")]
    TooLarge { what: String, limit: usize },
    /// A list longer than the page bound.
    #[error("{what}: more than {max_pages} pages; not reading further")]
    TooManyPages { what: String, max_pages: usize },
    /// A response that is not what the API documents (bad JSON, a missing
    /// field, a next link or redirect to somewhere it must not go).
    #[error("{what}: malformed response: {message}")]
    Malformed { what: String, message: String },
    /// An argument this client refuses before sending anything.
    #[error("invalid {what}: {message}")]
    InvalidInput { what: &'static str, message: String },
    /// The client could not be set up (URL, token, TLS).
    #[error("forge client configuration: {message}")]
    Config { message: String },
}

impl ForgeError {
    /// Whether the same request may succeed later without any change:
    /// rate limits and unavailability. A 4xx other than those is not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ForgeError::RateLimited { .. } | ForgeError::Unavailable { .. })
    }

    /// When to retry, if the forge said: the end of a rate limit, or a
    /// 5xx's `retry-after`. `None` for an error that is not retryable, or
    /// a retryable one where the caller's own backoff applies.
    pub fn retry_at(&self) -> Option<SystemTime> {
        match self {
            ForgeError::RateLimited { until, .. } => Some(*until),
            ForgeError::Unavailable { retry_at, .. } => *retry_at,
            _ => None,
        }
    }
}

/// Why a remote refused a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The remote branch has commits the pushed one does not contain.
    NonFastForward,
    /// The remote's hooks or branch protection declined it (GH006 and
    /// the like); the `remote:` lines say why.
    Remote,
    /// Another reason git gave (`fetch first`, `stale info`, ...).
    Other,
}

/// What went wrong pushing a branch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The remote refused the update; nothing was forced.
    #[error("push rejected: {reason}")]
    Rejected { kind: Rejection, reason: String },
    /// The remote refused the credentials (or asked for some and got none).
    #[error("push unauthorized: {message}")]
    Unauthorized { message: String },
    /// The remote could not be reached, or failed (5xx, timeout).
    #[error("remote unavailable: {message}")]
    Unavailable { message: String },
    /// An argument refused before git was run.
    #[error("invalid {what}: {message}")]
    InvalidInput { what: &'static str, message: String },
    /// `git` could not be run, or failed in a way not recognised above.
    #[error("git push failed: {message}")]
    Git { message: String },
}

impl PushError {
    /// Whether the same push may succeed later without any change.
    pub fn is_retryable(&self) -> bool {
        matches!(self, PushError::Unavailable { .. })
    }
}

/// What is wrong with a webhook delivery.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// An empty secret would make every signature forgeable.
    #[error("the webhook secret is empty")]
    EmptySecret,
    #[error("no X-Hub-Signature-256 header")]
    MissingSignature,
    #[error("malformed X-Hub-Signature-256 header: {0}")]
    MalformedSignature(&'static str),
    /// The body was not signed with this secret (or was changed).
    #[error("the signature does not match the body")]
    BadSignature,
    #[error("the body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("invalid {what}: {message}")]
    InvalidHeader { what: &'static str, message: String },
    /// The body is not the JSON the event documents.
    #[error("malformed {event} payload: {message}")]
    Malformed { event: String, message: String },
}

/// Why a git remote URL was refused: the URL (without any password) and
/// the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("remote URL {url:?}: {rule}")]
pub struct RemoteError {
    pub url: String,
    pub rule: String,
}
