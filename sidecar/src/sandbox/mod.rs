//! The worker sandbox: the one place its rules are built and applied.
//!
//! The agent in a worktree reads untrusted text all day, so it is the
//! least-trusted party in the system. Every process the sidecar starts on a
//! task's behalf (setup, the worker or agent, verify tiers) runs through
//! [`Confinement::argv`]: the sidecar's own binary re-executed as
//! `<exe> __sandbox <policy> -- <command...>`, which confines itself with
//! Landlock, drops every capability (`privileges`) and then execs the
//! command, so the command and all its children inherit the domain and
//! hold no capability while the sidecar (and the worker's supervisor) stay
//! free. A fresh single-threaded process is the safe place for it: a
//! Landlock domain binds only the thread that enters it. On a kernel
//! without Landlock the trampoline still runs, for the capabilities.
//!
//! The policy (see [`Policy::for_attempt`]): writes only to the worktree, a
//! private temporary directory, the agent's own state and the plan's
//! `sandbox.write`; reads of the system's directories, the programs on
//! `PATH` and the installs behind them ([`toolchains`]: pyenv's versions,
//! rustup's toolchains, a venv's base interpreter), the repository's
//! objects and the plan's `sandbox.read`; TCP
//! connect only to the plan's ports (443 by default); no bind; signals and
//! abstract Unix sockets scoped to the worker's own processes. Never the
//! controller's state directory, another worktree, the user's checkout or
//! the sidecar's journal and credentials.
//!
//! The worker's environment is built from an allowlist ([`inherited_env`]),
//! so nothing of the sidecar's own (its token, certificate paths) reaches
//! it, sandboxed or not.

pub mod cgroup;
pub mod denials;
mod landlock;
pub mod limits;
pub mod ownership;
mod privileges;
pub mod toolchains;
mod trampoline;
pub mod worker_user;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use swarm_core::plan::{AgentKind, SandboxMode, SandboxSpec};

pub use self::cgroup::{AttemptCgroup, Cgroups};
pub use self::landlock::{Capability, probe};
pub use trampoline::{ARG, main_if_requested};
pub use worker_user::WorkerUser;

/// What the trampoline applies: concrete, absolute paths and ports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Every file-system right.
    pub write: Vec<PathBuf>,
    /// Device files opened for reading and writing (`/dev/null`, ttys).
    pub devices: Vec<PathBuf>,
    /// TCP ports that may be connected to, on any host.
    pub connect: Vec<u16>,
    /// The attempt's cgroup, joined first (see [`cgroup`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// The plan's limits that no cgroup enforces (see [`limits`]).
    #[serde(default, skip_serializing_if = "limits::Rlimits::is_empty")]
    pub rlimits: limits::Rlimits,
    /// The sidecar's worker user, switched to before exec (see [`worker_user`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<worker_user::Ids>,
    /// No Landlock: only the user switch and the capability drop, for a
    /// plan's `sandbox = "off"` on a sidecar with a worker user.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfined: bool,
    /// What of `read` was found behind the `PATH` (see [`toolchains`]),
    /// for the report; the trampoline needs only `read`.
    #[serde(skip)]
    pub toolchains: Vec<PathBuf>,
}

/// The system's directories every worker may read: programs, libraries,
/// configuration, and the kernel's views (whose per-process files Landlock
/// itself guards: another domain's `/proc/<pid>/environ`, `mem` or `root`
/// cannot be opened).
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/nix/store",
];
const DEVICES: &[&str] =
    &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx"];
/// An agent's own state under `$HOME` (its login, settings and the
/// sessions `--resume` reads): directories made before the worker starts,
/// since the sandbox lets nothing create them in `$HOME` itself, and files
/// it rewrites in place (Claude Code's `~/.claude.json`).
const AGENT_STATE_DIRS: &[(AgentKind, &str)] =
    &[(AgentKind::Claude, ".claude"), (AgentKind::Codex, ".codex")];
const AGENT_STATE_FILES: &[(AgentKind, &str)] = &[(AgentKind::Claude, ".claude.json")];

/// Makes the agent's state directories under `home` that do not exist yet,
/// owned by the worker user when there is one.
pub fn make_agent_state(
    kind: AgentKind,
    home: &Path,
    owner: Option<&worker_user::Ids>,
) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    for (_, dir) in AGENT_STATE_DIRS.iter().filter(|(k, _)| *k == kind) {
        let dir = home.join(dir);
        let made = std::fs::symlink_metadata(&dir).is_err();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        if let (true, Some(ids)) = (made, owner) {
            std::os::unix::fs::lchown(&dir, Some(ids.uid), Some(ids.gid))?;
        }
    }
    Ok(())
}

/// The user's git configuration, under `$HOME`.
const GIT_CONFIG: &[&str] = &[".gitconfig", ".config/git"];
/// Shared with every process of the machine, but holding nothing of swarm's.
const SYSTEM_WRITE: &[&str] = &["/dev/pts", "/dev/shm"];

/// A task's sandbox settings as the sidecar received them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings(pub SandboxSpec);

impl Settings {
    pub fn is_off(&self) -> bool {
        self.0.mode == SandboxMode::Off
    }

    /// What the attempt's `attempt.sandbox` event says: the mode, what this
    /// sidecar's kernel enforces of it, how the attempt's processes are
    /// ended and how its limits are applied.
    pub fn report(&self, kernel: Capability, ending: &Ending, limits: &limits::Applied) -> SandboxReport {
        let mode = self.0.mode.as_str().to_string();
        if self.is_off() {
            let mut missing = vec!["everything: the plan opted out (sandbox = \"off\")".to_string()];
            if !self.0.limits.is_empty() {
                missing.push("limits: applied only to a confined worker".to_string());
            }
            return SandboxReport { mode, enforced: Vec::new(), missing };
        }
        let (mut enforced, mut missing) = kernel.split();
        // The trampoline drops them on any kernel, or the worker does not run.
        enforced.push(match privileges::held() {
            0 => NO_CAPABILITIES.to_string(),
            n => format!("{NO_CAPABILITIES} ({n} of the sidecar's dropped)"),
        });
        match ending {
            Ending::Cgroup => enforced.push(format!("{PROCESSES_END} (cgroup)")),
            Ending::Subreaper => enforced.push(format!("{PROCESSES_END} (subreaper)")),
            Ending::GroupOnly { why } => missing.push(format!(
                "{PROCESSES_END}: an agent's processes that leave its process group outlive it without a cgroup ({why})"
            )),
        }
        enforced.extend(limits.enforced.iter().cloned());
        missing.extend(limits.missing.iter().cloned());
        SandboxReport { mode, enforced, missing }
    }
}

/// What the report's `enforced` says of capabilities: a confined worker
/// holds none.
pub const NO_CAPABILITIES: &str = "no capabilities";
/// What the report says of an attempt's processes: none outlives it.
pub const PROCESSES_END: &str = "processes end with the attempt";

/// How an attempt's processes are ended, for its report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// All of them are in the attempt's cgroup, ended with `cgroup.kill`.
    Cgroup,
    /// A command worker's supervisor is their subreaper, and kills what is
    /// below it (see [`crate::reaper`]).
    Subreaper,
    /// An agent, run by the sidecar itself without a cgroup: only what
    /// stays in its process group is signalled.
    GroupOnly { why: String },
}

/// How a worker is confined, as this sidecar's kernel enforces it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxReport {
    /// "on", "off" or "required", as the plan asked.
    pub mode: String,
    /// What the kernel enforces, e.g. "filesystem", "network", "signals",
    /// and "no capabilities" (see [`NO_CAPABILITIES`]).
    pub enforced: Vec<String>,
    /// What was asked and is not enforced, each with the reason.
    pub missing: Vec<String>,
}

/// Where an attempt's worker lives, for [`Policy::for_attempt`].
pub struct Place<'a> {
    pub worktree: &'a Path,
    /// The repository's common git directory: only its objects are read.
    pub common_dir: &'a Path,
    /// Private to the attempt: `TMPDIR`, and the worker's git metadata.
    pub private: &'a [&'a Path],
    pub agent: Option<(AgentKind, &'a str)>,
    /// Read-only, nothing written: a reviewer may write only `.swarm/`.
    pub review: bool,
}

impl Place<'_> {
    /// What toolchain discovery must not reach: the repository's git state
    /// and the worktrees (nothing at, above or below them), the user's
    /// checkout (nothing at or above it).
    fn guard(&self) -> toolchains::Guard {
        let mut sealed = vec![self.common_dir.to_path_buf()];
        sealed.extend(self.worktree.parent().map(Path::to_path_buf));
        let checkout = self.common_dir.parent().filter(|_| self.common_dir.ends_with(".git"));
        toolchains::Guard { sealed, above: checkout.map(Path::to_path_buf).into_iter().collect() }
    }
}

impl Policy {
    /// The rules for one attempt's processes.
    pub fn for_attempt(settings: &Settings, place: &Place<'_>, env: &[(String, String)]) -> Policy {
        let home = env.iter().find(|(k, _)| k == "HOME").map(|(_, v)| PathBuf::from(v));
        let expand = |p: &str| -> Option<PathBuf> {
            match p.strip_prefix("~/") {
                Some(rest) => home.as_ref().map(|h| h.join(rest)),
                None => Some(PathBuf::from(p)),
            }
        };
        let mut policy = Policy {
            read: SYSTEM_READ.iter().map(PathBuf::from).collect(),
            write: SYSTEM_WRITE.iter().map(PathBuf::from).collect(),
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            connect: settings.0.connect.clone(),
            cgroup: None,
            rlimits: limits::Rlimits::default(),
            user: None,
            unconfined: false,
            toolchains: toolchains::find(env, &place.guard()),
        };
        policy.read.extend(path_dirs(env, home.as_deref()));
        policy.read.extend(policy.toolchains.iter().cloned());
        // git treats a config file it may not read as fatal, and every
        // worker runs git.
        policy.read.extend(GIT_CONFIG.iter().filter_map(|p| home.as_ref().map(|h| h.join(p))));
        policy.read.push(place.common_dir.join("objects"));
        policy.read.extend(settings.0.read.iter().filter_map(|p| expand(p)));
        if let Some(resolv) = resolv_conf_target() {
            policy.read.push(resolv);
        }
        if place.review {
            policy.read.push(place.worktree.to_path_buf());
            policy.write.push(place.worktree.join(crate::worktree::SWARM_DIR));
        } else {
            policy.write.push(place.worktree.to_path_buf());
        }
        policy.write.extend(place.private.iter().map(|p| p.to_path_buf()));
        policy.write.extend(settings.0.write.iter().filter_map(|p| expand(p)));
        if let Some((kind, program)) = place.agent {
            policy.read.extend(install_dir(program, env));
            let state = AGENT_STATE_DIRS.iter().chain(AGENT_STATE_FILES).filter(|(k, _)| *k == kind);
            policy.write.extend(state.filter_map(|(_, s)| home.as_ref().map(|h| h.join(s))));
        }
        if let Some(port) = otlp_port(env) {
            policy.connect.push(port);
        }
        policy.connect.sort_unstable();
        policy.connect.dedup();
        policy
    }
}

/// The directories on the worker's `PATH`: what a plan's commands expect
/// to run. Relative entries and the home directory itself are left out.
fn path_dirs(env: &[(String, String)], home: Option<&Path>) -> Vec<PathBuf> {
    let Some((_, path)) = env.iter().find(|(k, _)| k == "PATH") else { return Vec::new() };
    std::env::split_paths(path)
        .filter(|p| p.is_absolute() && p != Path::new("/") && Some(p.as_path()) != home)
        .collect()
}

/// The directory an agent's executable is installed in (its real path,
/// through any symlinks), so its own files load.
fn install_dir(program: &str, env: &[(String, String)]) -> Option<PathBuf> {
    let found = if program.contains('/') {
        PathBuf::from(program)
    } else {
        let (_, path) = env.iter().find(|(k, _)| k == "PATH")?;
        std::env::split_paths(path).map(|d| d.join(program)).find(|p| p.is_file())?
    };
    let real = found.canonicalize().ok()?;
    real.parent().map(Path::to_path_buf)
}

/// `/etc/resolv.conf` is often a link into `/run`, which is otherwise not
/// readable (it holds per-user runtime directories).
fn resolv_conf_target() -> Option<PathBuf> {
    let real = Path::new("/etc/resolv.conf").canonicalize().ok()?;
    (!real.starts_with("/etc")).then_some(real)
}

/// The OTLP collector's port: an agent's spans go where the sidecar's do.
fn otlp_port(env: &[(String, String)]) -> Option<u16> {
    let (_, url) = env.iter().find(|(k, _)| k == "OTEL_EXPORTER_OTLP_ENDPOINT")?;
    url_port(url)
}

/// The port a `scheme://host:port/...` URL names; None when it names none.
pub fn url_port(url: &str) -> Option<u16> {
    let authority = url.split("://").nth(1)?.split('/').next()?;
    authority.rsplit_once(':')?.1.parse().ok()
}

/// The variables a worker gets from the sidecar's own environment (with
/// the toolchains' [`toolchains::LOCATORS`]); every
/// other variable it sees is set for it (task variables, the plan's `env`).
pub fn inherited_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            matches!(k.as_str(), "PATH" | "HOME" | "LANG" | "TERM" | "TZ")
                || toolchains::LOCATORS.contains(&k.as_str())
                || k.starts_with("LC_")
                || k.starts_with("OTEL_EXPORTER_OTLP_")
        })
        .collect()
}

/// The confinement of processes at `place` under `settings` on a kernel
/// that enforces `kernel`: None when the plan opted out; an error (naming
/// what is missing) when the plan requires what the kernel cannot enforce.
/// A kernel without Landlock still gets the trampoline, which then only
/// drops capabilities. The one way attempts and the merge queue's verifier
/// confine what they run.
pub fn confine(
    settings: &Settings,
    kernel: Capability,
    exe: &Path,
    place: &Place<'_>,
    env: &[(String, String)],
) -> Result<Option<Confinement>, String> {
    if settings.0.mode == SandboxMode::Required && !kernel.is_full() {
        let (_, missing) = kernel.split();
        return Err(format!("requires a sandbox this kernel cannot enforce: {}", missing.join("; ")));
    }
    if settings.is_off() {
        return Ok(None);
    }
    let mut policy = Policy::for_attempt(settings, place, env);
    if place.agent.is_some() && !place.review {
        // The agent starts this binary as the bridge to swarm's tools.
        policy.read.push(exe.to_path_buf());
    }
    Ok(Some(Confinement { exe: exe.to_path_buf(), policy: Arc::new(policy) }))
}

/// How a process is confined: the trampoline binary and the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// The sidecar's own binary (it dispatches [`ARG`] first thing).
    pub exe: PathBuf,
    pub policy: Arc<Policy>,
}

impl Confinement {
    /// The argv that runs `argv` confined.
    pub fn argv(&self, argv: &[String]) -> Vec<OsString> {
        let policy = serde_json::to_string(&*self.policy).unwrap_or_default();
        let mut out = vec![self.exe.clone().into_os_string(), ARG.into(), policy.into(), "--".into()];
        out.extend(argv.iter().map(OsString::from));
        out
    }
}

/// The argv to spawn for `argv`, confined or not.
pub fn command_line(confinement: Option<&Confinement>, argv: &[String]) -> Vec<OsString> {
    match confinement {
        Some(c) => c.argv(argv),
        None => argv.iter().map(OsString::from).collect(),
    }
}

#[cfg(test)]
mod tests;
