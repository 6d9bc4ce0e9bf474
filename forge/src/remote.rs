//! A git remote URL read as "which repository on which forge", and the API
//! endpoints that forge has.
//!
//! The four spellings a GitHub remote comes in are accepted:
//! `https://github.com/o/r(.git)`, `http://127.0.0.1:8080/o/r.git`,
//! `git@github.com:o/r.git` and `ssh://git@host[:port]/o/r.git`. Names are
//! held to GitHub's own rules, so a name that reaches an API path needs no
//! escaping, and anything else (a query, a password, a third path segment)
//! is refused with the rule it broke.

use crate::error::RemoteError;
use crate::text;

/// How the remote is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Https,
    Http,
    Ssh,
}

/// A repository on a forge: host (with a port if one was given), owner
/// and repository name, each checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub transport: Transport,
    /// Lowercase host name or IPv4 address, with `:port` when the URL had
    /// one.
    pub host: String,
    pub owner: String,
    pub repo: String,
}

impl Remote {
    /// Parses a remote URL; see the module documentation for the forms.
    pub fn parse(url: &str) -> Result<Remote, RemoteError> {
        let fail = |rule: &str| RemoteError { url: shown_url(url), rule: rule.to_string() };
        if url.len() > 2048 {
            return Err(fail("longer than 2048 bytes"));
        }
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(fail("contains whitespace or control characters"));
        }
        let (transport, authority, path) = if let Some(rest) = url.strip_prefix("https://") {
            split_authority(Transport::Https, rest).ok_or_else(|| fail("no path after the host"))?
        } else if let Some(rest) = url.strip_prefix("http://") {
            split_authority(Transport::Http, rest).ok_or_else(|| fail("no path after the host"))?
        } else if let Some(rest) = url.strip_prefix("ssh://") {
            split_authority(Transport::Ssh, rest).ok_or_else(|| fail("no path after the host"))?
        } else if url.contains("://") {
            return Err(fail("the scheme must be https, http or ssh"));
        } else {
            // scp-like: user@host:path, where the path does not start with '/'.
            let (authority, path) =
                url.split_once(':').ok_or_else(|| fail("not a URL nor user@host:path"))?;
            if !authority.contains('@') || path.starts_with('/') {
                return Err(fail("not a URL nor user@host:owner/repo"));
            }
            (Transport::Ssh, authority, path)
        };
        if path.contains(['?', '#']) {
            return Err(fail("a remote URL has no query or fragment"));
        }
        let host_port = match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                if userinfo.contains(':') {
                    return Err(fail("credentials do not belong in the remote URL; pass a token"));
                }
                if userinfo.is_empty()
                    || !userinfo.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                {
                    return Err(fail("the user name may hold only letters, digits, '-', '_' and '.'"));
                }
                host
            }
            None => authority,
        };
        let host = check_host(host_port).map_err(|rule| fail(&rule))?;
        let path = path.strip_suffix('/').unwrap_or(path);
        let path = path.strip_suffix(".git").unwrap_or(path);
        let mut segments = path.split('/');
        let (Some(owner), Some(repo), None) = (segments.next(), segments.next(), segments.next()) else {
            return Err(fail("the path must be exactly /owner/repo"));
        };
        check_owner(owner).map_err(|rule| fail(&rule))?;
        check_repo(repo).map_err(|rule| fail(&rule))?;
        Ok(Remote { transport, host, owner: owner.to_string(), repo: repo.to_string() })
    }

    /// The REST API's base URL for this remote's host: [`api_url_for_host`],
    /// over plain http when the remote itself is plain http (a test server
    /// or a GHES reached without TLS serves its API the same way).
    pub fn api_url(&self) -> String {
        let api = api_url_for_host(&self.host);
        match self.transport {
            Transport::Http => api.replacen("https://", "http://", 1),
            _ => api,
        }
    }
}

/// `scheme://authority/path` split; `None` when there is no path.
fn split_authority(t: Transport, rest: &str) -> Option<(Transport, &str, &str)> {
    let (authority, path) = rest.split_once('/')?;
    Some((t, authority, path))
}

/// The host part: a DNS name or IPv4 address, lowercased, with an
/// optional port (never in the scp form, where the first ':' ends the host).
fn check_host(host_port: &str) -> Result<String, String> {
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (host_port, None),
    };
    if let Some(p) = port
        && !matches!(p.parse::<u16>(), Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("the port must be a number from 1 to 65535".into());
    }
    let labels_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !labels_ok {
        return Err("the host must be a DNS name or an IPv4 address".into());
    }
    let host = host.to_ascii_lowercase();
    Ok(match port {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

/// GitHub's rule for user and organization names: 1 to 39 letters, digits
/// and hyphens, not starting or ending with a hyphen. (GitHub also refuses
/// two hyphens in a row for new names, but older accounts have them.)
pub fn check_owner(owner: &str) -> Result<(), String> {
    if owner.is_empty() || owner.len() > 39 {
        return Err("the owner must be 1 to 39 characters".into());
    }
    if !owner.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err("the owner may hold only letters, digits and '-'".into());
    }
    if owner.starts_with('-') || owner.ends_with('-') {
        return Err("the owner may not start or end with '-'".into());
    }
    Ok(())
}

/// GitHub's rule for repository names: 1 to 100 letters, digits, '-', '_'
/// and '.', and not `.` or `..`.
pub fn check_repo(repo: &str) -> Result<(), String> {
    if repo.is_empty() || repo.len() > 100 {
        return Err("the repository name must be 1 to 100 characters".into());
    }
    if !repo.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Err("the repository name may hold only letters, digits, '-', '_' and '.'".into());
    }
    if repo == "." || repo == ".." {
        return Err("the repository name may not be '.' or '..'".into());
    }
    Ok(())
}

/// The default REST base URL for a forge host: `https://api.github.com`
/// for github.com, `https://HOST/api/v3` for GitHub Enterprise Server.
pub fn api_url_for_host(host: &str) -> String {
    if host.eq_ignore_ascii_case("github.com") || host.eq_ignore_ascii_case("www.github.com") {
        "https://api.github.com".to_string()
    } else {
        format!("https://{host}/api/v3")
    }
}

/// The GraphQL endpoint that goes with a REST base URL:
/// `https://api.github.com/graphql` for github.com, and the same prefix +
/// `/api/graphql` for an api_url ending in `/api/v3` (GHES). Any other
/// api_url gets `/graphql` appended, as github.com's does.
pub fn graphql_url_for(api_url: &str) -> String {
    let base = api_url.trim_end_matches('/');
    match base.strip_suffix("/api/v3") {
        Some(prefix) => format!("{prefix}/api/graphql"),
        None => format!("{base}/graphql"),
    }
}

/// The URL as it may appear in an error: no password, no controls, short.
fn shown_url(url: &str) -> String {
    let url = match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s && url[s + 3..at].contains(':') => {
            format!("{}://***@{}", &url[..s], &url[at + 1..])
        }
        _ => url.to_string(),
    };
    text::shown(&url, 200)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ok(url: &str) -> (Transport, String, String, String) {
        let r = Remote::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        (r.transport, r.host, r.owner, r.repo)
    }

    fn rule(url: &str) -> String {
        Remote::parse(url).unwrap_err().rule
    }

    #[test]
    fn the_four_remote_spellings_parse_to_host_owner_and_repo() {
        let gh = |t| (t, "github.com".to_string(), "octo-cat".to_string(), "hello.world".to_string());
        assert_eq!(ok("https://github.com/octo-cat/hello.world"), gh(Transport::Https));
        assert_eq!(ok("https://github.com/octo-cat/hello.world.git"), gh(Transport::Https));
        assert_eq!(ok("https://GitHub.com/octo-cat/hello.world/"), gh(Transport::Https));
        assert_eq!(ok("git@github.com:octo-cat/hello.world.git"), gh(Transport::Ssh));
        assert_eq!(ok("ssh://git@github.com/octo-cat/hello.world.git"), gh(Transport::Ssh));
        assert_eq!(
            ok("http://127.0.0.1:8080/o/r.git"),
            (Transport::Http, "127.0.0.1:8080".into(), "o".into(), "r".into())
        );
        assert_eq!(
            ok("ssh://git@ghe.example.com:2222/team/svc_api.git"),
            (Transport::Ssh, "ghe.example.com:2222".into(), "team".into(), "svc_api".into())
        );
        assert_eq!(ok("https://x-access-token@github.com/o/r").1, "github.com");
    }

    #[test]
    fn a_remote_that_breaks_a_rule_is_refused_naming_the_rule() {
        assert!(rule("ftp://github.com/o/r").contains("scheme"));
        assert!(rule("https://github.com/o").contains("exactly /owner/repo"));
        assert!(rule("https://github.com/o/r/pulls").contains("exactly /owner/repo"));
        assert!(rule("https://github.com/o/r?x=1").contains("query"));
        assert!(rule("https://github.com/-o/r").contains("start or end"));
        assert!(rule("https://github.com/o_o/r").contains("letters, digits and '-'"));
        assert!(rule(&format!("https://github.com/{}/r", "a".repeat(40))).contains("1 to 39"));
        assert!(rule("https://github.com/o/r$").contains("repository name may hold"));
        assert!(rule("https://github.com/o/..").contains("'.' or '..'"));
        assert!(rule("https://github.com:0/o/r").contains("port"));
        assert!(rule("https://github.com:99999/o/r").contains("port"));
        assert!(rule("https://exa mple.com/o/r").contains("whitespace"));
        assert!(rule("https://ex_ample.com/o/r").contains("DNS name"));
        assert!(rule("github.com/o/r").contains("user@host"));
        assert!(rule("git@github.com:/o/r").contains("user@host"));
        assert!(rule("git@github.com:22:o/r").contains("owner may hold"), "the scp form has no port");
        let e = Remote::parse("https://u:hunter2@github.com/o/r").unwrap_err();
        assert!(e.rule.contains("credentials"));
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn api_and_graphql_urls_for_github_and_enterprise_server() {
        assert_eq!(api_url_for_host("github.com"), "https://api.github.com");
        assert_eq!(api_url_for_host("ghe.example.com"), "https://ghe.example.com/api/v3");
        assert_eq!(graphql_url_for("https://api.github.com"), "https://api.github.com/graphql");
        assert_eq!(graphql_url_for("https://ghe.example.com/api/v3/"), "https://ghe.example.com/api/graphql");
        assert_eq!(graphql_url_for("http://127.0.0.1:9/api/v3"), "http://127.0.0.1:9/api/graphql");
        let r = Remote::parse("http://127.0.0.1:8080/o/r.git").unwrap();
        assert_eq!(r.api_url(), "http://127.0.0.1:8080/api/v3");
        assert_eq!(Remote::parse("git@github.com:o/r").unwrap().api_url(), "https://api.github.com");
    }
}
