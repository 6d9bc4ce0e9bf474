//! The tokens file (`--tokens`): named bearer tokens with a role, stored as
//! SHA-256 digests so the file never holds a usable credential.
//!
//! ```toml
//! [[tokens]]
//! name = "build-sidecars"
//! role = "sidecar"          # sidecar | operator | admin
//! workers = "build-*"       # sidecar only: the worker ids it may claim
//! sha256 = "<64 hex digits>"
//! ```

use std::collections::HashSet;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Role, WorkerPattern};

#[derive(Debug, Clone)]
pub struct TokenEntry {
    pub name: String,
    pub role: Role,
    pub workers: Option<WorkerPattern>,
    pub sha256: [u8; 32],
}

#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("tokens file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tokens: Vec<RawToken>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    name: String,
    role: String,
    workers: Option<String>,
    sha256: String,
}

/// The lowercase hex SHA-256 of a token, as the file stores it.
pub fn hash_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

pub fn load(path: &Path) -> Result<Vec<TokenEntry>, TokensError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TokensError::Read { path: path.display().to_string(), reason: e.to_string() })?;
    parse(&text).map_err(|e| TokensError::Read { path: path.display().to_string(), reason: e.to_string() })
}

/// Parses and validates the file; an error names the line or the field
/// (`tokens[2].role`) and the rule.
pub fn parse(text: &str) -> Result<Vec<TokenEntry>, TokensError> {
    let de = toml::Deserializer::parse(text)
        .map_err(|e| TokensError::Invalid(e.to_string().trim().to_string()))?;
    let raw: RawFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        TokensError::Invalid(format!("{path}: {}", e.into_inner().message().trim()))
    })?;
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(raw.tokens.len());
    for (i, t) in raw.tokens.into_iter().enumerate() {
        let err = |field: &str, rule: String| TokensError::Invalid(format!("tokens[{i}].{field}: {rule}"));
        if t.name.is_empty() || !t.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
            return Err(err("name", format!("{:?}: letters, digits and - _ . @ only, not empty", t.name)));
        }
        if !names.insert(t.name.clone()) {
            return Err(err("name", format!("{:?} appears twice", t.name)));
        }
        let role = Role::parse(&t.role)
            .ok_or_else(|| err("role", format!("{:?}: must be sidecar, operator or admin", t.role)))?;
        let workers = match (role, &t.workers) {
            (Role::Sidecar, Some(w)) => {
                Some(WorkerPattern::new(w).map_err(|r| err("workers", format!("{w:?}: {r}")))?)
            }
            (Role::Sidecar, None) => {
                return Err(err(
                    "workers",
                    "required for role sidecar (a worker id or a glob like \"build-*\")".into(),
                ));
            }
            (_, Some(_)) => {
                return Err(err("workers", format!("only for role sidecar, not {}", role.as_str())));
            }
            (_, None) => None,
        };
        let sha256 =
            parse_hex(&t.sha256).ok_or_else(|| err("sha256", "must be 64 lowercase hex digits".into()))?;
        out.push(TokenEntry { name: t.name, role, workers, sha256 });
    }
    Ok(out)
}

fn parse_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bad_entries_name_the_field() {
        let h = hash_hex("x");
        let cases = [
            (format!("[[tokens]]\nname = \"a\"\nrole = \"root\"\nsha256 = \"{h}\"\n"), "tokens[0].role"),
            (
                format!("[[tokens]]\nname = \"a\"\nrole = \"sidecar\"\nsha256 = \"{h}\"\n"),
                "tokens[0].workers",
            ),
            (
                "[[tokens]]\nname = \"a\"\nrole = \"admin\"\nsha256 = \"abc\"\n".to_string(),
                "tokens[0].sha256",
            ),
            (format!("[[tokens]]\nname = \"a\"\nrole = \"admin\"\nsha = \"{h}\"\n"), "tokens[0]"),
            ("[[tokens]]\nname = \"a\"\nrole = \n".to_string(), "line 3"),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should name {want}");
        }
        let ok = parse(&format!(
            "[[tokens]]\nname = \"a\"\nrole = \"sidecar\"\nworkers = \"b-*\"\nsha256 = \"{h}\"\n"
        ));
        assert_eq!(ok.unwrap()[0].sha256.to_vec(), Sha256::digest(b"x").to_vec());
    }
}
