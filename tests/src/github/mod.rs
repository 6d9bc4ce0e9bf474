//! A scripted GitHub on 127.0.0.1, so that a GitHub client (REST, GraphQL,
//! webhooks) and `git push` over HTTPS-style smart HTTP run offline
//! against a forge the test controls and inspects.
//!
//! One port serves everything, laid out as GitHub Enterprise Server lays
//! it out:
//! - REST under `/api/v3` ([`GitHub::api_url`]), GitHub's JSON shapes and
//!   errors, `x-ratelimit-*` headers, `ETag`/`If-None-Match`, `Link`
//!   pagination; every request needs `Authorization: Bearer|token <token>`
//!   of a token the test registered ([`GitHub::add_token`]), except
//!   `GET /rate_limit`;
//! - GraphQL at `/api/graphql` ([`GitHub::graphql_url`]; github.com has it at
//!   `https://api.github.com/graphql`): only the draft/ready mutations;
//! - git smart HTTP at `/{owner}/{repo}.git` ([`GitHub::remote_url`]), the
//!   real `git http-backend` over bare repositories in a temp dir the
//!   server owns ([`GitHub::repo_path`]);
//! - job logs at `/_logs/{id}`, where `GET .../actions/jobs/{id}/logs`
//!   redirects, needing no token as GitHub's signed URLs need none.
//!
//! A user's access is GitHub's: the repository's owner is admin, a
//! collaborator has the role the test gave ([`GitHub::add_collaborator`]),
//! anyone else reads a public repository. Pushing and merging need write.
//!
//! What happens sends webhooks to the repository's hooks
//! ([`GitHub::add_webhook`]): pull requests opened, edited, closed,
//! reopened, merged (closed with `merged: true`), synchronized by a push,
//! marked ready or draft; comments, reviews, check runs and suites,
//! statuses. Every request is recorded ([`GitHub::requests`]).
//!
//! Not modelled: forks (head is a branch of the same repository), labels,
//! assignees, requested reviewers, the checks-writing API, apps and
//! installations, GitHub's own rate-limit buckets per user, TLS.

mod activity;
mod delivery;
mod git;
mod git_http;
mod graphql;
mod http;
mod json;
mod ops;
mod reply;
mod rest;
mod state;
#[cfg(test)]
mod tests;
mod webhooks;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

pub use delivery::Delivery;
pub use state::{Pull, Request};
pub use webhooks::signature_256;

use delivery::Hook;
use ops::Fail;
use state::{Repo, State, now_s};

/// Largest REST request body accepted.
const MAX_BODY: usize = 16 << 20;

pub(crate) struct Shared {
    state: Mutex<State>,
    /// The bare repositories; removed when the last owner lets go.
    _dir: tempfile::TempDir,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running server; it stops, and its repositories go, when dropped.
pub struct GitHub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GitHub {
    /// Starts the server on a free port of 127.0.0.1, on its own thread
    /// and runtime so that sync and async tests alike can use it.
    pub fn start() -> GitHub {
        let dir = tempfile::Builder::new().prefix("swarm-github-").tempdir().expect("tempdir");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let (tx, jobs) = tokio::sync::mpsc::unbounded_channel();
        let state = State::new(format!("http://{addr}"), dir.path().to_path_buf(), tx);
        let shared = Arc::new(Shared { state: Mutex::new(state), _dir: dir });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new().fallback(http::handle).with_state(shared.clone());
        let deliveries = shared.clone();
        let thread = std::thread::Builder::new()
            .name("github".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    // Dropping the runtime at the end cancels open
                    // connections and deliveries: a stop never waits for a client.
                    tokio::select! {
                        r = axum::serve(listener, app) => r.expect("github server"),
                        _ = webhooks::run(deliveries, jobs) => {}
                        _ = stopped => {}
                    }
                });
            })
            .expect("spawning the github thread");
        GitHub { addr, shared, stop: Some(stop), thread: Some(thread) }
    }

    /// A server holding `owner/repo` with `checkout`'s `main` pushed to it,
    /// `token` logging in as `login` with write access, and the checkout's
    /// `origin` pointing at it: where a swarm's forge tests start.
    pub fn for_checkout(
        checkout: &std::path::Path,
        owner: &str,
        repo: &str,
        token: &str,
        login: &str,
    ) -> GitHub {
        let gh = GitHub::start();
        gh.add_token(token, login);
        gh.create_repo(owner, repo, "main");
        gh.add_collaborator(owner, repo, login, "write");
        crate::git_cli(checkout, &["remote", "add", "origin", &gh.remote_url(owner, repo)]);
        crate::git_cli(checkout, &["push", "-q", &gh.authed_remote_url(owner, repo, token), "main"]);
        gh
    }

    /// `http://127.0.0.1:PORT`, the web root (`html_url`s start here).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/api/v3`, the client's `api_url`.
    pub fn api_url(&self) -> String {
        format!("{}/api/v3", self.url())
    }

    /// `http://127.0.0.1:PORT/api/graphql`, where GHES serves GraphQL.
    pub fn graphql_url(&self) -> String {
        format!("{}/api/graphql", self.url())
    }

    /// `http://127.0.0.1:PORT/{owner}/{repo}.git`.
    pub fn remote_url(&self, owner: &str, repo: &str) -> String {
        format!("{}/{owner}/{repo}.git", self.url())
    }

    /// The remote with `x-access-token:<token>@` in it, for the git CLI.
    pub fn authed_remote_url(&self, owner: &str, repo: &str, token: &str) -> String {
        format!("http://x-access-token:{token}@{}/{owner}/{repo}.git", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Lets `token` authenticate as `login` (REST, GraphQL and git pushes).
    pub fn add_token(&self, token: &str, login: &str) {
        let mut st = self.lock();
        st.tokens.insert(token.to_string(), login.to_string());
        st.users.insert(login.to_string());
    }

    /// A user that exists (for the permission endpoint) without a token.
    pub fn add_user(&self, login: &str) {
        self.lock().users.insert(login.to_string());
    }

    /// A public, empty bare repository whose HEAD is `default_branch`;
    /// push to it or [`seed`](Self::seed) it.
    pub fn create_repo(&self, owner: &str, repo: &str, default_branch: &str) {
        let mut st = self.lock();
        let path = st.repo_path(owner, repo);
        assert!(st.repo(owner, repo).is_none(), "{owner}/{repo} exists");
        git::init_bare(&path, default_branch).expect("creating the bare repository");
        let id = st.id();
        st.users.insert(owner.to_string());
        let r = Repo {
            id,
            owner: owner.to_string(),
            name: repo.to_string(),
            default_branch: default_branch.to_string(),
            private: false,
            allow: [true; 3],
            protected: Default::default(),
            required_checks: Vec::new(),
            collaborators: Default::default(),
            pulls: Vec::new(),
            issues: Vec::new(),
            issue_comments: Vec::new(),
            review_comments: Vec::new(),
            reviews: Vec::new(),
            check_runs: Vec::new(),
            statuses: Vec::new(),
            suites: Default::default(),
            created_at: now_s(),
        };
        st.repos.insert((owner.to_string(), repo.to_string()), r);
    }

    /// Opens an issue by `login` on `owner/repo`; its number (issues and
    /// pull requests share one sequence, as on GitHub).
    pub fn add_issue(&self, owner: &str, repo: &str, login: &str, title: &str, body: &str) -> u64 {
        let mut st = self.lock();
        let id = st.id();
        let r = st.repo_mut(owner, repo).expect("the repository exists");
        let number = r.next_number();
        let issue = state::Issue {
            id,
            number,
            title: title.to_string(),
            body: body.to_string(),
            user: login.to_string(),
            created_at: now_s(),
        };
        r.issues.push(issue);
        number
    }

    /// The bare repository of `owner/repo` on disk.
    pub fn repo_path(&self, owner: &str, repo: &str) -> PathBuf {
        self.lock().repo_path(owner, repo)
    }

    fn with_repo<T>(&self, owner: &str, repo: &str, f: impl FnOnce(&mut Repo) -> T) -> T {
        let mut st = self.lock();
        f(st.repo_mut(owner, repo).unwrap_or_else(|| panic!("no repository {owner}/{repo}")))
    }

    /// A private repository is invisible, and not fetchable, to anyone but
    /// its owner and collaborators.
    pub fn set_private(&self, owner: &str, repo: &str, private: bool) {
        self.with_repo(owner, repo, |r| r.private = private);
    }

    /// Which merge methods the repository allows (all by default).
    pub fn set_merge_methods(&self, owner: &str, repo: &str, merge: bool, squash: bool, rebase: bool) {
        self.with_repo(owner, repo, |r| r.allow = [merge, squash, rebase]);
    }

    /// Pushes to `branch` are refused with GH006 (merges of pull requests are not).
    pub fn protect_branch(&self, owner: &str, repo: &str, branch: &str) {
        self.set_protected(owner, repo, branch, true);
    }

    pub fn unprotect_branch(&self, owner: &str, repo: &str, branch: &str) {
        self.set_protected(owner, repo, branch, false);
    }

    fn set_protected(&self, owner: &str, repo: &str, branch: &str, on: bool) {
        let path = self.repo_path(owner, repo);
        self.with_repo(owner, repo, |r| {
            if on {
                r.protected.insert(branch.to_string());
            } else {
                r.protected.remove(branch);
            }
            let list: Vec<&str> = r.protected.iter().map(String::as_str).collect();
            git::write_protected(&path, &list).expect("writing protected-refs");
        });
    }

    /// Merging through the API needs these checks (check runs or commit
    /// statuses) green on the head; otherwise 405.
    pub fn require_checks(&self, owner: &str, repo: &str, checks: &[&str]) {
        self.with_repo(owner, repo, |r| r.required_checks = checks.iter().map(|c| c.to_string()).collect());
    }

    /// `permission`: admin, maintain, write, triage or read.
    pub fn add_collaborator(&self, owner: &str, repo: &str, login: &str, permission: &str) {
        assert!(
            ["admin", "maintain", "write", "triage", "read"].contains(&permission),
            "permission {permission}"
        );
        self.with_repo(owner, repo, |r| r.collaborators.insert(login.to_string(), permission.to_string()));
        self.lock().users.insert(login.to_string());
    }

    /// Commits `files` (path, content; other files stay) on top of
    /// `branch` straight into the bare repository, as a push would; a new
    /// branch starts from the default branch (a root commit while that is
    /// unborn). The new sha.
    pub fn seed(
        &self,
        owner: &str,
        repo: &str,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> String {
        let mut st = self.lock();
        let path = st.repo_path(owner, repo);
        let default = st.repo(owner, repo).map(|r| r.default_branch.clone()).unwrap_or_default();
        let branches = git::branches(&path);
        let parent = branches.get(branch).or_else(|| branches.get(&default)).cloned();
        let sha = git::commit_files(&path, parent.as_deref(), files, message, ("Test", "test@example.com"))
            .expect("seeding a commit");
        git::set_ref(&path, &format!("refs/heads/{branch}"), &sha).expect("moving the branch");
        st.refresh(owner, repo);
        sha
    }

    /// Where `branch` points in the bare repository.
    pub fn branch_sha(&self, owner: &str, repo: &str, branch: &str) -> Option<String> {
        git::branches(&self.repo_path(owner, repo)).remove(branch)
    }

    /// Every pull request of the repository, oldest first (heads read
    /// back from the bare repository first).
    pub fn pulls(&self, owner: &str, repo: &str) -> Vec<Pull> {
        let mut st = self.lock();
        st.refresh(owner, repo);
        st.repo(owner, repo).map(|r| r.pulls.clone()).unwrap_or_default()
    }

    pub fn pull(&self, owner: &str, repo: &str, number: u64) -> Option<Pull> {
        self.pulls(owner, repo).into_iter().find(|p| p.number == number)
    }

    /// Opens a pull request as `login` would in the web UI; its number.
    pub fn open_pull(
        &self,
        owner: &str,
        repo: &str,
        login: &str,
        head: &str,
        base: &str,
        title: &str,
    ) -> u64 {
        self.lock()
            .open_pull(owner, repo, login, title, head, base, None, false)
            .map_err(text)
            .expect("open_pull")
    }

    /// Merges as a person with admin rights would from the web UI (a merge
    /// commit; required checks overridden); the new tip of the base, or
    /// GitHub's message when it cannot.
    pub fn merge_pull(&self, owner: &str, repo: &str, number: u64, login: &str) -> Result<String, String> {
        self.lock().merge_pull(owner, repo, number, login, "merge", None, None, None, false).map_err(text)
    }

    /// Closes the pull request without merging.
    pub fn close_pull(&self, owner: &str, repo: &str, number: u64, login: &str) {
        let edit = serde_json::json!({"state": "closed"});
        self.lock().edit_pull(owner, repo, number, login, &edit).map_err(text).expect("close_pull");
    }

    /// A comment on the pull request's conversation; its id.
    pub fn add_issue_comment(&self, owner: &str, repo: &str, number: u64, login: &str, body: &str) -> u64 {
        self.lock()
            .comment_on_issue(owner, repo, number, login, body)
            .map_err(text)
            .expect("add_issue_comment")
    }

    /// A review comment on `path` at `line` of the head (in a COMMENTED
    /// review of its own, as GitHub makes one); its id.
    #[allow(clippy::too_many_arguments)]
    pub fn add_review_comment(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        login: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64 {
        let at = Some((path, line));
        self.lock()
            .comment_on_line(owner, repo, number, login, at, None, body)
            .map_err(text)
            .expect("comment")
    }

    /// A submitted review; `state`: APPROVED, CHANGES_REQUESTED or COMMENTED. Its id.
    pub fn add_review(
        &self,
        owner: &str,
        repo: &str,
        number: u64,
        login: &str,
        state: &str,
        body: &str,
    ) -> u64 {
        assert!(["APPROVED", "CHANGES_REQUESTED", "COMMENTED"].contains(&state), "review state {state}");
        self.lock().submit_review(owner, repo, number, login, state, body).map_err(text).expect("add_review")
    }

    /// A GitHub Actions check run on `head_sha`; `status`: queued,
    /// in_progress or completed; `conclusion` with completed (success,
    /// failure, neutral, cancelled, skipped, timed_out, action_required).
    /// With `log`, its job log is served (the job id is the check run id).
    #[allow(clippy::too_many_arguments)]
    pub fn add_check_run(
        &self,
        owner: &str,
        repo: &str,
        head_sha: &str,
        name: &str,
        status: &str,
        conclusion: Option<&str>,
        output_text: Option<&str>,
        log: Option<String>,
    ) -> u64 {
        assert!(["queued", "in_progress", "completed"].contains(&status), "check status {status}");
        let mut st = self.lock();
        st.add_check_run(owner, repo, head_sha, name, status, conclusion, output_text, log)
            .map_err(text)
            .expect("add_check_run")
    }

    /// Moves a check run on (a completion sends `check_run` completed).
    pub fn set_check_run(&self, id: u64, status: &str, conclusion: Option<&str>) {
        self.lock().set_check_run(id, status, conclusion).map_err(text).expect("set_check_run");
    }

    /// A commit status (`state`: error, failure, pending, success); its id.
    pub fn add_status(&self, owner: &str, repo: &str, sha: &str, context: &str, state: &str) -> u64 {
        self.lock().add_status(owner, repo, sha, context, state, None).map_err(text).expect("add_status")
    }

    /// The primary limit: `limit` requests per hour; once spent, 403.
    pub fn set_rate_limit(&self, limit: u64) {
        let mut st = self.lock();
        st.rate.limit = limit;
        st.rate.roll();
    }

    /// Requests the primary limit has left this window.
    pub fn rate_remaining(&self) -> u64 {
        self.lock().rate.remaining()
    }

    /// The next `n` API requests get 403 with `retry-after` and GitHub's
    /// secondary-rate-limit message.
    pub fn secondary_limit_next(&self, n: u32, retry_after_secs: u64) {
        self.secondary_limit_next_with(n, retry_after_secs, 403);
    }

    /// As [`secondary_limit_next`](Self::secondary_limit_next) with 403 or 429.
    pub fn secondary_limit_next_with(&self, n: u32, retry_after_secs: u64, status: u16) {
        self.lock().secondary = (n, retry_after_secs, status);
    }

    /// The next `n` API requests fail with `status` (500, 502, 503, ...).
    pub fn fail_next(&self, n: u32, status: u16) {
        self.lock().fail = (n, status);
    }

    /// Every API response waits this long first (zero: none).
    pub fn delay(&self, by: Duration) {
        self.lock().delay = by;
    }

    /// Every API write's answer waits this long after the write took
    /// effect (zero: none), so a test can kill its client in between.
    pub fn hold_writes(&self, by: Duration) {
        self.lock().hold_writes = by;
    }

    /// Every request so far (REST, GraphQL, git; at most 5000), oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.lock().requests.clone()
    }

    /// Requests with `method` whose path starts with `path_prefix`.
    pub fn count(&self, method: &str, path_prefix: &str) -> usize {
        self.lock().requests.iter().filter(|r| r.method == method && r.path.starts_with(path_prefix)).count()
    }

    /// One line per request, for failure messages.
    pub fn summary(&self) -> String {
        let lines: Vec<String> =
            self.lock().requests.iter().map(|r| format!("{} {} -> {}", r.method, r.path, r.status)).collect();
        lines.join("\n")
    }

    /// A webhook on the repository for every event, signed with `secret`
    /// (unsigned when empty); its id.
    pub fn add_webhook(&self, owner: &str, repo: &str, url: &str, secret: &str) -> u64 {
        let mut st = self.lock();
        let id = st.id();
        st.hooks.push(Hook {
            id,
            owner: owner.into(),
            repo: repo.into(),
            url: url.into(),
            secret: secret.into(),
        });
        id
    }

    /// Sends `payload` as `event` to the hooks of the repository its
    /// `repository.full_name` names (every hook without one), as is; the
    /// delivery GUIDs.
    pub fn deliver(&self, event: &str, payload: Value) -> Vec<String> {
        let mut st = self.lock();
        let full = payload.pointer("/repository/full_name").and_then(Value::as_str).map(str::to_string);
        let hooks: Vec<Hook> = st
            .hooks
            .iter()
            .filter(|h| full.as_ref().is_none_or(|f| *f == format!("{}/{}", h.owner, h.repo)))
            .cloned()
            .collect();
        let body = payload.to_string();
        hooks.iter().map(|h| st.queue(h, event, body.clone(), webhooks::guid(), false)).collect()
    }

    /// Sends delivery `guid` again, same body and same GUID; false when
    /// there was no such delivery.
    pub fn redeliver(&self, guid: &str) -> bool {
        let mut st = self.lock();
        let Some(d) = st.deliveries.iter().find(|d| d.guid == guid).cloned() else { return false };
        let Some(hook) = st.hooks.iter().find(|h| h.id == d.hook_id).cloned() else { return false };
        st.queue(&hook, &d.event, d.body, d.guid, true);
        true
    }

    /// Every delivery so far, oldest first, with its outcome once known.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.lock().deliveries.clone()
    }
}

impl Drop for GitHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A refusal as text: the status and GitHub's message.
fn text((status, body): Fail) -> String {
    let msg = body.get("message").and_then(Value::as_str).unwrap_or_default();
    let detail = body.pointer("/errors/0/message").and_then(Value::as_str).unwrap_or_default();
    format!("{status} {msg} {detail}").trim().to_string()
}
