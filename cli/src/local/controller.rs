//! The embedded controller of local mode, logging to a file so the
//! terminal stays for the progress display.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use swarm_controller::{Config, Controller};

pub struct LocalController {
    inner: Controller,
    /// Spans export over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set;
    /// `None` when a subscriber was already installed.
    telemetry: Option<swarm_telemetry::Telemetry>,
}

impl LocalController {
    /// Starts the controller on 127.0.0.1 (ephemeral port) with its store
    /// under `<repo>/.git/swarm/`; its logs go to `log`, its metrics to
    /// `metrics_listen` when given.
    pub async fn start(
        repo: &Path,
        log: &Path,
        metrics_listen: Option<SocketAddr>,
    ) -> anyhow::Result<LocalController> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        // Fails only when a subscriber is already set (a second session).
        let telemetry = swarm_telemetry::init_with_writer("swarm-controller", false, Mutex::new(file)).ok();
        let mut config = Config::local(repo.to_path_buf());
        config.metrics_listen = metrics_listen;
        let inner = swarm_controller::start(config).await.context("starting the embedded controller")?;
        Ok(LocalController { inner, telemetry })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.inner.local_addr())
    }

    /// Completes when the controller stops on its own (a failed store, a
    /// failed scheduler or integrator thread); `shutdown` then says why.
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.inner.stopped()
    }

    /// Stops the controller; the error says why if it had stopped on its own.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let result = self.inner.shutdown().await;
        if let Some(t) = self.telemetry {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        result.context("the embedded controller")
    }
}
