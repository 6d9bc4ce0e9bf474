//! How fast a sidecar notices a dead link and comes back, derived from the
//! lease its controller gives it.
//!
//! The controller re-runs a sidecar's attempt elsewhere once the lease runs
//! out, so a sidecar that needs longer than the lease to notice a dead
//! connection rejoins after its work is gone. A connection across a long
//! cut is also worse than a new one once the link heals: TCP's
//! retransmission timer has backed off to seconds, so frames written to it
//! arrive late even then. HTTP/2 pings bound how long a half-open
//! connection is trusted; the reconnect backoff's ceiling bounds how long a
//! healed link goes untried. A connection is dialled before its Welcome
//! says what the lease is, and HTTP/2 pings cannot be retuned on a live
//! connection, so the socket's TCP user timeout is set once it is known:
//! heartbeats keep data in flight, and data left unacknowledged that long
//! closes the connection.

use std::future::Future;
use std::os::fd::{AsFd as _, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tonic::codegen::http::Uri;

/// The link's timers before any Welcome said what the lease is.
const UNKNOWN_LEASE: LinkTiming = LinkTiming {
    keepalive_interval: Duration::from_secs(10),
    keepalive_timeout: Duration::from_secs(20),
    connect_timeout: Duration::from_secs(5),
    backoff_ceiling: None,
};

/// Below these a loaded machine's scheduling delay alone would break a
/// healthy link; breaking it is harmless (the session resumes within the
/// lease) but costs a reconnect.
const MIN_INTERVAL: Duration = Duration::from_millis(250);
const MIN_TIMEOUT: Duration = Duration::from_secs(1);
const MIN_CONNECT: Duration = Duration::from_secs(1);
const MIN_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LinkTiming {
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    pub connect_timeout: Duration,
    /// The longest wait between reconnect attempts; None: the configured one.
    pub backoff_ceiling: Option<Duration>,
}

impl LinkTiming {
    /// A dead link is noticed within interval + timeout (≈ 5/6 of the
    /// lease, or a little more below the floors) and a healed one is tried
    /// again within half a lease. Never slower than before a lease was
    /// known: a long lease keeps the defaults.
    pub(super) fn for_lease(lease: Option<Duration>) -> LinkTiming {
        let Some(lease) = lease.filter(|l| !l.is_zero()) else { return UNKNOWN_LEASE };
        let clamp = |d: Duration, floor: Duration, ceiling: Duration| d.max(floor).min(ceiling.max(floor));
        LinkTiming {
            keepalive_interval: clamp(lease / 3, MIN_INTERVAL, UNKNOWN_LEASE.keepalive_interval),
            keepalive_timeout: clamp(lease / 2, MIN_TIMEOUT, UNKNOWN_LEASE.keepalive_timeout),
            connect_timeout: clamp(lease, MIN_CONNECT, UNKNOWN_LEASE.connect_timeout),
            backoff_ceiling: Some((lease / 2).max(MIN_BACKOFF)),
        }
    }

    /// How long sent data may stay unacknowledged before the kernel closes
    /// the connection; None before a lease is known.
    pub(super) fn user_timeout(lease: Option<Duration>) -> Option<Duration> {
        lease.filter(|l| !l.is_zero()).map(|l| (l / 2).max(MIN_TIMEOUT))
    }

    /// The reconnect backoff's ceiling: the configured one, or less.
    pub(super) fn backoff_max(&self, configured: Duration) -> Duration {
        self.backoff_ceiling.map_or(configured, |c| c.min(configured))
    }
}

/// The socket of the connection a [`TrackedConnector`] opened last, so
/// its user timeout can be set after the Welcome. It holds a duplicate of
/// the socket's descriptor: a session drops it when its stream ends, so a
/// closed connection is not kept open by it for longer than that.
#[derive(Clone, Default)]
pub(super) struct SocketHandle(Arc<Mutex<Option<OwnedFd>>>);

impl SocketHandle {
    fn track(&self, stream: &TcpStream) {
        let dup = stream.as_fd().try_clone_to_owned();
        if let (Ok(dup), Ok(mut slot)) = (dup, self.0.lock()) {
            *slot = Some(dup);
        }
    }

    /// Sets TCP_USER_TIMEOUT on the tracked socket (if any).
    pub(super) fn set_user_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        let Ok(slot) = self.0.lock() else { return Ok(()) };
        let Some(fd) = slot.as_ref() else { return Ok(()) };
        set_user_timeout(fd, timeout)
    }

    /// Forgets the socket (closing the duplicate).
    pub(super) fn release(&self) {
        if let Ok(mut slot) = self.0.lock() {
            slot.take();
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_user_timeout(fd: &OwnedFd, timeout: Duration) -> std::io::Result<()> {
    let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
    nix::sys::socket::setsockopt(fd, nix::sys::socket::sockopt::TcpUserTimeout, &ms)
        .map_err(std::io::Error::from)
}

/// Elsewhere the HTTP/2 pings alone notice a dead link.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn set_user_timeout(_fd: &OwnedFd, _timeout: Duration) -> std::io::Result<()> {
    Ok(())
}

/// Dials as tonic's own connector does (TCP_NODELAY, the connect timeout)
/// and remembers the socket in a [`SocketHandle`]; tonic adds TLS on top.
#[derive(Clone)]
pub(super) struct TrackedConnector {
    http: HttpConnector,
    socket: SocketHandle,
}

impl TrackedConnector {
    pub(super) fn new(connect_timeout: Duration, socket: SocketHandle) -> TrackedConnector {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        TrackedConnector { http, socket }
    }
}

type DialError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for TrackedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<TcpStream>, DialError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(DialError::from)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let dialling = self.http.call(uri);
        let socket = self.socket.clone();
        Box::pin(async move {
            let io = dialling.await?;
            socket.track(io.inner());
            Ok(io)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_lease_is_noticed_within_about_the_lease_and_retried_within_half() {
        let lease = Duration::from_secs(3);
        let t = LinkTiming::for_lease(Some(lease));
        assert!(t.keepalive_interval + t.keepalive_timeout < lease, "{t:?}");
        assert_eq!(t.backoff_max(Duration::from_secs(5)), Duration::from_millis(1500));
        assert!(t.connect_timeout <= lease);
    }

    #[test]
    fn the_floors_hold_for_a_lease_shorter_than_a_loaded_machine_can_honour() {
        let t = LinkTiming::for_lease(Some(Duration::from_millis(600)));
        assert_eq!(t.keepalive_interval, MIN_INTERVAL);
        assert_eq!(t.keepalive_timeout, MIN_TIMEOUT);
        assert_eq!(t.connect_timeout, MIN_CONNECT);
        assert_eq!(t.backoff_max(Duration::from_secs(5)), Duration::from_millis(300));
    }

    #[test]
    fn a_long_or_unknown_lease_keeps_the_defaults_and_the_configured_backoff() {
        for lease in [None, Some(Duration::ZERO)] {
            assert_eq!(LinkTiming::for_lease(lease), UNKNOWN_LEASE);
        }
        let long = LinkTiming::for_lease(Some(Duration::from_secs(600)));
        assert_eq!(
            (long.keepalive_interval, long.keepalive_timeout, long.connect_timeout),
            (
                UNKNOWN_LEASE.keepalive_interval,
                UNKNOWN_LEASE.keepalive_timeout,
                UNKNOWN_LEASE.connect_timeout
            )
        );
        assert_eq!(long.backoff_max(Duration::from_secs(5)), Duration::from_secs(5), "configured is lower");
        assert_eq!(UNKNOWN_LEASE.backoff_max(Duration::from_secs(5)), Duration::from_secs(5));
    }
}
