//! Ref lock files left by a killed process: reported as locks (not as a moved ref), removed only
//! on request and only when stale.

use std::time::Duration;

use swarm_git::{Integrator, MergeError, MergeRequest, MergeStrategy, RefLock};
use swarm_tests::TempRepo;

const BRANCH: &str = "swarm/demo/integration";

struct Fixture {
    repo: TempRepo,
    head: String,
    task: String,
}

fn fixture() -> Fixture {
    let repo = TempRepo::new();
    let base = repo.commit(None, &[("a.txt", Some("a\n"))], "base");
    let head = repo.commit(Some(&base), &[("a.txt", Some("A\n"))], "integration edit");
    let task = repo.commit(Some(&base), &[("b.txt", Some("b\n"))], "task");
    repo.set_branch(BRANCH, &head);
    repo.set_branch("main", &base);
    Fixture { repo, head, task }
}

fn request(f: &Fixture) -> MergeRequest {
    MergeRequest {
        integration_branch: BRANCH.into(),
        expected_head: f.head.clone(),
        task_commit: f.task.clone(),
        strategy: MergeStrategy::Merge,
        attempt_label: "demo/t#1".into(),
        title: "t".into(),
        summary: "s".into(),
    }
}

/// What a `git` killed in the middle of `update-ref` leaves behind.
fn plant_lock(f: &Fixture, branch: &str) -> std::path::PathBuf {
    let lock = f.repo.path().join(".git/refs/heads").join(format!("{branch}.lock"));
    std::fs::create_dir_all(lock.parent().expect("parent")).expect("mkdir");
    std::fs::write(&lock, format!("{}\n", f.head)).expect("plant lock");
    lock
}

#[test]
fn a_planted_lock_is_reported_as_a_lock_and_the_cas_succeeds_after_its_removal() {
    let f = fixture();
    let lock = plant_lock(&f, BRANCH);
    let integrator = Integrator::open(f.repo.path()).expect("open");
    assert_eq!(integrator.ref_lock_path(BRANCH).expect("lock path"), integrator_lock_path(&f));

    let err = integrator.integrate(&request(&f)).expect_err("the ref is locked");
    let text = err.to_string();
    assert!(matches!(&err, MergeError::RefLocked { lock: l, .. } if l == &lock), "{err:?}");
    assert!(text.contains("is locked by") && text.contains("integration.lock"), "{text}");
    assert!(!text.contains("moved from"), "a lock is not a moved ref: {text}");
    assert!(lock.exists(), "integrate never removes a lock itself");
    assert_eq!(f.repo.head(BRANCH), f.head, "nothing was written");

    match integrator.remove_stale_ref_lock(BRANCH, Duration::ZERO).expect("remove") {
        RefLock::Removed { path, .. } => assert_eq!(path, lock),
        other => panic!("expected Removed, got {other:?}"),
    }
    assert!(!lock.exists());
    let report = integrator.integrate(&request(&f)).expect("integrate after removal");
    assert_eq!(f.repo.head(BRANCH), report.result);
    assert_eq!(
        integrator.remove_stale_ref_lock(BRANCH, Duration::ZERO).expect("again"),
        RefLock::Absent,
        "the successful update left no lock behind"
    );
}

fn integrator_lock_path(f: &Fixture) -> std::path::PathBuf {
    f.repo.path().join(".git/refs/heads").join(format!("{BRANCH}.lock"))
}

#[test]
fn a_young_lock_or_one_held_open_is_left_alone() {
    let f = fixture();
    let lock = plant_lock(&f, BRANCH);
    let integrator = Integrator::open(f.repo.path()).expect("open");

    match integrator.remove_stale_ref_lock(BRANCH, Duration::from_secs(3600)).expect("look") {
        RefLock::Young { path, wait, .. } => {
            assert_eq!(path, lock);
            assert!(wait > Duration::ZERO && wait <= Duration::from_secs(3600), "{wait:?}");
        }
        other => panic!("expected Young, got {other:?}"),
    }
    assert!(lock.exists());

    // A live git keeps its lock file open while it writes it.
    let held = std::fs::File::open(&lock).expect("hold the lock open");
    match integrator.remove_stale_ref_lock(BRANCH, Duration::ZERO).expect("look") {
        RefLock::Open { path, pid } => {
            assert_eq!(path, lock);
            assert_eq!(pid, std::process::id());
        }
        other => panic!("expected Open, got {other:?}"),
    }
    assert!(lock.exists());
    drop(held);
}

#[test]
fn a_lock_on_another_ref_is_untouched_and_named_in_the_error() {
    let f = fixture();
    let lock = plant_lock(&f, "main");
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let err = integrator.fast_forward("main", &f.head).expect_err("main is locked");
    assert!(
        matches!(&err, MergeError::RefLocked { branch, lock: l } if branch == "main" && l == &lock),
        "{err:?}"
    );
    assert!(err.to_string().contains(&format!("locked by {}", lock.display())), "{err}");
    assert!(lock.exists(), "fast_forward never breaks a lock");
    // Merging into the integration ref is unaffected by a lock on another ref.
    integrator.integrate(&request(&f)).expect("integrate");
    assert!(lock.exists());
    assert_eq!(std::fs::read_to_string(&lock).expect("read lock"), format!("{}\n", f.head));
}
