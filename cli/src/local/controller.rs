//! The embedded controller of local mode, logging to a file so the
//! terminal stays for the progress display.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use swarm_controller::api::auth::tokens;
use swarm_controller::{Config, Controller};
use swarm_proto::client::ClientAuth;

use crate::client::Target;

/// In the run's private directory (see [`runtime_dir`]): the admin token
/// of the current local run, and the controller's URL.
pub const TOKEN_FILE: &str = "operator.token";
pub const URL_FILE: &str = "controller.url";

/// A directory only this user can enter, for the local run of `repo`:
/// `$XDG_RUNTIME_DIR/swarm/<repo hash>/`, or `<tmp>/swarm-<uid>/<repo hash>/`.
/// Never inside the repository: a worker's sandbox reads its worktree's
/// surroundings less than it reads the repository, and the token gives
/// the operator's and admin's powers.
pub fn runtime_dir(repo: &Path) -> anyhow::Result<std::path::PathBuf> {
    let uid = nix::unistd::getuid().as_raw();
    let base = match std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from) {
        Some(d) if d.is_absolute() && d.is_dir() => d.join("swarm"),
        _ => std::env::temp_dir().join(format!("swarm-{uid}")),
    };
    let dir = base.join(repo_key(repo));
    // In a shared /tmp another user could have made the base first.
    private_dir(&[&base, &dir], "it holds the run's admin token")?;
    Ok(dir)
}

/// A stable name per repository (16 hex digits of a hash of its canonical
/// path): local runs of two repositories never share a directory.
pub fn repo_key(repo: &Path) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let canonical = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    canonical.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// Makes the last of `dirs` (and its parents) with mode 0700 and checks
/// that each of `dirs` is a directory of this user's that no one else may
/// enter; `why` says what it protects.
pub fn private_dir(dirs: &[&Path], why: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let uid = nix::unistd::getuid().as_raw();
    let Some(dir) = dirs.last() else { return Ok(()) };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    for d in dirs {
        let meta = std::fs::symlink_metadata(d).with_context(|| format!("reading {}", d.display()))?;
        if meta.uid() != uid || !meta.is_dir() || meta.permissions().mode() & 0o077 != 0 {
            anyhow::bail!("{} must be a directory owned by uid {uid} with mode 0700 ({why})", d.display());
        }
    }
    Ok(())
}

/// Replaces `path` with `text`, readable by the owner only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// What the embedded controller serves besides its gRPC port, and whom
/// it tells; nothing by default.
#[derive(Debug, Clone, Default)]
pub struct Serve {
    /// Prometheus metrics (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// The dashboard (`--ui`), checked by [`check_ui`].
    pub ui_listen: Option<SocketAddr>,
    /// Operator webhooks (`--notify*`).
    pub notify: swarm_controller::notify::NotifyConfig,
}

/// The standalone controller's rule for its dashboard, with what local
/// mode can give: the dashboard shows all the Operator API's reads, and
/// local mode has neither TLS nor a way to hand its tokens to another
/// machine, so it serves on loopback only.
pub fn check_ui(addr: SocketAddr) -> Result<(), crate::exit::Usage> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(crate::exit::Usage(format!(
        "--ui {addr}: not a loopback address; swarmctl run serves the dashboard over plain HTTP,          so only on 127.0.0.1 or [::1] (reach it from elsewhere through an SSH tunnel, or run          swarm-controller with --ui-listen, --tls-cert, --tls-key and --tokens)"
    )))
}

pub struct LocalController {
    inner: Controller,
    /// This run's credentials: the controller accepts only these, so other
    /// local users cannot drive the loopback port.
    sidecar_token: String,
    admin_token: String,
    /// Spans export over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set;
    /// `None` when a subscriber was already installed.
    telemetry: Option<swarm_telemetry::Telemetry>,
}

impl LocalController {
    /// Starts the controller on 127.0.0.1 (ephemeral port) with its store
    /// under `<repo>/.git/swarm/`; its logs go to `log`; it serves and
    /// notifies what `serve` asks.
    pub async fn start(repo: &Path, log: &Path, serve: &Serve) -> anyhow::Result<LocalController> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        // Fails only when a subscriber is already set (a second session).
        let telemetry = swarm_telemetry::init_with_writer("swarm-controller", false, Mutex::new(file)).ok();
        let mut config = Config::local(repo.to_path_buf());
        config.metrics_listen = serve.metrics_listen;
        config.ui_listen = serve.ui_listen;
        config.notify = serve.notify.clone();
        let sidecar_token = crate::auth::new_token();
        let admin_token = crate::auth::new_token();
        // The link printed for the dashboard carries a token of its own,
        // with the role the dashboard needs and no more: the terminal's
        // scrollback is no place for the admin token.
        let ui_token = crate::auth::new_token();
        let entries = [
            crate::auth::token_entry("local-sidecars", "sidecar", Some("local-*"), &sidecar_token),
            crate::auth::token_entry("local-operator", "admin", None, &admin_token),
            crate::auth::token_entry("local-dashboard", "operator", None, &ui_token),
        ];
        config.security.tokens = tokens::parse(&entries.join("\n")).context("local-mode tokens")?;
        // For `swarmctl --token-file` while the run goes on; only this user may read it.
        let private = runtime_dir(repo)?;
        let token_file = private.join(TOKEN_FILE);
        write_private(&token_file, &admin_token)
            .with_context(|| format!("writing {}", token_file.display()))?;
        // An earlier run's token must not be left where workers once could read it.
        let _ = std::fs::remove_file(repo.join(".git").join("swarm").join(TOKEN_FILE));
        let inner = swarm_controller::start(config).await.context("starting the embedded controller")?;
        let url_file = private.join(URL_FILE);
        write_private(&url_file, &format!("http://{}", inner.local_addr()))
            .with_context(|| format!("writing {}", url_file.display()))?;
        eprintln!("controller: http://{} (operator token: {})", inner.local_addr(), token_file.display());
        if let Some(at) = inner.ui_addr() {
            // The dashboard logs a `/?token=` link in and drops the token
            // from the address bar at once (see README "Dashboard").
            eprintln!("dashboard: http://{at}/?token={ui_token}");
        }
        Ok(LocalController { inner, sidecar_token, admin_token, telemetry })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.inner.local_addr())
    }

    pub fn sidecar_token(&self) -> &str {
        &self.sidecar_token
    }

    /// The embedded controller with this run's admin token.
    pub fn operator_target(&self) -> Target {
        Target {
            url: self.url(),
            auth: ClientAuth { token: Some(self.admin_token.clone()), ..ClientAuth::default() },
        }
    }

    /// Completes when the controller stops on its own (a failed store, a
    /// failed scheduler or merger thread); `shutdown` then says why.
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
