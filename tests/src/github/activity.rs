//! What people and CI do on a pull request: conversation comments,
//! line comments and replies, reviews, check runs (and their suites) and
//! commit statuses, each sending its webhook.

use serde_json::{Value, json};

use super::git;
use super::json;
use super::ops::{Fail, not_found};
use super::state::{CheckRun, CommitStatus, IssueComment, Review, ReviewComment, State, now_s};

impl State {
    pub(super) fn comment_on_issue(
        &mut self,
        owner: &str,
        name: &str,
        number: u64,
        login: &str,
        body: &str,
    ) -> Result<u64, Fail> {
        let id = self.id();
        let r = self.repo_mut(owner, name).ok_or_else(not_found)?;
        r.pull(number).ok_or_else(not_found)?;
        let c =
            IssueComment { id, number, user: login.to_string(), body: body.to_string(), created_at: now_s() };
        r.issue_comments.push(c.clone());
        self.users.insert(login.to_string());
        let (Some(r), Some(p)) =
            (self.repo(owner, name), self.repo(owner, name).and_then(|r| r.pull(number)))
        else {
            return Ok(id);
        };
        let api = format!("{}/api/v3/repos/{}", self.base, r.full_name());
        let mut issue = json::pull(self, r, p, true, false);
        issue["url"] = json!(format!("{api}/issues/{number}"));
        issue["pull_request"] = json!({
            "url": format!("{api}/pulls/{number}"),
            "html_url": format!("{}/{}/pull/{number}", self.base, r.full_name()),
            "merged_at": issue["merged_at"].clone(),
        });
        let payload =
            json!({"action": "created", "issue": issue, "comment": json::issue_comment(self, r, &c)});
        self.emit(owner, name, "issue_comment", payload, login);
        Ok(id)
    }

    /// A review comment on `path:line` of the head, in a review of its own
    /// (state COMMENTED) as GitHub makes for a single comment or a reply.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn comment_on_line(
        &mut self,
        owner: &str,
        name: &str,
        number: u64,
        login: &str,
        at: Option<(&str, u64)>,
        reply_to: Option<u64>,
        body: &str,
    ) -> Result<u64, Fail> {
        let (review_id, id) = (self.id(), self.id());
        let r = self.repo_mut(owner, name).ok_or_else(not_found)?;
        let p = r.pull(number).ok_or_else(not_found)?;
        let head = p.head_sha.clone();
        let (path, line, in_reply_to) = match reply_to {
            Some(to) => {
                let c = r
                    .review_comments
                    .iter()
                    .find(|c| c.id == to && c.number == number)
                    .ok_or_else(not_found)?;
                (c.path.clone(), c.line, Some(c.in_reply_to.unwrap_or(c.id)))
            }
            None => {
                let (path, line) = at.ok_or_else(not_found)?;
                (path.to_string(), line, None)
            }
        };
        let now = now_s();
        let review = Review {
            id: review_id,
            number,
            user: login.to_string(),
            state: "COMMENTED".into(),
            body: String::new(),
            commit_id: head.clone(),
            submitted_at: now,
        };
        let c = ReviewComment {
            id,
            number,
            review_id,
            path,
            line,
            commit_id: head,
            body: body.to_string(),
            user: login.to_string(),
            in_reply_to,
            created_at: now,
        };
        r.reviews.push(review);
        r.review_comments.push(c.clone());
        self.users.insert(login.to_string());
        if let Some(r) = self.repo(owner, name)
            && let Some(p) = r.pull(number)
        {
            let payload = json!({"action": "created", "comment": json::review_comment(self, r, &c),
                                 "pull_request": json::pull(self, r, p, true, false)});
            self.emit(owner, name, "pull_request_review_comment", payload, login);
        }
        Ok(id)
    }

    pub(super) fn submit_review(
        &mut self,
        owner: &str,
        name: &str,
        number: u64,
        login: &str,
        state: &str,
        body: &str,
    ) -> Result<u64, Fail> {
        let id = self.id();
        let r = self.repo_mut(owner, name).ok_or_else(not_found)?;
        let p = r.pull(number).ok_or_else(not_found)?;
        let review = Review {
            id,
            number,
            user: login.to_string(),
            state: state.to_string(),
            body: body.to_string(),
            commit_id: p.head_sha.clone(),
            submitted_at: now_s(),
        };
        r.reviews.push(review.clone());
        self.users.insert(login.to_string());
        if let Some(r) = self.repo(owner, name)
            && let Some(p) = r.pull(number)
        {
            let mut v = json::review(self, r, &review);
            v["state"] = json!(state.to_ascii_lowercase());
            let payload = json!({"action": "submitted", "review": v, "pull_request": json::pull(self, r, p, true, false)});
            self.emit(owner, name, "pull_request_review", payload, login);
        }
        Ok(id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_check_run(
        &mut self,
        owner: &str,
        name: &str,
        head_sha: &str,
        check: &str,
        status: &str,
        conclusion: Option<&str>,
        output_text: Option<&str>,
        log: Option<String>,
    ) -> Result<u64, Fail> {
        let id = self.id();
        let fresh_suite = self.id();
        let r = self.repo_mut(owner, name).ok_or_else(not_found)?;
        let suite_id = *r.suites.entry(head_sha.to_string()).or_insert(fresh_suite);
        let now = now_s();
        r.check_runs.push(CheckRun {
            id,
            name: check.to_string(),
            head_sha: head_sha.to_string(),
            status: status.to_string(),
            conclusion: conclusion.map(str::to_string),
            started_at: now,
            completed_at: (status == "completed").then_some(now),
            output_text: output_text.map(str::to_string),
            log,
            suite_id,
        });
        self.check_event(owner, name, id, "created");
        if status == "completed" {
            self.check_event(owner, name, id, "completed");
        }
        Ok(id)
    }

    pub(super) fn set_check_run(
        &mut self,
        id: u64,
        status: &str,
        conclusion: Option<&str>,
    ) -> Result<(), Fail> {
        let key =
            self.repos.iter().find(|(_, r)| r.check_runs.iter().any(|c| c.id == id)).map(|(k, _)| k.clone());
        let (owner, name) = key.ok_or_else(not_found)?;
        let r = self.repo_mut(&owner, &name).ok_or_else(not_found)?;
        let c = r.check_runs.iter_mut().find(|c| c.id == id).ok_or_else(not_found)?;
        let was_done = c.status == "completed";
        c.status = status.to_string();
        c.conclusion = conclusion.map(str::to_string);
        c.completed_at = (status == "completed").then(now_s);
        if status == "completed" && !was_done {
            self.check_event(&owner, &name, id, "completed");
        }
        Ok(())
    }

    /// `check_run` with `action`; a completion that completes the suite
    /// also sends `check_suite` `completed`.
    fn check_event(&mut self, owner: &str, name: &str, id: u64, action: &str) {
        let Some(r) = self.repo(owner, name) else { return };
        let Some(c) = r.check_runs.iter().find(|c| c.id == id) else { return };
        let mut run = json::check_run(self, r, c);
        run["check_suite"] = json::check_suite(self, r, &c.head_sha);
        let suite_done = action == "completed"
            && r.check_runs.iter().filter(|o| o.head_sha == c.head_sha).all(|o| o.status == "completed");
        let suite = json::check_suite(self, r, &c.head_sha);
        self.emit(
            owner,
            name,
            "check_run",
            json!({"action": action, "check_run": run}),
            "github-actions[bot]",
        );
        if suite_done {
            self.emit(
                owner,
                name,
                "check_suite",
                json!({"action": "completed", "check_suite": suite}),
                "github-actions[bot]",
            );
        }
    }

    pub(super) fn add_status(
        &mut self,
        owner: &str,
        name: &str,
        sha: &str,
        context: &str,
        state: &str,
        description: Option<&str>,
    ) -> Result<u64, Fail> {
        let id = self.id();
        let r = self.repo_mut(owner, name).ok_or_else(not_found)?;
        let s = CommitStatus {
            id,
            sha: sha.to_string(),
            context: context.to_string(),
            state: state.to_string(),
            description: description.map(str::to_string),
            created_at: now_s(),
        };
        r.statuses.push(s.clone());
        let branches: Vec<Value> = git::branches(&self.repo_path(owner, name))
            .into_iter()
            .filter(|(_, at)| at == sha)
            .map(|(b, at)| json!({"name": b, "commit": {"sha": at}, "protected": false}))
            .collect();
        if let Some(r) = self.repo(owner, name) {
            let mut payload = json::status(self, r, &s);
            payload["sha"] = json!(sha);
            payload["name"] = json!(r.full_name());
            payload["commit"] = json!({"sha": sha});
            payload["branches"] = json!(branches);
            self.emit(owner, name, "status", payload, owner);
        }
        Ok(id)
    }
}
