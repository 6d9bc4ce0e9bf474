//! How a task's worker is confined: `sandbox = "on" | "off" | "required"`,
//! or a table with the paths and ports it may use beyond the defaults:
//!
//! ```toml
//! [defaults]
//! sandbox = { write = ["~/.cargo/registry"], read = ["/srv/models"], connect = [443, 8080] }
//! ```
//!
//! A task's table overrides the defaults field by field. `required` makes
//! the task wait for a sidecar whose kernel enforces every restriction,
//! through the reserved label [`SANDBOX_LABEL`] that such a sidecar sets on
//! itself (a plan may not set it directly).

use serde::Deserialize;

use super::error::{PlanError, err};

/// The label a sidecar sets on itself when its kernel enforces the whole
/// sandbox; a `required` task asks for it as for any other label.
pub const SANDBOX_LABEL: &str = "sandbox";
/// Its value.
pub const SANDBOX_ENFORCED: &str = "enforced";
/// The port a worker may connect to when the plan names none: HTTPS, which
/// is how every hosted model API is reached.
pub const DEFAULT_CONNECT: &[u16] = &[443];
const MAX_PATHS: usize = 64;
const MAX_PORTS: usize = 64;
const MAX_PATH_BYTES: usize = 4096;

/// Whether, and how strictly, a task's worker runs confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Confined with whatever the sidecar's kernel can enforce; what it
    /// cannot is named on the attempt.
    #[default]
    On,
    /// Not confined; recorded on every attempt as such.
    Off,
    /// Runs only on a sidecar that enforces every restriction.
    Required,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::On => "on",
            SandboxMode::Off => "off",
            SandboxMode::Required => "required",
        }
    }
}

/// A task's sandbox settings, as the sidecar receives them. Paths may start
/// with `~/` (the sidecar's home); the sidecar adds the worktree, the
/// system's directories and the agent's own files itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    pub mode: SandboxMode,
    /// Extra paths the worker may read (and execute).
    pub read: Vec<String>,
    /// Extra paths the worker may write (caches shared between attempts).
    pub write: Vec<String>,
    /// TCP ports the worker may connect to, on any host.
    pub connect: Vec<u16>,
    /// The plan's `limits` (a key of their own beside `sandbox`, see
    /// [`super::limits`]): they reach the sidecar with the sandbox.
    pub limits: super::limits::Limits,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            mode: SandboxMode::On,
            read: Vec::new(),
            write: Vec::new(),
            connect: DEFAULT_CONNECT.to_vec(),
            limits: super::limits::Limits::default(),
        }
    }
}

/// The value as written: a word or a table.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSandbox {
    Mode(String),
    Table(RawSandboxTable),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandboxTable {
    mode: Option<String>,
    read: Option<Vec<String>>,
    write: Option<Vec<String>>,
    connect: Option<Vec<i64>>,
}

/// `raw` (at `path`) over `base`: the defaults' settings for a task, or
/// the built-in defaults for `[defaults]`.
pub(super) fn resolve(
    path: &str,
    raw: Option<&RawSandbox>,
    base: &SandboxSpec,
) -> Result<SandboxSpec, PlanError> {
    let table = match raw {
        None => return Ok(base.clone()),
        Some(RawSandbox::Mode(word)) => {
            RawSandboxTable { mode: Some(word.clone()), ..RawSandboxTable::default() }
        }
        Some(RawSandbox::Table(t)) => t.clone(),
    };
    let mut out = base.clone();
    if let Some(word) = &table.mode {
        out.mode = parse_mode(word).ok_or_else(|| {
            let at = if matches!(raw, Some(RawSandbox::Mode(_))) {
                path.to_string()
            } else {
                format!("{path}.mode")
            };
            err(at, format!("must be \"on\", \"off\" or \"required\", not {word:?}"))
        })?;
    }
    if let Some(read) = table.read {
        out.read = check_paths(&format!("{path}.read"), read)?;
    }
    if let Some(write) = table.write {
        out.write = check_paths(&format!("{path}.write"), write)?;
    }
    if let Some(ports) = table.connect {
        out.connect = check_ports(&format!("{path}.connect"), &ports)?;
    }
    Ok(out)
}

fn parse_mode(word: &str) -> Option<SandboxMode> {
    match word {
        "on" => Some(SandboxMode::On),
        "off" => Some(SandboxMode::Off),
        "required" => Some(SandboxMode::Required),
        _ => None,
    }
}

/// `paths` (at `path`) as sandbox paths; the sidecar checks what it
/// receives with the same rule.
pub fn check_paths(path: &str, paths: Vec<String>) -> Result<Vec<String>, PlanError> {
    if paths.len() > MAX_PATHS {
        return Err(err(path, format!("at most {MAX_PATHS} paths")));
    }
    for (i, p) in paths.iter().enumerate() {
        check_sandbox_path(p).map_err(|rule| err(format!("{path}[{i}]"), rule))?;
    }
    Ok(paths)
}

/// A sandbox path: absolute or `~/…`, no `..`, no control characters. The
/// sidecar checks the same rule on what it receives.
pub fn check_sandbox_path(p: &str) -> Result<(), String> {
    if p.is_empty() || p.len() > MAX_PATH_BYTES {
        return Err(format!("must be 1 to {MAX_PATH_BYTES} bytes"));
    }
    if !(p.starts_with('/') || p == "~" || p.starts_with("~/")) {
        return Err(format!("{p:?} must be absolute or start with ~/"));
    }
    if p.chars().any(char::is_control) {
        return Err(format!("{p:?} must not contain control characters"));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(format!("{p:?} must not contain .."));
    }
    if p == "/" || p == "~" || p == "~/" {
        return Err(format!("{p:?} would open the whole file system or home directory"));
    }
    Ok(())
}

/// `ports` (at `path`) as TCP ports, at most 64 of them.
pub fn check_ports(path: &str, ports: &[i64]) -> Result<Vec<u16>, PlanError> {
    if ports.len() > MAX_PORTS {
        return Err(err(path, format!("at most {MAX_PORTS} ports")));
    }
    ports
        .iter()
        .enumerate()
        .map(|(i, &p)| match u16::try_from(p) {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(err(format!("{path}[{i}]"), format!("port {p} must be between 1 and 65535"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SandboxSpec, PlanError> {
        #[derive(Deserialize)]
        struct Doc {
            sandbox: RawSandbox,
        }
        let doc: Doc = toml::from_str(text).expect("toml");
        resolve("defaults.sandbox", Some(&doc.sandbox), &SandboxSpec::default())
    }

    #[test]
    fn a_word_sets_the_mode_and_keeps_the_defaults() {
        let s = parse(r#"sandbox = "required""#).expect("valid");
        assert_eq!(s.mode, SandboxMode::Required);
        assert_eq!(s.connect, vec![443]);
    }

    #[test]
    fn a_table_replaces_only_what_it_names() {
        let s =
            parse(r#"sandbox = { write = ["~/.cargo/registry"], connect = [443, 8080] }"#).expect("valid");
        assert_eq!(s.mode, SandboxMode::On);
        assert_eq!(s.write, vec!["~/.cargo/registry".to_string()]);
        assert!(s.read.is_empty());
        assert_eq!(s.connect, vec![443, 8080]);
    }

    #[test]
    fn bad_values_name_the_field_and_the_rule() {
        let e = parse(r#"sandbox = "strict""#).expect_err("refused");
        assert_eq!(e.path, "defaults.sandbox");
        assert!(e.rule.contains("\"on\", \"off\" or \"required\""), "{e}");
        let e = parse(r#"sandbox = { mode = "maybe" }"#).expect_err("refused");
        assert_eq!(e.path, "defaults.sandbox.mode");
        let e = parse(r#"sandbox = { write = ["relative/dir"] }"#).expect_err("refused");
        assert_eq!(e.path, "defaults.sandbox.write[0]");
        let e = parse(r#"sandbox = { read = ["/srv/../etc"] }"#).expect_err("refused");
        assert!(e.rule.contains(".."), "{e}");
        let e = parse(r#"sandbox = { write = ["/"] }"#).expect_err("refused");
        assert!(e.rule.contains("whole file system"), "{e}");
        let e = parse(r#"sandbox = { connect = [443, 70000] }"#).expect_err("refused");
        assert_eq!(e.path, "defaults.sandbox.connect[1]");
        let e = parse(r#"sandbox = { connect = [0] }"#).expect_err("refused");
        assert!(e.rule.contains("between 1 and 65535"), "{e}");
    }
}
