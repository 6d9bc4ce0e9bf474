//! REST and GraphQL as a client sees them.

use serde_json::{Value, json};

use super::*;

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

#[test]
fn query_strings_and_basic_credentials_decode() {
    let q = reply::Query::parse(Some("head=octo%3Atask-1&state=all&x=a+b"));
    assert_eq!((q.get("head"), q.get("state"), q.get("x")), (Some("octo:task-1"), Some("all"), Some("a b")));
    assert_eq!(reply::decode("100%"), "100%");
    assert_eq!(reply::base64_decode("eC1hY2Nlc3MtdG9rZW46Z2hwX3g=").unwrap(), b"x-access-token:ghp_x");
}

#[tokio::test]
async fn squash_and_rebase_merges_and_conflicts_answer_as_github_does() {
    let gh = server();
    gh.seed(OWNER, "app", "main", &[("a.txt", "a\n")], "base");
    gh.seed(OWNER, "app", "squashed", &[("s.txt", "1\n")], "s one");
    gh.seed(OWNER, "app", "squashed", &[("s.txt", "2\n")], "s two");
    gh.seed(OWNER, "app", "rebased", &[("r.txt", "1\n")], "r one");
    gh.seed(OWNER, "app", "rebased", &[("r.txt", "2\n")], "r two");
    gh.seed(OWNER, "app", "clash", &[("a.txt", "theirs\n")], "clash");
    gh.seed(OWNER, "app", "main", &[("a.txt", "ours\n")], "main moves");
    for (i, head) in ["squashed", "rebased", "clash"].iter().enumerate() {
        let r =
            send(&gh, "POST", "/repos/octo/app/pulls", json!({"title": head, "head": head, "base": "main"}))
                .await;
        assert_eq!((r.status, r.json()["number"].clone()), (201, json!(i + 1)), "{}", r.body);
    }
    let repo = gh.repo_path(OWNER, "app");
    let subjects = |rev: &str| git(&repo, &["log", "--format=%s", rev]).1;

    let r = send(&gh, "PUT", "/repos/octo/app/pulls/1/merge", json!({"merge_method": "squash"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(git(&repo, &["rev-list", "--parents", "-n1", "main"]).1.split_whitespace().count(), 2);
    assert!(subjects("main").starts_with("squashed (#1)\nmain moves\n"), "{}", subjects("main"));

    gh.set_merge_methods(OWNER, "app", true, true, false);
    let r = send(&gh, "PUT", "/repos/octo/app/pulls/2/merge", json!({"merge_method": "rebase"})).await;
    assert_eq!(
        (r.status, r.json()["message"].clone()),
        (405, json!("Rebase merges are not allowed on this repository."))
    );
    gh.set_merge_methods(OWNER, "app", true, true, true);
    let r = send(&gh, "PUT", "/repos/octo/app/pulls/2/merge", json!({"merge_method": "rebase"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(subjects("main").starts_with("r two\nr one\nsquashed (#1)\n"), "{}", subjects("main"));
    assert_eq!(git(&repo, &["show", "main:r.txt"]).1, "2\n");

    let clash = get(&gh, "/repos/octo/app/pulls/3").await.json();
    assert_eq!(
        (clash["mergeable"].clone(), clash["mergeable_state"].clone()),
        (json!(false), json!("dirty"))
    );
    let r = send(&gh, "PUT", "/repos/octo/app/pulls/3/merge", json!({})).await;
    assert_eq!((r.status, r.json()["message"].clone()), (405, json!("Pull Request is not mergeable")));
    let closed =
        send(&gh, "PATCH", "/repos/octo/app/pulls/3", json!({"state": "closed", "title": "T2"})).await;
    assert_eq!(
        (closed.json()["state"].clone(), closed.json()["title"].clone()),
        (json!("closed"), json!("T2"))
    );
    let open = get(&gh, "/repos/octo/app/pulls").await.json();
    assert_eq!(open, json!([]), "nothing open");
}
