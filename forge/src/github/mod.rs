//! GitHub (github.com and Enterprise Server) behind the [`Forge`] trait:
//! REST v3 for everything but the draft flag, which only GraphQL can
//! change.
//!
//! - `http`: one request (headers, token, caps, status → error), the
//!   conditional-GET cache and pagination;
//! - `cache`, `paging`, `ratelimit`: the ETag cache, `Link` headers and
//!   GitHub's rate-limit headers;
//! - `types`: GitHub's JSON and its conversion to the provider's types;
//! - `client`: the [`Forge`] methods as REST and GraphQL calls.
//!
//! [`Forge`]: crate::Forge

mod cache;
mod client;
mod http;
mod issue;
mod paging;
mod ratelimit;
pub(crate) mod types;

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;

pub use issue::Issue;
pub use paging::{MAX_PAGES, PER_PAGE};
pub use ratelimit::{Quota, SECONDARY_DEFAULT_WAIT};

use crate::error::ForgeError;
use crate::remote::{self, Remote, check_owner, check_repo};
use crate::token::Token;

/// Where a [`GitHub`] client talks to, and as whom.
#[derive(Debug, Clone)]
pub struct GitHubConfig {
    /// REST base: `https://api.github.com`, or `https://HOST/api/v3`.
    pub api_url: String,
    /// GraphQL endpoint; derived from `api_url` when `None`
    /// ([`remote::graphql_url_for`]).
    pub graphql_url: Option<String>,
    pub owner: String,
    pub repo: String,
    pub token: Token,
    /// Bound on one API request, connect to last byte.
    pub timeout: Duration,
    /// Bound on a log download (logs are large and served slowly).
    pub log_timeout: Duration,
    pub user_agent: String,
}

impl GitHubConfig {
    pub fn new(api_url: &str, owner: &str, repo: &str, token: Token) -> GitHubConfig {
        GitHubConfig {
            api_url: api_url.to_string(),
            graphql_url: None,
            owner: owner.to_string(),
            repo: repo.to_string(),
            token,
            timeout: Duration::from_secs(30),
            log_timeout: Duration::from_secs(120),
            user_agent: concat!("swarm-forge/", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }

    /// The repository a remote URL names, at its host's default API.
    pub fn for_remote(remote: &Remote, token: Token) -> GitHubConfig {
        GitHubConfig::new(&remote.api_url(), &remote.owner, &remote.repo, token)
    }
}

/// A GitHub repository as a [`Forge`](crate::Forge). Cheap to share
/// behind an `Arc`; the ETag cache and the quota are shared by all calls.
pub struct GitHub {
    http: http::Http,
    api: Url,
    graphql: Url,
    owner: String,
    repo: String,
    log_timeout: Duration,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHub")
            .field("api", &self.api.as_str())
            .field("owner", &self.owner)
            .field("repo", &self.repo)
            .finish_non_exhaustive()
    }
}

impl GitHub {
    /// A client for `config`. The URLs must be https, or http to a
    /// loopback address (a test server, or a proxy on this host): the
    /// token is never sent in clear over a network.
    pub fn new(config: GitHubConfig) -> Result<GitHub, ForgeError> {
        let bad = |message: String| ForgeError::Config { message };
        check_owner(&config.owner).map_err(|r| bad(format!("owner {:?}: {r}", config.owner)))?;
        check_repo(&config.repo).map_err(|r| bad(format!("repository {:?}: {r}", config.repo)))?;
        let api = endpoint(config.api_url.trim_end_matches('/'), "api_url")?;
        let graphql_url = config.graphql_url.clone().unwrap_or_else(|| remote::graphql_url_for(api.as_str()));
        let graphql = endpoint(&graphql_url, "graphql_url")?;
        let client = client(&config).map_err(bad)?;
        Ok(GitHub {
            http: http::Http::new(client, config.token, api.clone()),
            api,
            graphql,
            owner: config.owner,
            repo: config.repo,
            log_timeout: config.log_timeout,
        })
    }

    /// The primary quota as of the last answer, so a caller can slow down
    /// before it runs out (`None` before the first answer).
    pub fn quota(&self) -> Option<Quota> {
        self.http.quota()
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// This client as a shareable trait object.
    pub fn into_dyn(self) -> Arc<dyn crate::Forge> {
        Arc::new(self)
    }

    /// `{api}/repos/{owner}/{repo}/{segments...}`, each segment escaped.
    fn repo_url(&self, segments: &[&str]) -> Url {
        let mut url = self.api.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["repos", &self.owner, &self.repo]).extend(segments);
        }
        url
    }

    /// [`GitHub::repo_url`] with `per_page=100` and `query`.
    fn list_url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.repo_url(segments);
        url.query_pairs_mut().extend_pairs(query).append_pair("per_page", &PER_PAGE.to_string());
        url
    }
}

/// An API URL: http(s), a host, no credentials, no query; plain http only
/// to loopback.
fn endpoint(s: &str, field: &str) -> Result<Url, ForgeError> {
    let bad = |why: &str| ForgeError::Config { message: format!("{field} {s:?}: {why}") };
    let url = Url::parse(s).map_err(|e| bad(&e.to_string()))?;
    if url.cannot_be_a_base() || url.host_str().is_none() {
        return Err(bad("not an http(s) URL with a host"));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(bad("no credentials, query or fragment in an API URL"));
    }
    let loopback = match url.host_str() {
        Some("localhost") => true,
        Some(h) => h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        "http" => Err(bad("plain http only to a loopback address; the token would travel in clear")),
        _ => Err(bad("the scheme must be https")),
    }
}

/// The shared HTTPS client ([`crate::https`]); the one redirect swarm
/// follows (a job log's) is followed by hand, without the token.
fn client(config: &GitHubConfig) -> Result<reqwest::Client, String> {
    let connect = config.timeout.min(Duration::from_secs(10));
    crate::https::client(config.timeout, connect, &config.user_agent)
}
