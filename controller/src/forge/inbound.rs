//! The forge loop's inbound half: GitHub's webhook deliveries
//! (`POST /github` on `--forge-webhook-listen`), which only wake the poll.
//!
//! A delivery says that something changed on a swarm's repository (a
//! check, a status, the pull request, a review or comment); it does not
//! carry what swarm acts on. A verified, new delivery of one of those
//! events brings the polls of the swarms it concerns forward, and the poll
//! (`watch.rs`) reads the forge's state and hands feedback to the
//! scheduler, each forge id once. Webhook and polling therefore end in the
//! same command, and a lost or dropped delivery costs only latency.
//!
//! Everything a delivery holds is hostile until its signature is checked:
//! the body is read under a cap and a deadline, checked against every
//! webhook secret of the swarms the controller knows (their plans'
//! `[forge] webhook_secret`, read through the `--forge-secret` allowlist)
//! before anything in it is looked at, and only then parsed by
//! `swarm_forge::webhook`; a repository it names wakes only the swarms whose
//! secret verified it and whose remote is that repository. Every outcome is
//! counted (`swarm_forge_webhooks_total{outcome}`); a refusal changes
//! nothing and is logged without the body.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use futures::StreamExt as _;
use swarm_core::SwarmId;
use swarm_core::plan::SecretSource;
use swarm_forge::webhook::{self, BODY_MAX, Inbound, WebhookError};
use swarm_forge::{Remote, text};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::ForgeConfig;
use super::secrets::{self, SecretPolicy};
use crate::api::Shared;
use crate::api::auth::Security;
use crate::metrics::Metrics;
use crate::scheduler::Command;
use crate::scheduler::views::ForgeTarget;

/// Where GitHub posts.
pub(super) const PATH: &str = "/github";
/// How long a client may take to send its body (GitHub sends at once).
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Delivery ids remembered, newest kept: GitHub's redeliveries come
/// within hours, not after ten thousand other deliveries.
const SEEN_MAX: usize = 10_000;
/// The swarms' secrets are read again after this, so a flood of
/// deliveries does not become a flood of reads of the scheduler.
const SECRETS_FRESH: Duration = Duration::from_secs(5);
/// A delivery no secret verifies reads them again once they are this old:
/// a swarm created since is heard, and a flood of forgeries costs one
/// read a second.
const SECRETS_RETRY: Duration = Duration::from_secs(1);
/// Swarms waiting to be woken; beyond it a wake is dropped (and counted),
/// the next poll catching up.
const WAKE_QUEUE: usize = 256;

/// The events whose change the poll reads.
const WAKING: [&str; 7] = [
    "check_run",
    "check_suite",
    "status",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "issue_comment",
];

/// The rule for `--forge-webhook-listen`: any address, since a delivery
/// is authenticated by its HMAC signature and not by swarm's credentials,
/// but not in the clear beyond loopback (the body names the repository's
/// pull requests and checks) unless the controller has a certificate or
/// the operator said `--insecure`.
pub fn check_listen(addr: SocketAddr, security: &Security) -> Result<(), String> {
    if addr.ip().is_loopback() || security.tls_cert.is_some() {
        return Ok(());
    }
    if security.insecure {
        tracing::warn!(%addr, "--insecure: receiving forge webhooks on a non-loopback address without TLS");
        return Ok(());
    }
    Err(format!(
        "refusing --forge-webhook-listen {addr}, which is not a loopback address, without TLS: give \
         --tls-cert and --tls-key (deliveries are then received over HTTPS with the controller's \
         certificate; they are authenticated by their signature), or --insecure"
    ))
}

/// Binds `addr` and receives deliveries until the controller's shutdown;
/// the bound address and the swarms to wake, in the order woken.
pub(super) async fn serve(
    addr: SocketAddr,
    config: &ForgeConfig,
    repo: PathBuf,
    shared: &Shared,
) -> Result<(SocketAddr, mpsc::Receiver<SwarmId>), String> {
    let given = &config.webhook_security;
    check_listen(addr, given)?;
    // The certificate only: GitHub shows no client certificate.
    let security = Security {
        tls_cert: given.tls_cert.clone(),
        tls_key: given.tls_key.clone(),
        insecure: given.insecure,
        ..Security::default()
    };
    let (tx, rx) = mpsc::channel(WAKE_QUEUE);
    let receiver = Arc::new(Receiver {
        secrets: Secrets::new(config.secrets.clone(), repo, shared.scheduler.clone()),
        seen: Mutex::new(Seen::new(SEEN_MAX)),
        wake: tx,
        metrics: shared.metrics.clone(),
    });
    let app = Router::new().route(PATH, post(receive)).with_state(receiver);
    let span = |bound, tls| tracing::info_span!("forge.webhooks", %bound, tls);
    let bound = crate::ui::serve_app(addr, app, shared, &security, shared.shutdown.clone(), span)
        .await
        .map_err(|e| format!("--forge-webhook-listen {addr}: {e}"))?;
    // Tests and operators read this line for the bound port.
    tracing::info!("forge webhooks listening on {bound}");
    Ok((bound, rx))
}

/// What the handler shares.
struct Receiver {
    secrets: Secrets,
    seen: Mutex<Seen>,
    wake: mpsc::Sender<SwarmId>,
    metrics: Arc<Metrics>,
}

/// How a delivery ended: its status, the counter's label and a word for
/// the sender.
struct Outcome(StatusCode, &'static str, String);

impl Outcome {
    fn new(status: StatusCode, outcome: &'static str, message: impl Into<String>) -> Outcome {
        Outcome(status, outcome, message.into())
    }
}

async fn receive(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Body) -> (StatusCode, String) {
    let Outcome(status, outcome, message) = r.handle(&headers, body).await;
    r.metrics.forge.webhook(outcome);
    (status, message)
}

impl Receiver {
    async fn handle(&self, headers: &HeaderMap, body: Body) -> Outcome {
        let [event, delivery, signature] = match required(headers) {
            Ok(values) => values,
            Err(Missing(name)) => {
                // Without a signature nothing could be verified.
                let outcome = if name == SIGNATURE { "bad_signature" } else { "malformed" };
                return Outcome::new(StatusCode::BAD_REQUEST, outcome, format!("missing or invalid {name}"));
            }
        };
        let shown_delivery = text::shown(delivery, 64);
        let too_large =
            || Outcome::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", format!("over {BODY_MAX} bytes"));
        let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > BODY_MAX as u64) {
            return too_large();
        }
        let body = match tokio::time::timeout(READ_TIMEOUT, read_capped(body, BODY_MAX)).await {
            Ok(Ok(Some(bytes))) => bytes,
            Ok(Ok(None)) => return too_large(),
            Ok(Err(_)) => {
                return Outcome::new(StatusCode::BAD_REQUEST, "malformed", "the body could not be read");
            }
            Err(_) => {
                return Outcome::new(StatusCode::REQUEST_TIMEOUT, "malformed", "the body came too slowly");
            }
        };

        let verified = self.secrets.verifying(&body, signature).await;
        if verified.is_empty() {
            tracing::warn!(delivery = %shown_delivery, "a forge webhook delivery no swarm's secret verifies: refused");
            return Outcome::new(StatusCode::UNAUTHORIZED, "bad_signature", "signature not verified");
        }
        let inbound = match webhook::parse(event, delivery, &body) {
            Ok(inbound) => inbound,
            Err(WebhookError::TooLarge { .. }) => return too_large(),
            Err(e) => {
                tracing::warn!(delivery = %shown_delivery, error = %e, "a verified forge webhook delivery refused");
                return Outcome::new(StatusCode::BAD_REQUEST, "malformed", e.to_string());
            }
        };
        let fresh = self.seen.lock().map(|mut seen| seen.insert(delivery)).unwrap_or(true);
        if !fresh {
            return Outcome::new(StatusCode::OK, "duplicate", "already received");
        }
        if matches!(inbound, Inbound::Ignored { .. }) || !WAKING.contains(&event) {
            // `ping` and every event whose change swarm does not read.
            return Outcome::new(StatusCode::OK, "ignored", "not an event swarm reads");
        }
        let Some(repository) = inbound.meta().repository.as_deref() else {
            return Outcome::new(StatusCode::OK, "ignored", "no repository");
        };
        let swarms: Vec<SwarmId> = verified
            .into_iter()
            .filter(|v| v.repository.eq_ignore_ascii_case(repository))
            .map(|v| v.swarm)
            .collect();
        if swarms.is_empty() {
            return Outcome::new(StatusCode::OK, "ignored", "no swarm follows this repository");
        }
        for swarm in swarms {
            tracing::debug!(%swarm, event, delivery = %shown_delivery, "a forge webhook wakes the swarm's poll");
            if self.wake.try_send(swarm).is_err() {
                self.metrics.forge.wakes_dropped.inc();
            }
        }
        Outcome::new(StatusCode::ACCEPTED, "accepted", "accepted")
    }
}

const EVENT: &str = "X-GitHub-Event";
const DELIVERY: &str = "X-GitHub-Delivery";
const SIGNATURE: &str = "X-Hub-Signature-256";

/// The header that was missing (or not text).
struct Missing(&'static str);

fn required(headers: &HeaderMap) -> Result<[&str; 3], Missing> {
    let get = |name: &'static str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or(Missing(name))
    };
    Ok([get(EVENT)?, get(DELIVERY)?, get(SIGNATURE)?])
}

/// The body, or `None` as soon as it passes `max` bytes (whatever its
/// `Content-Length` said).
async fn read_capped(body: Body, max: usize) -> Result<Option<Vec<u8>>, axum::Error> {
    let mut chunks = body.into_data_stream();
    let mut out = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if out.len() + chunk.len() > max {
            return Ok(None);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Some(out))
}

/// The most recent delivery ids, so a redelivery does nothing twice.
struct Seen {
    ids: HashSet<String>,
    order: VecDeque<String>,
    max: usize,
}

impl Seen {
    fn new(max: usize) -> Seen {
        Seen { ids: HashSet::new(), order: VecDeque::new(), max: max.max(1) }
    }

    /// Whether `id` is new; the oldest id is forgotten past `max`.
    fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() >= self.max
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.to_string());
        self.order.push_back(id.to_string());
        true
    }
}

/// A swarm that takes signed deliveries: whose secret, about which repository.
struct Follower {
    swarm: SwarmId,
    /// `owner/repo` of its remote.
    repository: String,
    secret: Arc<[u8]>,
}

/// A swarm a delivery's signature verified under.
struct Verified {
    swarm: SwarmId,
    repository: String,
}

/// The swarms' webhook secrets, read from the scheduler and their sources
/// at most every [`SECRETS_FRESH`].
struct Secrets {
    policy: SecretPolicy,
    repo: PathBuf,
    scheduler: flume::Sender<Command>,
    /// The last read and when; short locks only.
    current: Mutex<(Option<Instant>, Arc<Vec<Follower>>)>,
    /// One read at a time; the others wait for it and use what it read.
    reading: tokio::sync::Mutex<Problems>,
}

/// Why each swarm was left out last time, so a problem is logged once.
type Problems = HashMap<SwarmId, String>;

impl Secrets {
    fn new(policy: SecretPolicy, repo: PathBuf, scheduler: flume::Sender<Command>) -> Secrets {
        Secrets {
            policy,
            repo,
            scheduler,
            current: Mutex::new((None, Arc::new(Vec::new()))),
            reading: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The swarms whose secret signed `body`; read again once when none
    /// did and what was read is older than [`SECRETS_RETRY`].
    async fn verifying(&self, body: &[u8], signature: &str) -> Vec<Verified> {
        let known = self.get(SECRETS_FRESH).await;
        let verified = verify_all(&known, body, signature);
        if !verified.is_empty() {
            return verified;
        }
        let again = self.get(SECRETS_RETRY).await;
        if Arc::ptr_eq(&known, &again) {
            return verified;
        }
        verify_all(&again, body, signature)
    }

    /// What was read, unless it is older than `max_age`.
    async fn get(&self, max_age: Duration) -> Arc<Vec<Follower>> {
        let fresh = |current: &(Option<Instant>, Arc<Vec<Follower>>)| {
            current.0.is_some_and(|at| at.elapsed() < max_age).then(|| current.1.clone())
        };
        if let Some(followers) = self.current.lock().ok().and_then(|c| fresh(&c)) {
            return followers;
        }
        let mut problems = self.reading.lock().await;
        if let Some(followers) = self.current.lock().ok().and_then(|c| fresh(&c)) {
            return followers;
        }
        let targets = super::targets(&self.scheduler, None).await;
        let (policy, repo) = (self.policy.clone(), self.repo.clone());
        let read = tokio::task::spawn_blocking(move || followers(targets, &policy, &repo)).await;
        let (followers, now_problems) = read.unwrap_or_default();
        for (swarm, problem) in &now_problems {
            if problems.get(swarm) != Some(problem) {
                tracing::warn!(%swarm, "forge webhooks for this swarm cannot be verified: {problem}");
            }
        }
        *problems = now_problems;
        let followers = Arc::new(followers);
        if let Ok(mut current) = self.current.lock() {
            *current = (Some(Instant::now()), followers.clone());
        }
        followers
    }
}

/// Checks `signature` once per distinct secret.
fn verify_all(followers: &[Follower], body: &[u8], signature: &str) -> Vec<Verified> {
    let mut tried: Vec<(&[u8], bool)> = Vec::new();
    let mut verified = Vec::new();
    for f in followers {
        let ok = match tried.iter().find(|(s, _)| *s == &*f.secret) {
            Some((_, ok)) => *ok,
            None => {
                let ok = webhook::verify(&f.secret, body, signature).is_ok();
                tried.push((&f.secret, ok));
                ok
            }
        };
        if ok {
            verified.push(Verified { swarm: f.swarm.clone(), repository: f.repository.clone() });
        }
    }
    verified
}

/// The swarms with a webhook secret, their secret read and their remote
/// resolved (blocking: files and the repository's config), and why each
/// other swarm with one was left out.
fn followers(targets: Vec<ForgeTarget>, policy: &SecretPolicy, repo: &Path) -> (Vec<Follower>, Problems) {
    let mut out = Vec::new();
    let mut problems = HashMap::new();
    for t in targets {
        let Some(source) = &t.spec.webhook_secret else { continue };
        match follower(&t, source, policy, repo) {
            Ok(f) => out.push(f),
            Err(problem) => {
                problems.insert(t.swarm.clone(), problem);
            }
        }
    }
    (out, problems)
}

fn follower(
    t: &ForgeTarget,
    source: &SecretSource,
    policy: &SecretPolicy,
    repo: &Path,
) -> Result<Follower, String> {
    let secret = secrets::read(policy, source).map_err(|m| format!("forge.webhook_secret: {m}"))?;
    let url = super::sync::remote_url(&t.spec, repo).map_err(|(message, _)| message)?;
    let remote = Remote::parse(&url).map_err(|e| format!("forge.remote: {e}"))?;
    Ok(Follower {
        swarm: t.swarm.clone(),
        repository: format!("{}/{}", remote.owner, remote.repo),
        secret: Arc::from(secret.into_bytes()),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_is_free_elsewhere_tls_or_insecure_is_needed_and_no_credential_is() {
        let none = Security::default();
        assert!(check_listen(addr("127.0.0.1:0"), &none).is_ok());
        assert!(check_listen(addr("[::1]:8443"), &none).is_ok());
        let e = check_listen(addr("0.0.0.0:8443"), &none).unwrap_err();
        assert!(e.contains("--forge-webhook-listen 0.0.0.0:8443") && e.contains("--tls-cert"), "{e}");

        // A certificate is enough: the signature is the credential.
        let tls = Security {
            tls_cert: Some("/etc/swarm/cert.pem".into()),
            tls_key: Some("/etc/swarm/key.pem".into()),
            ..Security::default()
        };
        assert!(!tls.has_credentials());
        assert!(check_listen(addr("0.0.0.0:8443"), &tls).is_ok());

        let insecure = Security { insecure: true, ..Security::default() };
        assert!(check_listen(addr("10.0.0.7:9000"), &insecure).is_ok());
    }

    #[test]
    fn the_seen_set_drops_repeats_and_forgets_the_oldest_past_its_bound() {
        let mut seen = Seen::new(3);
        assert!(seen.insert("a") && seen.insert("b") && seen.insert("c"));
        assert!(!seen.insert("a"), "a repeat");
        assert!(seen.insert("d"), "past the bound");
        assert_eq!(seen.ids.len(), 3);
        assert!(seen.insert("a"), "the oldest was forgotten");
        assert!(!seen.insert("d") && !seen.insert("c"));
        assert_eq!(seen.ids.len(), 3);

        let mut big = Seen::new(SEEN_MAX);
        for i in 0..SEEN_MAX + 500 {
            assert!(big.insert(&format!("guid-{i}")));
        }
        assert_eq!((big.ids.len(), big.order.len()), (SEEN_MAX, SEEN_MAX));
        assert!(!big.insert(&format!("guid-{}", SEEN_MAX + 499)));
        assert!(big.insert("guid-0"));
    }

    #[test]
    fn a_signature_is_checked_once_per_secret_and_names_every_swarm_of_it() {
        let follower = |swarm: &str, repository: &str, secret: &str| Follower {
            swarm: SwarmId::new(swarm.to_string()).unwrap(),
            repository: repository.into(),
            secret: Arc::from(secret.as_bytes()),
        };
        let followers = [
            follower("a", "acme/app", "s1"),
            follower("b", "acme/app", "s1"),
            follower("c", "acme/lib", "s2"),
        ];
        let body = br#"{"zen":"hi"}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"s1");
        let tag = ring::hmac::sign(&key, body);
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        let verified = verify_all(&followers, body, &format!("sha256={hex}"));
        let names: Vec<_> = verified.iter().map(|v| v.swarm.to_string()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(verify_all(&followers, b"{}", &format!("sha256={hex}")).is_empty(), "another body");
        assert!(verify_all(&followers, body, "sha256=00").is_empty());
    }
}
