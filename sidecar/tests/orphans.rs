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
        worktree::prepare(repo.path(), id, &format!("swarm/s/{id}"), &base).expect("prepare");
    }
    let ws = repo.path().join(".git/workspaces");
    let mut j = Journal::open(orphans::journal_path(&ws, "busy")).expect("journal");
    j.set_in_hand(&v1::Assign { branch: "swarm/s/busy".into(), ..Default::default() }).expect("in hand");
    let _live = orphans::take_lock(&ws, "live").expect("lock");
    assert!(orphans::take_lock(&ws, "live").is_err(), "a second sidecar with the same id is refused");

    let found = orphans::scan(&ws, "me");
    assert_eq!(found, vec!["old"]);
    orphans::remove(repo.path(), &ws, &found).expect("remove");
    assert!(!ws.join("old").exists());
    assert!(repo.git2().find_worktree("old").is_err(), "registration pruned");
    assert!(ws.join("busy").exists() && ws.join("live").exists() && ws.join("me").exists());
    assert!(orphans::scan(&ws, "me").is_empty());
}
