//! Local `swarm-sidecar` child processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// What every local sidecar is started with.
pub struct Flags<'a> {
    /// `--label`s, for the plan's tasks that require them.
    pub labels: &'a BTreeMap<String, String>,
    /// `--worker-user`: the user the workers run as.
    pub worker_user: Option<&'a str>,
}

/// The local sidecars, one per worker slot.
pub struct Sidecars {
    children: Vec<(String, Child)>,
    pub log_dir: PathBuf,
}

impl Sidecars {
    /// Starts `count` sidecars named `local-1`..; their worktrees live in
    /// `workspaces`, each logs to `<log_dir>/<id>.log`.
    pub fn start(
        url: &str,
        token: &str,
        repo: &Path,
        workspaces: &Path,
        count: u32,
        flags: &Flags<'_>,
        log_dir: &Path,
    ) -> anyhow::Result<Sidecars> {
        let Flags { labels, worker_user } = flags;
        // swarmctl itself, in sidecar mode (see `sidecar_mode`).
        let bin = std::env::current_exe().context("locating swarmctl")?;
        let mut children = Vec::new();
        for n in 1..=count {
            let id = format!("local-{n}");
            let log_path = log_dir.join(format!("{id}.log"));
            let log = std::fs::File::create(&log_path)
                .with_context(|| format!("creating {}", log_path.display()))?;
            let child = Command::new(&bin)
                .args([super::sidecar_mode::ARG, "--controller", url, "--worker-id", &id, "--repo"])
                .arg(repo)
                .arg("--workspaces")
                .arg(workspaces)
                .args(labels.iter().flat_map(|(k, v)| ["--label".to_string(), format!("{k}={v}")]))
                .args(worker_user.iter().flat_map(|u| ["--worker-user", u]))
                // The run's sidecar token; the environment of a process is
                // readable only by its user. The user's own TLS settings are
                // for remote controllers, not this loopback one.
                .env("SWARM_TOKEN", token)
                .env_remove("SWARM_TOKEN_FILE")
                .env_remove("SWARM_WORKSPACES")
                .env_remove("SWARM_CA")
                .env_remove("SWARM_CERT")
                .env_remove("SWARM_KEY")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                // Own process group: a Ctrl-C at the terminal reaches swarmctl
                // only, which then stops the sidecars in order.
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            children.push((id, child));
        }
        Ok(Sidecars { children, log_dir: log_dir.to_path_buf() })
    }

    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Sidecars that exited on their own, with their status.
    pub fn exited(&mut self) -> Vec<(String, std::process::ExitStatus)> {
        let mut out = Vec::new();
        for (id, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                out.push((id.clone(), status));
            }
        }
        out
    }

    /// SIGTERM to every sidecar (each runs its cancel sequence), then SIGKILL
    /// to any still running after `grace`.
    pub async fn stop(self, grace: Duration) {
        let stops = self.children.into_iter().map(|(_, mut child)| async move {
            terminate(&mut child, grace).await;
        });
        futures::future::join_all(stops).await;
    }
}

/// SIGTERM, wait up to `grace`, then SIGKILL.
pub async fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}
