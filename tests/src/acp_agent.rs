//! `claude-code-acp` from PyPI, a real ACP server for tests: it drives the
//! Claude Code CLI bundled in the Python Agent SDK (the same SDK release as
//! [`crate::claude_cli`]), so with the scripted Messages API it runs
//! offline. Installed once per target directory into its own venv,
//! `target/claude-code-acp/<versions>/`, under `install.lock`; a venv
//! cannot be moved, so a finished install is marked by a file written last.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::claude_cli::{SDK_VERSION, target_dir};
use crate::command::{check, run};

/// The adapter's release.
pub const ACP_VERSION: &str = "0.5.1";
/// The Python ACP library it imports: later releases break its import.
pub const ACP_LIB_VERSION: &str = "0.10.1";
const MARKER: &str = ".swarm-installed";
const INSTALL_LIMIT: Duration = Duration::from_secs(900);

/// The `claude-code-acp` executable, installed on first use; the reason
/// when it cannot be had here (no python3, no venv module, no network).
pub fn claude_code_acp() -> Result<&'static PathBuf, String> {
    static EXE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    EXE.get_or_init(find_or_install).as_ref().map_err(Clone::clone)
}

fn find_or_install() -> Result<PathBuf, String> {
    let root = target_dir()?.join("claude-code-acp");
    let dir = root.join(format!("acp-{ACP_VERSION}-lib-{ACP_LIB_VERSION}-sdk-{SDK_VERSION}"));
    let exe = dir.join("bin/claude-code-acp");
    if dir.join(MARKER).is_file() {
        return Ok(exe);
    }
    let deadline = Instant::now() + INSTALL_LIMIT;
    let _lock = crate::install_lock(&root.join("install.lock"), INSTALL_LIMIT)?;
    if dir.join(MARKER).is_file() {
        return Ok(exe);
    }
    // Holding the lock, an unmarked venv is a killed install's leftover.
    let _ = std::fs::remove_dir_all(&dir);
    let left = || deadline.saturating_duration_since(Instant::now());
    let out = run(Command::new("python3").args(["-m", "venv"]).arg(&dir), left())
        .map_err(|e| format!("python3 -m venv: {e}"))?;
    check("python3 -m venv", &out)?;
    let mut pip = Command::new(dir.join("bin/python"));
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet"])
        .arg(format!("claude-code-acp=={ACP_VERSION}"))
        .arg(format!("agent-client-protocol=={ACP_LIB_VERSION}"))
        .arg(format!("claude-agent-sdk=={SDK_VERSION}"))
        .env("PIP_NO_INPUT", "1")
        .env_remove("PIP_REQUIRE_VIRTUALENV");
    let out = run(&mut pip, left())?;
    check(&format!("pip install claude-code-acp=={ACP_VERSION}"), &out)?;
    if !exe.is_file() {
        return Err(format!("claude-code-acp {ACP_VERSION} installed no {}", exe.display()));
    }
    std::fs::write(dir.join(MARKER), b"").map_err(|e| e.to_string())?;
    Ok(exe)
}
