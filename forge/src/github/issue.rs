//! One issue, read for its text: `GET /repos/{owner}/{repo}/issues/{n}`
//! (`swarmctl plan --issue`, whose goal is the issue's title and body).

use reqwest::Method;
use serde::Deserialize;

use super::GitHub;
use super::http::{JSON_CAP, parse, what};
use crate::error::ForgeError;
use crate::text;

/// Longest title kept; GitHub's own limit is 256 characters.
const TITLE_MAX: usize = 1024;
/// Longest body kept; GitHub's own limit is 65,536 characters.
const BODY_MAX: usize = 256 << 10;

/// An issue's number, text and page, as a goal needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub number: u64,
    pub title: String,
    /// Empty when the issue has none.
    pub body: String,
    /// Its page on the forge (`html_url`).
    pub url: String,
    /// Whether it is a pull request (GitHub serves those as issues too).
    pub is_pull: bool,
}

#[derive(Debug, Deserialize)]
struct Raw {
    number: u64,
    title: String,
    #[serde(default)]
    body: Option<String>,
    html_url: String,
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

impl GitHub {
    /// The issue numbered `number`; [`ForgeError::NotFound`] when there is
    /// none the token may see. Its texts are stripped of control
    /// characters (but not newlines) and clipped.
    pub async fn issue(&self, number: u64) -> Result<Issue, ForgeError> {
        if number == 0 {
            return Err(ForgeError::InvalidInput {
                what: "issue number",
                message: "must be at least 1".into(),
            });
        }
        let url = self.repo_url(&["issues", &number.to_string()]);
        let what = what(&Method::GET, &url);
        let reply = self.http.send(Method::GET, url, None, None, JSON_CAP).await?;
        if reply.status != 200 {
            return Err(ForgeError::Status {
                what,
                status: reply.status,
                message: "expected 200 with the issue".into(),
            });
        }
        let raw: Raw = parse(&what, &reply.body)?;
        let keep = |s: &str, max: usize| text::clip(&text::strip_controls(s), max);
        Ok(Issue {
            number: raw.number,
            title: keep(&raw.title, TITLE_MAX),
            body: keep(raw.body.as_deref().unwrap_or_default(), BODY_MAX),
            url: text::clip(&text::strip_controls(&raw.html_url), 2048),
            is_pull: raw.pull_request.is_some(),
        })
    }
}
