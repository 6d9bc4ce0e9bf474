//! The reused worktree against real repositories.

use std::os::unix::fs::MetadataExt;

use swarm_sidecar::worktree;
use swarm_tests::TempRepo;

#[test]
fn worktree_is_made_under_git_workspaces_and_reused() {
    let repo = TempRepo::new();
    let c1 = repo.commit_on_branch(
        "main",
        &[("a.txt", Some("a1")), ("keep.txt", Some("k")), (".gitignore", Some("target/\n"))],
        "one",
    );
    let c2 = repo.commit_on_branch("main", &[("a.txt", Some("a2")), ("b.txt", Some("b"))], "two");

    let p = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t1", &c1).expect("prepare");
    assert!(p.created);
    let expected = repo.path().join(".git/workspaces/w1").canonicalize().expect("canon");
    assert_eq!(p.path, expected);
    assert_eq!(std::fs::read_to_string(p.path.join("a.txt")).expect("a"), "a1");

    // Warm state: an ignored build dir, an untracked file, the .swarm dir.
    std::fs::create_dir_all(p.path.join("target")).expect("mkdir");
    std::fs::write(p.path.join("target/cache"), "warm").expect("cache");
    std::fs::write(p.path.join("scratch.txt"), "junk").expect("scratch");
    std::fs::create_dir_all(p.path.join(".swarm")).expect("mkdir");
    std::fs::write(p.path.join(".swarm/task.md"), "task").expect("task");
    let keep_before = std::fs::metadata(p.path.join("keep.txt")).expect("meta");

    let q = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t2", &c2).expect("move");
    assert!(!q.created);
    assert_eq!(q.path, p.path);
    assert_eq!(std::fs::read_to_string(q.path.join("a.txt")).expect("a"), "a2");
    assert!(q.path.join("b.txt").exists());
    assert!(!q.path.join("scratch.txt").exists(), "untracked removed");
    assert_eq!(std::fs::read_to_string(q.path.join("target/cache")).expect("cache"), "warm");
    assert!(q.path.join(".swarm/task.md").exists(), ".swarm survives");
    let keep_after = std::fs::metadata(q.path.join("keep.txt")).expect("meta");
    assert_eq!(keep_before.ino(), keep_after.ino(), "untouched file not rewritten");
    assert_eq!(keep_before.mtime_nsec(), keep_after.mtime_nsec());
    assert_eq!(keep_before.mtime(), keep_after.mtime());

    let (head, _) = worktree::head(&q.path).expect("head");
    assert_eq!(head.to_string(), c2);
    let wt = git2::Repository::open(&q.path).expect("open");
    assert_eq!(wt.head().expect("head").shorthand(), Some("swarm/s/t2"));

    // Same branch again (a retry) at an older base: the branch is force-moved.
    let r = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t2", &c1).expect("again");
    assert_eq!(worktree::head(&r.path).expect("head").0.to_string(), c1);
    assert!(!r.path.join("b.txt").exists());
}

#[test]
fn commit_all_skips_swarm_dir_and_reports_files() {
    let repo = TempRepo::new();
    let c1 = repo.commit_on_branch("main", &[("a.txt", Some("a")), ("gone.txt", Some("g"))], "one");
    let p = worktree::prepare(&ws(repo.path()), "w2", "swarm/s/t", &c1).expect("prepare");
    std::fs::create_dir_all(p.path.join(".swarm/logs")).expect("mkdir");
    std::fs::write(p.path.join(".swarm/status.json"), "{}").expect("status");
    std::fs::write(p.path.join("new.txt"), "n").expect("new");
    std::fs::remove_file(p.path.join("gone.txt")).expect("rm");
    let (oid, made) = worktree::commit_all(&p.path, "title\n\nSwarm-Attempt: s/t#1").expect("commit");
    assert!(made);
    let mut files = worktree::files_changed(&p.path, &c1, oid).expect("diff");
    files.sort();
    assert_eq!(files, vec!["gone.txt", "new.txt"]);
    let (again, made) = worktree::commit_all(&p.path, "nothing").expect("noop");
    assert_eq!((again, made), (oid, false));
    let git = repo.git2();
    let tree = git.find_commit(oid).expect("commit").tree().expect("tree");
    assert!(tree.get_name(".swarm").is_none(), ".swarm/ never committed");
}

#[test]
fn bad_worker_ids_and_branches_are_refused() {
    let repo = TempRepo::new();
    let c1 = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "one");
    assert!(worktree::prepare(&ws(repo.path()), "../evil", "swarm/s/t", &c1).is_err());
    assert!(worktree::prepare(&ws(repo.path()), "w", "-x", &c1).is_err());
    assert!(worktree::prepare(&ws(repo.path()), "w", "b", "abc").is_err());
}

/// A task reassigned after its first sidecar was lost: the lost sidecar's
/// worktree still sits on the task branch, and the new sidecar must still
/// get a worktree at the new base, on that branch name.
#[test]
fn a_branch_checked_out_in_a_lost_sidecars_worktree_can_be_taken_over() {
    let repo = TempRepo::new();
    let c1 = repo.commit_on_branch("main", &[("a.txt", Some("a1"))], "one");
    let c2 = repo.commit_on_branch("main", &[("a.txt", Some("a2"))], "two");
    let lost = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t", &c1).expect("first sidecar");
    // The new sidecar's first worktree, on the same branch.
    let fresh = worktree::prepare(&ws(repo.path()), "w2", "swarm/s/t", &c2).expect("new worktree");
    assert_eq!(worktree::head(&fresh.path).expect("head").0.to_string(), c2);
    // And an existing worktree moving onto it.
    let w3 = worktree::prepare(&ws(repo.path()), "w3", "swarm/s/other", &c1).expect("w3");
    let moved = worktree::prepare(&ws(repo.path()), "w3", "swarm/s/t", &c2).expect("move onto it");
    assert_eq!(moved.path, w3.path);
    assert_eq!(worktree::head(&moved.path).expect("head").0.to_string(), c2);
    // Committing publishes the result on the branch.
    std::fs::write(moved.path.join("a.txt"), "a3").expect("write");
    let (oid, made) = worktree::commit_all(&moved.path, "three").expect("commit");
    assert!(made);
    let main = git2::Repository::open(repo.path()).expect("open");
    assert_eq!(main.find_reference("refs/heads/swarm/s/t").expect("branch").target(), Some(oid));
    // The lost worktree's files are untouched (its HEAD names the branch, so
    // it now resolves to the new commit; that sidecar's reports are fenced).
    assert_eq!(std::fs::read_to_string(lost.path.join("a.txt")).expect("lost file"), "a1");
}

/// A sidecar makes its worktree before its first task (at the repository's
/// HEAD), and the first task then moves it only by the paths that differ;
/// a worktree that is already there is never touched by the warm-up.
#[test]
fn the_worktree_is_made_ahead_at_head_and_an_existing_one_is_left_alone() {
    let repo = TempRepo::new();
    let c1 = repo.commit_on_branch("main", &[("a.txt", Some("a1")), ("keep.txt", Some("k"))], "one");
    git2::Repository::open(repo.path()).expect("open").set_head("refs/heads/main").expect("HEAD");
    let tracker = swarm_sidecar::changes::SharedTracker::default();

    swarm_sidecar::attempt::warm_worktree(&tracker, &ws(repo.path()), "w1");
    let path = repo.path().join(".git/workspaces/w1");
    assert_eq!(worktree::head(&path).expect("head").0.to_string(), c1, "made at HEAD");
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).expect("a"), "a1");
    assert!(tracker.lock().expect("lock").is_some(), "its changes are tracked from the checkout on");
    let keep_before = std::fs::metadata(path.join("keep.txt")).expect("meta");

    // The first task: at a later base, moved there by the changed paths.
    let c2 = repo.commit_on_branch("main", &[("a.txt", Some("a2"))], "two");
    let p = worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t", &c2).expect("prepare");
    assert!(!p.created, "the warm worktree is the one used");
    assert_eq!(std::fs::read_to_string(p.path.join("a.txt")).expect("a"), "a2");
    assert_eq!(std::fs::metadata(p.path.join("keep.txt")).expect("meta").ino(), keep_before.ino());

    // A later start finds it (with an attempt's work in it): untouched.
    std::fs::write(p.path.join("wip.txt"), "work").expect("wip");
    assert_eq!(worktree::warm(&ws(repo.path()), "w1", &c1).expect("warm"), None);
    let fresh = swarm_sidecar::changes::SharedTracker::default();
    swarm_sidecar::attempt::warm_worktree(&fresh, &ws(repo.path()), "w1");
    assert!(fresh.lock().expect("lock").is_none(), "nothing vouches for an existing worktree");
    assert_eq!(std::fs::read_to_string(p.path.join("wip.txt")).expect("wip"), "work");
    assert_eq!(worktree::head(&p.path).expect("head").0.to_string(), c2);
    assert!(worktree::warm(&ws(repo.path()), "w1", "abc").is_err(), "a bad commit is refused");
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}
