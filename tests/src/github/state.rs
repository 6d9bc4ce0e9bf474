//! What the scripted GitHub knows: users and tokens, repositories and
//! their pull requests, comments, reviews, check runs and statuses, the
//! knobs a test turned, and what it recorded. One `State` behind one
//! `std::sync::Mutex`, never held across an await.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::delivery::{Delivery, Hook, Job};

/// Requests kept for the test; later ones are counted, not kept.
pub(super) const MAX_RECORDED: usize = 5000;

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, e.g. `/api/v3/repos/o/r/pulls?state=all`.
    pub path: String,
    /// Lower-case names; `authorization` keeps its scheme only
    /// (`Bearer <redacted>`); a repeated header keeps its last value.
    pub headers: BTreeMap<String, String>,
    /// The JSON body; `Null` without one or when it is not JSON.
    pub body: Value,
    /// The login the request authenticated as.
    pub login: Option<String>,
    pub status: u16,
    /// When it arrived, unix ms.
    pub unix_ms: u64,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

/// A pull request as the server holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pull {
    pub id: u64,
    pub number: u64,
    pub node_id: String,
    pub title: String,
    pub body: Option<String>,
    pub open: bool,
    pub draft: bool,
    /// The head branch's name (same repository: forks are not modelled).
    pub head: String,
    pub head_sha: String,
    pub base: String,
    pub base_sha: String,
    pub merged: bool,
    pub merged_at: Option<u64>,
    pub merged_by: Option<String>,
    pub merge_commit_sha: Option<String>,
    pub user: String,
    pub created_at: u64,
    pub updated_at: u64,
    pub closed_at: Option<u64>,
}

impl Pull {
    pub fn state(&self) -> &'static str {
        if self.open { "open" } else { "closed" }
    }
}

/// An issue (not a pull request; those are [`Pull`]s), numbered with them.
#[derive(Debug, Clone)]
pub(super) struct Issue {
    pub id: u64,
    pub number: u64,
    pub title: String,
    pub body: String,
    pub user: String,
    pub created_at: u64,
}

#[derive(Debug, Clone)]
pub(super) struct IssueComment {
    pub id: u64,
    pub number: u64,
    pub user: String,
    pub body: String,
    pub created_at: u64,
}

#[derive(Debug, Clone)]
pub(super) struct ReviewComment {
    pub id: u64,
    pub number: u64,
    pub review_id: u64,
    pub path: String,
    pub line: u64,
    pub commit_id: String,
    pub body: String,
    pub user: String,
    pub in_reply_to: Option<u64>,
    pub created_at: u64,
}

#[derive(Debug, Clone)]
pub(super) struct Review {
    pub id: u64,
    pub number: u64,
    pub user: String,
    pub state: String,
    pub body: String,
    pub commit_id: String,
    pub submitted_at: u64,
}

#[derive(Debug, Clone)]
pub(super) struct CheckRun {
    pub id: u64,
    pub name: String,
    pub head_sha: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub started_at: u64,
    pub completed_at: Option<u64>,
    pub output_text: Option<String>,
    pub log: Option<String>,
    pub suite_id: u64,
}

#[derive(Debug, Clone)]
pub(super) struct CommitStatus {
    pub id: u64,
    pub sha: String,
    pub context: String,
    pub state: String,
    pub description: Option<String>,
    pub created_at: u64,
}

#[derive(Debug)]
pub(super) struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    pub default_branch: String,
    pub private: bool,
    /// merge, squash, rebase.
    pub allow: [bool; 3],
    pub protected: BTreeSet<String>,
    pub required_checks: Vec<String>,
    /// login → admin | maintain | write | triage | read.
    pub collaborators: BTreeMap<String, String>,
    pub pulls: Vec<Pull>,
    pub issues: Vec<Issue>,
    pub issue_comments: Vec<IssueComment>,
    pub review_comments: Vec<ReviewComment>,
    pub reviews: Vec<Review>,
    pub check_runs: Vec<CheckRun>,
    pub statuses: Vec<CommitStatus>,
    /// head sha → check suite id.
    pub suites: BTreeMap<String, u64>,
    pub created_at: u64,
}

impl Repo {
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The next issue or pull request number.
    pub fn next_number(&self) -> u64 {
        let pulls = self.pulls.iter().map(|p| p.number);
        pulls.chain(self.issues.iter().map(|i| i.number)).max().unwrap_or(0) + 1
    }

    pub fn pull(&self, number: u64) -> Option<&Pull> {
        self.pulls.iter().find(|p| p.number == number)
    }

    pub fn pull_mut(&mut self, number: u64) -> Option<&mut Pull> {
        self.pulls.iter_mut().find(|p| p.number == number)
    }

    /// The role `login` has here: the owner is admin, a collaborator has
    /// theirs, anyone else reads a public repository and nothing else.
    pub fn role(&self, login: &str) -> &str {
        if login == self.owner {
            return "admin";
        }
        match self.collaborators.get(login) {
            Some(r) => r,
            None if self.private => "none",
            None => "read",
        }
    }

    pub fn can_read(&self, login: Option<&str>) -> bool {
        match login {
            Some(l) => self.role(l) != "none",
            None => !self.private,
        }
    }

    pub fn can_push(&self, login: &str) -> bool {
        matches!(self.role(login), "admin" | "maintain" | "write")
    }

    pub fn association(&self, login: &str) -> &'static str {
        if login == self.owner {
            "OWNER"
        } else if self.collaborators.contains_key(login) {
            "COLLABORATOR"
        } else {
            "NONE"
        }
    }
}

/// The primary rate limit: one bucket for the whole server.
#[derive(Debug)]
pub(super) struct Rate {
    pub limit: u64,
    pub used: u64,
    pub reset: u64,
}

impl Rate {
    /// Starts a new window when the last one is over.
    pub fn roll(&mut self) {
        let now = now_s();
        if now >= self.reset {
            self.used = 0;
            self.reset = now + 3600;
        }
    }

    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }
}

pub(super) struct State {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Where the bare repositories live: `<root>/<owner>/<repo>.git`.
    pub root: PathBuf,
    pub next_id: u64,
    pub tokens: BTreeMap<String, String>,
    pub users: BTreeSet<String>,
    pub repos: BTreeMap<(String, String), Repo>,
    pub rate: Rate,
    /// Requests left to refuse with a secondary limit: (n, retry-after s, status).
    pub secondary: (u32, u64, u16),
    /// Requests left to fail: (n, status).
    pub fail: (u32, u16),
    pub delay: Duration,
    /// How long an answer to a write (POST, PATCH, PUT, DELETE) is held
    /// after it took effect: the window a client dies in having changed
    /// the forge without hearing so.
    pub hold_writes: Duration,
    pub requests: Vec<Request>,
    pub dropped: u64,
    pub hooks: Vec<Hook>,
    pub deliveries: Vec<Delivery>,
    pub tx: UnboundedSender<Job>,
}

impl State {
    pub fn new(base: String, root: PathBuf, tx: UnboundedSender<Job>) -> State {
        State {
            base,
            root,
            next_id: 1000,
            tokens: BTreeMap::new(),
            users: BTreeSet::new(),
            repos: BTreeMap::new(),
            rate: Rate { limit: 5000, used: 0, reset: now_s() + 3600 },
            secondary: (0, 0, 403),
            fail: (0, 500),
            delay: Duration::ZERO,
            hold_writes: Duration::ZERO,
            requests: Vec::new(),
            dropped: 0,
            hooks: Vec::new(),
            deliveries: Vec::new(),
            tx,
        }
    }

    pub fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn repo(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos.get(&(owner.to_string(), name.to_string()))
    }

    pub fn repo_mut(&mut self, owner: &str, name: &str) -> Option<&mut Repo> {
        self.repos.get_mut(&(owner.to_string(), name.to_string()))
    }

    pub fn repo_path(&self, owner: &str, name: &str) -> PathBuf {
        self.root.join(owner).join(format!("{name}.git"))
    }

    pub fn login_of(&self, token: &str) -> Option<&str> {
        self.tokens.get(token).map(String::as_str)
    }

    pub fn record(&mut self, req: Request) {
        if self.requests.len() < MAX_RECORDED {
            self.requests.push(req);
        } else {
            self.dropped += 1;
        }
    }
}

/// Seconds since the epoch.
pub(super) fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// `2011-01-26T19:01:12Z`, as GitHub writes times.
pub(super) fn iso(unix_s: u64) -> String {
    let t = jiff::Timestamp::from_second(i64::try_from(unix_s).unwrap_or(i64::MAX))
        .unwrap_or(jiff::Timestamp::MAX);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(super) fn iso_opt(unix_s: Option<u64>) -> Value {
    unix_s.map(|s| Value::String(iso(s))).unwrap_or(Value::Null)
}

/// A stable id for a login, as GitHub gives every user one.
pub(super) fn user_id(login: &str) -> u64 {
    // FNV-1a, folded to eight digits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in login.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    10_000_000 + h % 90_000_000
}

/// A GraphQL node id in GitHub's style: a type prefix and an opaque tail.
pub(super) fn node_id(prefix: &str, id: u64) -> String {
    format!("{prefix}_kwDO{id:010X}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_github_writes_them() {
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(1_296_068_472), "2011-01-26T19:01:12Z");
        assert_eq!(iso(951_782_400), "2000-02-29T00:00:00Z");
    }
}
