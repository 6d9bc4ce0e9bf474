//! GitHub's JSON objects as the REST API and the webhooks write them:
//! users, repositories, pull requests (full and the list's "simple"
//! form), comments, reviews, check runs and statuses.

use serde_json::{Value, json};

use super::git;
use super::state::{
    CheckRun, CommitStatus, IssueComment, Pull, Repo, Review, ReviewComment, State, iso, iso_opt, node_id,
    user_id,
};

pub(super) const DOCS: &str = "https://docs.github.com/rest";

/// `{"message": ..., "documentation_url": ...}`.
pub(super) fn message(text: &str) -> Value {
    json!({"message": text, "documentation_url": DOCS})
}

/// 422's body: `Validation Failed` with one error.
pub(super) fn validation(error: Value) -> Value {
    json!({
        "message": "Validation Failed",
        "errors": [error],
        "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
        "status": "422",
    })
}

pub(super) fn user(st: &State, login: &str) -> Value {
    let id = user_id(login);
    let kind = if login.ends_with("[bot]") { "Bot" } else { "User" };
    json!({
        "login": login,
        "id": id,
        "node_id": node_id("U", id),
        "avatar_url": format!("{}/avatars/u/{id}", st.base),
        "url": format!("{}/api/v3/users/{login}", st.base),
        "html_url": format!("{}/{login}", st.base),
        "type": kind,
        "site_admin": false,
    })
}

/// The repository object; `viewer` adds the `permissions` the REST API
/// gives the authenticated user.
pub(super) fn repo(st: &State, r: &Repo, viewer: Option<&str>) -> Value {
    let full = r.full_name();
    let api = format!("{}/api/v3/repos/{full}", st.base);
    let mut v = json!({
        "id": r.id,
        "node_id": node_id("R", r.id),
        "name": r.name,
        "full_name": full,
        "private": r.private,
        "visibility": if r.private { "private" } else { "public" },
        "owner": user(st, &r.owner),
        "html_url": format!("{}/{full}", st.base),
        "url": api,
        "pulls_url": format!("{api}/pulls{{/number}}"),
        "clone_url": format!("{}/{full}.git", st.base),
        "git_url": format!("{}/{full}.git", st.base),
        "fork": false,
        "archived": false,
        "disabled": false,
        "default_branch": r.default_branch,
        "allow_merge_commit": r.allow[0],
        "allow_squash_merge": r.allow[1],
        "allow_rebase_merge": r.allow[2],
        "allow_auto_merge": false,
        "delete_branch_on_merge": false,
        "created_at": iso(r.created_at),
        "updated_at": iso(r.created_at),
        "pushed_at": iso(r.created_at),
    });
    if let Some(login) = viewer {
        let role = r.role(login);
        let at_least = |roles: &[&str]| roles.contains(&role);
        v["permissions"] = json!({
            "admin": at_least(&["admin"]),
            "maintain": at_least(&["admin", "maintain"]),
            "push": at_least(&["admin", "maintain", "write"]),
            "triage": at_least(&["admin", "maintain", "write", "triage"]),
            "pull": role != "none",
        });
    }
    v
}

fn branch_end(st: &State, r: &Repo, branch: &str, sha: &str) -> Value {
    json!({
        "label": format!("{}:{branch}", r.owner),
        "ref": branch,
        "sha": sha,
        "user": user(st, &r.owner),
        "repo": repo(st, r, None),
    })
}

/// The pull request as `GET /pulls/{n}` writes it; `simple` leaves out
/// what the list leaves out (merged, mergeable, counts); `fresh` answers
/// `mergeable: null` as GitHub does before its background job ran.
pub(super) fn pull(st: &State, r: &Repo, p: &Pull, simple: bool, fresh: bool) -> Value {
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    let html = format!("{}/{}/pull/{}", st.base, r.full_name(), p.number);
    let mut v = json!({
        "url": format!("{api}/pulls/{}", p.number),
        "id": p.id,
        "node_id": p.node_id,
        "html_url": html,
        "diff_url": format!("{html}.diff"),
        "patch_url": format!("{html}.patch"),
        "issue_url": format!("{api}/issues/{}", p.number),
        "commits_url": format!("{api}/pulls/{}/commits", p.number),
        "review_comments_url": format!("{api}/pulls/{}/comments", p.number),
        "comments_url": format!("{api}/issues/{}/comments", p.number),
        "statuses_url": format!("{api}/statuses/{}", p.head_sha),
        "number": p.number,
        "state": p.state(),
        "locked": false,
        "title": p.title,
        "user": user(st, &p.user),
        "body": p.body,
        "labels": [],
        "milestone": null,
        "created_at": iso(p.created_at),
        "updated_at": iso(p.updated_at),
        "closed_at": iso_opt(p.closed_at),
        "merged_at": iso_opt(p.merged_at),
        "merge_commit_sha": p.merge_commit_sha,
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "head": branch_end(st, r, &p.head, &p.head_sha),
        "base": branch_end(st, r, &p.base, &p.base_sha),
        "author_association": r.association(&p.user),
        "auto_merge": null,
        "draft": p.draft,
    });
    if simple {
        return v;
    }
    let (mergeable, state) = if fresh || !p.open {
        (Value::Null, "unknown")
    } else if !git::mergeable(&st.repo_path(&r.owner, &r.name), &p.base_sha, &p.head_sha) {
        (json!(false), "dirty")
    } else if p.draft {
        (json!(true), "draft")
    } else if !missing_checks(r, &p.head_sha).is_empty() {
        (json!(true), "blocked")
    } else if checks_failing(r, &p.head_sha) {
        (json!(true), "unstable")
    } else {
        (json!(true), "clean")
    };
    let comments = r.issue_comments.iter().filter(|c| c.number == p.number).count();
    let review_comments = r.review_comments.iter().filter(|c| c.number == p.number).count();
    let extra = json!({
        "merged": p.merged,
        "mergeable": mergeable,
        "rebaseable": mergeable,
        "mergeable_state": state,
        "merged_by": p.merged_by.as_deref().map(|l| user(st, l)),
        "comments": comments,
        "review_comments": review_comments,
        "maintainer_can_modify": false,
        "commits": git::ahead(&st.repo_path(&r.owner, &r.name), &p.base_sha, &p.head_sha),
    });
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    v
}

/// Required checks of `r` that are not green on `sha`: neither a latest
/// check run of that name that succeeded (or was neutral or skipped), nor
/// a latest commit status of that context that succeeded.
pub(super) fn missing_checks(r: &Repo, sha: &str) -> Vec<(String, &'static str)> {
    let mut missing = Vec::new();
    for name in &r.required_checks {
        let run = r.check_runs.iter().rev().find(|c| c.head_sha == sha && &c.name == name);
        let status = r.statuses.iter().rev().find(|s| s.sha == sha && &s.context == name);
        let green = run.is_some_and(|c| {
            c.status == "completed"
                && matches!(c.conclusion.as_deref(), Some("success" | "neutral" | "skipped"))
        }) || status.is_some_and(|s| s.state == "success");
        if !green {
            let why = match (run, status) {
                (None, None) => "expected",
                (Some(c), _) if c.status != "completed" => "expected",
                (_, Some(s)) if s.state == "pending" => "expected",
                _ => "failing",
            };
            missing.push((name.clone(), why));
        }
    }
    missing
}

fn checks_failing(r: &Repo, sha: &str) -> bool {
    r.check_runs.iter().any(|c| {
        c.head_sha == sha && matches!(c.conclusion.as_deref(), Some("failure" | "timed_out" | "cancelled"))
    }) || r.statuses.iter().any(|s| s.sha == sha && matches!(s.state.as_str(), "failure" | "error"))
}

pub(super) fn issue_comment(st: &State, r: &Repo, c: &IssueComment) -> Value {
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    json!({
        "id": c.id,
        "node_id": node_id("IC", c.id),
        "url": format!("{api}/issues/comments/{}", c.id),
        "html_url": format!("{}/{}/pull/{}#issuecomment-{}", st.base, r.full_name(), c.number, c.id),
        "issue_url": format!("{api}/issues/{}", c.number),
        "body": c.body,
        "user": user(st, &c.user),
        "created_at": iso(c.created_at),
        "updated_at": iso(c.created_at),
        "author_association": r.association(&c.user),
    })
}

pub(super) fn review_comment(st: &State, r: &Repo, c: &ReviewComment) -> Value {
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    let mut v = json!({
        "id": c.id,
        "node_id": node_id("PRRC", c.id),
        "url": format!("{api}/pulls/comments/{}", c.id),
        "html_url": format!("{}/{}/pull/{}#discussion_r{}", st.base, r.full_name(), c.number, c.id),
        "pull_request_url": format!("{api}/pulls/{}", c.number),
        "pull_request_review_id": c.review_id,
        "diff_hunk": format!("@@ -{0},1 +{0},1 @@", c.line),
        "path": c.path,
        "position": c.line,
        "original_position": c.line,
        "commit_id": c.commit_id,
        "original_commit_id": c.commit_id,
        "user": user(st, &c.user),
        "body": c.body,
        "created_at": iso(c.created_at),
        "updated_at": iso(c.created_at),
        "author_association": r.association(&c.user),
        "start_line": null,
        "original_start_line": null,
        "start_side": null,
        "line": c.line,
        "original_line": c.line,
        "side": "RIGHT",
        "subject_type": "line",
    });
    if let Some(to) = c.in_reply_to {
        v["in_reply_to_id"] = json!(to);
    }
    v
}

pub(super) fn review(st: &State, r: &Repo, v: &Review) -> Value {
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    json!({
        "id": v.id,
        "node_id": node_id("PRR", v.id),
        "user": user(st, &v.user),
        "body": v.body,
        "state": v.state,
        "html_url": format!("{}/{}/pull/{}#pullrequestreview-{}", st.base, r.full_name(), v.number, v.id),
        "pull_request_url": format!("{api}/pulls/{}", v.number),
        "commit_id": v.commit_id,
        "submitted_at": iso(v.submitted_at),
        "author_association": r.association(&v.user),
    })
}

fn pull_ref(st: &State, r: &Repo, p: &Pull) -> Value {
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    let end = |branch: &str, sha: &str| json!({"ref": branch, "sha": sha, "repo": {"id": r.id, "url": api, "name": r.name}});
    json!({
        "url": format!("{api}/pulls/{}", p.number),
        "id": p.id,
        "number": p.number,
        "head": end(&p.head, &p.head_sha),
        "base": end(&p.base, &p.base_sha),
    })
}

/// The pull requests whose head is at `sha`, as check runs and suites list them.
fn pulls_at(st: &State, r: &Repo, sha: &str) -> Vec<Value> {
    r.pulls.iter().filter(|p| p.open && p.head_sha == sha).map(|p| pull_ref(st, r, p)).collect()
}

fn app(st: &State) -> Value {
    json!({
        "id": 15368,
        "slug": "github-actions",
        "node_id": "MDM6QXBwMTUzNjg=",
        "name": "GitHub Actions",
        "owner": user(st, "github"),
    })
}

pub(super) fn check_run(st: &State, r: &Repo, c: &CheckRun) -> Value {
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    let html = format!("{}/{}/actions/runs/{}/job/{}", st.base, r.full_name(), c.suite_id, c.id);
    let summary = match c.conclusion.as_deref() {
        Some(conclusion) => format!("{} {conclusion}", c.name),
        None => format!("{} {}", c.name, c.status),
    };
    json!({
        "id": c.id,
        "node_id": node_id("CR", c.id),
        "head_sha": c.head_sha,
        "external_id": "",
        "url": format!("{api}/check-runs/{}", c.id),
        "html_url": html,
        "details_url": html,
        "status": c.status,
        "conclusion": c.conclusion,
        "started_at": iso(c.started_at),
        "completed_at": iso_opt(c.completed_at),
        "output": {
            "title": summary,
            "summary": summary,
            "text": c.output_text,
            "annotations_count": 0,
            "annotations_url": format!("{api}/check-runs/{}/annotations", c.id),
        },
        "name": c.name,
        "check_suite": {"id": c.suite_id},
        "app": app(st),
        "pull_requests": pulls_at(st, r, &c.head_sha),
    })
}

/// The check suite of `sha` (every run on it), for the `check_suite` event.
pub(super) fn check_suite(st: &State, r: &Repo, sha: &str) -> Value {
    let runs: Vec<&CheckRun> = r.check_runs.iter().filter(|c| c.head_sha == sha).collect();
    let done = runs.iter().all(|c| c.status == "completed");
    let conclusion = if !done {
        Value::Null
    } else if runs.iter().any(|c| c.conclusion.as_deref() == Some("failure")) {
        json!("failure")
    } else {
        json!("success")
    };
    let id = r.suites.get(sha).copied().unwrap_or_default();
    let branch = r.pulls.iter().find(|p| p.head_sha == sha).map(|p| p.head.clone());
    json!({
        "id": id,
        "node_id": node_id("CS", id),
        "head_branch": branch,
        "head_sha": sha,
        "status": if done { "completed" } else { "in_progress" },
        "conclusion": conclusion,
        "url": format!("{}/api/v3/repos/{}/check-suites/{id}", st.base, r.full_name()),
        "app": app(st),
        "pull_requests": pulls_at(st, r, sha),
        "latest_check_runs_count": runs.len(),
    })
}

pub(super) fn status(st: &State, r: &Repo, s: &CommitStatus) -> Value {
    json!({
        "url": format!("{}/api/v3/repos/{}/statuses/{}", st.base, r.full_name(), s.sha),
        "avatar_url": null,
        "id": s.id,
        "node_id": node_id("SC", s.id),
        "state": s.state,
        "description": s.description,
        "target_url": null,
        "context": s.context,
        "created_at": iso(s.created_at),
        "updated_at": iso(s.created_at),
        "creator": user(st, &r.owner),
    })
}

/// The combined status of `sha`: the latest status of each context.
pub(super) fn combined_status(st: &State, r: &Repo, sha: &str) -> Value {
    let mut latest: Vec<&CommitStatus> = Vec::new();
    for s in r.statuses.iter().rev().filter(|s| s.sha == sha) {
        if !latest.iter().any(|l| l.context == s.context) {
            latest.push(s);
        }
    }
    let state = if latest.iter().any(|s| matches!(s.state.as_str(), "error" | "failure")) {
        "failure"
    } else if latest.is_empty() || latest.iter().any(|s| s.state == "pending") {
        "pending"
    } else {
        "success"
    };
    let api = format!("{}/api/v3/repos/{}", st.base, r.full_name());
    json!({
        "state": state,
        "statuses": latest.iter().map(|s| status(st, r, s)).collect::<Vec<_>>(),
        "sha": sha,
        "total_count": latest.len(),
        "repository": repo(st, r, None),
        "commit_url": format!("{api}/commits/{sha}"),
        "url": format!("{api}/commits/{sha}/status"),
    })
}
