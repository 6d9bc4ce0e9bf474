//! What changes a pull request, one function per change, shared by the
//! REST handlers, GraphQL and the test's own methods: each checks as
//! GitHub checks, changes, and sends the webhooks GitHub sends
//! (activity on a pull request is in `activity.rs`).

use serde_json::{Value, json};

use super::git::{self, MergeFail};
use super::json::{self, message, validation};
use super::state::{Pull, State, node_id, now_s};

/// An HTTP status and GitHub's JSON body for it.
pub(super) type Fail = (u16, Value);

pub(super) fn not_found() -> Fail {
    (404, message("Not Found"))
}

impl State {
    /// Reads the branches of `owner/name` back into its open pull requests:
    /// a moved head is a `synchronize` (and `refs/pull/N/head` follows).
    pub(super) fn refresh(&mut self, owner: &str, name: &str) {
        let path = self.repo_path(owner, name);
        let branches = git::branches(&path);
        let Some(r) = self.repo_mut(owner, name) else { return };
        let mut moved = Vec::new();
        for p in r.pulls.iter_mut().filter(|p| p.open) {
            if let Some(sha) = branches.get(&p.base) {
                p.base_sha.clone_from(sha);
            }
            if let Some(sha) = branches.get(&p.head)
                && *sha != p.head_sha
            {
                moved.push((p.number, p.head_sha.clone(), sha.clone()));
                p.head_sha.clone_from(sha);
                p.updated_at = now_s();
            }
        }
        for (number, before, after) in moved {
            let _ = git::set_ref(&path, &format!("refs/pull/{number}/head"), &after);
            self.pull_event(
                owner,
                name,
                number,
                "synchronize",
                json!({"before": before, "after": after}),
                owner,
            );
        }
    }

    /// Sends `pull_request` with `action` (and `extra` fields) about PR `number`.
    pub(super) fn pull_event(
        &mut self,
        owner: &str,
        name: &str,
        number: u64,
        action: &str,
        extra: Value,
        sender: &str,
    ) {
        let Some(r) = self.repo(owner, name) else { return };
        let Some(p) = r.pull(number) else { return };
        let mut payload =
            json!({"action": action, "number": number, "pull_request": json::pull(self, r, p, false, false)});
        if let (Some(p), Some(extra)) = (payload.as_object_mut(), extra.as_object()) {
            p.extend(extra.clone());
        }
        self.emit(owner, name, "pull_request", payload, sender);
    }

    /// Opens a pull request from `head` (a branch, or `owner:branch` of
    /// this repository) into `base`; its number.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open_pull(
        &mut self,
        owner: &str,
        name: &str,
        login: &str,
        title: &str,
        head: &str,
        base: &str,
        body: Option<&str>,
        draft: bool,
    ) -> Result<u64, Fail> {
        self.refresh(owner, name);
        let path = self.repo_path(owner, name);
        let branches = git::branches(&path);
        let r = self.repo(owner, name).ok_or_else(not_found)?;
        if title.trim().is_empty() {
            let e = json!({"resource": "PullRequest", "field": "title", "code": "missing_field"});
            return Err((422, validation(e)));
        }
        let branch = match head.split_once(':') {
            Some((o, b)) if o == owner => b,
            Some(_) => "",
            None => head,
        };
        let Some(head_sha) = branches.get(branch).cloned() else {
            return Err((
                422,
                validation(json!({"resource": "PullRequest", "field": "head", "code": "invalid"})),
            ));
        };
        let Some(base_sha) = branches.get(base).cloned() else {
            return Err((
                422,
                validation(json!({"resource": "PullRequest", "field": "base", "code": "invalid"})),
            ));
        };
        if r.pulls.iter().any(|p| p.open && p.head == branch && p.base == base) {
            let msg = format!("A pull request already exists for {owner}:{branch}.");
            return Err((
                422,
                validation(json!({"resource": "PullRequest", "code": "custom", "message": msg})),
            ));
        }
        if git::ahead(&path, &base_sha, &head_sha) == 0 {
            let msg = format!("No commits between {base} and {branch}");
            return Err((
                422,
                validation(json!({"resource": "PullRequest", "code": "custom", "message": msg})),
            ));
        }
        let number = r.next_number();
        let id = self.id();
        let now = now_s();
        let pull = Pull {
            id,
            number,
            node_id: node_id("PR", id),
            title: title.to_string(),
            body: body.map(str::to_string),
            open: true,
            draft,
            head: branch.to_string(),
            head_sha: head_sha.clone(),
            base: base.to_string(),
            base_sha,
            merged: false,
            merged_at: None,
            merged_by: None,
            merge_commit_sha: None,
            user: login.to_string(),
            created_at: now,
            updated_at: now,
            closed_at: None,
        };
        let _ = git::set_ref(&path, &format!("refs/pull/{number}/head"), &head_sha);
        self.users.insert(login.to_string());
        if let Some(r) = self.repo_mut(owner, name) {
            r.pulls.push(pull);
        }
        self.pull_event(owner, name, number, "opened", json!({}), login);
        Ok(number)
    }

    /// `PATCH /pulls/{n}`: title, body, state and base; `draft` is not
    /// something REST changes.
    pub(super) fn edit_pull(
        &mut self,
        owner: &str,
        name: &str,
        number: u64,
        login: &str,
        edit: &Value,
    ) -> Result<(), Fail> {
        self.refresh(owner, name);
        let branches = git::branches(&self.repo_path(owner, name));
        let r = self.repo_mut(owner, name).ok_or_else(not_found)?;
        let open_heads: Vec<(String, String, u64)> =
            r.pulls.iter().filter(|p| p.open).map(|p| (p.head.clone(), p.base.clone(), p.number)).collect();
        let p = r.pull_mut(number).ok_or_else(not_found)?;
        let mut changes = json!({});
        let mut action = None;
        if let Some(base) = edit.get("base").and_then(Value::as_str)
            && base != p.base
        {
            let Some(sha) = branches.get(base) else {
                let e = json!({"resource": "PullRequest", "field": "base", "code": "invalid"});
                return Err((422, validation(e)));
            };
            changes["base"] = json!({"ref": {"from": p.base}, "sha": {"from": p.base_sha}});
            p.base = base.to_string();
            p.base_sha.clone_from(sha);
        }
        if let Some(title) = edit.get("title").and_then(Value::as_str)
            && title != p.title
        {
            changes["title"] = json!({"from": p.title});
            p.title = title.to_string();
        }
        if let Some(body) = edit.get("body").and_then(Value::as_str)
            && Some(body) != p.body.as_deref()
        {
            changes["body"] = json!({"from": p.body});
            p.body = Some(body.to_string());
        }
        match edit.get("state").and_then(Value::as_str) {
            None => {}
            Some("closed") if p.open => {
                p.open = false;
                p.closed_at = Some(now_s());
                action = Some("closed");
            }
            Some("open") if !p.open => {
                if p.merged {
                    return Err((
                        422,
                        validation(
                            json!({"resource": "PullRequest", "code": "custom", "message": "Cannot reopen a merged pull request"}),
                        ),
                    ));
                }
                if open_heads.iter().any(|(h, b, n)| *h == p.head && *b == p.base && *n != number) {
                    let msg = format!("A pull request already exists for {owner}:{}.", p.head);
                    return Err((
                        422,
                        validation(json!({"resource": "PullRequest", "code": "custom", "message": msg})),
                    ));
                }
                p.open = true;
                p.closed_at = None;
                action = Some("reopened");
            }
            Some("open" | "closed") => {}
            Some(_) => {
                let e = json!({"resource": "PullRequest", "field": "state", "code": "invalid"});
                return Err((422, validation(e)));
            }
        }
        p.updated_at = now_s();
        let edited = changes.as_object().is_some_and(|c| !c.is_empty());
        if edited {
            self.pull_event(owner, name, number, "edited", json!({"changes": changes}), login);
        }
        if let Some(action) = action {
            self.pull_event(owner, name, number, action, json!({}), login);
        }
        Ok(())
    }

    /// GraphQL's `markPullRequestReadyForReview` / `convertPullRequestToDraft`.
    pub(super) fn set_draft(&mut self, node: &str, draft: bool, login: &str) -> Result<(u64, bool), String> {
        let found = self
            .repos
            .iter()
            .find_map(|(k, r)| r.pulls.iter().find(|p| p.node_id == node).map(|p| (k.clone(), p.number)));
        let Some(((owner, name), number)) = found else {
            return Err(format!("Could not resolve to a node with the global id of '{node}'"));
        };
        let r = self.repo_mut(&owner, &name).ok_or("no repository")?;
        let p = r.pull_mut(number).ok_or("no pull request")?;
        if !p.open {
            return Err("Pull request is closed".into());
        }
        if p.draft != draft {
            p.draft = draft;
            p.updated_at = now_s();
            let action = if draft { "converted_to_draft" } else { "ready_for_review" };
            self.pull_event(&owner, &name, number, action, json!({}), login);
        }
        Ok((number, draft))
    }

    /// Merges PR `number` as `PUT /pulls/{n}/merge` does; `checks` says
    /// whether required checks are enforced (an admin's override skips them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn merge_pull(
        &mut self,
        owner: &str,
        name: &str,
        number: u64,
        login: &str,
        method: &str,
        sha: Option<&str>,
        title: Option<&str>,
        text: Option<&str>,
        checks: bool,
    ) -> Result<String, Fail> {
        self.refresh(owner, name);
        let path = self.repo_path(owner, name);
        let r = self.repo(owner, name).ok_or_else(not_found)?;
        let p = r.pull(number).ok_or_else(not_found)?.clone();
        let allowed = match method {
            "merge" => r.allow[0],
            "squash" => r.allow[1],
            "rebase" => r.allow[2],
            _ => {
                let e = json!({"resource": "PullRequest", "field": "merge_method", "code": "invalid"});
                return Err((422, validation(e)));
            }
        };
        if !allowed {
            let what = match method {
                "merge" => "Merge commits are",
                "squash" => "Squash merges are",
                _ => "Rebase merges are",
            };
            return Err((405, message(&format!("{what} not allowed on this repository."))));
        }
        if !p.open {
            return Err((405, message("Pull Request is not mergeable")));
        }
        if p.draft {
            return Err((405, message("Pull Request is still a draft")));
        }
        if sha.is_some_and(|s| s != p.head_sha) {
            return Err((409, message("Head branch was modified. Review and try the merge again.")));
        }
        if checks && let Some((check, why)) = json::missing_checks(r, &p.head_sha).into_iter().next() {
            return Err((405, message(&format!("Required status check \"{check}\" is {why}."))));
        }
        let message_text = match method {
            "merge" => format!(
                "{}\n\n{}",
                title
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("Merge pull request #{number} from {owner}/{}", p.head)),
                text.unwrap_or(&p.title)
            ),
            "squash" => format!(
                "{}\n\n{}",
                title.map(str::to_string).unwrap_or_else(|| format!("{} (#{number})", p.title)),
                text.or(p.body.as_deref()).unwrap_or("")
            ),
            _ => String::new(),
        };
        let email = format!("{login}@users.noreply.github.com");
        let merged =
            git::merge(&path, &p.base, &p.base_sha, &p.head_sha, method, &message_text, (login, &email));
        let tip = match merged {
            Ok(tip) => tip,
            Err(MergeFail::Conflict) => return Err((405, message("Pull Request is not mergeable"))),
            Err(MergeFail::BaseMoved) => {
                return Err((409, message("Base branch was modified. Review and try the merge again.")));
            }
            Err(MergeFail::Git(e)) => return Err((500, message(&format!("Server Error: {e}")))),
        };
        let now = now_s();
        if let Some(p) = self.repo_mut(owner, name).and_then(|r| r.pull_mut(number)) {
            p.open = false;
            p.merged = true;
            p.merged_at = Some(now);
            p.closed_at = Some(now);
            p.updated_at = now;
            p.merged_by = Some(login.to_string());
            p.merge_commit_sha = Some(tip.clone());
        }
        self.pull_event(owner, name, number, "closed", json!({}), login);
        self.refresh(owner, name);
        Ok(tip)
    }
}
