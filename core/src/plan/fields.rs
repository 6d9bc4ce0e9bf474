//! Shapes and checks several sections of a plan share: the worker
//! command, verify tiers, labels and environment names.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{PlanError, err};
use super::sandbox;
use crate::names::check_id;

/// A worker command: a shell line (run with `sh -c`) or an argv array.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum Command {
    Shell(String),
    Argv(Vec<String>),
}

impl Command {
    pub(super) fn into_argv(self) -> Vec<String> {
        match self {
            Command::Shell(line) => vec!["sh".into(), "-c".into(), line],
            Command::Argv(argv) => argv,
        }
    }
}

/// One verify tier, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyTier {
    pub name: String,
    pub command: String,
    pub blocking: bool,
    pub timeout_secs: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTier {
    name: String,
    command: String,
    #[serde(default = "yes")]
    blocking: bool,
    #[serde(default = "default_tier_timeout")]
    timeout_secs: u32,
}

fn yes() -> bool {
    true
}

fn default_tier_timeout() -> u32 {
    600
}

/// Environment names a plan may not override: the sidecar owns them.
const RESERVED_ENV_PREFIX: &str = "SWARM_";

pub(super) fn check_labels(path: &str, labels: &BTreeMap<String, String>) -> Result<(), PlanError> {
    for (key, value) in labels {
        if key == sandbox::SANDBOX_LABEL {
            return Err(err(
                format!("{path}.{key}"),
                "the sandbox label is set by sidecars themselves; ask for it with sandbox = \"required\"",
            ));
        }
        check_label(key, value).map_err(|rule| err(format!("{path}.{key}"), rule))?;
    }
    Ok(())
}

/// Label keys follow the id pattern (plus `.` and `/` for namespacing);
/// values are short printable text.
pub fn check_label(key: &str, value: &str) -> Result<(), String> {
    let key_ok = !key.is_empty()
        && key.len() <= 63
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if !key_ok {
        return Err(format!("label key {key:?} must be 1-63 of [A-Za-z0-9._/-]"));
    }
    if value.len() > 63 || value.chars().any(|c| c.is_control()) {
        return Err(format!("label value {value:?} must be at most 63 printable characters"));
    }
    Ok(())
}

pub(super) fn check_env(path: &str, env: &BTreeMap<String, String>) -> Result<(), PlanError> {
    for key in env.keys() {
        let ok = !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !key.starts_with(|c: char| c.is_ascii_digit());
        if !ok {
            return Err(err(
                format!("{path}.{key}"),
                "environment names must match ^[A-Za-z_][A-Za-z0-9_]*$",
            ));
        }
        if key.starts_with(RESERVED_ENV_PREFIX) || key == "TRACEPARENT" {
            return Err(err(format!("{path}.{key}"), "SWARM_* and TRACEPARENT are set by the sidecar"));
        }
    }
    Ok(())
}

pub(super) fn check_tiers(path: &str, tiers: Vec<RawTier>) -> Result<Vec<VerifyTier>, PlanError> {
    let mut out: Vec<VerifyTier> = Vec::with_capacity(tiers.len());
    for (i, tier) in tiers.into_iter().enumerate() {
        check_id(&tier.name).map_err(|rule| err(format!("{path}[{i}].name"), rule))?;
        if out.iter().any(|t| t.name == tier.name) {
            return Err(err(format!("{path}[{i}].name"), format!("duplicate tier {:?}", tier.name)));
        }
        if tier.command.trim().is_empty() {
            return Err(err(format!("{path}[{i}].command"), "must not be empty"));
        }
        if tier.timeout_secs == 0 {
            return Err(err(format!("{path}[{i}].timeout_secs"), "must be at least 1"));
        }
        out.push(VerifyTier {
            name: tier.name,
            command: tier.command,
            blocking: tier.blocking,
            timeout_secs: tier.timeout_secs,
        });
    }
    Ok(out)
}
