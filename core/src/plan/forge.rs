//! Where a swarm's work goes when it is done: a branch pushed to a git
//! remote and, on a forge, one pull request (root plans only).
//!
//! ```toml
//! [forge]
//! provider = "github"                 # "github", or "git": push only, no pull request
//! remote = "origin"                   # a remote of the controller's repository, or its URL
//! api_url = "https://ghe.example/api/v3"  # GitHub Enterprise Server; read from the remote's host otherwise
//! token = { env = "GITHUB_TOKEN" }    # or { file = "/run/secrets/github" }: read by the controller only
//! pr = "swarm"                        # one pull request when the swarm completes; "task": updated as each task merges
//! merge = "manual"                    # "manual" (people merge), or "auto" when checks pass and reviews approve
//! ci_retries = 3                      # failed-check rounds sent back to agents before the operator is asked
//! branch = "swarm/auth"               # the remote branch; the integration branch's name by default
//! base = "main"                       # what the pull request merges into; the target branch by default
//! webhook_secret = { env = "GITHUB_WEBHOOK_SECRET" }
//! ```
//!
//! The token and the webhook secret are the controller's: no worker's
//! environment holds them, and the plan keeps only where they are read.

use serde::Deserialize;

use super::error::{PlanError, err};
use super::secrets::RawSecret;
use super::secrets::SecretSource;
use crate::names::check_branch;

/// The most failed-check rounds a plan may send back to its agents.
pub const MAX_CI_RETRIES: u32 = 20;
pub const DEFAULT_CI_RETRIES: u32 = 3;
const MAX_REMOTE_LEN: usize = 2048;

/// Which forge speaks for the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// GitHub or GitHub Enterprise Server: a pull request, its checks and reviews.
    Github,
    /// A plain git remote: the branch is pushed and nothing else.
    Git,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Git => "git",
        }
    }
}

/// When the pull request is opened and updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PullScope {
    /// Once the swarm completes.
    #[default]
    Swarm,
    /// As each task merges: a draft while work remains.
    Task,
}

/// Who merges the pull request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    #[default]
    Manual,
    /// swarm merges it when its checks pass and the required reviews approve.
    Auto,
}

/// A plan's `[forge]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ForgeSpec {
    pub provider: Provider,
    /// A remote's name in the controller's repository, or a URL.
    pub remote: String,
    pub api_url: Option<String>,
    pub token: Option<SecretSource>,
    pub webhook_secret: Option<SecretSource>,
    pub pr: PullScope,
    pub merge: MergeMode,
    pub ci_retries: u32,
    /// The remote branch; `None`: the integration branch's own name.
    pub branch: Option<String>,
    /// The pull request's base; `None`: the plan's target branch.
    pub base: Option<String>,
}

impl ForgeSpec {
    /// Whether the remote is a URL rather than a remote's name.
    pub fn remote_is_url(&self) -> bool {
        is_url(&self.remote)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForge {
    provider: Provider,
    remote: Option<String>,
    api_url: Option<String>,
    token: Option<RawSecret>,
    webhook_secret: Option<RawSecret>,
    pr: Option<PullScope>,
    merge: Option<MergeMode>,
    ci_retries: Option<u32>,
    branch: Option<String>,
    base: Option<String>,
}

pub(super) fn validate(raw: Option<&RawForge>) -> Result<Option<ForgeSpec>, PlanError> {
    let Some(raw) = raw else { return Ok(None) };
    let remote = raw.remote.clone().unwrap_or_else(|| "origin".to_string());
    check_remote(&remote).map_err(|rule| err("forge.remote", rule))?;
    if let Some(url) = &raw.api_url {
        check_http_url(url).map_err(|rule| err("forge.api_url", rule))?;
    }
    let token = raw.token.as_ref().map(|s| s.source("forge.token")).transpose()?;
    let webhook_secret = raw.webhook_secret.as_ref().map(|s| s.source("forge.webhook_secret")).transpose()?;
    let ci_retries = raw.ci_retries.unwrap_or(DEFAULT_CI_RETRIES);
    if ci_retries > MAX_CI_RETRIES {
        return Err(err("forge.ci_retries", format!("must be at most {MAX_CI_RETRIES}")));
    }
    for (field, branch) in [("forge.branch", &raw.branch), ("forge.base", &raw.base)] {
        if let Some(b) = branch {
            check_branch(b).map_err(|rule| err(field, rule))?;
        }
    }
    if raw.provider == Provider::Git {
        // A plain remote has no pull request to open, watch or merge.
        let forge_only = [
            ("forge.api_url", raw.api_url.is_some()),
            ("forge.pr", raw.pr.is_some()),
            ("forge.merge", raw.merge.is_some()),
            ("forge.ci_retries", raw.ci_retries.is_some()),
            ("forge.base", raw.base.is_some()),
            ("forge.webhook_secret", raw.webhook_secret.is_some()),
        ];
        if let Some((field, _)) = forge_only.iter().find(|(_, set)| *set) {
            return Err(err(*field, "applies to a forge; provider = \"git\" only pushes"));
        }
    } else if token.is_none() {
        return Err(err("forge.token", "a forge needs a token: { env = \"NAME\" } or { file = \"/path\" }"));
    }
    Ok(Some(ForgeSpec {
        provider: raw.provider,
        remote,
        api_url: raw.api_url.clone(),
        token,
        webhook_secret,
        pr: raw.pr.unwrap_or_default(),
        merge: raw.merge.unwrap_or_default(),
        ci_retries,
        branch: raw.branch.clone(),
        base: raw.base.clone(),
    }))
}

/// A URL, `user@host:path`, or a bare repository's absolute path.
fn is_url(remote: &str) -> bool {
    remote.contains("://") || (remote.contains('@') && remote.contains(':')) || remote.starts_with('/')
}

/// A remote's name (git's rules, strictly) or a URL git can push to.
pub fn check_remote(remote: &str) -> Result<(), String> {
    if remote.is_empty() || remote.len() > MAX_REMOTE_LEN {
        return Err(format!("must be 1 to {MAX_REMOTE_LEN} characters"));
    }
    if remote.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain whitespace or control characters".into());
    }
    if remote.starts_with('-') {
        return Err(format!("{remote:?} must not start with '-'"));
    }
    if is_url(remote) {
        if remote.starts_with('/') && (remote.contains("/../") || remote.ends_with("/..")) {
            return Err(format!("{remote:?}: a path must not contain '..'"));
        }
        let scheme = remote.split("://").next().unwrap_or_default();
        let ok = !remote.contains("://") || matches!(scheme, "https" | "http" | "ssh" | "git" | "file");
        if !ok {
            return Err(format!(
                "{remote:?}: a URL must be https://, http://, ssh://, git:// or user@host:path"
            ));
        }
        return Ok(());
    }
    let ok = remote.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok || remote.contains("..") {
        return Err(format!("{remote:?} must be a remote's name ([A-Za-z0-9._-]) or a URL"));
    }
    Ok(())
}

fn check_http_url(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => {}
        _ => return Err(format!("{url:?} must be an http:// or https:// URL with a host")),
    }
    if url.len() > MAX_REMOTE_LEN || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("must be at most {MAX_REMOTE_LEN} characters, no whitespace"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::plan::Plan;

    fn plan(forge: &str) -> Result<Plan, PlanError> {
        Plan::parse(&format!(
            "name = \"auth\"\n[forge]\n{forge}\n[defaults]\ncommand = [\"true\"]\n[[tasks]]\nid = \"a\"\nfiles = [\"a/**\"]\n"
        ))
    }

    #[test]
    fn a_github_forge_takes_its_defaults() {
        let p = plan("provider = \"github\"\ntoken = { env = \"GITHUB_TOKEN\" }").unwrap();
        let f = p.forge.as_deref().unwrap();
        assert_eq!(f.provider, Provider::Github);
        assert_eq!(f.remote, "origin");
        assert_eq!(f.token, Some(SecretSource::Env("GITHUB_TOKEN".into())));
        assert_eq!((f.pr, f.merge, f.ci_retries), (PullScope::Swarm, MergeMode::Manual, DEFAULT_CI_RETRIES));
        assert!(!f.remote_is_url());
        let p = plan(
            "provider = \"github\"\nremote = \"http://127.0.0.1:9/o/r.git\"\ntoken = { file = \"/run/secrets/gh\" }\npr = \"task\"\nmerge = \"auto\"\nci_retries = 0\nbranch = \"swarm/auth\"\nbase = \"release\"",
        )
        .unwrap();
        let f = p.forge.as_deref().unwrap();
        assert!(f.remote_is_url());
        assert_eq!((f.pr, f.merge, f.ci_retries), (PullScope::Task, MergeMode::Auto, 0));
        assert_eq!((f.branch.as_deref(), f.base.as_deref()), (Some("swarm/auth"), Some("release")));
    }

    #[test]
    fn bad_forge_settings_name_the_field_and_the_rule() {
        let cases = [
            ("provider = \"github\"", "forge.token", "needs a token"),
            ("provider = \"gitlab\"", "forge.provider", "unknown variant"),
            ("provider = \"git\"\npr = \"task\"", "forge.pr", "only pushes"),
            ("provider = \"git\"\nremote = \"--upload-pack=x\"", "forge.remote", "must not start with '-'"),
            ("provider = \"git\"\nremote = \"ftp://h/x\"", "forge.remote", "a URL must be"),
            ("provider = \"git\"\nremote = \"a b\"", "forge.remote", "whitespace"),
            (
                "provider = \"github\"\ntoken = { env = \"T\" }\napi_url = \"file:///x\"",
                "forge.api_url",
                "http:// or https://",
            ),
            (
                "provider = \"github\"\ntoken = { env = \"T\" }\nci_retries = 99",
                "forge.ci_retries",
                "at most 20",
            ),
            (
                "provider = \"github\"\ntoken = { env = \"SWARM_TOKEN\" }",
                "forge.token.env",
                "set by the sidecar",
            ),
            ("provider = \"github\"\ntoken = { env = \"T\", file = \"/x\" }", "forge.token", "exactly one"),
            ("provider = \"git\"\nbranch = \"a..b\"", "forge.branch", "'..'"),
        ];
        for (forge, field, rule) in cases {
            let e = plan(forge).unwrap_err();
            assert_eq!(e.path, field, "{forge}: {e}");
            assert!(e.to_string().contains(rule), "{forge}: {e}");
        }
    }

    #[test]
    fn a_plain_git_remote_needs_no_token() {
        let p = plan("provider = \"git\"\nremote = \"/srv/git/app.git\"").unwrap();
        assert!(p.forge.as_deref().unwrap().remote_is_url(), "an absolute path is a remote");
        let p = plan("provider = \"git\"\nremote = \"git@example.com:o/r.git\"").unwrap();
        let f = p.forge.as_deref().unwrap();
        assert_eq!((f.provider, f.token.as_ref()), (Provider::Git, None));
        let none = Plan::parse(
            "name = \"auth\"\n[defaults]\ncommand = [\"true\"]\n[[tasks]]\nid = \"a\"\nfiles = [\"a/**\"]\n",
        );
        assert!(none.unwrap().forge.is_none(), "no [forge], no push");
    }
}
