//! How the integration ref is written: by exchange under git's lock protocol, readable by git at
//! every step, logged in the reflog; libgit2's path for refs that are not plain loose files; and the
//! repair of a ref a power loss left empty.

use swarm_git::{GitError, Integrator, MergeRequest, MergeStrategy, RefRepair};
use swarm_tests::TempRepo;

const BRANCH: &str = "swarm/demo/integration";

struct Fixture {
    repo: TempRepo,
    head: String,
    tasks: Vec<String>,
}

fn fixture() -> Fixture {
    let repo = TempRepo::new();
    let base = repo.commit(None, &[("a.txt", Some("a\n"))], "base");
    let head = repo.commit(Some(&base), &[("a.txt", Some("A\n"))], "integration edit");
    let tasks = (0..3)
        .map(|n| repo.commit(Some(&base), &[(format!("t{n}.txt").as_str(), Some("t\n"))], "task"))
        .collect();
    repo.set_branch(BRANCH, &head);
    Fixture { repo, head, tasks }
}

fn request(expected: &str, task: &str, n: usize) -> MergeRequest {
    MergeRequest {
        integration_branch: BRANCH.into(),
        expected_head: expected.into(),
        task_commit: task.into(),
        strategy: MergeStrategy::Merge,
        attempt_label: format!("demo/t{n}#1"),
        title: format!("t{n}"),
        summary: "s".into(),
    }
}

fn ref_file(f: &Fixture) -> std::path::PathBuf {
    f.repo.path().join(".git/refs/heads").join(BRANCH)
}

fn reflog(f: &Fixture) -> Vec<(String, String)> {
    let log = f.repo.git2().reflog(&format!("refs/heads/{BRANCH}")).expect("reflog");
    // git2 lists the newest first.
    log.iter().map(|e| (e.id_old().to_string(), e.id_new().to_string())).rev().collect()
}

#[test]
fn each_landing_moves_the_ref_for_git_leaves_no_lock_and_logs_one_reflog_line() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let logged_before = reflog(&f).len();
    let mut head = f.head.clone();
    let mut moves = Vec::new();
    for (n, task) in f.tasks.iter().enumerate() {
        let report = integrator.integrate(&request(&head, task, n)).expect("integrate");
        assert_eq!(report.base, head);
        assert_eq!(f.repo.head(BRANCH), report.result, "git reads the new head");
        assert_eq!(std::fs::read_to_string(ref_file(&f)).expect("ref"), format!("{}\n", report.result));
        assert!(!ref_file(&f).with_extension("lock").exists(), "no lock is left behind");
        moves.push((head.clone(), report.result.clone()));
        head = report.result;
    }
    assert_eq!(reflog(&f)[logged_before..], moves[..], "one reflog line per landing, old -> new");
    let fsck = f.repo.git(&["fsck", "--no-dangling"]);
    assert!(!fsck.contains("error"), "{fsck}");
}

#[test]
fn a_ref_held_in_packed_refs_only_is_moved_through_libgit2() {
    let f = fixture();
    f.repo.git(&["pack-refs", "--all"]);
    assert!(!ref_file(&f).exists(), "the branch is packed, not loose");
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let report = integrator.integrate(&request(&f.head, &f.tasks[0], 0)).expect("integrate");
    assert_eq!(f.repo.head(BRANCH), report.result);
    let second = integrator.integrate(&request(&report.result, &f.tasks[1], 1)).expect("integrate");
    assert_eq!(f.repo.head(BRANCH), second.result, "and by exchange once it is loose again");
}

#[test]
fn a_batch_and_an_advance_move_the_ref_by_compare_and_swap_too() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let reqs: Vec<MergeRequest> =
        f.tasks[..2].iter().enumerate().map(|(n, t)| request(&f.head, t, n)).collect();
    let batch = integrator.integrate_batch(&reqs).expect("batch");
    assert_eq!(f.repo.head(BRANCH), batch.head);

    let speculation =
        integrator.speculate(BRANCH, &[request(&batch.head, &f.tasks[2], 2)]).expect("speculate");
    // A stale expectation changes nothing.
    let stale = integrator.advance(BRANCH, &f.head, &speculation.head, "queue");
    assert!(stale.is_err(), "{stale:?}");
    assert_eq!(f.repo.head(BRANCH), batch.head);
    integrator.advance(BRANCH, &batch.head, &speculation.head, "queue").expect("advance");
    assert_eq!(f.repo.head(BRANCH), speculation.head);
    assert!(!ref_file(&f).with_extension("lock").exists());
}

#[test]
fn a_ref_left_empty_by_a_power_loss_is_put_back_at_the_recorded_head_and_merges_go_on() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let landed = integrator.integrate(&request(&f.head, &f.tasks[0], 0)).expect("integrate");
    // What ext4 can leave of a file renamed into place whose data never reached the disk.
    std::fs::write(ref_file(&f), "").expect("empty the ref");
    assert!(integrator.branch_head(BRANCH).is_err(), "an empty ref is unreadable");

    let repaired = integrator.repair_ref(BRANCH, &landed.result).expect("repair");
    assert_eq!(repaired, RefRepair::Repaired { found: String::new() });
    assert_eq!(f.repo.head(BRANCH), landed.result);
    assert!(!ref_file(&f).with_extension("lock").exists());
    let next =
        integrator.integrate(&request(&landed.result, &f.tasks[1], 1)).expect("integrate after repair");
    assert_eq!(f.repo.head(BRANCH), next.result);
}

#[test]
fn a_ref_behind_the_recorded_head_is_moved_up_and_one_ahead_or_diverged_is_left_alone() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let landed = integrator.integrate(&request(&f.head, &f.tasks[0], 0)).expect("integrate");
    // The record is behind the ref (the controller was killed before it recorded the landing):
    // the ref is right, and recovery finds the landing in its history instead.
    assert_eq!(integrator.repair_ref(BRANCH, &f.head).expect("repair"), RefRepair::Intact);
    assert_eq!(f.repo.head(BRANCH), landed.result);
    // Diverged: not something a power loss does; the merges report it.
    assert_eq!(integrator.repair_ref(BRANCH, &f.tasks[1]).expect("repair"), RefRepair::Intact);
    assert_eq!(f.repo.head(BRANCH), landed.result);

    // An older value of the ref, as a recycled lock file can bring back after a power loss.
    std::fs::write(ref_file(&f), format!("{}\n", f.head)).expect("rewind the ref file");
    let repaired = integrator.repair_ref(BRANCH, &landed.result).expect("repair");
    assert_eq!(repaired, RefRepair::Repaired { found: f.head.clone() });
    assert_eq!(f.repo.head(BRANCH), landed.result);

    f.repo.git(&["pack-refs", "--all"]);
    assert_eq!(integrator.repair_ref(BRANCH, &f.head).expect("repair"), RefRepair::Intact, "packed");
    assert_eq!(f.repo.head(BRANCH), landed.result);
}

#[test]
fn the_lock_file_is_recycled_and_a_stray_spare_or_lock_changes_nothing_for_git() {
    use std::os::unix::fs::MetadataExt as _;
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let first = integrator.integrate(&request(&f.head, &f.tasks[0], 0)).expect("integrate");
    let spare = f.repo.path().join(".git/swarm-ref-spares/refs/heads").join(BRANCH);
    let spare_inode = std::fs::metadata(&spare).expect("the old ref file is kept as the spare").ino();
    let second = integrator.integrate(&request(&first.result, &f.tasks[1], 1)).expect("integrate");
    let ref_inode = std::fs::metadata(ref_file(&f)).expect("ref").ino();
    assert_eq!(ref_inode, spare_inode, "the spare became the lock, then the ref");
    assert!(!ref_file(&f).with_extension("lock").exists());
    // git sees neither the spare nor anything else of ours as a ref.
    let refs = f.repo.git(&["for-each-ref", "--format=%(refname)"]);
    assert!(!refs.contains("spare"), "{refs}");

    // A lock held by someone else is reported, and the spare is not consumed by the attempt.
    let lock = ref_file(&f).with_extension("lock");
    std::fs::write(&lock, "held\n").expect("lock");
    let err = integrator.integrate(&request(&second.result, &f.tasks[2], 2)).expect_err("locked");
    assert!(matches!(err, swarm_git::MergeError::RefLocked { .. }), "{err:?}");
    assert_eq!(std::fs::read_to_string(&lock).expect("lock"), "held\n", "their lock is untouched");
    assert!(spare.exists());
    std::fs::remove_file(&lock).expect("unlock");
    // A spare longer than an id (nothing we write, but a file is a file) is cut to the id.
    std::fs::write(&spare, "x".repeat(200)).expect("long spare");
    let third = integrator.integrate(&request(&second.result, &f.tasks[2], 2)).expect("integrate");
    assert_eq!(std::fs::read_to_string(ref_file(&f)).expect("ref"), format!("{}\n", third.result));
}

#[test]
fn a_repair_towards_a_missing_commit_fails_and_writes_nothing() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    std::fs::write(ref_file(&f), "garbage").expect("corrupt the ref");
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err = integrator.repair_ref(BRANCH, missing).expect_err("nothing to put back");
    assert!(matches!(err, GitError::MissingCommit { .. }), "{err:?}");
    assert_eq!(std::fs::read_to_string(ref_file(&f)).expect("ref"), "garbage");
    let err = integrator.repair_ref(BRANCH, "not-an-id").expect_err("invalid id");
    assert!(matches!(err, GitError::InvalidCommitId { .. }), "{err:?}");

    let repaired = integrator.repair_ref(BRANCH, &f.head).expect("repair");
    assert_eq!(repaired, RefRepair::Repaired { found: "garbage".into() });
    assert_eq!(f.repo.head(BRANCH), f.head);
}
