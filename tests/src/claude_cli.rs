//! The real Claude Code CLI for tests, as the Claude Agent SDK for Python
//! bundles it: `pip install claude-agent-sdk==SDK_VERSION` once per target
//! directory (`target/claude-cli/sdk-<version>/`), then
//! `claude_agent_sdk/_bundled/claude` from there. The wheel carries the
//! CLI as one native executable, so only pip and the network are needed,
//! not Node.
//!
//! Concurrent test processes install once ([`crate::wheel`]).
//!
//! `SWARM_CLAUDE_CLI=/path/to/claude` uses that CLI instead (to try a newer
//! one); nothing is installed then.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::command::{check, run};
use crate::wheel::Wheel;

/// The SDK release the tests install (the newest on PyPI when pinned).
pub const SDK_VERSION: &str = "0.2.189";
/// The Claude Code release [`SDK_VERSION`] bundles.
pub const BUNDLED_CLI_VERSION: &str = "2.1.332";
/// Names a CLI to use instead of installing one.
pub const CLI_ENV: &str = "SWARM_CLAUDE_CLI";
/// Where the executable sits in the installed package.
const BUNDLED: &str = "claude_agent_sdk/_bundled/claude";
/// The wheel is ~100 MB; a slow mirror on a busy machine needs minutes.
const INSTALL_LIMIT: Duration = Duration::from_secs(900);

/// A Claude Code executable and what its `--version` says.
#[derive(Debug, Clone)]
pub struct ClaudeCli {
    pub path: PathBuf,
    /// e.g. `2.1.332 (Claude Code)`.
    pub version: String,
}

/// The CLI, installed on first use in this test process; the reason when
/// it cannot be had here (no python3, no venv module, no network).
pub fn claude_cli() -> Result<&'static ClaudeCli, String> {
    static CLI: OnceLock<Result<ClaudeCli, String>> = OnceLock::new();
    CLI.get_or_init(find_or_install).as_ref().map_err(Clone::clone)
}

fn find_or_install() -> Result<ClaudeCli, String> {
    if let Some(p) = std::env::var_os(CLI_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(p);
        let version = version_of(&path).map_err(|e| format!("{CLI_ENV}={}: {e}", path.display()))?;
        return Ok(ClaudeCli { path, version });
    }
    let root = target_dir()?.join("claude-cli");
    let requirement = format!("claude-agent-sdk=={SDK_VERSION}");
    let wheel = Wheel { requirement: &requirement, executable: BUNDLED, limit: INSTALL_LIMIT };
    let path = wheel.install(&root, &root.join(format!("sdk-{SDK_VERSION}")), version_of)?;
    let version = version_of(&path)?;
    // The pin and the record of what it bundles change together.
    if !version.starts_with(BUNDLED_CLI_VERSION) {
        return Err(format!(
            "claude-agent-sdk {SDK_VERSION} bundles Claude Code {version:?}, not {BUNDLED_CLI_VERSION}: update BUNDLED_CLI_VERSION"
        ));
    }
    Ok(ClaudeCli { path, version })
}

/// `target/` of this workspace: the test executable is `target/<profile>/deps/<test>-<hash>`.
pub(crate) fn target_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("no target directory above {}", exe.display()))
}

/// `claude --version`, run with a throwaway HOME so that nothing of the
/// developer's is read or written.
fn version_of(cli: &Path) -> Result<String, String> {
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = run(
        Command::new(cli).arg("--version").env_clear().env("HOME", home.path()).env("PATH", "/usr/bin:/bin"),
        Duration::from_secs(60),
    )?;
    check(&format!("{} --version", cli.display()), &out)?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
