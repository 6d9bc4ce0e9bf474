//! The sidecar's configuration: every flag also from `SWARM_*` variables.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OrphanPolicy {
    /// Report orphaned worktrees to the controller and keep them.
    #[default]
    Report,
    /// Report them and remove them.
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    #[default]
    Pretty,
    Json,
}

/// swarm-sidecar: runs one worker at a time in its own worktree for a swarm controller.
#[derive(Debug, Clone, Parser)]
#[command(name = "swarm-sidecar", version)]
pub struct Config {
    /// The controller's gRPC URL, e.g. http://127.0.0.1:7400; several,
    /// comma-separated, for a leader and its standbys: the sidecar connects
    /// to the one that answers as leader, and reconnects the same way.
    #[arg(long, env = "SWARM_CONTROLLER")]
    pub controller: String,
    /// The repository this sidecar's worktree belongs to.
    #[arg(long, env = "SWARM_REPO")]
    pub repo: PathBuf,
    /// Where the worktree, its attempts' private git and temporary
    /// directories, the liveness lock and the journal live; default
    /// `<repo>/.git/workspaces/`. `swarmctl run` passes a directory of its
    /// own outside the checkout.
    #[arg(long, env = "SWARM_WORKSPACES")]
    pub workspaces: Option<PathBuf>,
    /// Stable worker id; default: hostname + hash of the repository path.
    #[arg(long, env = "SWARM_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Labels for scheduling, `key=value`; repeatable (env: comma-separated).
    #[arg(long = "label", env = "SWARM_LABELS", value_delimiter = ',', value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Idle timeout used when an assignment has none (0: none).
    #[arg(long, env = "SWARM_IDLE_TIMEOUT_SECS", default_value_t = 0)]
    pub idle_timeout_secs: u64,
    /// Grace between SIGINT, SIGTERM and SIGKILL when the sidecar stops a worker itself.
    #[arg(long, env = "SWARM_STOP_GRACE_MS", default_value_t = 5000)]
    pub stop_grace_ms: u64,
    /// This repository is not the controller's: move commits as packs.
    #[arg(long, env = "SWARM_REMOTE")]
    pub remote: bool,
    /// What to do with worktrees of sidecars that are gone.
    #[arg(long, env = "SWARM_ORPHANS", value_enum, default_value_t = OrphanPolicy::Report)]
    pub orphans: OrphanPolicy,
    /// Log output format (filter with RUST_LOG).
    #[arg(long, env = "SWARM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
    /// Longest wait between reconnection attempts, in milliseconds.
    #[arg(long, env = "SWARM_RECONNECT_MAX_MS", default_value_t = 5000)]
    pub reconnect_max_ms: u64,
    /// The binary run as `<binary> __supervise ...` to supervise workers;
    /// default: the running executable (for embedders such as tests).
    #[arg(long, env = "SWARM_SUPERVISOR", hide = true)]
    pub supervisor: Option<PathBuf>,
    /// CA (PEM) that signed the controller's certificate; for https:// URLs.
    #[arg(long, env = "SWARM_CA")]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS; its URI SAN spiffe://swarm/worker/<id> must cover --worker-id.
    #[arg(long, env = "SWARM_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Client private key (PEM).
    #[arg(long, env = "SWARM_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Bearer token (role sidecar).
    #[arg(long, env = "SWARM_TOKEN", hide_env_values = true, conflicts_with = "token_file")]
    pub token: Option<Secret>,
    /// File whose first line is the bearer token.
    #[arg(long, env = "SWARM_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Run workers as this user (a name or a numeric uid, never root), with
    /// the directories they write handed to it; for a sidecar running as
    /// root, which alone may switch users.
    #[arg(long, env = "SWARM_WORKER_USER", value_name = "USER")]
    pub worker_user: Option<crate::sandbox::WorkerUser>,
}

/// A credential that never shows up in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} must be key=value"))?;
    if k.is_empty() {
        return Err(format!("{s:?}: empty key"));
    }
    if k == swarm_core::plan::sandbox::SANDBOX_LABEL {
        return Err(format!(
            "{s:?}: the {k} label is set by the sidecar itself, from what its kernel enforces"
        ));
    }
    Ok((k.to_string(), v.to_string()))
}

impl Config {
    /// A config with defaults, for embedding and tests.
    pub fn new(controller: impl Into<String>, repo: impl Into<PathBuf>) -> Config {
        Config {
            controller: controller.into(),
            repo: repo.into(),
            workspaces: None,
            worker_id: None,
            labels: Vec::new(),
            idle_timeout_secs: 0,
            stop_grace_ms: 5000,
            remote: false,
            orphans: OrphanPolicy::Report,
            log_format: LogFormat::Pretty,
            reconnect_max_ms: 5000,
            supervisor: None,
            ca: None,
            cert: None,
            key: None,
            token: None,
            token_file: None,
            worker_user: None,
        }
    }

    /// The credentials for the channel to the controller.
    pub fn client_auth(&self) -> swarm_proto::client::ClientAuth {
        swarm_proto::client::ClientAuth {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            token: self.token.as_ref().map(|t| t.0.clone()),
            token_file: self.token_file.clone(),
        }
    }

    pub fn stop_grace(&self) -> Duration {
        Duration::from_millis(self.stop_grace_ms)
    }

    pub fn default_idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_secs > 0).then(|| Duration::from_secs(self.idle_timeout_secs))
    }
}

/// Hostname, sanitized to an id, plus 8 hex digits of FNV-1a of the canonical
/// repository path: stable across restarts, distinct per repository.
pub fn default_worker_id(canonical_repo: &Path) -> String {
    let host = hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let mut clean: String = host
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' { c } else { '-' })
        .collect();
    clean.truncate(40);
    let clean = clean.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical_repo.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let short = format!("{:08x}", (hash >> 32) as u32 ^ hash as u32);
    if clean.is_empty() { format!("sidecar-{short}") } else { format!("{clean}-{short}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_worker_id_is_a_valid_stable_id() {
        let a = default_worker_id(Path::new("/srv/repo"));
        assert_eq!(a, default_worker_id(Path::new("/srv/repo")));
        assert_ne!(a, default_worker_id(Path::new("/srv/other")));
        swarm_core::names::check_id(&a).expect("valid id");
    }

    #[test]
    fn flags_parse() {
        let c = Config::try_parse_from([
            "swarm-sidecar",
            "--controller",
            "http://127.0.0.1:1",
            "--repo",
            "/tmp/r",
            "--label",
            "os=linux",
            "--label",
            "gpu=no",
            "--orphans",
            "remove",
        ])
        .expect("parse");
        assert_eq!(c.labels, vec![("os".into(), "linux".into()), ("gpu".into(), "no".into())]);
        assert_eq!(c.orphans, OrphanPolicy::Remove);
        assert!(
            Config::try_parse_from(["swarm-sidecar", "--controller", "x", "--repo", "r", "--label", "bad"])
                .is_err()
        );
    }

    #[test]
    fn a_root_or_unknown_worker_user_is_refused_naming_the_flag() {
        let parse = |user: &str| {
            Config::try_parse_from([
                "swarm-sidecar",
                "--controller",
                "x",
                "--repo",
                "r",
                "--worker-user",
                user,
            ])
        };
        for (user, says) in
            [("root", "root (uid 0)"), ("0", "root (uid 0)"), ("no-such-user-swarm", "no user")]
        {
            let e = parse(user).expect_err(user).to_string();
            assert!(e.contains("--worker-user") && e.contains(says), "{user}: {e}");
        }
    }
}
