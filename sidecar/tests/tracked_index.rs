//! The tracked commit leaves the index file to the next move; a sidecar
//! that stops in between must still start its next attempt from an index
//! that agrees with the files.

use std::path::Path;

use swarm_sidecar::{changes, worktree};
use swarm_tests::TempRepo;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git").args(args).current_dir(dir).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_full_prepare_repairs_an_index_the_tracked_commit_left_unwritten() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch(
        "main",
        &[("a.txt", Some("a")), ("b.txt", Some("b")), ("src/c.txt", Some("c"))],
        "base",
    );
    let p = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t1", &base).expect("prepare");
    let mut tracker = changes::Tracker::start(&p.path).expect("tracker");
    std::fs::write(p.path.join("a.txt"), "a2").expect("modify");
    std::fs::remove_file(p.path.join("b.txt")).expect("delete");
    std::fs::create_dir_all(p.path.join("new")).expect("mkdir");
    std::fs::write(p.path.join("new/d.txt"), "d").expect("add");
    let changed = tracker.take().expect("tracked");
    let (wt, memo) = tracker.repo_and_memo().expect("the tracker's repository");
    let (oid, made) = changes::commit_paths_in(wt, memo, "t1", &changed).expect("commit");
    assert!(made);
    // The sidecar stops here: the index file still says the base.
    drop(tracker);
    assert_ne!(git(&p.path, &["status", "--porcelain"]), "", "the index file is behind the commit");

    // The next sidecar has no tracker: a full prepare, to the commit itself
    // and then to a commit after it.
    let q = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t2", &oid.to_string()).expect("prepare again");
    assert_eq!(git(&q.path, &["status", "--porcelain"]), "", "index agrees with HEAD and the files");
    let next = repo.commit(Some(&oid.to_string()), &[("src/c.txt", Some("c2"))], "next");
    let r = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t3", &next).expect("prepare next");
    assert_eq!(git(&r.path, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(r.path.join("src/c.txt")).expect("read"), "c2");
    assert_eq!(git(&r.path, &["ls-files"]), "a.txt\nnew/d.txt\nsrc/c.txt");
}

#[test]
fn a_full_prepare_drops_what_a_worker_staged() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a")), ("b.txt", Some("b"))], "base");
    let p = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t1", &base).expect("prepare");
    // The worker staged changes (some matching the base again) and failed.
    std::fs::write(p.path.join("a.txt"), "a2").expect("modify");
    std::fs::write(p.path.join("x.txt"), "x").expect("add");
    git(&p.path, &["add", "-A"]);
    std::fs::write(p.path.join("a.txt"), "a").expect("back to the base");
    let q = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t2", &base).expect("prepare again");
    assert_eq!(git(&q.path, &["status", "--porcelain"]), "");
    assert_eq!(git(&q.path, &["ls-files"]), "a.txt\nb.txt");
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}
