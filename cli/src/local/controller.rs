//! The embedded controller of local mode, logging to a file so the
//! terminal stays for the progress display.

use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use swarm_controller::{Config, Controller};

pub struct LocalController {
    inner: Controller,
}

impl LocalController {
    /// Starts the controller on 127.0.0.1 (ephemeral port) with its store
    /// under `<repo>/.git/swarm/`; its logs go to `log`.
    pub async fn start(repo: &Path, log: &Path) -> anyhow::Result<LocalController> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        // Fails only when a subscriber is already set (a second session).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(Mutex::new(file))
            .try_init();
        let inner = swarm_controller::start(Config::local(repo.to_path_buf()))
            .await
            .context("starting the embedded controller")?;
        Ok(LocalController { inner })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.inner.local_addr())
    }

    pub async fn shutdown(self) {
        if let Err(e) = self.inner.shutdown().await {
            eprintln!("warning: the controller did not shut down cleanly: {e}");
        }
    }
}
