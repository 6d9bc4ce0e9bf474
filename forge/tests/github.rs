//! The GitHub client against the scripted GitHub (`swarm_tests::github`):
//! pull requests made idempotently, pages, conditional requests, rate
//! limits, failures, checks, logs, comments, reviews, permissions, merges
//! and webhooks, each over real HTTP.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::*;
use swarm_forge::webhook::{self, Inbound};
use swarm_forge::{
    CheckSource, CheckState, Ensured, Forge, ForgeError, GitHub, GitHubConfig, MergeMethod, MergeOutcome,
    NewPull, Permission, PullState, PullUpdate, ReviewState, Token, ensure_pull,
};

fn want(head: &str, body: &str, draft: bool) -> NewPull {
    NewPull {
        title: format!("{head}: the change"),
        body: body.into(),
        head: head.into(),
        base: "main".into(),
        draft,
    }
}

const PULLS: &str = "/api/v3/repos/acme/widgets/pulls";

#[tokio::test]
async fn ensure_pull_twice_opens_one_pull_request_and_changes_nothing_the_second_time() {
    let f = forge();
    f.branch("swarm/s1/a");
    let (first, done) = ensure_pull(&f.client, &want("swarm/s1/a", "body", false)).await.unwrap();
    assert_eq!(done, Ensured::Opened);
    let (again, done) = ensure_pull(&f.client, &want("swarm/s1/a", "body", false)).await.unwrap();
    assert_eq!(done, Ensured::Unchanged);
    assert_eq!(again.number, first.number);
    assert_eq!(f.server.pulls(OWNER, REPO).len(), 1);
    assert_eq!(f.server.count("POST", PULLS), 1, "{}", f.server.summary());
    assert_eq!(f.server.count("PATCH", PULLS), 0);
}

#[tokio::test]
async fn a_second_ensure_with_a_new_body_updates_it_and_a_draft_is_marked_ready_through_graphql() {
    let f = forge();
    f.branch("swarm/s1/b");
    let (pr, done) = ensure_pull(&f.client, &want("swarm/s1/b", "first", true)).await.unwrap();
    assert_eq!((done, pr.draft, pr.state), (Ensured::Opened, true, PullState::Open));

    let (pr, done) = ensure_pull(&f.client, &want("swarm/s1/b", "second", true)).await.unwrap();
    assert_eq!((done, pr.body.as_str(), pr.draft), (Ensured::Updated, "second", true));
    assert_eq!(f.server.count("POST", "/api/graphql"), 0, "a body change is REST only");

    let (pr, done) = ensure_pull(&f.client, &want("swarm/s1/b", "second", false)).await.unwrap();
    assert_eq!((done, pr.draft), (Ensured::Updated, false));
    assert_eq!(f.server.count("POST", "/api/graphql"), 1);
    let on_server = f.server.pull(OWNER, REPO, pr.number).unwrap();
    assert_eq!((on_server.draft, on_server.body.as_deref()), (false, Some("second")));
    let (_, done) = ensure_pull(&f.client, &want("swarm/s1/b", "second", false)).await.unwrap();
    assert_eq!(done, Ensured::Unchanged);
    assert_eq!(f.server.pulls(OWNER, REPO).len(), 1);
}

/// A forge whose first `find_pull` misses, as when another controller
/// opens the pull request between our find and our open.
struct LateFind<'a> {
    inner: &'a GitHub,
    missed: std::sync::atomic::AtomicBool,
}

impl Forge for LateFind<'_> {
    fn find_pull<'a>(
        &'a self,
        head: &'a str,
    ) -> swarm_forge::ForgeFuture<'a, Option<swarm_forge::PullRequest>> {
        if !self.missed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async { Ok(None) });
        }
        self.inner.find_pull(head)
    }
    fn open_pull<'a>(&'a self, n: &'a NewPull) -> swarm_forge::ForgeFuture<'a, swarm_forge::PullRequest> {
        self.inner.open_pull(n)
    }
    fn update_pull<'a>(
        &'a self,
        n: u64,
        u: &'a PullUpdate,
    ) -> swarm_forge::ForgeFuture<'a, swarm_forge::PullRequest> {
        self.inner.update_pull(n, u)
    }
    fn get_pull(&self, n: u64) -> swarm_forge::ForgeFuture<'_, swarm_forge::PullRequest> {
        self.inner.get_pull(n)
    }
    fn checks<'a>(&'a self, sha: &'a str) -> swarm_forge::ForgeFuture<'a, Vec<swarm_forge::Check>> {
        self.inner.checks(sha)
    }
    fn check_log<'a>(&'a self, c: &'a swarm_forge::Check) -> swarm_forge::ForgeFuture<'a, String> {
        self.inner.check_log(c)
    }
    fn issue_comments(
        &self,
        n: u64,
        s: Option<SystemTime>,
    ) -> swarm_forge::ForgeFuture<'_, Vec<swarm_forge::Comment>> {
        self.inner.issue_comments(n, s)
    }
    fn review_comments(&self, n: u64) -> swarm_forge::ForgeFuture<'_, Vec<swarm_forge::ReviewComment>> {
        self.inner.review_comments(n)
    }
    fn reviews(&self, n: u64) -> swarm_forge::ForgeFuture<'_, Vec<swarm_forge::Review>> {
        self.inner.reviews(n)
    }
    fn post_comment<'a>(&'a self, n: u64, b: &'a str) -> swarm_forge::ForgeFuture<'a, swarm_forge::Comment> {
        self.inner.post_comment(n, b)
    }
    fn reply_review_comment<'a>(
        &'a self,
        n: u64,
        id: u64,
        b: &'a str,
    ) -> swarm_forge::ForgeFuture<'a, swarm_forge::ReviewComment> {
        self.inner.reply_review_comment(n, id, b)
    }
    fn permission<'a>(&'a self, l: &'a str) -> swarm_forge::ForgeFuture<'a, Permission> {
        self.inner.permission(l)
    }
    fn merge_pull<'a>(
        &'a self,
        n: u64,
        s: &'a str,
        m: MergeMethod,
    ) -> swarm_forge::ForgeFuture<'a, MergeOutcome> {
        self.inner.merge_pull(n, s, m)
    }
}

#[tokio::test]
async fn ensure_pull_that_loses_the_race_to_open_finds_the_winner_instead() {
    let f = forge();
    f.branch("swarm/s1/c");
    let number = f.server.open_pull(OWNER, REPO, BOT, "swarm/s1/c", "main", "opened elsewhere");
    let late = LateFind { inner: &f.client, missed: false.into() };
    let (pr, done) = ensure_pull(&late, &want("swarm/s1/c", "", false)).await.unwrap();
    assert_eq!((pr.number, done), (number, Ensured::Updated), "found after the 422, then retitled");
    assert_eq!(f.server.pulls(OWNER, REPO).len(), 1);
}

#[tokio::test]
async fn find_pull_pages_through_more_than_100_pull_requests_and_prefers_the_open_one() {
    let f = forge();
    f.branch("swarm/s1/many");
    for _ in 0..120 {
        let n = f.server.open_pull(OWNER, REPO, BOT, "swarm/s1/many", "main", "again");
        f.server.close_pull(OWNER, REPO, n, BOT);
    }
    let newest_closed = f.client.find_pull("swarm/s1/many").await.unwrap().unwrap();
    assert_eq!((newest_closed.number, newest_closed.state), (120, PullState::Closed));
    // (The scripted server's next links leave out GHES's /api/v3; the
    // client follows any link within the API's origin.)
    let pages = f
        .server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/widgets/pulls?"))
        .count();
    assert_eq!(pages, 2, "two pages of 100: {}", f.server.summary());

    let open = f.server.open_pull(OWNER, REPO, BOT, "swarm/s1/many", "main", "the live one");
    let found = f.client.find_pull("swarm/s1/many").await.unwrap().unwrap();
    assert_eq!((found.number, found.state), (open, PullState::Open));
    assert_eq!(f.client.find_pull("swarm/s1/none").await.unwrap(), None);

    // 150 comments: two pages, oldest first.
    for i in 0..150 {
        f.server.add_issue_comment(OWNER, REPO, open, "octo-dev", &format!("comment {i}"));
    }
    let comments = f.client.issue_comments(open, None).await.unwrap();
    assert_eq!(comments.len(), 150);
    assert_eq!((comments[0].body.as_str(), comments[149].body.as_str()), ("comment 0", "comment 149"));
}

#[tokio::test]
async fn an_unchanged_resource_is_served_from_the_etag_cache_by_a_304_that_costs_no_quota() {
    let f = forge();
    f.branch("swarm/s1/e");
    let (pr, _) = ensure_pull(&f.client, &want("swarm/s1/e", "b", false)).await.unwrap();
    let fresh = f.client.get_pull(pr.number).await.unwrap();
    let quota = f.client.quota().unwrap();
    let cached = f.client.get_pull(pr.number).await.unwrap();
    assert_eq!(cached, fresh);
    let path = format!("{PULLS}/{}", pr.number);
    let gets: Vec<_> =
        f.server.requests().into_iter().filter(|r| r.method == "GET" && r.path == path).collect();
    assert_eq!(gets.len(), 2);
    assert_eq!(gets[1].status, 304);
    assert!(gets[1].header("if-none-match").is_some());
    assert_eq!(f.client.quota().unwrap().remaining, quota.remaining, "a 304 is free");

    // Pages too: the cached second page comes with its cached next link.
    f.server.add_issue_comment(OWNER, REPO, pr.number, "octo-dev", "hello");
    let a = f.client.issue_comments(pr.number, None).await.unwrap();
    let b = f.client.issue_comments(pr.number, None).await.unwrap();
    assert_eq!(a, b);
    let last = f.server.requests().into_iter().last().unwrap();
    assert_eq!(last.status, 304);

    // A change is seen.
    f.server.add_issue_comment(OWNER, REPO, pr.number, "octo-dev", "again");
    assert_eq!(f.client.issue_comments(pr.number, None).await.unwrap().len(), 2);
}

#[tokio::test]
async fn the_primary_rate_limit_is_typed_with_the_reset_and_the_quota_is_visible_before_it() {
    let f = forge();
    f.server.set_rate_limit(1000);
    let used = 1000 - f.server.rate_remaining();
    f.server.set_rate_limit(used + 1);
    let _ = f.client.permission("octo-dev").await;
    let quota = f.client.quota().unwrap();
    assert_eq!(quota.remaining, 0, "the caller can see it coming");
    let e = f.client.permission("octo-dev").await.unwrap_err();
    let ForgeError::RateLimited { until, secondary: false } = e else { panic!("{e:?}") };
    assert_eq!(until, quota.reset);
    assert!(
        until > SystemTime::now() - Duration::from_secs(5)
            && until <= SystemTime::now() + Duration::from_secs(3700)
    );
    assert!(e.is_retryable());
    assert_eq!(e.retry_at(), Some(until));
}

#[tokio::test]
async fn a_secondary_rate_limit_is_typed_with_retry_after_as_403_or_429() {
    let f = forge();
    for status in [403, 429] {
        f.server.secondary_limit_next_with(1, 30, status);
        let before = SystemTime::now();
        let e = f.client.permission("octo-dev").await.unwrap_err();
        let ForgeError::RateLimited { until, secondary: true } = e else { panic!("{status}: {e:?}") };
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert!(secs(until) >= secs(before) + 30 && secs(until) <= secs(SystemTime::now()) + 31, "{status}");
        assert!(e.is_retryable());
        assert!(f.client.permission("octo-dev").await.is_ok(), "it passes afterwards");
    }
}

#[tokio::test]
async fn a_server_error_is_retryable_and_a_bad_token_is_not() {
    let f = forge();
    for status in [500, 502, 503] {
        f.server.fail_next(1, status);
        let e = f.client.get_pull(1).await.unwrap_err();
        assert!(matches!(e, ForgeError::Unavailable { status: Some(s), .. } if s == status), "{e:?}");
        assert!(e.is_retryable());
    }
    let stranger = client_for(&f.server, "ghp_notRegistered0000");
    let e = stranger.get_pull(1).await.unwrap_err();
    assert!(matches!(e, ForgeError::Unauthorized { .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert!(!format!("{e} {e:?} {stranger:?}").contains("ghp_notRegistered"));
    assert!(matches!(f.client.get_pull(999).await.unwrap_err(), ForgeError::NotFound { .. }));
}

#[tokio::test]
async fn checks_merge_check_runs_and_statuses_with_their_states_and_job_ids() {
    let f = forge();
    let sha = f.branch("swarm/s1/ci");
    let s = &f.server;
    s.add_check_run(OWNER, REPO, &sha, "build", "completed", Some("success"), None, None);
    let test =
        s.add_check_run(OWNER, REPO, &sha, "test", "completed", Some("failure"), Some("2 failed"), None);
    s.add_check_run(OWNER, REPO, &sha, "lint", "in_progress", None, None, None);
    s.add_check_run(OWNER, REPO, &sha, "fmt", "completed", Some("skipped"), None, None);
    s.add_status(OWNER, REPO, &sha, "ci/legacy", "pending");
    s.add_status(OWNER, REPO, &sha, "deploy", "error");
    let checks = f.client.checks(&sha).await.unwrap();
    let got: Vec<(&str, CheckState)> = checks.iter().map(|c| (c.name.as_str(), c.state)).collect();
    assert_eq!(
        got,
        [
            ("build", CheckState::Success),
            ("ci/legacy", CheckState::Pending),
            ("deploy", CheckState::Failure),
            ("fmt", CheckState::Skipped),
            ("lint", CheckState::Pending),
            ("test", CheckState::Failure),
        ]
    );
    let t = checks.iter().find(|c| c.name == "test").unwrap();
    assert_eq!((t.source, t.job_id), (CheckSource::CheckRun(test), Some(test)));
    assert!(t.output.contains("2 failed"), "{}", t.output);
    assert_eq!(checks.iter().find(|c| c.name == "deploy").unwrap().source, CheckSource::Status);
    assert!(matches!(f.client.checks("not-a-sha").await, Err(ForgeError::InvalidInput { .. })));
}

#[tokio::test]
async fn a_job_log_is_fetched_through_the_redirect_with_escapes_stripped() {
    let f = forge();
    let sha = f.branch("swarm/s1/log");
    let log = "2024-03-01T10:00:00Z \u{1b}[31merror\u{1b}[0m: test foo failed\n\u{1b}]0;title\u{7}done\n";
    f.server.add_check_run(
        OWNER,
        REPO,
        &sha,
        "test",
        "completed",
        Some("failure"),
        Some("out"),
        Some(log.into()),
    );
    f.server.add_check_run(
        OWNER,
        REPO,
        &sha,
        "nolog",
        "completed",
        Some("failure"),
        Some("only output"),
        None,
    );
    let checks = f.client.checks(&sha).await.unwrap();
    let text = f.client.check_log(checks.iter().find(|c| c.name == "test").unwrap()).await.unwrap();
    assert_eq!(text, "2024-03-01T10:00:00Z error: test foo failed\ndone\n");
    let jobs =
        f.server.requests().into_iter().filter(|r| r.path.contains("/actions/jobs/")).collect::<Vec<_>>();
    assert_eq!((jobs.len(), jobs[0].status), (1, 302));
    // A log GitHub no longer keeps: the check's own output instead.
    let nolog = checks.iter().find(|c| c.name == "nolog").unwrap();
    assert!(f.client.check_log(nolog).await.unwrap().contains("only output"));
}

/// The API answers the log request with a redirect to itself on another
/// path; the recorder shows what reached the "log host".
fn log_host(req: &Recorded, base: &str) -> Answer {
    if req.path.ends_with("/actions/jobs/7/logs") {
        return (302, vec![("location".into(), format!("{base}/blob/job-7?sig=abc"))], Vec::new());
    }
    (200, vec![("content-type".into(), "text/plain".into())], b"log line\n".to_vec())
}

#[tokio::test]
async fn the_token_is_not_sent_to_the_host_a_log_redirect_names() {
    let rec = Recorder::start(log_host).await;
    let client = GitHub::new(GitHubConfig::new(
        &format!("{}/api/v3", rec.url),
        OWNER,
        REPO,
        Token::new(TOKEN).unwrap(),
    ))
    .unwrap();
    let check = swarm_forge::Check {
        name: "test".into(),
        state: CheckState::Failure,
        source: CheckSource::CheckRun(7),
        details_url: None,
        output: String::new(),
        job_id: Some(7),
    };
    assert_eq!(client.check_log(&check).await.unwrap(), "log line\n");
    let seen = rec.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {TOKEN}").as_str()));
    assert_eq!(seen[1].path, "/blob/job-7?sig=abc");
    assert_eq!(seen[1].header("authorization"), None, "the log host never sees the token");
}

#[tokio::test]
async fn comments_reviews_and_replies_read_back_typed() {
    let f = forge();
    let sha = f.branch("swarm/s1/r");
    let (pr, _) = ensure_pull(&f.client, &want("swarm/s1/r", "b", false)).await.unwrap();
    f.server.add_user("octo-dev");
    let line = f.server.add_review_comment(OWNER, REPO, pr.number, "octo-dev", "swarm/s1/r.txt", 1, "why?");
    f.server.add_review(OWNER, REPO, pr.number, "octo-dev", "CHANGES_REQUESTED", "see inline");
    let reply = f.client.reply_review_comment(pr.number, line, "because").await.unwrap();
    assert_eq!((reply.in_reply_to, reply.author.as_str()), (Some(line), BOT));
    let posted = f.client.post_comment(pr.number, "ready \u{1b}[2J again").await.unwrap();
    assert_eq!(posted.author, BOT);

    let comments = f.client.review_comments(pr.number).await.unwrap();
    assert_eq!(comments.len(), 2);
    assert_eq!(
        (comments[0].path.as_str(), comments[0].commit_sha.as_str()),
        ("swarm/s1/r.txt", sha.as_str())
    );
    let reviews = f.client.reviews(pr.number).await.unwrap();
    let changes = reviews.iter().find(|r| r.state == ReviewState::ChangesRequested).unwrap();
    assert_eq!((changes.author.as_str(), changes.body.as_str()), ("octo-dev", "see inline"));
    let conv = f.client.issue_comments(pr.number, None).await.unwrap();
    assert_eq!(conv.last().unwrap().body, "ready  again", "escape sequences stripped on the way in");
    let later = f.client.issue_comments(pr.number, Some(SystemTime::now() + Duration::from_secs(3600))).await;
    assert_eq!(later.unwrap().len(), 0, "since= is sent and honoured");
    assert!(matches!(f.client.post_comment(pr.number, "  ").await, Err(ForgeError::InvalidInput { .. })));
}

#[tokio::test]
async fn permissions_read_the_role_and_a_stranger_has_read_on_a_public_repository() {
    let f = forge();
    f.server.add_collaborator(OWNER, REPO, "octo-triage", "triage");
    f.server.add_collaborator(OWNER, REPO, "octo-maint", "maintain");
    f.server.add_user("stranger");
    let p = |l: &'static str| f.client.permission(l);
    assert_eq!(p(OWNER).await.unwrap(), Permission::Admin);
    assert_eq!(p("octo-maint").await.unwrap(), Permission::Maintain);
    assert_eq!(p(BOT).await.unwrap(), Permission::Write);
    assert_eq!(p("octo-triage").await.unwrap(), Permission::Triage);
    assert_eq!(p("stranger").await.unwrap(), Permission::Read);
    assert_eq!(p("nobody-at-all").await.unwrap(), Permission::None);
    assert_eq!(p("dependabot[bot]").await.unwrap(), Permission::None);
    assert!(matches!(p("../admin").await, Err(ForgeError::InvalidInput { .. })));
}

#[tokio::test]
async fn a_merge_is_refused_with_githubs_reason_until_it_may_go() {
    let f = forge();
    let sha = f.branch("swarm/s1/m");
    let (pr, _) = ensure_pull(&f.client, &want("swarm/s1/m", "b", false)).await.unwrap();
    f.server.require_checks(OWNER, REPO, &["test"]);
    let out = f.client.merge_pull(pr.number, &sha, MergeMethod::Squash).await.unwrap();
    assert!(
        matches!(&out, MergeOutcome::Refused { status: 405, message } if message.contains("test")),
        "{out:?}"
    );
    let other = "0".repeat(40);
    let out = f.client.merge_pull(pr.number, &other, MergeMethod::Squash).await.unwrap();
    assert!(matches!(&out, MergeOutcome::Refused { status: 409, .. }), "{out:?}");
    f.server.add_check_run(OWNER, REPO, &sha, "test", "completed", Some("success"), None, None);
    let out = f.client.merge_pull(pr.number, &sha, MergeMethod::Squash).await.unwrap();
    let MergeOutcome::Merged { sha: merged } = out else { panic!("{out:?}") };
    assert_eq!(f.server.branch_sha(OWNER, REPO, "main"), Some(merged));
    assert_eq!(f.client.get_pull(pr.number).await.unwrap().state, PullState::Merged);
}

#[tokio::test]
async fn webhook_deliveries_verify_and_parse_into_typed_events() {
    let rec = Recorder::start(|_, _| (200, Vec::new(), Vec::new())).await;
    let f = forge();
    f.server.add_webhook(OWNER, REPO, &format!("{}/hook", rec.url), "hook-s3cret");
    let sha = f.branch("swarm/s1/w");
    let (pr, _) = ensure_pull(&f.client, &want("swarm/s1/w", "b", false)).await.unwrap();
    f.server.add_issue_comment(OWNER, REPO, pr.number, "octo-dev", "/swarm retry");
    f.server.add_check_run(OWNER, REPO, &sha, "test", "completed", Some("success"), None, None);
    f.server.add_status(OWNER, REPO, &sha, "ci/legacy", "failure");
    f.server.add_review(OWNER, REPO, pr.number, "octo-dev", "APPROVED", "lgtm");
    let seen = swarm_tests::poll("the webhook deliveries", swarm_tests::WAIT, || {
        let n = f.server.deliveries().iter().filter(|d| d.done).count();
        let got = rec.requests();
        async move { (n >= 5 && got.len() >= n).then_some(got) }
    })
    .await;
    let mut kinds = Vec::new();
    for req in &seen {
        let sig = req.header("x-hub-signature-256").unwrap();
        webhook::verify(b"hook-s3cret", &req.body, sig).unwrap();
        assert!(webhook::verify(b"wrong", &req.body, sig).is_err());
        let event = req.header("x-github-event").unwrap();
        let inbound = webhook::parse(event, req.header("x-github-delivery").unwrap(), &req.body)
            .unwrap_or_else(|e| panic!("{event}: {e}"));
        assert_eq!(inbound.meta().repository.as_deref(), Some("acme/widgets"));
        kinds.push(match inbound {
            Inbound::PullRequest { action, pull, .. } => {
                assert_eq!((pull.number, pull.head.as_str()), (pr.number, "swarm/s1/w"));
                format!("pull_request.{action}")
            }
            Inbound::IssueComment { comment, on_pull, .. } => {
                assert!(on_pull);
                format!("comment:{}", comment.body)
            }
            Inbound::CheckRun { check, head_sha, .. } => {
                assert_eq!(head_sha, sha);
                format!("check_run:{}:{:?}", check.name, check.state)
            }
            Inbound::Status { check, .. } => format!("status:{}:{:?}", check.name, check.state),
            Inbound::Review { review, .. } => format!("review:{:?}", review.state),
            Inbound::CheckSuite { .. } => "check_suite".into(),
            Inbound::ReviewComment { .. } => "review_comment".into(),
            Inbound::Ignored { event, .. } => format!("ignored:{event}"),
            other => format!("{other:?}"),
        });
    }
    for expected in [
        "pull_request.opened",
        "comment:/swarm retry",
        "check_run:test:Success",
        "status:ci/legacy:Failure",
        "review:Approved",
    ] {
        assert!(kinds.iter().any(|k| k == expected), "{expected} not in {kinds:?}");
    }
}

/// A hostile API: endless pages, a next link to another host, a body past
/// the cap, and JSON that is not a pull request list; by repository name.
fn hostile(req: &Recorded, base: &str) -> Answer {
    let json = vec![("content-type".to_string(), "application/json".to_string())];
    let page: u32 = req.path.split("page=").nth(1).and_then(|p| p.parse().ok()).unwrap_or(1);
    let link = |to: String| {
        let mut h = json.clone();
        h.push(("link".into(), format!("<{to}>; rel=\"next\"")));
        h
    };
    if req.path.contains("/endless/") {
        let next = format!("{base}/api/v3/repos/acme/endless/pulls?per_page=100&page={}", page + 1);
        (200, link(next), b"[]".to_vec())
    } else if req.path.contains("/elsewhere/") {
        (200, link("http://evil.example.com/api/v3/steal?page=2".into()), b"[]".to_vec())
    } else if req.path.contains("/huge/") {
        (200, json, vec![b' '; 3 * 1024 * 1024])
    } else if req.path.contains("/garbage/") {
        (200, json, br#"[{"number":"seven"}]"#.to_vec())
    } else {
        (422, json, br#"{"message":"Validation Failed","errors":[{"message":"first"},{"field":"base","code":"invalid"}]}"#.to_vec())
    }
}

#[tokio::test]
async fn a_hostile_api_is_bounded_in_pages_hosts_bytes_and_shapes() {
    let rec = Recorder::start(hostile).await;
    let client = |repo: &str| {
        GitHub::new(GitHubConfig::new(
            &format!("{}/api/v3", rec.url),
            OWNER,
            repo,
            Token::new(TOKEN).unwrap(),
        ))
        .unwrap()
    };
    let e = client("endless").find_pull("b").await.unwrap_err();
    assert!(matches!(e, ForgeError::TooManyPages { max_pages: 50, .. }), "{e:?}");
    assert_eq!(rec.requests().len(), 50);
    let e = client("elsewhere").find_pull("b").await.unwrap_err();
    assert!(
        matches!(&e, ForgeError::Malformed { message, .. } if message.contains("outside the API")),
        "{e:?}"
    );
    assert_eq!(rec.requests().len(), 51, "the foreign link was not followed");
    let e = client("huge").find_pull("b").await.unwrap_err();
    assert!(matches!(e, ForgeError::TooLarge { limit, .. } if limit == 2 * 1024 * 1024), "{e:?}");
    let e = client("garbage").find_pull("b").await.unwrap_err();
    assert!(matches!(e, ForgeError::Malformed { .. }), "{e:?}");
    let e = client("other").open_pull(&want("b", "", false)).await.unwrap_err();
    assert!(matches!(&e, ForgeError::Invalid { message, .. } if message == "first; base: invalid"), "{e:?}");
    assert!(!e.is_retryable());
    // Plain http to anything but loopback is refused before any request.
    let e = GitHub::new(GitHubConfig::new(
        "http://ghe.example.com/api/v3",
        OWNER,
        REPO,
        Token::new(TOKEN).unwrap(),
    ))
    .unwrap_err();
    assert!(matches!(e, ForgeError::Config { .. }), "{e:?}");
}
