#![allow(clippy::unwrap_used)]
//! The payloads in `testdata/` keep the shape of GitHub's documented
//! examples (octokit/webhooks' payload-examples), trimmed to a few fields
//! of each object plus some the parser must ignore, with swarm-like values.

use super::*;
use crate::provider::{CheckSource, PullState, ReviewState};

const SHA: &str = "3f786850e387550fdab836ed7e6dc881de23001b";
const DELIVERY: &str = "72d3162e-cc78-11e3-81ab-4c9367dc0958";

fn sign(secret: &[u8], body: &[u8]) -> String {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn fixture(event: &str) -> Inbound {
    let body = match event {
        "check_run" => include_str!("testdata/check_run.completed.json"),
        "check_suite" => include_str!("testdata/check_suite.completed.json"),
        "status" => include_str!("testdata/status.json"),
        "pull_request" => include_str!("testdata/pull_request.opened.json"),
        "issue_comment" => include_str!("testdata/issue_comment.created.json"),
        "pull_request_review" => include_str!("testdata/pull_request_review.submitted.json"),
        "pull_request_review_comment" => include_str!("testdata/pull_request_review_comment.created.json"),
        _ => unreachable!(),
    };
    parse(event, DELIVERY, body.as_bytes()).unwrap_or_else(|e| panic!("{event}: {e}"))
}

#[test]
fn the_signature_githubs_documentation_gives_verifies() {
    // docs.github.com, "Validating webhook deliveries": the test values.
    let secret = b"It's a Secret to Everybody";
    let header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    verify(secret, b"Hello, World!", header).unwrap();
    verify(secret, b"Hello, World!", &header.to_uppercase().replace("SHA256=", "sha256=")).unwrap();
    assert!(matches!(verify(secret, b"Hello, World?", header), Err(WebhookError::BadSignature)));
    assert!(matches!(verify(b"another secret", b"Hello, World!", header), Err(WebhookError::BadSignature)));
}

#[test]
fn malformed_or_missing_signatures_are_refused_before_any_hmac() {
    let body = b"{}";
    assert!(matches!(verify(b"s", body, ""), Err(WebhookError::MissingSignature)));
    assert!(matches!(verify(b"s", body, "sha1=abcd"), Err(WebhookError::MalformedSignature(_))));
    assert!(matches!(verify(b"s", body, "sha256=abcd"), Err(WebhookError::MalformedSignature(_))));
    assert!(matches!(
        verify(b"s", body, &format!("sha256={}", "g".repeat(64))),
        Err(WebhookError::MalformedSignature(_))
    ));
    assert!(matches!(verify(b"", body, &sign(b"", body)), Err(WebhookError::EmptySecret)));
    verify(b"s", body, &sign(b"s", body)).unwrap();
}

#[test]
fn check_run_is_typed_with_its_job_pulls_and_clean_output() {
    let Inbound::CheckRun { meta, action, head_sha, check, pulls } = fixture("check_run") else { panic!() };
    assert_eq!(meta.delivery, DELIVERY);
    assert_eq!(meta.repository.as_deref(), Some("acme/widgets"));
    assert_eq!(meta.sender.as_deref(), Some("github-actions[bot]"));
    assert_eq!((action.as_str(), head_sha.as_str(), pulls), ("completed", SHA, vec![12]));
    assert_eq!(check.name, "test (ubuntu-latest)");
    assert_eq!(check.state, CheckState::Failure);
    assert_eq!(check.source, CheckSource::CheckRun(5_120_337_001));
    assert_eq!(check.job_id, Some(5_120_337_001));
    assert_eq!(check.output, "2 errors\n\ncargo test failed", "ANSI colours stripped");
}

#[test]
fn check_suite_and_status_are_typed() {
    let Inbound::CheckSuite { head_sha, head_branch, state, pulls, .. } = fixture("check_suite") else {
        panic!()
    };
    assert_eq!((head_sha.as_str(), head_branch.as_deref()), (SHA, Some("swarm/s1/auth-api")));
    assert_eq!((state, pulls), (CheckState::Success, vec![12]));

    let Inbound::Status { sha, check, meta } = fixture("status") else { panic!() };
    assert_eq!(sha, SHA);
    assert_eq!(meta.sender.as_deref(), Some("ci-runner"));
    assert_eq!(check.name, "ci/legacy");
    assert_eq!(check.state, CheckState::Success);
    assert_eq!(check.source, CheckSource::Status);
    assert_eq!(check.details_url.as_deref(), Some("https://ci.example.com/builds/77"));
    assert_eq!(check.output, "Build passed in 3m");
}

#[test]
fn pull_request_is_typed_with_its_draft_flag_and_a_body_without_carriage_returns() {
    let Inbound::PullRequest { action, pull, .. } = fixture("pull_request") else { panic!() };
    assert_eq!(action, "opened");
    assert_eq!((pull.number, pull.state, pull.draft), (12, PullState::Open, true));
    assert_eq!(
        (pull.head.as_str(), pull.base.as_str(), pull.head_sha.as_str()),
        ("swarm/s1/auth-api", "main", SHA)
    );
    assert_eq!(pull.node_id, "PR_kwDOAbCdE85qfQ9z");
    assert_eq!(pull.body, "Implements the refresh.\n\nswarm task auth/api");
    assert_eq!(pull.merge_commit_sha, None);
}

#[test]
fn comments_and_reviews_are_typed_and_escape_sequences_removed() {
    let Inbound::IssueComment { number, on_pull, comment, .. } = fixture("issue_comment") else { panic!() };
    assert_eq!((number, on_pull, comment.id), (12, true, 9001));
    assert_eq!(comment.author, "octo-dev");
    assert_eq!(comment.body, "/swarm retry please", "the OSC 52 clipboard write is gone");

    let Inbound::Review { number, review, .. } = fixture("pull_request_review") else { panic!() };
    assert_eq!((number, review.state, review.body.as_str()), (12, ReviewState::Approved, ""));
    assert_eq!(review.commit_sha.as_deref(), Some(SHA));
    assert!(review.submitted_at.is_some());

    let Inbound::ReviewComment { number, comment, .. } = fixture("pull_request_review_comment") else {
        panic!()
    };
    assert_eq!((number, comment.id, comment.in_reply_to), (12, 284_312_630, Some(284_312_600)));
    assert_eq!((comment.path.as_str(), comment.line), ("src/auth.rs", Some(42)));
    assert_eq!(comment.review_id, Some(237_895_672));
}

#[test]
fn a_huge_comment_body_is_clipped() {
    let body = serde_json::json!({
        "action": "created",
        "issue": { "number": 3 },
        "comment": { "id": 1, "user": null, "body": "x".repeat(200_000), "html_url": "https://github.com/o/r/issues/3#c1",
                     "created_at": "2024-03-01T10:10:00Z", "updated_at": null },
    });
    let Inbound::IssueComment { on_pull, comment, .. } =
        parse("issue_comment", DELIVERY, body.to_string().as_bytes()).unwrap()
    else {
        panic!()
    };
    assert!(!on_pull);
    assert_eq!(comment.author, "ghost");
    assert!(comment.body.len() <= crate::github::types::TEXT_MAX);
    assert!(comment.body.ends_with(crate::text::CLIP_MARKER));
}

#[test]
fn unknown_events_are_ignored_and_bad_headers_bodies_and_shapes_refused() {
    let ping =
        br#"{"zen":"Keep it logically awesome.","hook_id":1,"repository":{"full_name":"acme/widgets"}}"#;
    let Inbound::Ignored { meta, event } = parse("ping", DELIVERY, ping).unwrap() else { panic!() };
    assert_eq!((event.as_str(), meta.repository.as_deref()), ("ping", Some("acme/widgets")));
    assert!(matches!(parse("push", DELIVERY, b"not json").unwrap(), Inbound::Ignored { .. }));

    for bad in ["", "short", "../../etc/passwd", "72d3162e cc78", &"a".repeat(65)] {
        assert!(matches!(parse("ping", bad, ping), Err(WebhookError::InvalidHeader { .. })), "{bad:?}");
    }
    assert!(matches!(parse("Check_Run", DELIVERY, ping), Err(WebhookError::InvalidHeader { .. })));
    let big = vec![b' '; BODY_MAX + 1];
    assert!(matches!(parse("ping", DELIVERY, &big), Err(WebhookError::TooLarge { .. })));

    assert!(matches!(parse("check_run", DELIVERY, b"{}"), Err(WebhookError::Malformed { .. })));
    let bad_sha = include_str!("testdata/status.json").replace(SHA, "not-a-sha");
    assert!(matches!(parse("status", DELIVERY, bad_sha.as_bytes()), Err(WebhookError::Malformed { .. })));
    let wrong_type =
        include_str!("testdata/pull_request.opened.json").replace("\"number\": 12", "\"number\": \"12\"");
    assert!(matches!(
        parse("pull_request", DELIVERY, wrong_type.as_bytes()),
        Err(WebhookError::Malformed { .. })
    ));
}
