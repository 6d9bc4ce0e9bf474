//! The forge's token and webhook secret: the controller's own, read where
//! the plan says but only from sources the controller's operator allowed.
//!
//! A plan comes from whoever holds the operator role; without this rule it
//! could name any file or variable of the controller's and have its
//! contents sent as a bearer token to an `api_url` of its choosing.

use swarm_core::plan::SecretSource;

/// Most bytes a token file may hold: tokens are short.
const MAX_SECRET_BYTES: u64 = 16 << 10;

/// Which sources a plan's `[forge]` may name.
#[derive(Debug, Clone, Default)]
pub enum SecretPolicy {
    /// Any: the controller is the operator's own process (local mode).
    #[default]
    Any,
    /// Only these (`--forge-secret env:NAME` or `file:PATH`).
    Only(Vec<SecretSource>),
}

impl SecretPolicy {
    /// From `--forge-secret` values: `env:NAME` or `file:PATH`.
    pub fn from_flags(values: &[String]) -> Result<SecretPolicy, String> {
        let mut allowed = Vec::new();
        for v in values.iter().filter(|v| !v.trim().is_empty()) {
            let source = match v.split_once(':') {
                Some(("env", name)) => {
                    swarm_core::plan::secrets::check_env_name(name)
                        .map_err(|rule| format!("--forge-secret {v}: {rule}"))?;
                    SecretSource::Env(name.to_string())
                }
                Some(("file", path)) if path.starts_with('/') => SecretSource::File(path.to_string()),
                _ => return Err(format!("--forge-secret {v}: must be env:NAME or file:/absolute/path")),
            };
            allowed.push(source);
        }
        Ok(SecretPolicy::Only(allowed))
    }

    fn allows(&self, source: &SecretSource) -> bool {
        match self {
            SecretPolicy::Any => true,
            SecretPolicy::Only(list) => list.contains(source),
        }
    }
}

/// The secret `source` holds, trimmed of the newline editors add; the
/// error names the source (never the value) and the rule.
pub fn read(policy: &SecretPolicy, source: &SecretSource) -> Result<String, String> {
    if !policy.allows(source) {
        return Err(format!(
            "{source} is not a forge secret this controller allows (start it with --forge-secret to allow it)"
        ));
    }
    let text = match source {
        SecretSource::Env(name) => std::env::var(name).map_err(|_| format!("{source} is not set"))?,
        SecretSource::File(path) => {
            let path = expand_home(path);
            let meta = std::fs::metadata(&path).map_err(|e| format!("{source} cannot be read: {e}"))?;
            if !meta.is_file() || meta.len() > MAX_SECRET_BYTES {
                return Err(format!("{source} must be a regular file of at most {MAX_SECRET_BYTES} bytes"));
            }
            std::fs::read_to_string(&path).map_err(|e| format!("{source} cannot be read as text: {e}"))?
        }
    };
    let secret = text.trim_end_matches(['\r', '\n']).to_string();
    if secret.trim().is_empty() {
        return Err(format!("{source} is empty"));
    }
    Ok(secret)
}

fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_allowed_sources_are_read_and_errors_never_hold_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "ghp_s3cret\n").unwrap();
        let path = file.display().to_string();
        let source = SecretSource::File(path.clone());
        assert_eq!(read(&SecretPolicy::Any, &source).unwrap(), "ghp_s3cret");

        let policy = SecretPolicy::from_flags(&[format!("file:{path}")]).unwrap();
        assert_eq!(read(&policy, &source).unwrap(), "ghp_s3cret");
        let other = SecretSource::File("/etc/shadow".into());
        let e = read(&policy, &other).unwrap_err();
        assert!(e.contains("not a forge secret this controller allows"), "{e}");
        let e = read(&policy, &SecretSource::Env("HOME".into())).unwrap_err();
        assert!(e.contains("--forge-secret"), "{e}");

        std::fs::write(&file, "\n").unwrap();
        let e = read(&SecretPolicy::Any, &source).unwrap_err();
        assert!(e.ends_with("is empty") && !e.contains("s3cret"), "{e}");
        let e = read(&SecretPolicy::Any, &SecretSource::File(dir.path().display().to_string())).unwrap_err();
        assert!(e.contains("regular file"), "{e}");
    }

    #[test]
    fn bad_flags_name_the_rule() {
        for bad in ["token", "env:1X", "file:relative/path", "vault:x"] {
            let e = SecretPolicy::from_flags(&[bad.to_string()]).unwrap_err();
            assert!(e.starts_with(&format!("--forge-secret {bad}")), "{e}");
        }
        assert!(matches!(
            SecretPolicy::from_flags(&["env:GITHUB_TOKEN".into()]).unwrap(),
            SecretPolicy::Only(v) if v == vec![SecretSource::Env("GITHUB_TOKEN".into())]
        ));
    }
}
