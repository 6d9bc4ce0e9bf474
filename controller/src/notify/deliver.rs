//! One endpoint's delivery: a bounded queue the dispatcher never waits
//! on, and a task that posts each notification with retries.
//!
//! A slow or dead endpoint fills only its own queue; when it is full the
//! oldest notification goes (the newest says more about what waits now)
//! and the drop is counted. A failed attempt (no connection, a timeout, a
//! 5xx, 408 or 429) is tried again after an exponential back-off with
//! jitter, up to a bounded number of attempts; any other answer is final.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use rand::Rng as _;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::sign::{SIGNATURE_HEADER, Signer, TIMESTAMP_HEADER};
use super::{Endpoint, Policy};
use crate::metrics::NotifyMetrics;

/// A notification rendered once and sent to every endpoint.
#[derive(Debug)]
pub struct Job {
    pub kind: &'static str,
    pub event_id: u64,
    pub swarm: String,
    pub task: String,
    pub body: Vec<u8>,
}

/// The endpoint's counters, looked up once rather than per notification.
#[derive(Clone)]
pub struct Counters {
    delivered: Counter,
    failed: Counter,
    attempts_failed: Counter,
    dropped: Counter,
    queued: Gauge,
}

impl Counters {
    pub fn new(m: &NotifyMetrics, endpoint: &Endpoint) -> Counters {
        let label = vec![("endpoint", endpoint.label.clone())];
        Counters {
            delivered: m.delivered.get_or_create(&label).clone(),
            failed: m.failed.get_or_create(&label).clone(),
            attempts_failed: m.attempts_failed.get_or_create(&label).clone(),
            dropped: m.dropped.get_or_create(&label).clone(),
            queued: m.queued.get_or_create(&label).clone(),
        }
    }
}

/// A bounded queue whose `push` never waits. The lock is held only to
/// move one job in or out.
pub struct Queue {
    jobs: Mutex<VecDeque<Arc<Job>>>,
    ready: Notify,
    capacity: usize,
    counters: Counters,
}

impl Queue {
    pub fn new(capacity: usize, counters: Counters) -> Queue {
        Queue { jobs: Mutex::new(VecDeque::new()), ready: Notify::new(), capacity: capacity.max(1), counters }
    }

    pub fn push(&self, job: Arc<Job>) {
        let dropped = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let dropped = if jobs.len() >= self.capacity { jobs.pop_front() } else { None };
            jobs.push_back(job);
            self.counters.queued.set(jobs.len() as i64);
            dropped
        };
        if let Some(old) = dropped {
            self.counters.dropped.inc();
            tracing::warn!(
                event = old.kind,
                event_id = old.event_id,
                "webhook queue full: dropped the oldest notification"
            );
        }
        self.ready.notify_one();
    }

    fn try_pop(&self) -> Option<Arc<Job>> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let job = jobs.pop_front();
        self.counters.queued.set(jobs.len() as i64);
        job
    }

    async fn pop(&self) -> Arc<Job> {
        loop {
            if let Some(job) = self.try_pop() {
                return job;
            }
            // `notify_one` leaves a permit when nobody waits, so a push
            // between the check and this wait is not lost.
            self.ready.notified().await;
        }
    }
}

/// Posts the queue's notifications to `endpoint` one at a time, in order,
/// until `shutdown`; what is still queued then is not sent.
pub async fn run(
    client: reqwest::Client,
    endpoint: Endpoint,
    signer: Option<Signer>,
    policy: Policy,
    queue: Arc<Queue>,
    shutdown: CancellationToken,
) {
    loop {
        let job = tokio::select! {
            _ = shutdown.cancelled() => return,
            job = queue.pop() => job,
        };
        let span = tracing::info_span!("notify.deliver", endpoint = %endpoint.label, event = job.kind,
            event_id = job.event_id, swarm = %job.swarm, task = %job.task);
        let sender =
            Sender { client: &client, endpoint: &endpoint, signer: signer.as_ref(), policy: &policy };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = sender.deliver(&job, &queue.counters).instrument(span) => {}
        }
    }
}

struct Sender<'a> {
    client: &'a reqwest::Client,
    endpoint: &'a Endpoint,
    signer: Option<&'a Signer>,
    policy: &'a Policy,
}

/// How one attempt ended.
enum Attempt {
    Delivered,
    /// Worth another attempt, after at least this long when the endpoint said so.
    Retry(String, Option<Duration>),
    Final(String),
}

impl Sender<'_> {
    async fn deliver(&self, job: &Job, counters: &Counters) {
        let attempts = self.policy.attempts.max(1);
        for n in 1..=attempts {
            match self.attempt(job).await {
                Attempt::Delivered => {
                    counters.delivered.inc();
                    tracing::debug!(attempt = n, "webhook delivered");
                    return;
                }
                Attempt::Final(why) => {
                    counters.attempts_failed.inc();
                    counters.failed.inc();
                    tracing::warn!(attempt = n, error = %why, "webhook refused; not retried");
                    return;
                }
                Attempt::Retry(why, _) if n == attempts => {
                    counters.attempts_failed.inc();
                    counters.failed.inc();
                    tracing::warn!(attempts, error = %why, "webhook delivery failed; giving up");
                    return;
                }
                Attempt::Retry(why, after) => {
                    counters.attempts_failed.inc();
                    let wait =
                        self.policy.backoff(n).max(after.unwrap_or_default()).min(self.policy.max_backoff);
                    tracing::info!(attempt = n, error = %why, retry_in = ?wait, "webhook attempt failed");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn attempt(&self, job: &Job) -> Attempt {
        let mut req = self
            .client
            .post(self.endpoint.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("x-swarm-event", job.kind)
            // The same id on every attempt: a receiver drops a retry of what it has.
            .header("x-swarm-delivery", job.event_id.to_string())
            .body(job.body.clone());
        if let Some(signer) = self.signer {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            req = req
                .header(TIMESTAMP_HEADER, now.to_string())
                .header(SIGNATURE_HEADER, signer.sign(now, &job.body));
        }
        match req.send().await {
            Ok(resp) => judge(resp.status(), retry_after(&resp)),
            // reqwest's error names the URL: only its kind is logged.
            Err(e) => Attempt::Retry(error_kind(&e).to_string(), None),
        }
    }
}

fn judge(status: reqwest::StatusCode, after: Option<Duration>) -> Attempt {
    if status.is_success() {
        Attempt::Delivered
    } else if status.is_server_error()
        || status == reqwest::StatusCode::REQUEST_TIMEOUT
        || status == reqwest::StatusCode::TOO_MANY_REQUESTS
    {
        Attempt::Retry(format!("HTTP {status}"), after)
    } else {
        Attempt::Final(format!("HTTP {status}"))
    }
}

/// `Retry-After` in seconds (the form Slack and Discord send).
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let v = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0).map(Duration::from_secs_f64)
}

fn error_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_request() {
        "request failed"
    } else {
        "no answer"
    }
}

impl Policy {
    /// The wait after failed attempt `n` (1-based): doubling from the
    /// first back-off, then half of it fixed and half random, so endpoints
    /// that failed together do not come back together.
    pub fn backoff(&self, n: u32) -> Duration {
        let full =
            self.first_backoff.saturating_mul(1u32 << (n.saturating_sub(1)).min(20)).min(self.max_backoff);
        let half = full / 2;
        half + half.mul_f64(rand::rng().random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn counters(m: &NotifyMetrics) -> Counters {
        let endpoint = Endpoint::parse("http://127.0.0.1:9/hook").unwrap();
        Counters::new(m, &endpoint)
    }

    fn job(id: u64) -> Arc<Job> {
        Arc::new(Job {
            kind: "task.question",
            event_id: id,
            swarm: "s".into(),
            task: "t".into(),
            body: vec![],
        })
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_oldest_and_counts_it() {
        let m = NotifyMetrics::default();
        let q = Queue::new(2, counters(&m));
        for id in 1..=3 {
            q.push(job(id));
        }
        let label = vec![("endpoint", "127.0.0.1:9".to_string())];
        assert_eq!(m.dropped.get_or_create(&label).get(), 1);
        assert_eq!(m.queued.get_or_create(&label).get(), 2);
        assert_eq!(q.pop().await.event_id, 2);
        assert_eq!(q.pop().await.event_id, 3);
        assert_eq!(m.queued.get_or_create(&label).get(), 0);
    }

    #[test]
    fn back_off_doubles_within_its_bounds_with_jitter() {
        let p = Policy {
            first_backoff: Duration::from_millis(400),
            max_backoff: Duration::from_secs(2),
            ..Policy::default()
        };
        for _ in 0..50 {
            let first = p.backoff(1);
            assert!(first >= Duration::from_millis(200) && first <= Duration::from_millis(400), "{first:?}");
            let second = p.backoff(2);
            assert!(
                second >= Duration::from_millis(400) && second <= Duration::from_millis(800),
                "{second:?}"
            );
            assert!(p.backoff(30) <= Duration::from_secs(2));
        }
    }

    #[test]
    fn server_errors_and_throttling_are_retried_other_refusals_are_final() {
        use reqwest::StatusCode as S;
        assert!(matches!(judge(S::NO_CONTENT, None), Attempt::Delivered));
        assert!(matches!(judge(S::INTERNAL_SERVER_ERROR, None), Attempt::Retry(..)));
        assert!(matches!(judge(S::TOO_MANY_REQUESTS, None), Attempt::Retry(..)));
        assert!(matches!(judge(S::REQUEST_TIMEOUT, None), Attempt::Retry(..)));
        assert!(matches!(judge(S::NOT_FOUND, None), Attempt::Final(_)));
        assert!(matches!(judge(S::FORBIDDEN, None), Attempt::Final(_)));
    }
}
