//! Where a session is in its life, and the loop that reconnects until it
//! ends. Each state carries what it needs: only a shutdown has a moment
//! at which it stops waiting for acks.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::{Ended, INITIAL_BACKOFF, LinkTiming, Session, Stop};
use crate::SidecarError;

/// The session's life: serving → draining (asked to, or broken too often)
/// and either → shutting down (the process was told to stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lifecycle {
    /// Takes work.
    Serving,
    /// Takes no more work; the stream closes once the attempt in hand is
    /// done and every report acked.
    Draining,
    /// Stopping the attempt in hand; the stream closes once it is done and
    /// acked, or at `give_up_at` with what is unacked left in the journal.
    ShuttingDown { give_up_at: Instant },
}

impl Lifecycle {
    pub(super) fn takes_work(self) -> bool {
        self == Lifecycle::Serving
    }

    pub(super) fn is_shutting_down(self) -> bool {
        matches!(self, Lifecycle::ShuttingDown { .. })
    }

    /// A shutdown whose time for acks is over.
    pub(super) fn gave_up(self) -> bool {
        matches!(self, Lifecycle::ShuttingDown { give_up_at } if give_up_at <= Instant::now())
    }

    /// Serving → draining; a shutdown stays one.
    pub(super) fn drain(&mut self) {
        if *self == Lifecycle::Serving {
            *self = Lifecycle::Draining;
        }
    }

    /// Resolves when a shutdown stops waiting for acks; never otherwise.
    pub(super) async fn give_up(self) {
        match self {
            Lifecycle::ShuttingDown { give_up_at } => tokio::time::sleep_until(give_up_at).await,
            _ => std::future::pending().await,
        }
    }
}

impl Session {
    /// Connects, and reconnects with backoff, until the session is done.
    pub(super) async fn run(&mut self) -> Result<(), SidecarError> {
        let mut backoff = INITIAL_BACKOFF;
        let configured_max = Duration::from_millis(self.cfg.reconnect_max_ms.max(100));
        loop {
            match self.connect_once().await {
                Ok(Ended::Done) => return self.finish().await,
                Ok(Ended::Broken(welcomed)) => {
                    if welcomed {
                        backoff = INITIAL_BACKOFF;
                    }
                    tracing::info!("stream to controller closed; reconnecting");
                }
                // A bad URL or credential file does not heal by retrying.
                Err(e @ (SidecarError::Journal(_) | SidecarError::Config(_))) => return Err(e),
                Err(e) => tracing::warn!(error = %e, "cannot reach controller"),
            }
            if self.lifecycle.is_shutting_down() && (self.current.is_none() || self.lifecycle.gave_up()) {
                return self.finish().await;
            }
            if !std::mem::replace(&mut self.back_off, true) {
                continue;
            }
            let max = LinkTiming::for_lease(self.lease).backoff_max(configured_max);
            backoff = backoff.min(max);
            let jitter = rand::rng().random_range(0..=backoff.as_millis() as u64 / 2);
            let sleep = tokio::time::sleep(backoff + Duration::from_millis(jitter));
            backoff = (backoff * 2).min(max);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    _ = self.shutdown.cancelled(), if !self.lifecycle.is_shutting_down() => self.begin_shutdown(),
                    Some(r) = self.reports_rx.recv() => {
                        self.record(r).await?;
                        if self.lifecycle.is_shutting_down() && self.current.is_none() {
                            return self.finish().await;
                        }
                    }
                }
            }
        }
    }

    /// Stops the attempt in hand, if any, and journals what it reported.
    async fn finish(&mut self) -> Result<(), SidecarError> {
        if let Some(c) = self.current.take() {
            let _ = c.stop.send(Some(Stop::Shutdown));
            let _ = c.task.await;
            while let Ok(r) = self.reports_rx.try_recv() {
                self.record(r).await?;
            }
        }
        Ok(())
    }

    /// Stops taking work and stops the attempt in hand.
    pub(super) fn begin_shutdown(&mut self) {
        tracing::info!("shutting down");
        // Room for the worker's stop sequence, then a little for the acks.
        let give_up_at = Instant::now() + self.cfg.stop_grace() * 2 + Duration::from_secs(5);
        self.lifecycle = Lifecycle::ShuttingDown { give_up_at };
        if let Some(c) = &self.current {
            let _ = c.stop.send(Some(Stop::Shutdown));
        }
    }
}
