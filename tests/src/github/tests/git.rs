//! The git CLI against the server's smart HTTP.

use super::*;
use crate::TempRepo;

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

#[test]
fn a_fetch_of_many_refs_sends_a_gzip_body_that_http_backend_inflates() {
    let gh = server();
    gh.seed(OWNER, "app", "main", &[("a.txt", "a\n")], "base");
    for i in 0..40 {
        gh.seed(
            OWNER,
            "app",
            &format!("branch-with-a-longish-name-{i:03}"),
            &[("b.txt", &format!("{i}\n"))],
            "b",
        );
    }
    let into = tempfile::tempdir().unwrap();
    let dest = into.path().join("mirror.git");
    let (code, _, err) =
        git(into.path(), &["clone", "-q", "--mirror", &gh.remote_url(OWNER, "app"), dest.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(git(&dest, &["for-each-ref", "refs/heads"]).1.lines().count(), 41);
    let gzipped = gh.requests().iter().any(|r| {
        r.path.ends_with("/git-upload-pack")
            && r.header("content-encoding") == Some("gzip")
            && r.status == 200
    });
    assert!(gzipped, "git sent a gzip body: {}", gh.summary());
}
