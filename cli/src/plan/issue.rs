//! `swarmctl plan --issue OWNER/REPO#N`: the goal is a GitHub issue's
//! title and body, read through the forge crate's GitHub client with the
//! token `swarmctl run --forge` takes (`--forge-token-env`, GITHUB_TOKEN).

use swarm_forge::remote::{check_owner, check_repo};
use swarm_forge::{ForgeError, GitHub, GitHubConfig, Token};
use tracing::Instrument as _;

use crate::exit::Usage;

/// `OWNER/REPO#N`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueRef {
    pub owner: String,
    pub repo: String,
    pub number: u64,
}

/// The rule a spec breaks, for `--issue`'s error.
pub fn parse(spec: &str) -> Result<IssueRef, String> {
    let rule = "must be OWNER/REPO#N (e.g. octo/app#12)";
    let (path, number) = spec.trim().rsplit_once('#').ok_or_else(|| format!("{spec:?}: {rule}"))?;
    let (owner, repo) = path.split_once('/').ok_or_else(|| format!("{spec:?}: {rule}"))?;
    let number: u64 = number
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{spec:?}: the issue number must be a positive integer ({rule})"))?;
    check_owner(owner).map_err(|r| format!("{spec:?}: {r}"))?;
    check_repo(repo).map_err(|r| format!("{spec:?}: {r}"))?;
    Ok(IssueRef { owner: owner.to_string(), repo: repo.to_string(), number })
}

/// The issue's text as a goal (its title, a blank line, its body) and its URL.
pub async fn goal(spec: &str, api_url: &str, token_env: &str) -> anyhow::Result<(String, String)> {
    let issue = parse(spec).map_err(|e| Usage(format!("--issue {e}")))?;
    let token = std::env::var(token_env).map_err(|_| {
        Usage(format!("--issue: the token variable {token_env} is not set (--forge-token-env)"))
    })?;
    let token = Token::new(&token).map_err(|e| Usage(format!("--issue: {token_env}: {e}")))?;
    let config = GitHubConfig::new(api_url, &issue.owner, &issue.repo, token);
    let github = GitHub::new(config).map_err(|e| Usage(format!("--forge-api-url {api_url}: {e}")))?;
    let span =
        tracing::info_span!("forge.issue", owner = %issue.owner, repo = %issue.repo, number = issue.number);
    let found = github.issue(issue.number).instrument(span).await.map_err(|e| match e {
        ForgeError::NotFound { .. } => anyhow::anyhow!(
            "--issue {spec}: {}/{} has no issue #{} that this token may see (404 from {api_url})",
            issue.owner,
            issue.repo,
            issue.number
        ),
        other => anyhow::anyhow!("--issue {spec}: {other}"),
    })?;
    let body = found.body.trim();
    let text = if body.is_empty() { found.title.clone() } else { format!("{}\n\n{body}", found.title) };
    Ok((text, found.url))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_issue_is_owner_slash_repo_hash_number() {
        let r = parse("octo/app#12").unwrap();
        assert_eq!((r.owner.as_str(), r.repo.as_str(), r.number), ("octo", "app", 12));
        for bad in ["foo#x", "octo/app", "octo/app#0", "octo/app#-1", "/app#1", "octo/#1", "oc to/app#1"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("foo#x").unwrap_err().contains("OWNER/REPO#N"));
    }
}
