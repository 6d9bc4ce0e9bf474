//! Operator webhooks (`--notify URL`): the operator hears about what
//! waits for them — a question or permission request, a review, a swarm
//! STALLED, PAUSED, COMPLETED or FAILED, a budget reached, the breaker.
//!
//! The dispatcher subscribes to the scheduler's committed-event feed (the
//! one Watch uses), names each event it cares about (`kinds`), renders the
//! body once (`payload`) and hands it to each endpoint's queue
//! (`deliver`), which signs it (`sign`) and posts it with retries. The
//! publisher never waits for the notifier: the feed is a broadcast, and a
//! notifier that falls behind skips ahead and counts what it missed.
//! Delivery is at most once per controller run: what was queued when the
//! controller stops, and what happened while it was down, is not sent.

mod deliver;
mod flags;
mod kinds;
mod payload;
mod sign;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

pub use flags::NotifyArgs;
pub use kinds::{Kind, classify, parse_filter};
pub use payload::{line, render};
pub use sign::{SIGNATURE_HEADER, Signer, TIMESTAMP_HEADER};

use crate::metrics::Metrics;
use crate::scheduler::Command;
use crate::store::EventRow;

/// A bad `--notify*` flag: the flag, the value and the rule it breaks.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {value}: {rule}")]
pub struct NotifyConfigError {
    pub flag: &'static str,
    pub value: String,
    pub rule: String,
}

/// The webhooks, checked; none by default.
#[derive(Debug, Clone, Default)]
pub struct NotifyConfig {
    pub endpoints: Vec<Endpoint>,
    /// What is sent; every kind by default.
    pub events: BTreeSet<Kind>,
    pub signer: Option<Signer>,
    pub policy: Policy,
}

/// Retries and bounds; the defaults suit a chat webhook.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Attempts per notification, the first included.
    pub attempts: u32,
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// One attempt's limit, connection included.
    pub timeout: Duration,
    /// Notifications waiting per endpoint before the oldest is dropped.
    pub queue: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            attempts: 5,
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            queue: 1000,
        }
    }
}

/// A webhook URL and what may be said of it in logs and metrics.
#[derive(Clone)]
pub struct Endpoint {
    pub url: reqwest::Url,
    /// `host[:port]`: a hook's token is in its path or query, never here.
    pub label: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({})", self.label)
    }
}

impl Endpoint {
    /// An `http://` or `https://` URL with a host; the rule broken if not.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let url = reqwest::Url::parse(s.trim()).map_err(|e| format!("not a URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("must be an http:// or https:// URL, not {}://", url.scheme()));
        }
        let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
            return Err("must name a host".into());
        };
        let label = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        Ok(Endpoint { url, label })
    }
}

impl NotifyConfig {
    /// From the flags as given: `urls` (`--notify`), `events`
    /// (`--notify-events`, every kind when absent) and the file holding
    /// the signing secret (`--notify-secret-file`).
    pub fn from_flags(
        urls: &[String],
        events: Option<&str>,
        secret_file: Option<&Path>,
    ) -> Result<NotifyConfig, NotifyConfigError> {
        let err =
            |flag, value: &str, rule: String| NotifyConfigError { flag, value: value.to_string(), rule };
        let endpoints = urls
            .iter()
            .filter(|u| !u.trim().is_empty())
            .map(|u| Endpoint::parse(u).map_err(|rule| err("--notify", &redact(u), rule)))
            .collect::<Result<Vec<_>, _>>()?;
        let events = match events {
            Some(list) => parse_filter(list).map_err(|rule| err("--notify-events", list, rule))?,
            None => Kind::ALL.into_iter().collect(),
        };
        let signer = match secret_file {
            Some(path) => Some(
                read_secret(path)
                    .map_err(|rule| err("--notify-secret-file", &path.display().to_string(), rule))?,
            ),
            None => None,
        };
        if endpoints.is_empty() && signer.is_some() {
            return Err(err("--notify-secret-file", "", "needs at least one --notify URL".into()));
        }
        Ok(NotifyConfig { endpoints, events, signer, policy: Policy::default() })
    }
}

/// The URL as a message may show it: scheme and host, no path or query.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url.trim()) {
        Ok(u) if u.host_str().is_some() => format!("{}://{}/…", u.scheme(), u.host_str().unwrap_or_default()),
        _ => format!("{:?}", url.chars().take(12).collect::<String>() + "…"),
    }
}

fn read_secret(path: &Path) -> Result<Signer, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?;
    // Editors and `echo` end the file with a newline that is not the secret's.
    let text = String::from_utf8(bytes).map_err(|_| "must hold the secret as UTF-8 text".to_string())?;
    let secret = text.trim_end_matches(['\r', '\n']);
    if secret.trim().is_empty() {
        return Err("is empty; it must hold the shared secret".into());
    }
    Ok(Signer::new(secret.as_bytes()))
}

/// Subscribes to the scheduler's events and starts a delivery task per
/// endpoint, all owned by `tasks` and ended by `shutdown`. Subscribed
/// before it returns, so nothing committed after is missed.
pub async fn start(
    config: NotifyConfig,
    scheduler: &flume::Sender<Command>,
    metrics: Arc<Metrics>,
    tasks: &TaskTracker,
    shutdown: CancellationToken,
) -> Result<(), String> {
    if config.endpoints.is_empty() {
        return Ok(());
    }
    let client = client(&config.policy)?;
    let (reply, rx) = oneshot::channel();
    scheduler
        .send_async(Command::Subscribe { reply })
        .await
        .map_err(|_| "the scheduler stopped".to_string())?;
    let (_, live) = rx.await.map_err(|_| "the scheduler stopped".to_string())?;
    let mut queues = Vec::new();
    for endpoint in config.endpoints {
        let counters = deliver::Counters::new(&metrics.notify, &endpoint);
        let queue = Arc::new(deliver::Queue::new(config.policy.queue, counters));
        queues.push(queue.clone());
        let span = tracing::info_span!("notify.endpoint", endpoint = %endpoint.label);
        let run = deliver::run(
            client.clone(),
            endpoint,
            config.signer.clone(),
            config.policy.clone(),
            queue,
            shutdown.clone(),
        );
        tasks.spawn(run.instrument(span));
    }
    tracing::info!(endpoints = queues.len(), events = ?config.events, signed = config.signer.is_some(), "operator webhooks on");
    let dispatch = dispatch(live, config.events, queues, metrics, shutdown);
    tasks.spawn(dispatch.instrument(tracing::info_span!("notify.dispatch")));
    Ok(())
}

/// The shared HTTPS client, which follows no redirect: a signed body goes
/// only where it was sent.
fn client(policy: &Policy) -> Result<reqwest::Client, String> {
    let connect = policy.timeout.min(Duration::from_secs(5));
    swarm_forge::https::client(
        policy.timeout,
        connect,
        concat!("swarm-controller/", env!("CARGO_PKG_VERSION")),
    )
    .map_err(|e| format!("webhook client: {e}"))
}

async fn dispatch(
    mut live: broadcast::Receiver<Arc<EventRow>>,
    events: BTreeSet<Kind>,
    queues: Vec<Arc<deliver::Queue>>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        let received = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = live.recv() => r,
        };
        match received {
            Ok(event) => {
                let Some(kind) = classify(&event).filter(|k| events.contains(k)) else { continue };
                let job = Arc::new(deliver::Job {
                    kind: kind.as_str(),
                    event_id: event.id,
                    swarm: event.swarm.clone(),
                    task: event.task.clone(),
                    body: render(kind, &event),
                });
                for q in &queues {
                    q.push(job.clone());
                }
            }
            Err(broadcast::error::RecvError::Lagged(skipped)) => {
                metrics.notify.lagged.inc_by(skipped);
                tracing::warn!(skipped, "webhook notifier fell behind the event feed; skipped ahead");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn flags(urls: &[&str], events: Option<&str>, secret: Option<&Path>) -> Result<NotifyConfig, String> {
        let urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
        NotifyConfig::from_flags(&urls, events, secret).map_err(|e| e.to_string())
    }

    #[test]
    fn urls_events_and_the_secret_are_checked_at_startup() {
        let c = flags(&["https://hooks.slack.com/services/T0/B0/XYZ", "http://127.0.0.1:8080/h"], None, None)
            .unwrap();
        assert_eq!(c.endpoints.len(), 2);
        assert_eq!(c.endpoints[0].label, "hooks.slack.com");
        assert_eq!(c.endpoints[1].label, "127.0.0.1:8080");
        assert_eq!(c.events.len(), Kind::ALL.len(), "every kind by default");

        let e = flags(&["ftp://example.com/x"], None, None).unwrap_err();
        assert!(e.starts_with("--notify ftp://example.com/…: must be an http:// or https:// URL"), "{e}");
        let e = flags(&["not a url"], None, None).unwrap_err();
        assert!(e.starts_with("--notify ") && e.contains("not a URL"), "{e}");
        let e = flags(&["http://h/x"], Some("task.questions"), None).unwrap_err();
        assert!(e.starts_with("--notify-events task.questions: unknown event"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let e = flags(&["http://h/x"], None, Some(&empty)).unwrap_err();
        assert!(e.contains("--notify-secret-file") && e.contains("is empty"), "{e}");
        let e = flags(&["http://h/x"], None, Some(&dir.path().join("missing"))).unwrap_err();
        assert!(e.contains("cannot be read"), "{e}");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let c = flags(&["http://h/x"], Some("swarm.*"), Some(&secret)).unwrap();
        let signer = c.signer.unwrap();
        assert_eq!(
            signer.sign(1, b"x"),
            Signer::new(b"s3cret").sign(1, b"x"),
            "the newline is not the secret's"
        );
        assert!(flags(&[], None, Some(&secret)).unwrap_err().contains("needs at least one --notify URL"));
    }

    #[test]
    fn a_url_with_a_token_is_never_echoed_whole() {
        let e = flags(&["gopher://hooks.example/T0K3N?key=s3cret"], None, None).unwrap_err();
        assert!(!e.contains("T0K3N") && !e.contains("s3cret"), "{e}");
        assert_eq!(
            format!("{:?}", Endpoint::parse("https://h.example/T0K3N").unwrap()),
            "Endpoint(h.example)"
        );
    }
}
