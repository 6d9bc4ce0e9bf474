//! The toolchains a worker's `PATH` really leads to. A `PATH` entry is
//! often a shim or a proxy whose program lives elsewhere: pyenv's and
//! asdf's shims run an interpreter under `versions/` or `installs/`,
//! rustup's `cargo` runs a toolchain under `toolchains/`, a venv's `python`
//! is a link to a base interpreter whose standard library is in its prefix.
//! Landlock checks the real path of what is opened or executed, so the
//! entry alone is not enough: [`find`] resolves each entry to the installs
//! behind it, which the sandbox then allows read-only (and executable)
//! without a setting.
//!
//! What it finds is never a credential store ([`CREDENTIALS`]), `$HOME`
//! itself, `/`, or anything at or above swarm's own directories (the
//! repository's git state, the worktrees): a candidate that is, contains
//! or lies in one is dropped, and the worker then needs the plan's
//! `sandbox.read` for it, which names the path on purpose.

use std::path::{Component, Path, PathBuf};

/// The variables that say where a toolchain lives: a worker gets them
/// from the sidecar's environment (see [`super::inherited_env`]), so that
/// its `cargo` finds the same `RUSTUP_HOME` as the user's.
pub const LOCATORS: &[&str] =
    &["PYENV_ROOT", "RUSTUP_HOME", "CARGO_HOME", "NVM_DIR", "ASDF_DATA_DIR", "MISE_DATA_DIR", "VIRTUAL_ENV"];

/// Under `$HOME`: where credentials live. Discovery never allows one of
/// these, a directory inside one, or a directory holding one.
pub const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".docker",
    ".kube",
    ".gnupg",
    ".password-store",
    ".netrc",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".git-credentials",
    ".vault-token",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".terraform.d",
    ".config/gh",
    ".config/hub",
    ".config/gcloud",
    ".config/git/credentials",
    ".config/op",
    ".config/swarm",
    ".local/share/keyrings",
    ".local/state/swarm",
    ".claude",
    ".claude.json",
    ".codex",
];

/// File names that hold credentials wherever they are (an install's global
/// `etc/npmrc` may carry a registry token, `CARGO_HOME` may be anywhere):
/// a candidate directory holding one is dropped.
const CREDENTIAL_FILES: &[&str] =
    &["credentials", "credentials.toml", ".npmrc", "etc/npmrc", ".pypirc", ".netrc", ".git-credentials"];

/// At most this many links are followed in one `PATH` directory: a
/// directory of thousands of programs is a system one, already readable.
const MAX_LINKS_PER_DIR: usize = 512;

/// What discovery must never reach, beyond the credential stores.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// Nothing at, above or below these: the repository's git directory,
    /// the directory holding the worktrees.
    pub sealed: Vec<PathBuf>,
    /// Nothing at or above these (below is fine): the user's checkout,
    /// whose `.venv/` a worker may use.
    pub above: Vec<PathBuf>,
}

/// The installs behind the worker's `PATH`, to be read and executed: real
/// directories (and a few files), without duplicates or anything `guard`
/// or [`CREDENTIALS`] rule out. Nothing here fails: what cannot be read is
/// not found.
pub fn find(env: &[(String, String)], guard: &Guard) -> Vec<PathBuf> {
    let var = |k: &str| env.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let home = var("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let homes = Homes::new(&var, home.as_deref());
    let mut found = Found::default();
    let path = var("PATH").unwrap_or_default();
    let entries: Vec<PathBuf> = std::env::split_paths(path).filter(|p| p.is_absolute()).collect();
    for entry in &entries {
        let Ok(real) = entry.canonicalize() else { continue };
        found.push(&real);
        homes.managers(entry, &real, &mut found);
        if let Some(prefix) = install_prefix(&real) {
            found.prefix(&prefix);
        }
        linked_installs(&real, &mut found);
    }
    if let Some(venv) = var("VIRTUAL_ENV").filter(|v| Path::new(v).is_absolute()) {
        found.venv(Path::new(venv));
    }
    let denied = denied(home.as_deref(), homes.cargo.as_deref());
    found.0.retain(|p| allowed(p, home.as_deref(), &denied, guard));
    // What the sandbox reads anyway (the system's directories, the PATH
    // entries as written) is not a finding.
    let covered = |p: &PathBuf| {
        super::SYSTEM_READ.iter().any(|s| p.starts_with(s)) || entries.iter().any(|e| p.starts_with(e))
    };
    found.0.retain(|p| !covered(p));
    dedup_nested(found.0)
}

/// Where each manager keeps its installs, from the environment or the
/// managers' defaults under `$HOME`.
struct Homes {
    pyenv: Option<PathBuf>,
    rustup: Option<PathBuf>,
    cargo: Option<PathBuf>,
    nvm: Option<PathBuf>,
    asdf: Option<PathBuf>,
    mise: Option<PathBuf>,
    home: Option<PathBuf>,
}

impl Homes {
    fn new<'a>(var: &dyn Fn(&str) -> Option<&'a str>, home: Option<&Path>) -> Homes {
        let or_home = |k: &str, default: &str| -> Option<PathBuf> {
            match var(k).filter(|v| Path::new(v).is_absolute()) {
                Some(v) => Some(PathBuf::from(v)),
                None => home.map(|h| h.join(default)),
            }
        };
        let xdg_data = or_home("XDG_DATA_HOME", ".local/share");
        let mise = match var("MISE_DATA_DIR").filter(|v| Path::new(v).is_absolute()) {
            Some(v) => Some(PathBuf::from(v)),
            None => xdg_data.map(|d| d.join("mise")),
        };
        Homes {
            pyenv: or_home("PYENV_ROOT", ".pyenv"),
            rustup: or_home("RUSTUP_HOME", ".rustup"),
            cargo: or_home("CARGO_HOME", ".cargo"),
            nvm: or_home("NVM_DIR", ".nvm"),
            asdf: or_home("ASDF_DATA_DIR", ".asdf"),
            mise,
            home: home.map(Path::to_path_buf),
        }
    }

    /// The version managers whose programs `entry` (really `real`) holds.
    fn managers(&self, entry: &Path, real: &Path, found: &mut Found) {
        fn under<'a>(root: &'a Option<PathBuf>, entry: &Path, real: &Path) -> Option<&'a PathBuf> {
            root.as_ref().filter(|r| entry.starts_with(r) || real.starts_with(real_or(r)))
        }
        // pyenv: its shims run `pyenv exec` (libexec/, plugins/ and their
        // hooks in pyenv.d/), which picks a version under versions/.
        if let Some(root) = under(&self.pyenv, entry, real) {
            found.under(root, &["versions", "libexec", "plugins", "pyenv.d", "shims", "bin", "version"]);
        }
        // rustup's proxies (cargo, rustc) run a toolchain named in its
        // settings; cargo reads the crates it downloaded before.
        if (real.join("rustup").is_file() || is_link_to(&real.join("cargo"), "rustup"))
            && let Some(root) = &self.rustup
        {
            found.under(root, &["toolchains", "settings.toml"]);
        }
        if real.join("cargo").is_file()
            && let Some(root) = &self.cargo
        {
            found.under(root, &["registry", "git"]);
        }
        // nvm: every installed node, each checked on its own (a prefix's
        // global `etc/npmrc` may hold a token).
        if let Some(root) = under(&self.nvm, entry, real)
            && let Ok(versions) = std::fs::read_dir(root.join("versions/node"))
        {
            for v in versions.flatten().take(MAX_LINKS_PER_DIR) {
                found.push(&v.path());
            }
        }
        // asdf's shims run `asdf exec` (its lib/ in versions before the
        // rewrite in Go), which reads the plugin's scripts and the user's
        // `.tool-versions`.
        if let Some(root) = under(&self.asdf, entry, real) {
            found.under(root, &["installs", "plugins", "lib", "shims", "bin"]);
            found.home_files(self.home.as_deref(), &[".tool-versions", ".asdfrc"]);
        }
        if let Some(root) = under(&self.mise, entry, real) {
            found.under(root, &["installs", "plugins", "shims"]);
            found.home_files(self.home.as_deref(), &[".tool-versions"]);
        }
    }
}

/// Candidates in the order found.
#[derive(Default)]
struct Found(Vec<PathBuf>);

impl Found {
    fn push(&mut self, p: &Path) {
        let real = real_or(p);
        if real.exists() && !self.0.contains(&real) {
            self.0.push(real);
        }
    }

    fn under(&mut self, root: &Path, names: &[&str]) {
        for name in names {
            self.push(&root.join(name));
        }
    }

    fn home_files(&mut self, home: Option<&Path>, names: &[&str]) {
        if let Some(home) = home {
            self.under(home, names);
        }
    }

    /// The prefix a `<prefix>/bin` directory was installed into, when it
    /// looks like one (a venv, or `lib/`, `share/` or `include/` beside
    /// `bin/`, and not a git checkout).
    fn prefix(&mut self, prefix: &Path) {
        if prefix.join("pyvenv.cfg").is_file() {
            return self.venv(prefix);
        }
        let install = ["lib", "share", "include"].iter().any(|d| prefix.join(d).is_dir());
        if install && !prefix.join(".git").exists() {
            self.push(prefix);
        }
    }

    /// A venv at `root` (a directory with `pyvenv.cfg`): itself, for its
    /// site-packages, and the base interpreter it was made from (`home =`)
    /// with that interpreter's prefix, where the standard library lives.
    fn venv(&mut self, root: &Path) {
        let Ok(cfg) = std::fs::read_to_string(root.join("pyvenv.cfg")) else { return };
        self.push(root);
        let value = |key: &str| {
            cfg.lines().find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        let Some(base) = value("home").map(PathBuf::from).filter(|p| p.is_absolute()) else { return };
        self.push(&base);
        let base = real_or(&base);
        let Some(prefix) = base.parent().filter(|_| base.ends_with("bin")) else { return };
        // The whole prefix where it may be allowed; else (a prefix such as
        // $HOME, which `allowed` drops) the standard library alone.
        self.push(prefix);
        let version = value("version_info").or_else(|| value("version")).unwrap_or_default();
        let mut parts = version.split('.');
        if let (Some(major), Some(minor)) = (parts.next(), parts.next()) {
            self.push(&prefix.join("lib").join(format!("python{major}.{minor}")));
        }
    }
}

/// The directory a program in `bin` was installed into: `<prefix>/bin`'s
/// prefix.
fn install_prefix(bin: &Path) -> Option<PathBuf> {
    bin.ends_with("bin").then(|| bin.parent().map(Path::to_path_buf)).flatten()
}

/// Programs in `dir` that are links to somewhere else (pipx's
/// `~/.local/bin/black`, a hand-made `~/bin/node`): their install's prefix,
/// and the venv there if it is one.
fn linked_installs(dir: &Path, found: &mut Found) {
    if super::SYSTEM_READ.iter().any(|s| dir.starts_with(s)) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten().take(MAX_LINKS_PER_DIR) {
        if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
            continue;
        }
        let Ok(target) = entry.path().canonicalize() else { continue };
        let Some(parent) = target.parent().filter(|p| *p != dir) else { continue };
        found.push(parent);
        if let Some(prefix) = install_prefix(parent) {
            found.prefix(&prefix);
        }
    }
}

/// Whether `link` is a symbolic link to a file named `name`.
fn is_link_to(link: &Path, name: &str) -> bool {
    link.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink())
        && link.canonicalize().is_ok_and(|t| t.file_name().is_some_and(|n| n == name))
}

fn real_or(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// The credential stores, as written and as their links resolve.
fn denied(home: Option<&Path>, cargo: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        home.map(|h| CREDENTIALS.iter().map(|c| h.join(c)).collect()).unwrap_or_default();
    if let Some(cargo) = cargo {
        out.extend(["credentials", "credentials.toml"].iter().map(|c| cargo.join(c)));
    }
    let resolved: Vec<PathBuf> = out.iter().filter_map(|p| p.canonicalize().ok()).collect();
    out.extend(resolved);
    out
}

/// Whether discovery may allow `candidate` (a real path).
fn allowed(candidate: &Path, home: Option<&Path>, denied: &[PathBuf], guard: &Guard) -> bool {
    let normal = candidate.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !normal || candidate.parent().is_none() {
        return false; // `/`, or `..` left in a path that did not resolve
    }
    let homes = home.into_iter().flat_map(|h| [h.to_path_buf(), real_or(h)]);
    if homes.into_iter().any(|h| h.starts_with(candidate)) {
        return false;
    }
    let overlaps = |p: &PathBuf| p.starts_with(candidate) || candidate.starts_with(p);
    if denied.iter().any(overlaps) || guard.sealed.iter().any(overlaps) {
        return false;
    }
    if guard.above.iter().any(|p| p.starts_with(candidate)) {
        return false;
    }
    !(candidate.is_dir() && CREDENTIAL_FILES.iter().any(|f| candidate.join(f).exists()))
}

/// Drops what another entry already covers.
fn dedup_nested(mut found: Vec<PathBuf>) -> Vec<PathBuf> {
    let all = found.clone();
    found.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    found
}

/// The `attempt.sandbox` line naming what was found: at most `MAX` paths.
pub fn describe(found: &[PathBuf]) -> Option<String> {
    const MAX: usize = 12;
    if found.is_empty() {
        return None;
    }
    let mut shown: Vec<String> = found.iter().take(MAX).map(|p| p.display().to_string()).collect();
    if found.len() > MAX {
        shown.push(format!("and {} more", found.len() - MAX));
    }
    Some(format!("{TOOLCHAINS}: {}", shown.join(", ")))
}

/// How the report names the toolchains found on `PATH`.
pub const TOOLCHAINS: &str = "toolchains read-only";

#[cfg(test)]
#[path = "toolchains_tests.rs"]
mod tests;
