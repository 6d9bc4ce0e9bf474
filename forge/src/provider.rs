//! The forge as swarm sees it: one object-safe trait over pull requests,
//! checks, reviews, comments, permissions and merges, and the plain types
//! it speaks. GitHub implements it (`github/`); GitLab's merge requests,
//! pipelines, notes and approvals fit the same shapes.
//!
//! Every text field of these types came from the forge and is already
//! stripped of control characters and clipped ([`crate::text`]).

use std::time::SystemTime;

use futures::future::BoxFuture;

use crate::error::ForgeError;

/// A future a [`Forge`] method returns.
pub type ForgeFuture<'a, T> = BoxFuture<'a, Result<T, ForgeError>>;

/// A pull request (GitLab: merge request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub number: u64,
    /// The forge's global id (GraphQL node id), for mutations REST lacks.
    pub node_id: String,
    pub state: PullState,
    pub draft: bool,
    pub title: String,
    pub body: String,
    /// The head branch name (without `refs/heads/`).
    pub head: String,
    pub head_sha: String,
    pub base: String,
    /// The page a person opens.
    pub url: String,
    pub merge_commit_sha: Option<String>,
    pub updated_at: Option<SystemTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullState {
    Open,
    Closed,
    Merged,
}

/// What [`Forge::open_pull`] and [`ensure_pull`](crate::ensure_pull) are asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPull {
    pub title: String,
    pub body: String,
    pub head: String,
    pub base: String,
    pub draft: bool,
}

/// Changes to a pull request; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullUpdate {
    pub title: Option<String>,
    pub body: Option<String>,
    /// `Some(true)` marks a draft ready for review, `Some(false)` turns it
    /// back into a draft.
    pub ready_for_review: Option<bool>,
}

impl PullUpdate {
    pub fn is_empty(&self) -> bool {
        self.title.is_none() && self.body.is_none() && self.ready_for_review.is_none()
    }
}

/// One CI signal on a commit: a check run or a commit status (GitLab: a
/// pipeline job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub state: CheckState,
    pub source: CheckSource,
    /// Where a person reads the details.
    pub details_url: Option<String>,
    /// What the check said about itself (title, summary, text; or a
    /// status's description).
    pub output: String,
    /// The CI job whose log [`Forge::check_log`] can fetch (GitHub
    /// Actions: the `/job/<id>` in the details URL).
    pub job_id: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckSource {
    /// A check run, with its id.
    CheckRun(u64),
    /// A commit status (the combined-status API).
    Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckState {
    Pending,
    Success,
    Failure,
    Neutral,
    Skipped,
    Cancelled,
    TimedOut,
    ActionRequired,
}

impl CheckState {
    /// Whether the check has finished (any state but `Pending`).
    pub fn is_done(self) -> bool {
        self != CheckState::Pending
    }

    /// Whether the check lets a merge through: success, neutral or skipped
    /// (GitHub's own reading for required checks).
    pub fn is_passing(self) -> bool {
        matches!(self, CheckState::Success | CheckState::Neutral | CheckState::Skipped)
    }
}

/// A comment on the pull request's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub url: String,
    pub created_at: Option<SystemTime>,
    pub updated_at: Option<SystemTime>,
}

/// A comment on a line of the diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewComment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub url: String,
    pub path: String,
    pub line: Option<u64>,
    pub commit_sha: String,
    /// The comment this one answers, in a thread.
    pub in_reply_to: Option<u64>,
    pub review_id: Option<u64>,
    pub created_at: Option<SystemTime>,
}

/// A submitted (or pending) review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub id: u64,
    pub author: String,
    pub state: ReviewState,
    pub body: String,
    pub commit_sha: Option<String>,
    pub url: String,
    pub submitted_at: Option<SystemTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    Pending,
}

/// A user's role on the repository, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    None,
    Read,
    Triage,
    Write,
    Maintain,
    Admin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MergeMethod {
    Merge,
    Squash,
    Rebase,
}

impl MergeMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeMethod::Merge => "merge",
            MergeMethod::Squash => "squash",
            MergeMethod::Rebase => "rebase",
        }
    }
}

/// The answer to a merge request: merged, or refused with the forge's
/// reason (not mergeable, the head moved, checks required, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    Merged {
        sha: String,
    },
    /// HTTP status (405, 409, 422) and the forge's message.
    Refused {
        status: u16,
        message: String,
    },
}

/// The forge, as the controller uses it. Object safe: held as
/// `Arc<dyn Forge>`, and tests put a scripted one in its place.
pub trait Forge: Send + Sync {
    /// The pull request whose head is `head_branch`: an open one if there
    /// is one, else the most recent closed or merged one.
    fn find_pull<'a>(&'a self, head_branch: &'a str) -> ForgeFuture<'a, Option<PullRequest>>;
    fn open_pull<'a>(&'a self, new: &'a NewPull) -> ForgeFuture<'a, PullRequest>;
    /// Applies `update` and returns the pull request as it now is.
    fn update_pull<'a>(&'a self, number: u64, update: &'a PullUpdate) -> ForgeFuture<'a, PullRequest>;
    fn get_pull(&self, number: u64) -> ForgeFuture<'_, PullRequest>;
    /// Every check on `sha`, check runs and commit statuses in one list,
    /// sorted by name.
    fn checks<'a>(&'a self, sha: &'a str) -> ForgeFuture<'a, Vec<Check>>;
    /// The check's log if its CI keeps one, else its output text.
    fn check_log<'a>(&'a self, check: &'a Check) -> ForgeFuture<'a, String>;
    /// Conversation comments, oldest first, updated at or after `since`.
    fn issue_comments(&self, number: u64, since: Option<SystemTime>) -> ForgeFuture<'_, Vec<Comment>>;
    fn review_comments(&self, number: u64) -> ForgeFuture<'_, Vec<ReviewComment>>;
    fn reviews(&self, number: u64) -> ForgeFuture<'_, Vec<Review>>;
    fn post_comment<'a>(&'a self, number: u64, body: &'a str) -> ForgeFuture<'a, Comment>;
    fn reply_review_comment<'a>(
        &'a self,
        number: u64,
        comment_id: u64,
        body: &'a str,
    ) -> ForgeFuture<'a, ReviewComment>;
    /// `login`'s role on the repository (`None` for a stranger).
    fn permission<'a>(&'a self, login: &'a str) -> ForgeFuture<'a, Permission>;
    /// Merges if the head is still `sha`.
    fn merge_pull<'a>(
        &'a self,
        number: u64,
        sha: &'a str,
        method: MergeMethod,
    ) -> ForgeFuture<'a, MergeOutcome>;
}
