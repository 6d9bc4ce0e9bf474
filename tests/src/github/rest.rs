//! The REST endpoints under `/api/v3`, each a function over the state:
//! repositories, pull requests (list, create, get, edit, merge), issue and
//! review comments, reviews, check runs, combined status, job logs,
//! collaborator permission and the rate limit.

use axum::http::Method;
use serde_json::{Value, json};

use super::git;
use super::json::{self, message, validation};
use super::ops::not_found;
use super::reply::{Payload, Query, Reply, paginate};
use super::state::{Repo, State, user_id};
use super::webhooks::guid;

/// Routes one authenticated request; `path` is the part after `/api/v3`.
pub(super) fn route(
    st: &mut State,
    method: &Method,
    path: &str,
    segs: &[&str],
    q: &Query,
    body: &Value,
    login: &str,
) -> Reply {
    let m = method.as_str();
    match segs {
        ["user"] if m == "GET" => Reply::json(200, json::user(st, login)),
        ["repos", o, r, rest @ ..] => {
            match st.repo(o, r) {
                Some(repo) if repo.can_read(Some(login)) => {}
                _ => return Reply::fail(not_found()),
            }
            st.refresh(o, r);
            repo_route(st, m, path, o, r, rest, q, body, login)
        }
        _ => Reply::fail(not_found()),
    }
}

#[allow(clippy::too_many_arguments)]
fn repo_route(
    st: &mut State,
    m: &str,
    path: &str,
    o: &str,
    r: &str,
    rest: &[&str],
    q: &Query,
    body: &Value,
    login: &str,
) -> Reply {
    let number = |s: &str| s.parse::<u64>().ok();
    match (m, rest) {
        ("GET", []) => with_repo(st, o, r, |st, repo| Reply::json(200, json::repo(st, repo, Some(login)))),
        ("GET", ["pulls"]) => list_pulls(st, path, o, r, q),
        ("POST", ["pulls"]) => create_pull(st, o, r, body, login),
        ("GET", ["pulls", n]) => match number(n) {
            Some(n) => {
                with_pull(st, o, r, n, |st, repo, p| Reply::json(200, json::pull(st, repo, p, false, false)))
            }
            None => Reply::fail(not_found()),
        },
        ("PATCH", ["pulls", n]) => match number(n) {
            Some(n) => edit_pull(st, o, r, n, body, login),
            None => Reply::fail(not_found()),
        },
        ("PUT", ["pulls", n, "merge"]) => match number(n) {
            Some(n) => merge(st, o, r, n, body, login),
            None => Reply::fail(not_found()),
        },
        ("GET", ["pulls", n, "merge"]) => match number(n) {
            Some(n) => with_pull(st, o, r, n, |_, _, p| {
                if p.merged {
                    Reply { status: 204, body: Payload::Empty, headers: Vec::new() }
                } else {
                    Reply::fail(not_found())
                }
            }),
            None => Reply::fail(not_found()),
        },
        ("GET", ["issues", n]) => match number(n) {
            Some(n) => with_repo(st, o, r, |st, repo| match issue(st, repo, n) {
                Some(v) => Reply::json(200, v),
                None => Reply::fail(not_found()),
            }),
            None => Reply::fail(not_found()),
        },
        ("GET", ["issues", n, "comments"]) => list(st, path, q, o, r, number(n), |st, repo, n| {
            repo.issue_comments
                .iter()
                .filter(|c| c.number == n)
                .map(|c| json::issue_comment(st, repo, c))
                .collect()
        }),
        ("POST", ["issues", n, "comments"]) => {
            let Some(text) = body.get("body").and_then(Value::as_str) else {
                return missing("IssueComment", "body");
            };
            match st.comment_on_issue(o, r, number(n).unwrap_or(0), login, text) {
                Ok(id) => {
                    with_repo(st, o, r, |st, repo| match repo.issue_comments.iter().find(|c| c.id == id) {
                        Some(c) => Reply::json(201, json::issue_comment(st, repo, c)),
                        None => Reply::fail(not_found()),
                    })
                }
                Err(f) => Reply::fail(f),
            }
        }
        ("GET", ["pulls", n, "comments"]) => list(st, path, q, o, r, number(n), |st, repo, n| {
            repo.review_comments
                .iter()
                .filter(|c| c.number == n)
                .map(|c| json::review_comment(st, repo, c))
                .collect()
        }),
        ("POST", ["pulls", n, "comments", id, "replies"]) => {
            let Some(text) = body.get("body").and_then(Value::as_str) else {
                return missing("PullRequestReviewComment", "body");
            };
            let (n, id) = (number(n).unwrap_or(0), number(id).unwrap_or(0));
            match st.comment_on_line(o, r, n, login, None, Some(id), text) {
                Ok(id) => {
                    with_repo(st, o, r, |st, repo| match repo.review_comments.iter().find(|c| c.id == id) {
                        Some(c) => Reply::json(201, json::review_comment(st, repo, c)),
                        None => Reply::fail(not_found()),
                    })
                }
                Err(f) => Reply::fail(f),
            }
        }
        ("GET", ["pulls", n, "reviews"]) => list(st, path, q, o, r, number(n), |st, repo, n| {
            repo.reviews.iter().filter(|v| v.number == n).map(|v| json::review(st, repo, v)).collect()
        }),
        ("GET", ["commits", reference @ .., "check-runs"]) if !reference.is_empty() => {
            check_runs(st, path, o, r, &reference.join("/"), q)
        }
        ("GET", ["commits", reference @ .., "status"]) if !reference.is_empty() => {
            let Some(sha) = resolve(st, o, r, &reference.join("/")) else {
                return no_commit(&reference.join("/"));
            };
            with_repo(st, o, r, |st, repo| Reply::json(200, json::combined_status(st, repo, &sha)))
        }
        ("GET", ["check-runs", id]) => {
            with_repo(st, o, r, |st, repo| match repo.check_runs.iter().find(|c| Some(c.id) == number(id)) {
                Some(c) => Reply::json(200, json::check_run(st, repo, c)),
                None => Reply::fail(not_found()),
            })
        }
        ("GET", ["actions", "jobs", id, "logs"]) => with_repo(st, o, r, |st, repo| {
            match repo.check_runs.iter().find(|c| Some(c.id) == number(id) && c.log.is_some()) {
                Some(c) => {
                    // As GitHub's: a short-lived URL elsewhere that needs no token.
                    let at = format!("{}/_logs/{}?sig={}", st.base, c.id, guid());
                    Reply { status: 302, body: Payload::Empty, headers: vec![("location".into(), at)] }
                }
                None => Reply::fail(not_found()),
            }
        }),
        ("GET", ["collaborators", user, "permission"]) => permission(st, o, r, user, login),
        _ => Reply::fail(not_found()),
    }
}

/// `GET /issues/{n}`: an issue, or a pull request as GitHub shows one
/// there (with `pull_request`).
fn issue(st: &State, repo: &Repo, n: u64) -> Option<Value> {
    let api = format!("{}/api/v3/repos/{}", st.base, repo.full_name());
    let page = format!("{}/{}", st.base, repo.full_name());
    if let Some(i) = repo.issues.iter().find(|i| i.number == n) {
        return Some(json!({
            "url": format!("{api}/issues/{n}"),
            "id": i.id,
            "number": n,
            "html_url": format!("{page}/issues/{n}"),
            "title": i.title,
            "body": if i.body.is_empty() { Value::Null } else { json!(i.body) },
            "state": "open",
            "user": json::user(st, &i.user),
            "created_at": super::state::iso(i.created_at),
            "comments": repo.issue_comments.iter().filter(|c| c.number == n).count(),
        }));
    }
    let p = repo.pull(n)?;
    Some(json!({
        "url": format!("{api}/issues/{n}"),
        "id": p.id,
        "number": n,
        "html_url": format!("{page}/pull/{n}"),
        "title": p.title,
        "body": p.body,
        "state": if p.open { "open" } else { "closed" },
        "pull_request": {"url": format!("{api}/pulls/{n}"), "html_url": format!("{page}/pull/{n}")},
    }))
}

fn with_repo(st: &State, o: &str, r: &str, f: impl FnOnce(&State, &Repo) -> Reply) -> Reply {
    match st.repo(o, r) {
        Some(repo) => f(st, repo),
        None => Reply::fail(not_found()),
    }
}

fn with_pull(
    st: &State,
    o: &str,
    r: &str,
    n: u64,
    f: impl FnOnce(&State, &Repo, &super::state::Pull) -> Reply,
) -> Reply {
    with_repo(st, o, r, |st, repo| match repo.pull(n) {
        Some(p) => f(st, repo, p),
        None => Reply::fail(not_found()),
    })
}

/// A paginated list of what `items` gives for pull request `n`.
fn list(
    st: &State,
    path: &str,
    q: &Query,
    o: &str,
    r: &str,
    n: Option<u64>,
    items: impl FnOnce(&State, &Repo, u64) -> Vec<Value>,
) -> Reply {
    let Some(n) = n else { return Reply::fail(not_found()) };
    with_pull(st, o, r, n, |st, repo, _| {
        let (page, link) = paginate(st, path, q, items(st, repo, n));
        with_link(Reply::json(200, Value::Array(page)), link)
    })
}

fn with_link(reply: Reply, link: Option<String>) -> Reply {
    match link {
        Some(l) => reply.header("link", l),
        None => reply,
    }
}

fn missing(resource: &str, field: &str) -> Reply {
    Reply::json(422, validation(json!({"resource": resource, "field": field, "code": "missing_field"})))
}

fn no_commit(reference: &str) -> Reply {
    Reply::json(422, message(&format!("No commit found for SHA: {reference}")))
}

fn list_pulls(st: &State, path: &str, o: &str, r: &str, q: &Query) -> Reply {
    let state = q.get("state").unwrap_or("open");
    if !matches!(state, "open" | "closed" | "all") {
        return Reply::json(
            422,
            validation(json!({"resource": "Search", "field": "state", "code": "invalid"})),
        );
    }
    // GitHub filters by head only in the `user:ref-name` form; a bare
    // branch name is ignored (every pull request comes back).
    let head = q.get("head").and_then(|h| h.split_once(':'));
    let base = q.get("base");
    let sort = q.get("sort").unwrap_or("created");
    let desc = match q.get("direction") {
        Some(d) => d == "desc",
        None => matches!(sort, "created" | "updated"),
    };
    with_repo(st, o, r, |st, repo| {
        let mut pulls: Vec<&super::state::Pull> = repo
            .pulls
            .iter()
            .filter(|p| state == "all" || p.state() == state)
            .filter(|p| head.is_none_or(|(owner, branch)| owner == repo.owner && branch == p.head))
            .filter(|p| base.is_none_or(|b| b == p.base))
            .collect();
        match sort {
            "updated" => pulls.sort_by_key(|p| (p.updated_at, p.number)),
            _ => pulls.sort_by_key(|p| (p.created_at, p.number)),
        }
        if desc {
            pulls.reverse();
        }
        let items = pulls.iter().map(|p| json::pull(st, repo, p, true, false)).collect();
        let (page, link) = paginate(st, path, q, items);
        with_link(Reply::json(200, Value::Array(page)), link)
    })
}

fn create_pull(st: &mut State, o: &str, r: &str, body: &Value, login: &str) -> Reply {
    if !body.is_object() {
        return Reply::json(400, message("Problems parsing JSON"));
    }
    let field = |k: &str| body.get(k).and_then(Value::as_str);
    let (Some(head), Some(base)) = (field("head"), field("base")) else {
        let which = if field("head").is_none() { "head" } else { "base" };
        return missing("PullRequest", which);
    };
    let Some(title) = field("title") else { return missing("PullRequest", "title") };
    let draft = body.get("draft").and_then(Value::as_bool).unwrap_or(false);
    match st.open_pull(o, r, login, title, head, base, field("body"), draft) {
        Ok(n) => with_pull(st, o, r, n, |st, repo, p| {
            let v = json::pull(st, repo, p, false, true);
            let at = v["url"].as_str().unwrap_or_default().to_string();
            Reply::json(201, v).header("location", at)
        }),
        Err(f) => Reply::fail(f),
    }
}

fn edit_pull(st: &mut State, o: &str, r: &str, n: u64, body: &Value, login: &str) -> Reply {
    let Some(repo) = st.repo(o, r) else { return Reply::fail(not_found()) };
    let Some(p) = repo.pull(n) else { return Reply::fail(not_found()) };
    if !repo.can_push(login) && p.user != login {
        return Reply::json(403, message("Resource not accessible by personal access token"));
    }
    if !body.is_object() {
        return Reply::json(400, message("Problems parsing JSON"));
    }
    match st.edit_pull(o, r, n, login, body) {
        Ok(()) => {
            with_pull(st, o, r, n, |st, repo, p| Reply::json(200, json::pull(st, repo, p, false, false)))
        }
        Err(f) => Reply::fail(f),
    }
}

fn merge(st: &mut State, o: &str, r: &str, n: u64, body: &Value, login: &str) -> Reply {
    let Some(repo) = st.repo(o, r) else { return Reply::fail(not_found()) };
    if !repo.can_push(login) {
        return Reply::json(403, message("Resource not accessible by personal access token"));
    }
    let field = |k: &str| body.get(k).and_then(Value::as_str);
    let method = field("merge_method").unwrap_or("merge");
    match st.merge_pull(
        o,
        r,
        n,
        login,
        method,
        field("sha"),
        field("commit_title"),
        field("commit_message"),
        true,
    ) {
        Ok(sha) => Reply::json(
            200,
            json!({"sha": sha, "merged": true, "message": "Pull Request successfully merged"}),
        ),
        Err(f) => Reply::fail(f),
    }
}

/// The commit a ref names: a full SHA as it is, else a branch, tag or
/// abbreviated SHA in the bare repository.
fn resolve(st: &State, o: &str, r: &str, reference: &str) -> Option<String> {
    if reference.len() == 40 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(reference.to_ascii_lowercase());
    }
    git::resolve(&st.repo_path(o, r), reference)
}

fn check_runs(st: &State, path: &str, o: &str, r: &str, reference: &str, q: &Query) -> Reply {
    let Some(sha) = resolve(st, o, r, reference) else { return no_commit(reference) };
    let latest = q.get("filter").unwrap_or("latest") == "latest";
    with_repo(st, o, r, |st, repo| {
        let mut runs: Vec<&super::state::CheckRun> = repo
            .check_runs
            .iter()
            .rev()
            .filter(|c| c.head_sha == sha)
            .filter(|c| q.get("check_name").is_none_or(|n| n == c.name))
            .filter(|c| q.get("status").is_none_or(|s| s == c.status))
            .collect();
        if latest {
            let mut seen = std::collections::BTreeSet::new();
            runs.retain(|c| seen.insert(c.name.clone()));
        }
        let total = runs.len();
        let items = runs.iter().map(|c| json::check_run(st, repo, c)).collect();
        let (page, link) = paginate(st, path, q, items);
        with_link(Reply::json(200, json!({"total_count": total, "check_runs": page})), link)
    })
}

fn permission(st: &State, o: &str, r: &str, user: &str, login: &str) -> Reply {
    with_repo(st, o, r, |st, repo| {
        if !repo.can_push(login) {
            return Reply::json(403, message("Must have push access to view repository collaborators."));
        }
        let known = st.users.contains(user) || repo.owner == user || repo.collaborators.contains_key(user);
        if !known {
            return Reply::fail(not_found());
        }
        let role = repo.role(user);
        let permission = match role {
            "maintain" => "write",
            "triage" => "read",
            other => other,
        };
        let mut u = json::user(st, user);
        u["id"] = json!(user_id(user));
        Reply::json(200, json!({"permission": permission, "role_name": role, "user": u}))
    })
}

pub(super) fn rate_limit(st: &State) -> Reply {
    let core = json!({
        "limit": st.rate.limit,
        "used": st.rate.used,
        "remaining": st.rate.remaining(),
        "reset": st.rate.reset,
    });
    let search = json!({"limit": 30, "used": 0, "remaining": 30, "reset": st.rate.reset});
    Reply::json(200, json!({"resources": {"core": core, "graphql": core, "search": search}, "rate": core}))
}
