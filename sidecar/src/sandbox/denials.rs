//! Why a confined command failed, when the sandbox is why: the paths its
//! output says it was denied, each with the setting that would allow it.
//!
//! Landlock itself says nothing to the process beyond `EACCES`; the kernel
//! can log each denial to the audit subsystem (Linux 6.15+), but reading
//! that takes an audit netlink socket and `CAP_AUDIT_READ`, which a
//! sidecar without privileges does not have. So the sidecar reads what the
//! worker's tools print: `Permission denied` and `Operation not permitted`
//! with a path (shells, coreutils, git, Python's `PermissionError`, node's
//! `EACCES`, cargo's `failed to read` followed by its cause), a program
//! named by a shell that could not run it (looked up on the worker's
//! `PATH`), and Python's "Fatal Python error" whose `encodings` module was
//! not found (its prefix, from the path configuration it prints, was
//! unreadable). A path the policy already allows is not the sandbox's
//! doing and is left out.

use std::path::{Path, PathBuf};

use super::toolchains::CREDENTIALS;
use super::{Confinement, Policy, SandboxReport};

/// At most this many denials are named in a reason.
const MAX_NAMED: usize = 3;

/// A path the sandbox denied, and how to allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// What the command tried to reach (its real path, links resolved).
    pub path: PathBuf,
    /// What the setting would allow: the path if it is a directory, else
    /// its directory (never `$HOME` itself: then the file).
    pub allow: PathBuf,
    /// `sandbox.write` (the path is readable, so a write was denied) or
    /// `sandbox.read`.
    pub setting: &'static str,
    /// A credential store: named, but allowing it is the plan's choice.
    pub credential: bool,
}

impl Denial {
    /// `sandbox.read = ["/x"]`, as the plan would say it.
    pub fn setting_text(&self) -> String {
        format!("{} = [{:?}]", self.setting, self.allow.display().to_string())
    }
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.credential {
            write!(f, " (a credential store; allow it only if the task must use it:")?;
        } else {
            write!(f, " (allow it with")?;
        }
        write!(f, " {} in the task or [defaults])", self.setting_text())
    }
}

/// The denials `lines` (a confined command's output, oldest first) show
/// under `policy`, for a worker whose environment is `env`; each path once.
pub fn find(lines: &[String], policy: &Policy, env: &[(String, String)]) -> Vec<Denial> {
    let rules = Rules::of(policy);
    let home = env.iter().find(|(k, _)| k == "HOME").map(|(_, v)| PathBuf::from(v));
    let mut out: Vec<Denial> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        for (path, write) in denied_paths(lines, i, line, env) {
            let Some(d) = rules.denial(&path, write, home.as_deref()) else { continue };
            if !out.iter().any(|o| o.path == d.path) {
                out.push(d);
            }
        }
    }
    out
}

/// The sentence the reason of a command that failed gets, from its output
/// `lines`: empty unless Landlock confined its file system (`confinement`
/// has rules, and `report` says the kernel enforces them).
pub fn explain(
    lines: &[String],
    confinement: Option<&Confinement>,
    report: &SandboxReport,
    env: &[(String, String)],
) -> String {
    let Some(c) = confinement.filter(|c| !c.policy.read.is_empty()) else { return String::new() };
    if !report.enforced.iter().any(|e| e == FILESYSTEM) {
        return String::new();
    }
    reason(&find(lines, &c.policy, env))
}

/// What the report's `enforced` says when Landlock confines the file system.
const FILESYSTEM: &str = "filesystem";

/// The sentence a failure's reason gets: `; the sandbox denied /x (allow
/// it with sandbox.read = ["/x"] in the task or [defaults])`, empty when
/// there is nothing to say.
pub fn reason(denials: &[Denial]) -> String {
    if denials.is_empty() {
        return String::new();
    }
    let named: Vec<String> = denials.iter().take(MAX_NAMED).map(Denial::to_string).collect();
    let more = match denials.len().saturating_sub(MAX_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!("; the sandbox denied {}{more}", named.join(", "))
}

/// Words that mark a line as a denial.
const MARKERS: &[&str] =
    &["Permission denied", "permission denied", "Operation not permitted", "EACCES", "EPERM", "os error 13"];
/// Words that say the denied operation was a write.
const WRITES: &[&str] = &[
    "cannot create",
    "cannot touch",
    "cannot remove",
    "cannot move",
    "for writing",
    "could not lock",
    "unable to create",
    "failed to create",
    "failed to write",
    "Read-only",
    "mkdir",
];

/// The absolute paths line `i` says were denied, each with whether a
/// write was; a line saying only "Permission denied (os error 13)" takes
/// the path of the lines just before it (cargo's "Caused by:" chain).
fn denied_paths(lines: &[String], i: usize, line: &str, env: &[(String, String)]) -> Vec<(PathBuf, bool)> {
    if let Some(prefix) = python_without_encodings(lines, i) {
        return vec![(prefix, false)];
    }
    if !MARKERS.iter().any(|m| line.contains(m)) {
        return Vec::new();
    }
    let write = WRITES.iter().any(|w| line.contains(w));
    let mut paths = absolute_paths(line);
    if paths.is_empty() {
        paths.extend(program_on_path(line, env));
    }
    if paths.is_empty() {
        let before = lines[i.saturating_sub(3)..i].iter().rev();
        if let Some(p) = before.map(|l| absolute_paths(l)).find(|p| !p.is_empty()) {
            let write = lines[i.saturating_sub(3)..i].iter().any(|l| WRITES.iter().any(|w| l.contains(w)));
            return p.into_iter().map(|p| (p, write)).collect();
        }
    }
    paths.into_iter().map(|p| (p, write)).collect()
}

/// "Fatal Python error" at line `i` with `encodings` not found: the prefix
/// its path configuration names (`sys.base_prefix = '/x'`), which the
/// interpreter could not read its standard library from.
fn python_without_encodings(lines: &[String], i: usize) -> Option<PathBuf> {
    if !lines[i].contains("Fatal Python error") {
        return None;
    }
    let near = &lines[i.saturating_sub(40)..(i + 5).min(lines.len())];
    if !near.iter().any(|l| l.contains("No module named 'encodings'") || l.contains("init_fs_encoding")) {
        return None;
    }
    let prefix = |key: &str| {
        near.iter().find_map(|l| {
            let v = l.trim().strip_prefix(key)?.trim().strip_prefix('=')?.trim();
            Some(PathBuf::from(v.trim_matches('\'')))
        })
    };
    prefix("sys.base_prefix").or_else(|| prefix("sys.prefix")).filter(|p| p.is_absolute())
}

/// The absolute paths in a line of a tool's output, where they are quoted
/// ('/x', "/x", `/x`) or stand between spaces, colons or commas.
fn absolute_paths(line: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(off) = line[i..].find('/') {
        let start = i + off;
        let quote = start.checked_sub(1).map(|p| bytes[p]).filter(|b| matches!(b, b'\'' | b'"' | b'`'));
        let boundary =
            start == 0 || quote.is_some() || matches!(bytes[start - 1], b' ' | b':' | b',' | b'(' | b'=');
        let end = match quote {
            Some(q) => line[start..].find(q as char).map_or(line.len(), |e| start + e),
            None => {
                line[start..].find([' ', ':', ',', ')', '\'', '"', '`']).map_or(line.len(), |e| start + e)
            }
        };
        if boundary && end > start + 1 {
            let p = line[start..end].trim_end_matches(['.', ';']);
            if !p.contains("//") && !p.starts_with("/proc/self") {
                out.push(PathBuf::from(p));
            }
        }
        i = end.max(start + 1);
    }
    out
}

/// A shell's `sh: 1: python: Permission denied`: the program it could not
/// run, as the worker's `PATH` finds it.
fn program_on_path(line: &str, env: &[(String, String)]) -> Option<PathBuf> {
    let head = line.split(": Permission denied").next().filter(|h| h.len() < line.len())?;
    let name = head.rsplit(": ").next()?.trim();
    if name.is_empty() || name.contains(['/', ' ']) {
        return None;
    }
    let (_, path) = env.iter().find(|(k, _)| k == "PATH")?;
    std::env::split_paths(path).map(|d| d.join(name)).find(|p| p.exists())
}

/// The policy's rules as real paths: Landlock checks the real path of what
/// is opened.
struct Rules {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
}

impl Rules {
    fn of(policy: &Policy) -> Rules {
        let real = |v: &[PathBuf]| v.iter().filter_map(|p| p.canonicalize().ok()).collect();
        Rules { read: real(&policy.read), write: real(&policy.write) }
    }

    /// The denial of `path`, if the policy is why.
    fn denial(&self, path: &Path, write: bool, home: Option<&Path>) -> Option<Denial> {
        let path = real_path(path);
        if self.write.iter().any(|w| path.starts_with(w)) {
            return None; // the sandbox allows everything there
        }
        let readable = self.read.iter().any(|r| path.starts_with(r));
        if readable && !write {
            return None;
        }
        let allow = match path.is_dir() {
            true => path.clone(),
            false => match path.parent() {
                Some(dir) if Some(dir) != home && dir.parent().is_some() => dir.to_path_buf(),
                _ => path.clone(),
            },
        };
        let credential = home.is_some_and(|h| CREDENTIALS.iter().any(|c| path.starts_with(h.join(c))));
        let setting = if readable || write { "sandbox.write" } else { "sandbox.read" };
        Some(Denial { path, allow, setting, credential })
    }
}

/// `path` with its links resolved as far as they resolve: what does not
/// exist (a file a command tried to create) keeps its own name under its
/// directory's real path.
fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => real_path(dir).join(name),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
#[path = "denials_tests.rs"]
mod tests;
