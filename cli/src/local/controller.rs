//! The controller of local mode.
//!
//! TEMPORARY: runs the `swarm-controller` binary found next to swarmctl
//! until the embedded library entry point (`swarm_controller::start`) lands.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use super::sidecars::{binary_next_to_me, terminate};

pub struct LocalController {
    child: Child,
    addr: String,
}

impl LocalController {
    pub async fn start(repo: &Path, log: &Path) -> anyhow::Result<LocalController> {
        let bin = binary_next_to_me("swarm-controller")?;
        let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(&bin)
            .args(["--listen", "127.0.0.1:0", "--repo"])
            .arg(repo)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("controller stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("the controller did not report its address within 30s")??
            .context("the controller exited before it was ready")?;
        let addr = line.strip_prefix("listening on ").context("unexpected controller output")?.to_string();
        Ok(LocalController { child, addr })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn shutdown(mut self) {
        terminate(&mut self.child, Duration::from_secs(10)).await;
    }
}
