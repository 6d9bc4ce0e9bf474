//! Secrets handed to one task's worker: where the sidecar reads each, never
//! the value. The plan the controller keeps, its events and every view name
//! only the source:
//!
//! ```toml
//! [defaults]
//! secrets = { ANTHROPIC_API_KEY = { file = "/run/secrets/anthropic" }, GH_TOKEN = { env = "GH_TOKEN" } }
//! ```
//!
//! A task's table adds to the defaults' (a name in both takes the task's).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{PlanError, err};
use super::sandbox::check_sandbox_path;

const MAX_SECRETS: usize = 64;

/// Where the sidecar reads a secret when the attempt starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file on the sidecar's machine (absolute or `~/…`); one trailing
    /// newline is not part of the value.
    File(String),
    /// A variable of the sidecar's own environment.
    Env(String),
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::File(p) => write!(f, "file {p}"),
            SecretSource::Env(v) => write!(f, "environment variable {v}"),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecret {
    file: Option<String>,
    env: Option<String>,
}

impl RawSecret {
    /// Where the secret at `at` is read: exactly one of a file or a variable.
    pub(super) fn source(&self, at: &str) -> Result<SecretSource, PlanError> {
        match (&self.file, &self.env) {
            (Some(file), None) => {
                check_sandbox_path(file).map_err(|rule| err(format!("{at}.file"), rule))?;
                Ok(SecretSource::File(file.clone()))
            }
            (None, Some(var)) => {
                check_env_name(var).map_err(|rule| err(format!("{at}.env"), rule))?;
                Ok(SecretSource::Env(var.clone()))
            }
            _ => Err(err(at, "set exactly one of file or env")),
        }
    }
}

/// `raw` (at `path`) over `base`.
pub(super) fn resolve(
    path: &str,
    raw: Option<&BTreeMap<String, RawSecret>>,
    base: &BTreeMap<String, SecretSource>,
    env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, SecretSource>, PlanError> {
    let mut out = base.clone();
    for (name, secret) in raw.into_iter().flatten() {
        let at = format!("{path}.{name}");
        check_env_name(name).map_err(|rule| err(&at, rule))?;
        out.insert(name.clone(), secret.source(&at)?);
    }
    if out.len() > MAX_SECRETS {
        return Err(err(path, format!("at most {MAX_SECRETS} secrets")));
    }
    if let Some(name) = out.keys().find(|n| env.contains_key(*n)) {
        return Err(err(format!("{path}.{name}"), "is also set in env; a variable is a secret or not"));
    }
    Ok(out)
}

/// A variable name a secret may be given as: the `env` rule, and not one
/// the sidecar sets.
pub fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !ok {
        return Err(format!("{name:?} must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most 128 characters)"));
    }
    if name.starts_with("SWARM_") || name == "TRACEPARENT" {
        return Err(format!("{name}: SWARM_* and TRACEPARENT are set by the sidecar"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BTreeMap<String, SecretSource>, PlanError> {
        #[derive(Deserialize)]
        struct Doc {
            secrets: BTreeMap<String, RawSecret>,
        }
        let doc: Doc = toml::from_str(text).expect("toml");
        resolve("defaults.secrets", Some(&doc.secrets), &BTreeMap::new(), &BTreeMap::new())
    }

    #[test]
    fn sources_are_a_file_or_a_variable() {
        let s = parse(r#"secrets = { A = { file = "/run/secrets/a" }, B = { env = "GH_TOKEN" } }"#)
            .expect("valid");
        assert_eq!(s["A"], SecretSource::File("/run/secrets/a".into()));
        assert_eq!(s["B"], SecretSource::Env("GH_TOKEN".into()));
    }

    #[test]
    fn bad_secrets_name_the_field_and_the_rule() {
        let e = parse(r#"secrets = { A = { file = "/a", env = "B" } }"#).expect_err("both");
        assert_eq!(
            (e.path.as_str(), e.rule.as_str()),
            ("defaults.secrets.A", "set exactly one of file or env")
        );
        let e = parse(r#"secrets = { A = {} }"#).expect_err("neither");
        assert_eq!(e.path, "defaults.secrets.A");
        let e = parse(r#"secrets = { SWARM_TOKEN = { env = "X" } }"#).expect_err("reserved");
        assert!(e.rule.contains("set by the sidecar"), "{e}");
        let e = parse(r#"secrets = { A = { file = "relative" } }"#).expect_err("relative");
        assert_eq!(e.path, "defaults.secrets.A.file");
        let e = parse(r#"secrets = { "1A" = { env = "X" } }"#).expect_err("name");
        assert_eq!(e.path, "defaults.secrets.1A");
    }

    #[test]
    fn a_secret_is_not_also_a_plain_variable() {
        let raw: BTreeMap<String, RawSecret> =
            [("A".to_string(), RawSecret { file: None, env: Some("X".into()) })].into();
        let env = [("A".to_string(), "plain".to_string())].into();
        let e = resolve("tasks[0].secrets", Some(&raw), &BTreeMap::new(), &env).expect_err("both");
        assert_eq!(e.path, "tasks[0].secrets.A");
    }
}
