//! The scripted GitHub against real clients: the git CLI pushing, fetching
//! and cloning over smart HTTP, and an HTTP client for REST, GraphQL and
//! the webhooks' receiver.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, Request as HttpRequest};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::*;
use crate::{TempRepo, WAIT, poll};

const OWNER: &str = "octo";
const TOKEN: &str = "ghp_owner";

struct Resp {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

/// One request; `token` goes in `Authorization: Bearer`.
async fn call(
    method: &str,
    url: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<Value>,
) -> Resp {
    let client: Client<_, Body> = Client::builder(TokioExecutor::new()).build_http();
    let mut req =
        HttpRequest::builder().method(method).uri(url).header("accept", "application/vnd.github+json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let body = body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty);
    let resp = client.request(req.body(body).unwrap()).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(Body::new(body), usize::MAX).await.unwrap();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into(),
    }
}

async fn get(gh: &GitHub, path: &str) -> Resp {
    call("GET", &format!("{}{path}", gh.api_url()), Some(TOKEN), &[], None).await
}

async fn send(gh: &GitHub, method: &str, path: &str, body: Value) -> Resp {
    call(method, &format!("{}{path}", gh.api_url()), Some(TOKEN), &[], Some(body)).await
}

/// git in `dir` with only its own config; (exit code, stdout, stderr).
fn git(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "")
        .env("SSH_ASKPASS", "")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// A server with `octo/app` (default branch `main`) and the owner's token.
fn server() -> GitHub {
    let gh = GitHub::start();
    gh.add_token(TOKEN, OWNER);
    gh.create_repo(OWNER, "app", "main");
    gh
}

#[test]
fn a_push_with_a_token_lands_and_clones_back_and_anonymous_pushes_are_refused() {
    let gh = server();
    let work = TempRepo::with_files(&[("README.md", "hello\n")]);
    // Incompressible and larger than http.postBuffer: git streams it chunked.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let big: Vec<u8> = (0..(2 << 20))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(work.path().join("big.bin"), &big).unwrap();
    work.git(&["add", "big.bin"]);
    work.git(&["commit", "-q", "-m", "big"]);
    let head = work.head("main");

    let (code, _, err) = git(work.path(), &["push", &gh.remote_url(OWNER, "app"), "main"]);
    assert_ne!(code, 0, "an anonymous push is refused");
    assert!(
        err.contains("401") || err.contains("Authentication failed") || err.contains("could not read"),
        "{err}"
    );
    let bad = gh.authed_remote_url(OWNER, "app", "ghp_wrong");
    assert_ne!(git(work.path(), &["push", &bad, "main"]).0, 0, "an unknown token is refused");
    gh.add_token("ghp_stranger", "stranger");
    let (code, _, err) =
        git(work.path(), &["push", &gh.authed_remote_url(OWNER, "app", "ghp_stranger"), "main"]);
    assert_ne!(code, 0);
    assert!(err.contains("Permission to octo/app.git denied to stranger."), "{err}");
    assert_eq!(gh.branch_sha(OWNER, "app", "main"), None);

    let (code, _, err) = git(work.path(), &["push", &gh.authed_remote_url(OWNER, "app", TOKEN), "main"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(gh.branch_sha(OWNER, "app", "main").as_deref(), Some(head.as_str()));

    let (code, refs, err) = git(work.path(), &["ls-remote", &gh.remote_url(OWNER, "app")]);
    assert_eq!(code, 0, "an anonymous fetch of a public repository: {err}");
    assert!(refs.contains(&format!("{head}\trefs/heads/main")), "{refs}");
    let into = tempfile::tempdir().unwrap();
    let dest = into.path().join("clone");
    let (code, _, err) =
        git(into.path(), &["clone", "-q", &gh.remote_url(OWNER, "app"), dest.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(dest.join("big.bin")).unwrap(), big);

    gh.set_private(OWNER, "app", true);
    assert_ne!(
        git(work.path(), &["ls-remote", &gh.remote_url(OWNER, "app")]).0,
        0,
        "private: no anonymous fetch"
    );
    let authed = gh.authed_remote_url(OWNER, "app", TOKEN);
    assert_eq!(git(work.path(), &["ls-remote", &authed]).0, 0);
    // git probes with an empty request before it streams a large pack.
    let pushes = gh.count("POST", "/octo/app.git/git-receive-pack");
    assert_eq!(pushes, 2, "{}", gh.summary());
    let recorded = gh.requests();
    let chunked = recorded.iter().any(|r| r.header("transfer-encoding") == Some("chunked"));
    assert!(chunked, "the pack came chunked");
    let auth = recorded.iter().find_map(|r| r.header("authorization")).unwrap();
    assert_eq!(auth, "Basic <redacted>");
}

#[test]
fn protected_branches_refuse_pushes_with_gh006_and_rewrites_are_refused() {
    let gh = server();
    let work = TempRepo::with_files(&[("a.txt", "1\n")]);
    let remote = gh.authed_remote_url(OWNER, "app", TOKEN);
    assert_eq!(git(work.path(), &["push", &remote, "main", "main:feature"]).0, 0);
    gh.protect_branch(OWNER, "app", "main");
    let before = gh.branch_sha(OWNER, "app", "main");
    work.commit_worktree("two", &[("a.txt", "2\n")]);
    let (code, _, err) = git(work.path(), &["push", &remote, "main"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("remote: error: GH006: Protected branch update failed for refs/heads/main."),
        "{err}"
    );
    assert!(err.contains("pre-receive hook declined"), "{err}");
    assert_eq!(gh.branch_sha(OWNER, "app", "main"), before);
    assert_eq!(git(work.path(), &["push", &remote, "main:feature"]).0, 0, "other branches take pushes");

    work.git(&["reset", "-q", "--hard", "HEAD~1"]);
    work.commit_worktree("other two", &[("a.txt", "two\n")]);
    let (code, _, err) = git(work.path(), &["push", "--force", &remote, "main:feature"]);
    assert_ne!(code, 0, "a forced non-fast-forward push is refused");
    assert!(err.contains("non-fast-forward"), "{err}");
}

#[tokio::test]
async fn pull_requests_page_through_link_headers_and_duplicates_are_refused() {
    let gh = server();
    gh.seed(OWNER, "app", "main", &[("README.md", "base\n")], "base");
    for i in 0..35 {
        gh.seed(OWNER, "app", &format!("task-{i}"), &[("f.txt", &format!("{i}\n"))], "work");
        let body =
            json!({"title": format!("task {i}"), "head": format!("task-{i}"), "base": "main", "body": "b"});
        let r = send(&gh, "POST", "/repos/octo/app/pulls", body).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.json()["number"], i + 1);
        assert_eq!(
            r.json()["head"]["sha"].as_str(),
            gh.branch_sha(OWNER, "app", &format!("task-{i}")).as_deref()
        );
    }
    let again = json!({"title": "again", "head": "octo:task-3", "base": "main"});
    let r = send(&gh, "POST", "/repos/octo/app/pulls", again).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["errors"][0]["message"], "A pull request already exists for octo:task-3.");
    let nowhere = json!({"title": "x", "head": "no-such-branch", "base": "main"});
    let r = send(&gh, "POST", "/repos/octo/app/pulls", nowhere).await;
    assert_eq!((r.status, r.json()["errors"][0]["field"].clone()), (422, json!("head")));

    let first = get(&gh, "/repos/octo/app/pulls").await;
    assert_eq!(first.json().as_array().unwrap().len(), 30, "30 a page by default");
    assert!(first.header("link").contains("page=2>; rel=\"next\""), "{}", first.header("link"));

    let mut url = format!("{}/repos/octo/app/pulls?state=all&per_page=10", gh.api_url());
    let mut numbers = Vec::new();
    let mut pages = 0;
    loop {
        let r = call("GET", &url, Some(TOKEN), &[], None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        pages += 1;
        if pages == 1 {
            let link = r.header("link");
            assert!(link.contains("&page=4>; rel=\"last\""), "{link}");
        }
        numbers.extend(r.json().as_array().unwrap().iter().map(|p| p["number"].as_u64().unwrap()));
        let next = r
            .header("link")
            .split(", ")
            .find(|l| l.ends_with("rel=\"next\""))
            .map(|l| l.trim_start_matches('<').split('>').next().unwrap().to_string());
        match next {
            Some(n) => url = n,
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(numbers, (1..=35).rev().collect::<Vec<u64>>(), "newest first, each once");

    let by_head = get(&gh, "/repos/octo/app/pulls?head=octo:task-7").await.json();
    assert_eq!(by_head.as_array().unwrap().len(), 1);
    assert_eq!(by_head[0]["number"], 8);
    assert!(by_head[0].get("merged").is_none(), "the list's pull requests are the simple form");
}

#[tokio::test]
async fn a_matching_etag_is_answered_304_without_spending_quota() {
    let gh = server();
    let first = get(&gh, "/repos/octo/app").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["full_name"], "octo/app");
    assert_eq!(first.json()["permissions"]["admin"], true);
    let etag = first.header("etag").to_string();
    assert!(etag.starts_with("W/\""), "{etag}");
    let remaining: u64 = first.header("x-ratelimit-remaining").parse().unwrap();
    assert_eq!(first.header("x-ratelimit-resource"), "core");
    assert!(!first.header("x-github-request-id").is_empty());

    let url = format!("{}/repos/octo/app", gh.api_url());
    let cached = call("GET", &url, Some(TOKEN), &[("if-none-match", &etag)], None).await;
    assert_eq!(cached.status, 304);
    assert!(cached.body.is_empty());
    assert_eq!(cached.header("x-ratelimit-remaining").parse::<u64>().unwrap(), remaining);
    let again = get(&gh, "/repos/octo/app").await;
    assert_eq!(again.header("x-ratelimit-remaining").parse::<u64>().unwrap(), remaining - 1);
    let seen = gh.requests();
    assert_eq!(seen[1].header("if-none-match"), Some(etag.as_str()));
    assert_eq!(seen[1].status, 304);
}

#[tokio::test]
async fn rate_limits_primary_and_secondary_and_failures_answer_as_github_does() {
    let gh = server();
    gh.secondary_limit_next(1, 7);
    let r = get(&gh, "/repos/octo/app").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("retry-after"), "7");
    assert!(r.json()["message"].as_str().unwrap().starts_with("You have exceeded a secondary rate limit"));
    gh.fail_next(1, 502);
    assert_eq!(get(&gh, "/repos/octo/app").await.status, 502);
    assert_eq!(get(&gh, "/repos/octo/app").await.status, 200);

    gh.set_rate_limit(2);
    assert_eq!(get(&gh, "/repos/octo/app").await.status, 200);
    let r = get(&gh, "/repos/octo/app").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("x-ratelimit-remaining"), "0");
    assert!(r.header("x-ratelimit-reset").parse::<u64>().unwrap() > state::now_s());
    assert!(r.json()["message"].as_str().unwrap().starts_with("API rate limit exceeded"));

    let anonymous = call("GET", &format!("{}/repos/octo/app", gh.api_url()), None, &[], None).await;
    assert_eq!(
        (anonymous.status, anonymous.json()["message"].clone()),
        (401, json!("Requires authentication"))
    );
    let bad = call("GET", &format!("{}/repos/octo/app", gh.api_url()), Some("nope"), &[], None).await;
    assert_eq!(bad.status, 401);
    assert_eq!(
        bad.json(),
        json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
    );
}

#[tokio::test]
async fn a_merge_waits_for_required_checks_and_makes_a_real_merge_commit() {
    let gh = server();
    let base = gh.seed(OWNER, "app", "main", &[("a.txt", "a\n")], "base");
    let head = gh.seed(OWNER, "app", "feature", &[("f.txt", "feature\n")], "feature");
    gh.seed(OWNER, "app", "main", &[("m.txt", "main moved\n")], "main moves");
    let git_base = gh.repo_path(OWNER, "app");
    assert_eq!(git(&git_base, &["rev-parse", "feature^"]).1.trim(), base, "a branch starts from main");
    gh.require_checks(OWNER, "app", &["ci"]);
    gh.protect_branch(OWNER, "app", "main");
    let pr =
        send(&gh, "POST", "/repos/octo/app/pulls", json!({"title": "F", "head": "feature", "base": "main"}))
            .await;
    assert_eq!(pr.status, 201);
    assert_eq!(pr.json()["mergeable"], Value::Null, "not computed yet, as on GitHub");
    let n = pr.json()["number"].as_u64().unwrap();
    let merge_path = format!("/repos/octo/app/pulls/{n}/merge");
    let merge = |body: Value| send(&gh, "PUT", &merge_path, body);
    let r = merge(json!({"merge_method": "merge", "sha": head})).await;
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (405, json!("Required status check \"ci\" is expected."))
    );
    let got = get(&gh, &format!("/repos/octo/app/pulls/{n}")).await.json();
    assert_eq!((got["mergeable"].clone(), got["mergeable_state"].clone()), (json!(true), json!("blocked")));

    let run =
        gh.add_check_run(OWNER, "app", &head, "ci", "in_progress", None, None, Some("step 1\nok\n".into()));
    assert_eq!(merge(json!({"sha": head})).await.status, 405);
    gh.set_check_run(run, "completed", Some("success"));
    assert_eq!(merge(json!({"sha": "0".repeat(40)})).await.status, 409);
    let r = merge(json!({"merge_method": "merge", "sha": head, "commit_title": "Merge F"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["merged"], true);
    let sha = r.json()["sha"].as_str().unwrap().to_string();
    assert_eq!(gh.branch_sha(OWNER, "app", "main").as_deref(), Some(sha.as_str()));
    let (_, parents, _) = git(&git_base, &["rev-list", "--parents", "-n1", &sha]);
    assert_eq!(parents.split_whitespace().count(), 3, "a merge commit with two parents: {parents}");
    assert!(parents.contains(&head));
    let got = get(&gh, &format!("/repos/octo/app/pulls/{n}")).await.json();
    assert_eq!((got["state"].clone(), got["merged"].clone()), (json!("closed"), json!(true)));
    assert_eq!(got["merge_commit_sha"], json!(sha));
    assert_eq!(merge(json!({})).await.status, 405, "a merged pull request is not mergeable again");

    let runs = get(&gh, "/repos/octo/app/commits/feature/check-runs").await.json();
    assert_eq!(runs["total_count"], 1);
    assert_eq!(runs["check_runs"][0]["conclusion"], "success");
    assert_eq!(runs["check_runs"][0]["app"]["slug"], "github-actions");
    let logs = get(&gh, &format!("/repos/octo/app/actions/jobs/{run}/logs")).await;
    assert_eq!(logs.status, 302);
    let text = call("GET", logs.header("location"), None, &[], None).await;
    assert_eq!((text.status, text.body.as_str()), (200, "step 1\nok\n"));
    gh.add_status(OWNER, "app", &head, "lint", "failure");
    let combined = get(&gh, &format!("/repos/octo/app/commits/{head}/status")).await.json();
    assert_eq!((combined["state"].clone(), combined["total_count"].clone()), (json!("failure"), json!(1)));
}

#[tokio::test]
async fn graphql_marks_a_draft_ready_and_comments_reviews_and_permissions_read_back() {
    let gh = server();
    gh.seed(OWNER, "app", "main", &[("a.txt", "a\n")], "base");
    gh.seed(OWNER, "app", "topic", &[("a.txt", "b\n")], "topic");
    let pr = send(
        &gh,
        "POST",
        "/repos/octo/app/pulls",
        json!({"title": "T", "head": "topic", "base": "main", "draft": true}),
    )
    .await
    .json();
    let node = pr["node_id"].as_str().unwrap();
    assert_eq!(pr["draft"], true);
    let query = "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft number } } }";
    let r = call(
        "POST",
        &gh.graphql_url(),
        Some(TOKEN),
        &[],
        Some(json!({"query": query, "variables": {"id": node}})),
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"data": {"markPullRequestReadyForReview": {"pullRequest": {"id": node, "isDraft": false, "number": 1}}}})
    );
    assert!(!gh.pull(OWNER, "app", 1).unwrap().draft);
    let r = call("POST", &gh.graphql_url(), Some(TOKEN), &[], Some(json!({"query": "{ viewer { login } }"})))
        .await;
    assert!(r.json()["errors"][0]["message"].is_string());

    gh.add_issue_comment(OWNER, "app", 1, "reviewer", "looks off");
    let posted = send(&gh, "POST", "/repos/octo/app/issues/1/comments", json!({"body": "on it"})).await;
    assert_eq!(posted.status, 201);
    assert_eq!(posted.json()["author_association"], "OWNER");
    let comments = get(&gh, "/repos/octo/app/issues/1/comments").await.json();
    let bodies: Vec<&str> =
        comments.as_array().unwrap().iter().map(|c| c["body"].as_str().unwrap()).collect();
    assert_eq!(bodies, ["looks off", "on it"]);
    let line = gh.add_review_comment(OWNER, "app", 1, "reviewer", "a.txt", 1, "why b?");
    let reply = send(
        &gh,
        "POST",
        &format!("/repos/octo/app/pulls/1/comments/{line}/replies"),
        json!({"body": "because"}),
    )
    .await;
    assert_eq!((reply.status, reply.json()["in_reply_to_id"].clone()), (201, json!(line)));
    let thread = get(&gh, "/repos/octo/app/pulls/1/comments").await.json();
    assert_eq!(thread[0]["path"], "a.txt");
    assert_eq!(thread[0]["line"], 1);
    gh.add_review(OWNER, "app", 1, "reviewer", "CHANGES_REQUESTED", "fix it");
    let reviews = get(&gh, "/repos/octo/app/pulls/1/reviews").await.json();
    let states: Vec<&str> =
        reviews.as_array().unwrap().iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert_eq!(
        states,
        ["COMMENTED", "COMMENTED", "CHANGES_REQUESTED"],
        "each line comment comes in a review"
    );

    gh.add_collaborator(OWNER, "app", "dev", "maintain");
    let p = get(&gh, "/repos/octo/app/collaborators/dev/permission").await.json();
    assert_eq!((p["permission"].clone(), p["role_name"].clone()), (json!("write"), json!("maintain")));
    assert_eq!(
        get(&gh, "/repos/octo/app/collaborators/reviewer/permission").await.json()["permission"],
        "read"
    );
    assert_eq!(get(&gh, "/repos/octo/app/collaborators/nobody-at-all/permission").await.status, 404);
    assert_eq!(get(&gh, "/repos/octo/nothing").await.status, 404);
}

/// A webhook receiver on 127.0.0.1: what it got, headers and body.
async fn receiver() -> (String, Arc<Mutex<Vec<(HeaderMap, String)>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: String| {
        let keep = keep.clone();
        async move {
            keep.lock().unwrap().push((headers, body));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_and_a_redelivery_keeps_its_guid() {
    let gh = server();
    gh.seed(OWNER, "app", "main", &[("a.txt", "a\n")], "base");
    gh.seed(OWNER, "app", "topic", &[("a.txt", "b\n")], "topic");
    let (url, got) = receiver().await;
    let secret = "It's a Secret to Everybody";
    gh.add_webhook(OWNER, "app", &url, secret);
    let pr =
        send(&gh, "POST", "/repos/octo/app/pulls", json!({"title": "T", "head": "topic", "base": "main"}))
            .await;
    assert_eq!(pr.status, 201);

    let first =
        poll("the pull_request delivery", WAIT, || async { got.lock().unwrap().first().cloned() }).await;
    let (headers, body) = first;
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert_eq!(header("x-github-event"), "pull_request");
    assert!(header("user-agent").starts_with("GitHub-Hookshot/"));
    assert_eq!(header("content-type"), "application/json");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let expected = webhooks::hex(ring::hmac::sign(&key, body.as_bytes()).as_ref());
    assert_eq!(header("x-hub-signature-256"), format!("sha256={expected}"));
    assert_eq!(header("x-hub-signature-256"), signature_256(secret, body.as_bytes()));
    let payload: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(payload["action"], "opened");
    assert_eq!(payload["pull_request"]["number"], 1);
    assert_eq!(payload["repository"]["full_name"], "octo/app");
    assert_eq!(payload["sender"]["login"], OWNER);
    let guid = header("x-github-delivery");
    assert_eq!(guid.len(), 36);

    assert!(gh.redeliver(&guid));
    let again = poll("the redelivery", WAIT, || async { got.lock().unwrap().get(1).cloned() }).await;
    assert_eq!(again.0.get("x-github-delivery").unwrap().to_str().unwrap(), guid);
    assert_eq!(again.1, body, "the same body");
    let run = gh.add_check_run(
        OWNER,
        "app",
        pr.json()["head"]["sha"].as_str().unwrap(),
        "ci",
        "completed",
        Some("failure"),
        Some("boom"),
        None,
    );
    let kinds = poll("check_run and check_suite", WAIT, || async {
        let g = got.lock().unwrap();
        let kinds: Vec<String> =
            g.iter().map(|(h, _)| h["x-github-event"].to_str().unwrap().to_string()).collect();
        (kinds.len() >= 5).then_some(kinds)
    })
    .await;
    assert_eq!(kinds[2..], ["check_run", "check_run", "check_suite"]);
    let completed: Value = serde_json::from_str(&got.lock().unwrap()[3].1).unwrap();
    assert_eq!(
        (completed["action"].clone(), completed["check_run"]["id"].clone()),
        (json!("completed"), json!(run))
    );
    assert_eq!(completed["check_run"]["pull_requests"][0]["number"], 1);
    let deliveries = poll("the recorded outcomes", WAIT, || async {
        let d = gh.deliveries();
        d.iter().all(|d| d.done).then_some(d)
    })
    .await;
    assert!(deliveries.iter().all(|d| d.status == Some(200)), "{deliveries:?}");
    assert!(deliveries[1].redelivery && deliveries[1].guid == guid);
}

#[test]
fn query_strings_and_basic_credentials_decode() {
    let q = http::Query::parse(Some("head=octo%3Atask-1&state=all&x=a+b"));
    assert_eq!((q.get("head"), q.get("state"), q.get("x")), (Some("octo:task-1"), Some("all"), Some("a b")));
    assert_eq!(http::decode("100%"), "100%");
    assert_eq!(http::base64_decode("eC1hY2Nlc3MtdG9rZW46Z2hwX3g=").unwrap(), b"x-access-token:ghp_x");
}
