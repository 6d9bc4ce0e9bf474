//! Waiting for a condition: poll it against a deadline, never sleep blind.

use std::time::Duration;

/// Polls `check` every 50 ms until it returns `Some`, or panics after `limit`
/// naming `what`.
pub async fn poll<T, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match try_poll(limit, check).await {
        Some(v) => v,
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Polls `check` every 50 ms until it returns `Some`; `None` after `limit`.
pub async fn try_poll<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`poll`] for code that is not async (tests around processes): polls
/// `check` every 100 ms until it returns `Some`, or panics after `limit`
/// naming `what`.
pub fn wait_until<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
