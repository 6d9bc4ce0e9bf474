//! `swarm_forge::push` with the real git CLI over smart HTTP to the
//! scripted GitHub (`git http-backend` behind Basic auth): created,
//! fast-forwarded, up to date, refused as non-fast-forward or by branch
//! protection without ever forcing, and refused credentials kept out of
//! the error.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::*;
use swarm_forge::push::push_with_timeout;
use swarm_forge::{PushError, PushOutcome, Rejection, Token, push};
use tempfile::TempDir;

/// A clone of `acme/widgets` (public: no credentials to fetch).
fn clone(f: &Forge) -> TempDir {
    let dir = TempDir::new().unwrap();
    git(dir.path(), &["clone", "-q", &f.server.remote_url(OWNER, REPO), "."]);
    dir
}

fn token() -> Token {
    Token::new(TOKEN).unwrap()
}

#[tokio::test]
async fn a_branch_is_created_then_fast_forwarded_then_up_to_date() {
    let f = forge();
    let work = clone(&f);
    let url = f.server.remote_url(OWNER, REPO);
    let first = commit(work.path(), "a.txt", "a");
    let out = push(work.path(), &url, "HEAD", "swarm/s1/p", Some(&token())).await.unwrap();
    assert_eq!(out, PushOutcome::Updated { old: None, new: first.clone() });
    assert_eq!(f.server.branch_sha(OWNER, REPO, "swarm/s1/p"), Some(first.clone()));

    let second = commit(work.path(), "b.txt", "b");
    let out = push(work.path(), &url, "HEAD", "swarm/s1/p", Some(&token())).await.unwrap();
    assert_eq!(
        out,
        PushOutcome::Updated { old: Some(first), new: second.clone() },
        "the old tip expanded to full"
    );
    let out = push(work.path(), &url, &second, "swarm/s1/p", Some(&token())).await.unwrap();
    assert_eq!(out, PushOutcome::UpToDate);
    assert_eq!(f.server.branch_sha(OWNER, REPO, "swarm/s1/p"), Some(second));
}

#[tokio::test]
async fn a_non_fast_forward_push_is_rejected_and_nothing_is_forced() {
    let f = forge();
    let work = clone(&f);
    let url = f.server.remote_url(OWNER, REPO);
    let ours = commit(work.path(), "a.txt", "ours");
    push(work.path(), &url, "HEAD", "swarm/s1/nff", Some(&token())).await.unwrap();

    // A sibling of what the remote has: git knows it is not a fast-forward.
    git(work.path(), &["reset", "-q", "--hard", "HEAD~1"]);
    let sibling = commit(work.path(), "a.txt", "sibling");
    let e = push(work.path(), &url, "HEAD", "swarm/s1/nff", Some(&token())).await.unwrap_err();
    let PushError::Rejected { kind, reason } = &e else { panic!("{e:?}") };
    assert_eq!(*kind, Rejection::NonFastForward, "{reason}");
    assert!(reason.contains("non-fast-forward"), "{reason}");
    assert_eq!(f.server.branch_sha(OWNER, REPO, "swarm/s1/nff"), Some(ours.clone()));

    // Someone else moved the branch to a commit we do not have: "fetch first".
    let theirs = f.server.seed(OWNER, REPO, "swarm/s1/nff", &[("x.txt", "theirs")], "theirs");
    let e = push(work.path(), &url, &sibling, "swarm/s1/nff", Some(&token())).await.unwrap_err();
    assert!(matches!(e, PushError::Rejected { kind: Rejection::NonFastForward, .. }), "{e:?}");
    assert_eq!(f.server.branch_sha(OWNER, REPO, "swarm/s1/nff"), Some(theirs));
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn a_push_to_a_protected_branch_is_rejected_with_the_remotes_reason() {
    let f = forge();
    f.server.protect_branch(OWNER, REPO, "main");
    let work = clone(&f);
    commit(work.path(), "a.txt", "straight to main");
    let url = f.server.remote_url(OWNER, REPO);
    let e = push(work.path(), &url, "HEAD", "main", Some(&token())).await.unwrap_err();
    let PushError::Rejected { kind, reason } = &e else { panic!("{e:?}") };
    eprintln!("{e}");
    assert_eq!(*kind, Rejection::Remote, "{reason}");
    assert!(reason.contains("GH006"), "{reason}");
    assert_eq!(f.server.branch_sha(OWNER, REPO, "main"), Some(f.main.clone()));
}

#[tokio::test]
async fn a_push_with_a_bad_token_is_unauthorized_and_the_token_is_not_in_the_error() {
    let f = forge();
    let work = clone(&f);
    commit(work.path(), "a.txt", "a");
    let bad = Token::new("ghp_NotTheRightToken12345").unwrap();
    let url = f.server.remote_url(OWNER, REPO);
    let e = push(work.path(), &url, "HEAD", "swarm/s1/u", Some(&bad)).await.unwrap_err();
    eprintln!("{e}");
    assert!(matches!(e, PushError::Unauthorized { .. }), "{e:?}");
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains("ghp_NotTheRightToken12345"), "{shown}");
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode("x-access-token:ghp_NotTheRightToken12345");
    assert!(!shown.contains(&basic), "{shown}");
    assert_eq!(f.server.branch_sha(OWNER, REPO, "swarm/s1/u"), None);

    // No token at all: git may not prompt, and no credential helper is asked.
    let e = push(work.path(), &url, "HEAD", "swarm/s1/u", None).await.unwrap_err();
    assert!(matches!(e, PushError::Unauthorized { .. }), "{e:?}");
}

#[tokio::test]
async fn an_unreachable_remote_is_unavailable_and_bad_arguments_never_reach_git() {
    let f = forge();
    let work = clone(&f);
    commit(work.path(), "a.txt", "a");
    // A port nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("http://{dead}/acme/widgets.git");
    let e = push_with_timeout(work.path(), &url, "HEAD", "b", Some(&token()), Duration::from_secs(30))
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert!(matches!(e, PushError::Unavailable { .. }), "{e:?}");
    assert!(e.is_retryable());

    let url = f.server.remote_url(OWNER, REPO);
    for (local, branch) in
        [("HEAD", "+main"), ("HEAD", "-f"), ("HEAD", "a..b"), ("--all", "b"), ("HEAD:x", "b")]
    {
        let e = push(work.path(), &url, local, branch, Some(&token())).await.unwrap_err();
        assert!(matches!(e, PushError::InvalidInput { .. }), "{local} {branch}: {e:?}");
    }
    let e = push(work.path(), "http://example.com/o/r.git", "HEAD", "b", Some(&token())).await.unwrap_err();
    assert!(
        matches!(e, PushError::InvalidInput { what: "remote URL", .. }),
        "no token over plain http: {e:?}"
    );
    let e = push(work.path(), &url, "no-such-ref", "b", Some(&token())).await.unwrap_err();
    assert!(matches!(e, PushError::InvalidInput { what: "local ref", .. }), "{e:?}");
}
