//! What the server keeps of its webhooks: the hooks, each delivery's
//! record, and the jobs queued for the sending task. Apart from
//! `webhooks.rs`, which writes payloads from the state, so that the state
//! can hold these without using the sender.

use serde_json::Value;

/// A repository webhook.
#[derive(Debug, Clone)]
pub struct Hook {
    pub id: u64,
    pub owner: String,
    pub repo: String,
    pub url: String,
    pub secret: String,
}

/// One delivery of an event to a hook.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// This attempt's id (a redelivery has its own).
    pub id: u64,
    /// `X-GitHub-Delivery`: the same for a redelivery.
    pub guid: String,
    pub hook_id: u64,
    /// `X-GitHub-Event`.
    pub event: String,
    pub action: Option<String>,
    /// The body sent, byte for byte.
    pub body: String,
    pub redelivery: bool,
    /// The receiver's status, once it answered.
    pub status: Option<u16>,
    /// Why the delivery failed, when it did without a status.
    pub error: Option<String>,
    /// Whether the attempt is over (answered, refused or timed out).
    pub done: bool,
}

impl Delivery {
    pub fn payload(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A delivery waiting for the sending task.
pub(super) struct Job {
    pub delivery: u64,
    pub hook_id: u64,
    pub repo_id: u64,
    pub url: String,
    pub secret: String,
    pub guid: String,
    pub event: String,
    pub body: String,
}
