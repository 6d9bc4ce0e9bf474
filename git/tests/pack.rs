//! Pack transfer between two repositories with no shared object store.

use swarm_git::{GitError, Integrator, build_pack, receive_pack};
use swarm_tests::TempRepo;

const MAX: usize = 64 * 1024 * 1024;

fn pack_files(repo: &TempRepo) -> usize {
    std::fs::read_dir(repo.path().join(".git/objects/pack")).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn a_pack_round_trips_between_two_repositories() {
    let a = TempRepo::new();
    let base = a.commit(None, &[("a.txt", Some("a\n")), ("dir/b.txt", Some("b\n"))], "base");
    let tip = a.commit(Some(&base), &[("dir/c.txt", Some("c\n"))], "tip");

    // B starts with nothing: the full history travels.
    let b = TempRepo::new();
    let pack = build_pack(a.path(), &tip, &[]).expect("build");
    let objects = receive_pack(b.path(), &pack, &tip, MAX).expect("receive");
    assert_eq!(objects, 9, "2 commits, 4 trees, 3 blobs");
    assert_eq!(b.file(&tip, "dir/c.txt").as_deref(), Some("c\n"));
    assert_eq!(b.file(&tip, "a.txt").as_deref(), Some("a\n"));
    assert!(Integrator::open(b.path()).expect("open").commit_exists(&tip).expect("exists"));
    let leftovers: Vec<_> = std::fs::read_dir(b.path().join(".git/objects"))
        .expect("objects dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("incoming-"))
        .collect();
    assert!(leftovers.is_empty(), "staging directory removed");

    // An incremental pack only carries what B lacks.
    let next = a.commit(Some(&tip), &[("a.txt", Some("a2\n"))], "next");
    let unknown = "0123456789abcdef0123456789abcdef01234567".to_string();
    let pack = build_pack(a.path(), &next, &[tip.clone(), unknown]).expect("build incremental");
    let objects = receive_pack(b.path(), &pack, &next, MAX).expect("receive incremental");
    assert_eq!(objects, 3, "1 commit, 1 tree, 1 blob");
    assert_eq!(b.file(&next, "a.txt").as_deref(), Some("a2\n"));
    assert_eq!(b.file(&next, "dir/b.txt").as_deref(), Some("b\n"));

    // Nothing new: an empty pack is accepted when the tip is already there.
    let pack = build_pack(a.path(), &next, std::slice::from_ref(&next)).expect("build empty");
    assert_eq!(receive_pack(b.path(), &pack, &next, MAX).expect("empty pack"), 0);
}

#[test]
fn an_oversize_pack_is_refused_untouched() {
    let a = TempRepo::new();
    let tip = a.commit(None, &[("big.txt", Some(&"x".repeat(10_000)))], "big");
    let b = TempRepo::new();
    let pack = build_pack(a.path(), &tip, &[]).expect("build");
    let before = pack_files(&b);
    let err = receive_pack(b.path(), &pack, &tip, 16).expect_err("too large");
    assert!(matches!(err, GitError::PackTooLarge { max: 16, .. }), "{err}");
    assert_eq!(pack_files(&b), before);
}

#[test]
fn a_pack_without_the_expected_tip_is_refused_untouched() {
    let a = TempRepo::new();
    let base = a.commit(None, &[("a.txt", Some("a\n"))], "base");
    let tip = a.commit(Some(&base), &[("b.txt", Some("b\n"))], "tip");
    let b = TempRepo::new();
    // The pack holds only `base`, but the sender claims `tip`.
    let pack = build_pack(a.path(), &base, &[]).expect("build");
    let before = pack_files(&b);
    let err = receive_pack(b.path(), &pack, &tip, MAX).expect_err("missing tip");
    assert!(matches!(&err, GitError::PackMissingTip { tip: t } if *t == tip), "{err}");
    assert_eq!(pack_files(&b), before, "nothing installed");
    assert!(b.git2().find_commit(git2::Oid::from_str(&base).expect("oid")).is_err());

    // A pack that lacks the tip's parent (the receiver does not have it) is refused too.
    let pack = build_pack(a.path(), &tip, std::slice::from_ref(&base)).expect("build thin");
    let result = receive_pack(b.path(), &pack, &tip, MAX);
    assert!(matches!(result, Err(GitError::PackRejected { .. })), "{result:?}");
    assert_eq!(pack_files(&b), before, "nothing installed");

    // Garbage is an error, not a panic.
    assert!(receive_pack(b.path(), b"PACK\0\0\0\x02\0\0\0\x05garbage", &tip, MAX).is_err());
    assert!(matches!(build_pack(a.path(), "nothex", &[]), Err(GitError::InvalidCommitId { .. })));
}
