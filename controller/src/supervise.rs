//! Supervision of the controller's threads: the scheduler and the
//! merger hold state the async side cannot rebuild, so when either
//! ends while the controller is not shutting down (an error such as a
//! failed store commit, a panic, or a plain return) the controller stops
//! through its one shutdown path, a [`CancellationToken`], and reports why;
//! `main` turns that into a non-zero exit so a supervisor (systemd
//! `Restart=on-failure`) restarts it and recovery rebuilds the state.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;

use crate::error::ControllerError;

#[derive(Clone)]
pub struct Supervisor {
    shutdown: CancellationToken,
    fatal: Arc<Mutex<Option<String>>>,
}

impl Supervisor {
    pub fn new(shutdown: CancellationToken) -> Supervisor {
        Supervisor { shutdown, fatal: Arc::default() }
    }

    /// The controller's shutdown token: cancelled by an orderly shutdown or
    /// by [`Supervisor::fail`].
    pub fn token(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Stops the controller because of `reason`; the first reason wins.
    pub fn fail(&self, reason: String) {
        tracing::error!(%reason, "controller stopping");
        if let Ok(mut fatal) = self.fatal.lock()
            && fatal.is_none()
        {
            *fatal = Some(reason);
        }
        self.shutdown.cancel();
    }

    /// Why the controller stopped on its own, if it did.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// `Err(Stopped)` once a supervised thread has failed.
    pub fn check(&self) -> Result<(), ControllerError> {
        match self.fatal() {
            Some(reason) => Err(ControllerError::Stopped(reason)),
            None => Ok(()),
        }
    }

    /// Runs `body` on a thread named `name`; its error, panic or return
    /// before shutdown stops the controller.
    pub fn spawn<F>(&self, name: &'static str, body: F) -> Result<JoinHandle<()>, ControllerError>
    where
        F: FnOnce() -> Result<(), ControllerError> + Send + 'static,
    {
        let supervisor = self.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
                match outcome {
                    Ok(Ok(())) if supervisor.shutdown.is_cancelled() => {}
                    Ok(Ok(())) => supervisor.fail(format!("the {name} thread ended unexpectedly")),
                    Ok(Err(e)) => supervisor.fail(format!("the {name} thread failed: {e}")),
                    Err(payload) => {
                        supervisor.fail(format!("the {name} thread panicked: {}", panic_text(&payload)))
                    }
                }
            })
            .map_err(|e| ControllerError::Thread(format!("{name}: {e}")))
    }
}

fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Body = Box<dyn FnOnce() -> Result<(), ControllerError> + Send>;

    #[test]
    fn a_failing_panicking_or_returning_thread_stops_the_controller_with_its_reason() {
        let cases: Vec<(Body, &str)> = vec![
            (
                Box::new(|| Err(ControllerError::Thread("disk on fire".into()))),
                "failed: scheduler thread: disk on fire",
            ),
            (Box::new(|| panic!("boom")), "panicked: boom"),
            (Box::new(|| Ok(())), "ended unexpectedly"),
        ];
        for (body, expected) in cases {
            let supervisor = Supervisor::new(CancellationToken::new());
            supervisor.spawn("worker", body).expect("spawn").join().expect("join");
            assert!(supervisor.token().is_cancelled(), "{expected}");
            let err = supervisor.check().expect_err("fatal").to_string();
            assert!(err.contains(expected) && err.contains("worker"), "{err}");
        }
    }

    #[test]
    fn a_thread_ending_after_shutdown_is_not_a_failure() {
        let supervisor = Supervisor::new(CancellationToken::new());
        supervisor.token().cancel();
        supervisor.spawn("worker", || Ok(())).expect("spawn").join().expect("join");
        assert!(supervisor.check().is_ok());
    }
}
