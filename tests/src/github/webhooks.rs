//! Repository webhooks as GitHub's Hookshot sends them: one POST per hook
//! and event with `X-GitHub-Event`, `X-GitHub-Delivery` (a GUID kept by a
//! redelivery), `X-GitHub-Hook-ID`, `X-Hub-Signature-256` (HMAC-SHA256 of
//! the body under the hook's secret) and the legacy `X-Hub-Signature`
//! (SHA-1), `User-Agent: GitHub-Hookshot/...`; the payload carries
//! `action`, the event's object, `repository` and `sender`. Deliveries go
//! out in order from one task, each given 10 s as GitHub gives them, and
//! their outcome is recorded.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ring::hmac;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use super::Shared;
use super::delivery::{Delivery, Hook, Job};
use super::json;
use super::state::State;

/// How long a receiver has to answer, as GitHub allows.
const TIMEOUT: Duration = Duration::from_secs(10);

impl State {
    /// Sends `event` to every hook of `owner/name`, adding `repository`
    /// and `sender` to `payload`; the delivery GUIDs.
    pub(super) fn emit(
        &mut self,
        owner: &str,
        name: &str,
        event: &str,
        mut payload: Value,
        sender: &str,
    ) -> Vec<String> {
        let Some(r) = self.repo(owner, name) else { return Vec::new() };
        if payload.get("repository").is_none() {
            payload["repository"] = json::repo(self, r, None);
        }
        if payload.get("sender").is_none() {
            payload["sender"] = json::user(self, sender);
        }
        let hooks: Vec<Hook> =
            self.hooks.iter().filter(|h| h.owner == owner && h.repo == name).cloned().collect();
        let body = payload.to_string();
        hooks.iter().map(|h| self.queue(h, event, body.clone(), guid(), false)).collect()
    }

    /// Queues one delivery; its GUID.
    pub(super) fn queue(
        &mut self,
        hook: &Hook,
        event: &str,
        body: String,
        guid: String,
        redelivery: bool,
    ) -> String {
        let id = self.id();
        let action = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("action").and_then(Value::as_str).map(str::to_string));
        let repo_id = self.repo(&hook.owner, &hook.repo).map(|r| r.id).unwrap_or_default();
        self.deliveries.push(Delivery {
            id,
            guid: guid.clone(),
            hook_id: hook.id,
            event: event.to_string(),
            action,
            body: body.clone(),
            redelivery,
            status: None,
            error: None,
            done: false,
        });
        let job = Job {
            delivery: id,
            hook_id: hook.id,
            repo_id,
            url: hook.url.clone(),
            secret: hook.secret.clone(),
            guid: guid.clone(),
            event: event.to_string(),
            body,
        };
        if self.tx.send(job).is_err()
            && let Some(d) = self.deliveries.last_mut()
        {
            d.done = true;
            d.error = Some("the server has stopped".into());
        }
        guid
    }
}

/// Sends the queued deliveries, in order, until the server stops.
pub(super) async fn run(shared: Arc<Shared>, mut jobs: UnboundedReceiver<Job>) {
    let client: Client<_, Body> = Client::builder(TokioExecutor::new()).build_http();
    while let Some(job) = jobs.recv().await {
        let outcome = match tokio::time::timeout(TIMEOUT, send(&client, &job)).await {
            Ok(Ok(status)) => (Some(status), None),
            Ok(Err(e)) => (None, Some(e)),
            Err(_) => (None, Some(format!("timed out after {TIMEOUT:?}"))),
        };
        let mut st = shared.lock();
        if let Some(d) = st.deliveries.iter_mut().find(|d| d.id == job.delivery) {
            (d.status, d.error, d.done) = (outcome.0, outcome.1, true);
        }
    }
}

async fn send(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Body>,
    job: &Job,
) -> Result<u16, String> {
    let mut req = Request::post(&job.url)
        .header("content-type", "application/json")
        .header("user-agent", "GitHub-Hookshot/swarm-tests")
        .header("x-github-event", &job.event)
        .header("x-github-delivery", &job.guid)
        .header("x-github-hook-id", job.hook_id.to_string())
        .header("x-github-hook-installation-target-type", "repository")
        .header("x-github-hook-installation-target-id", job.repo_id.to_string());
    if !job.secret.is_empty() {
        req = req
            .header("x-hub-signature-256", signature_256(&job.secret, job.body.as_bytes()))
            .header("x-hub-signature", signature_sha1(&job.secret, job.body.as_bytes()));
    }
    let req = req.body(Body::from(job.body.clone())).map_err(|e| format!("building the request: {e}"))?;
    let resp = client.request(req).await.map_err(|e| format!("posting to {}: {e}", job.url))?;
    Ok(resp.status().as_u16())
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, the `X-Hub-Signature-256` header.
pub fn signature_256(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    format!("sha256={}", hex(hmac::sign(&key, body).as_ref()))
}

/// `sha1=<hex HMAC-SHA1(secret, body)>`, the legacy `X-Hub-Signature` header.
pub fn signature_sha1(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, secret.as_bytes());
    format!("sha1={}", hex(hmac::sign(&key, body).as_ref()))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random GUID in the 8-4-4-4-12 form GitHub's delivery ids take.
pub(super) fn guid() -> String {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 16];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}
