//! Worktrees of sidecars that are gone.

use swarm_proto::v1;
use swarm_sidecar::journal::Journal;
use swarm_sidecar::{orphans, worktree};
use swarm_tests::TempRepo;

#[test]
fn only_unlocked_idle_worktrees_of_other_workers_are_orphans() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    for id in ["me", "old", "busy", "live"] {
        worktree::prepare(&ws(repo.path()), id, &format!("swarm/s/{id}"), &base).expect("prepare");
    }
    let dir = repo.path().join(".git/workspaces");
    let mut j = Journal::open(orphans::journal_path(&dir, "busy")).expect("journal");
    j.set_in_hand(&v1::Assign { branch: "swarm/s/busy".into(), ..Default::default() }).expect("in hand");
    let _live = orphans::take_lock(&dir, "live").expect("lock");
    assert!(orphans::take_lock(&dir, "live").is_err(), "a second sidecar with the same id is refused");

    let found = orphans::scan(&dir, "me");
    assert_eq!(found, vec!["old"]);
    orphans::remove(&ws(repo.path()), &found).expect("remove");
    assert!(!dir.join("old").exists());
    assert!(repo.git2().find_worktree("old").is_err(), "registration pruned");
    assert!(dir.join("busy").exists() && dir.join("live").exists() && dir.join("me").exists());
    assert!(orphans::scan(&dir, "me").is_empty());
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}
