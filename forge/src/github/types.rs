//! GitHub's JSON, with only the fields swarm uses, and its conversion into
//! the provider's types. The REST answers and the webhook payloads carry
//! the same objects, so both read them through here.
//!
//! Strict where it matters: numbers are numbers, a SHA is 40 or 64 hex
//! digits, a timestamp is RFC 3339, a state is one GitHub documents (an
//! unknown check conclusion reads as a failure, never as a pass). Text is
//! stripped of controls and clipped; a URL that is not http(s) is dropped.

use serde::Deserialize;

use crate::ensure::{clean_body, clean_title};
use crate::provider::{
    Check, CheckSource, CheckState, Comment, Permission, PullRequest, PullState, Review, ReviewComment,
    ReviewState,
};
use crate::text;
use crate::time::parse_rfc3339;

/// Longest name (check, context, branch, path, login) kept.
pub const NAME_MAX: usize = 512;
/// Longest comment, review or check output kept.
pub const TEXT_MAX: usize = 64 * 1024;
const URL_MAX: usize = 2048;

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct User {
    pub login: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct GitRef {
    #[serde(rename = "ref")]
    pub name: String,
    pub sha: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Pull {
    pub number: u64,
    pub node_id: String,
    pub state: String,
    #[serde(default)]
    pub draft: bool,
    pub title: String,
    pub body: Option<String>,
    pub head: GitRef,
    pub base: GitRef,
    pub html_url: String,
    pub merged_at: Option<String>,
    #[serde(default)]
    pub merged: Option<bool>,
    pub merge_commit_sha: Option<String>,
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CheckOutput {
    pub title: Option<String>,
    pub summary: Option<String>,
    pub text: Option<String>,
}

/// A pull request named by number only (check runs and suites list the
/// ones they belong to; review events carry the whole object).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PullNumber {
    pub number: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CheckRun {
    pub id: u64,
    pub name: String,
    pub head_sha: Option<String>,
    pub status: String,
    pub conclusion: Option<String>,
    pub details_url: Option<String>,
    pub html_url: Option<String>,
    pub output: Option<CheckOutput>,
    #[serde(default)]
    pub pull_requests: Vec<PullNumber>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CheckRunsPage {
    pub check_runs: Vec<CheckRun>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Status {
    pub context: String,
    pub state: String,
    pub target_url: Option<String>,
    pub description: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CombinedStatus {
    pub statuses: Vec<Status>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct IssueComment {
    pub id: u64,
    pub user: Option<User>,
    pub body: Option<String>,
    pub html_url: String,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PullComment {
    pub id: u64,
    pub user: Option<User>,
    pub body: Option<String>,
    pub html_url: String,
    pub path: String,
    pub line: Option<u64>,
    pub original_line: Option<u64>,
    pub commit_id: String,
    pub in_reply_to_id: Option<u64>,
    pub pull_request_review_id: Option<u64>,
    pub created_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct PullReview {
    pub id: u64,
    pub user: Option<User>,
    pub state: String,
    pub body: Option<String>,
    pub commit_id: Option<String>,
    pub html_url: String,
    pub submitted_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CollaboratorPermission {
    pub permission: String,
    pub role_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MergeResult {
    pub sha: Option<String>,
    pub merged: bool,
    pub message: Option<String>,
}

/// A 40- (SHA-1) or 64-digit (SHA-256) lowercase hex object id.
pub(crate) fn is_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(crate) fn sha(s: String, field: &str) -> Result<String, String> {
    if is_sha(&s) { Ok(s) } else { Err(format!("{field} is not a commit SHA")) }
}

fn time(t: Option<String>, field: &str) -> Result<Option<std::time::SystemTime>, String> {
    match t {
        None => Ok(None),
        Some(t) => parse_rfc3339(&t).map(Some).ok_or_else(|| format!("{field} is not an RFC 3339 time")),
    }
}

/// An http(s) URL without controls or spaces, else nothing: a details URL
/// is a link someone may click.
pub(crate) fn url(u: Option<String>) -> Option<String> {
    let u = u?;
    let ok = (u.starts_with("https://") || u.starts_with("http://"))
        && u.len() <= URL_MAX
        && !u.chars().any(|c| c.is_control() || c.is_whitespace());
    ok.then_some(u)
}

pub(crate) fn name(s: &str) -> String {
    text::shown(s, NAME_MAX)
}

pub(crate) fn login(u: Option<User>) -> String {
    u.map(|u| name(&u.login)).unwrap_or_else(|| "ghost".into())
}

fn body(b: Option<String>) -> String {
    text::shown(b.as_deref().unwrap_or(""), TEXT_MAX)
}

impl Pull {
    pub fn into_domain(self) -> Result<PullRequest, String> {
        let merged = self.merged_at.is_some() || self.merged == Some(true);
        let state = match (self.state.as_str(), merged) {
            ("open", _) => PullState::Open,
            ("closed", true) => PullState::Merged,
            ("closed", false) => PullState::Closed,
            (other, _) => return Err(format!("pull request state {:?}", text::shown(other, 40))),
        };
        if self.node_id.is_empty()
            || self.node_id.len() > 256
            || !self.node_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-=".contains(&b))
        {
            return Err("node_id is not a GitHub node id".into());
        }
        Ok(PullRequest {
            number: self.number,
            node_id: self.node_id,
            state,
            draft: self.draft,
            title: clean_title(&self.title),
            body: clean_body(self.body.as_deref().unwrap_or("")),
            head: name(&self.head.name),
            head_sha: sha(self.head.sha, "head.sha")?,
            base: name(&self.base.name),
            url: url(Some(self.html_url)).unwrap_or_default(),
            merge_commit_sha: self.merge_commit_sha.map(|s| sha(s, "merge_commit_sha")).transpose()?,
            updated_at: time(self.updated_at, "updated_at")?,
        })
    }
}

/// A check run's state: not completed is pending; a conclusion GitHub
/// may add later reads as a failure (`stale`, a run GitHub gave up on
/// after two weeks, as timed out).
pub(crate) fn check_run_state(status: &str, conclusion: Option<&str>) -> CheckState {
    if status != "completed" {
        return CheckState::Pending;
    }
    match conclusion {
        Some("success") => CheckState::Success,
        Some("neutral") => CheckState::Neutral,
        Some("skipped") => CheckState::Skipped,
        Some("cancelled") => CheckState::Cancelled,
        Some("timed_out" | "stale") => CheckState::TimedOut,
        Some("action_required") => CheckState::ActionRequired,
        Some("failure" | "startup_failure") => CheckState::Failure,
        other => {
            tracing::debug!(conclusion = ?other.map(|c| text::shown(c, 40)), "unknown check conclusion; read as failure");
            CheckState::Failure
        }
    }
}

/// A commit status's state (`error` is a failure to run, still a failure).
pub(crate) fn status_state(state: &str) -> CheckState {
    match state {
        "success" => CheckState::Success,
        "pending" => CheckState::Pending,
        _ => CheckState::Failure,
    }
}

/// The Actions job id in a URL like `.../actions/runs/1/job/42`.
pub(crate) fn job_id(u: &str) -> Option<u64> {
    let (_, after) = u.rsplit_once("/job/")?;
    let digits: &str = &after[..after.bytes().take_while(u8::is_ascii_digit).count()];
    let rest = &after[digits.len()..];
    if digits.is_empty() || !(rest.is_empty() || rest.starts_with(['?', '#', '/'])) {
        return None;
    }
    digits.parse().ok()
}

impl CheckRun {
    pub fn into_domain(self) -> Check {
        let details_url = url(self.details_url).or_else(|| url(self.html_url.clone()));
        let job_id =
            details_url.as_deref().and_then(job_id).or_else(|| self.html_url.as_deref().and_then(job_id));
        let output = self
            .output
            .map(|o| {
                [o.title, o.summary, o.text]
                    .into_iter()
                    .flatten()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .join("\n\n");
        Check {
            name: name(&self.name),
            state: check_run_state(&self.status, self.conclusion.as_deref()),
            source: CheckSource::CheckRun(self.id),
            details_url,
            output: text::shown(&output, TEXT_MAX),
            job_id,
        }
    }
}

impl Status {
    pub fn into_domain(self) -> Check {
        let details_url = url(self.target_url);
        Check {
            name: name(&self.context),
            state: status_state(&self.state),
            source: CheckSource::Status,
            job_id: details_url.as_deref().and_then(job_id),
            details_url,
            output: body(self.description),
        }
    }
}

impl IssueComment {
    pub fn into_domain(self) -> Result<Comment, String> {
        Ok(Comment {
            id: self.id,
            author: login(self.user),
            body: body(self.body),
            url: url(Some(self.html_url)).unwrap_or_default(),
            created_at: time(self.created_at, "created_at")?,
            updated_at: time(self.updated_at, "updated_at")?,
        })
    }
}

impl PullComment {
    pub fn into_domain(self) -> Result<ReviewComment, String> {
        Ok(ReviewComment {
            id: self.id,
            author: login(self.user),
            body: body(self.body),
            url: url(Some(self.html_url)).unwrap_or_default(),
            path: name(&self.path),
            line: self.line.or(self.original_line),
            commit_sha: sha(self.commit_id, "commit_id")?,
            in_reply_to: self.in_reply_to_id,
            review_id: self.pull_request_review_id,
            created_at: time(self.created_at, "created_at")?,
        })
    }
}

impl PullReview {
    pub fn into_domain(self) -> Result<Review, String> {
        // REST says APPROVED, webhooks say approved.
        let state = match self.state.to_ascii_uppercase().as_str() {
            "APPROVED" => ReviewState::Approved,
            "CHANGES_REQUESTED" => ReviewState::ChangesRequested,
            "COMMENTED" => ReviewState::Commented,
            "DISMISSED" => ReviewState::Dismissed,
            "PENDING" => ReviewState::Pending,
            other => return Err(format!("review state {:?}", text::shown(other, 40))),
        };
        Ok(Review {
            id: self.id,
            author: login(self.user),
            state,
            body: body(self.body),
            commit_sha: self.commit_id.map(|s| sha(s, "commit_id")).transpose()?,
            url: url(Some(self.html_url)).unwrap_or_default(),
            submitted_at: time(self.submitted_at, "submitted_at")?,
        })
    }
}

impl CollaboratorPermission {
    /// The role: `role_name` when it is a built-in one (it also names
    /// custom roles), else the classic `permission`.
    pub fn into_domain(self) -> Result<Permission, String> {
        let parse = |s: &str| match s {
            "admin" => Some(Permission::Admin),
            "maintain" => Some(Permission::Maintain),
            "write" => Some(Permission::Write),
            "triage" => Some(Permission::Triage),
            "read" => Some(Permission::Read),
            "none" => Some(Permission::None),
            _ => None,
        };
        self.role_name
            .as_deref()
            .and_then(parse)
            .or_else(|| parse(&self.permission))
            .ok_or_else(|| format!("permission {:?}", text::shown(&self.permission, 40)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn actions_job_ids_are_read_from_details_urls() {
        assert_eq!(job_id("https://github.com/o/r/actions/runs/123/job/456"), Some(456));
        assert_eq!(job_id("https://github.com/o/r/actions/runs/123/job/456?pr=7"), Some(456));
        assert_eq!(job_id("https://github.com/o/r/runs/456"), None);
        assert_eq!(job_id("https://ci.example.com/job/build"), None);
        assert_eq!(job_id("https://x/job/12abc"), None);
        assert_eq!(job_id("https://x/job/99999999999999999999999"), None);
    }

    #[test]
    fn check_states_map_and_unknown_conclusions_fail() {
        assert_eq!(check_run_state("in_progress", None), CheckState::Pending);
        assert_eq!(check_run_state("queued", Some("success")), CheckState::Pending);
        assert_eq!(check_run_state("completed", Some("success")), CheckState::Success);
        assert_eq!(check_run_state("completed", Some("action_required")), CheckState::ActionRequired);
        assert_eq!(check_run_state("completed", Some("stale")), CheckState::TimedOut);
        assert_eq!(check_run_state("completed", Some("brand_new")), CheckState::Failure);
        assert_eq!(check_run_state("completed", None), CheckState::Failure);
        assert_eq!(status_state("error"), CheckState::Failure);
        assert_eq!(status_state("pending"), CheckState::Pending);
    }

    #[test]
    fn only_http_urls_are_kept() {
        assert_eq!(url(Some("https://x/y".into())), Some("https://x/y".into()));
        assert_eq!(url(Some("javascript:alert(1)".into())), None);
        assert_eq!(url(Some("https://x/\u{1b}[2J".into())), None);
    }
}
