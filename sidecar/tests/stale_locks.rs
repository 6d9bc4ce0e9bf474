//! Git lock files left by a crashed sidecar are removed before the next
//! attempt; a lock a live process holds is never broken.

use std::path::Path;
use std::time::Duration;

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_sidecar::attempt::{self, Assignment, Context};
use swarm_sidecar::{locks, worktree};
use swarm_tests::{TempRepo, script};
use tokio::sync::{mpsc, watch};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/sent.rs"]
mod sent;
use sent::Report;

fn assign(base: &str, worker: &Path, task: &str, number: u32) -> v1::Assign {
    v1::Assign {
        attempt: Some(v1::AttemptRef {
            swarm_id: "s".into(),
            task_id: task.into(),
            attempt: number,
            fencing_token: 9,
        }),
        base_commit: base.into(),
        branch: format!("swarm/s/{task}"),
        title: format!("Do {task}"),
        task_text: "# Task\n".into(),
        command: vec![worker.to_string_lossy().into_owned()],
        // The test's scripts sit beside the repository, as a plan's tools
        // outside the worktree would: named for the sandbox to read.
        sandbox: Some(v1::SandboxSpec {
            read: vec![worker.parent().expect("script dir").to_string_lossy().into_owned()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn run(ctx: Context, a: v1::Assign) -> Vec<Report> {
    let assignment = Assignment::try_from(&a).expect("valid assign");
    let (_stop_tx, stop_rx) = watch::channel(None);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(attempt::run(ctx, assignment, stop_rx, tx));
    tokio::time::timeout(Duration::from_secs(60), task).await.expect("attempt ends").expect("join");
    let mut reports = Vec::new();
    while let Ok(r) = rx.try_recv() {
        reports.push(Report::from(r));
    }
    reports
}

#[tokio::test]
async fn locks_left_by_a_crash_are_removed_and_the_next_attempt_succeeds() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(repo.path(), "w.sh", "echo done > out.txt");
    // The worktree exists from an earlier attempt; then the sidecar was
    // killed mid-commit and mid-ref-update: real lock files, nobody holds them.
    worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t", &base).expect("first prepare");
    let admin = repo.path().join(".git/worktrees/w1");
    let index_lock = admin.join("index.lock");
    let head_lock = admin.join("HEAD.lock");
    let branch_lock = repo.path().join(".git/refs/heads/swarm/s/t.lock");
    for l in [&index_lock, &head_lock, &branch_lock] {
        std::fs::write(l, "").expect("plant lock");
    }
    // Plain git agrees the worktree is stuck.
    let stuck = std::process::Command::new("git")
        .args(["add", "-A"])
        .current_dir(repo.path().join(".git/workspaces/w1"))
        .output()
        .expect("git");
    assert!(!stuck.status.success(), "git sees the planted index.lock");

    let reports = run(harness::ctx(repo.path(), "w1", None), assign(&base, &worker, "t", 2)).await;
    let r = harness::the_result(&reports);
    assert_eq!(r.outcome(), v1::Outcome::Success, "{r:?}");
    for l in [&index_lock, &head_lock, &branch_lock] {
        assert!(!l.exists(), "{} removed", l.display());
    }
    let recorded: Vec<&str> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Journaled(Body::Status(s)) if s.message.contains("stale git lock") => {
                Some(s.message.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(recorded.len(), 3, "each removal is reported: {recorded:?}");
    assert!(recorded.iter().any(|m| m.contains("index.lock")));
    let git = repo.git2();
    let branch = git.find_branch("swarm/s/t", git2::BranchType::Local).expect("branch");
    assert_eq!(branch.get().target().expect("target").to_string(), r.commit);
}

#[test]
fn a_lock_held_open_by_a_live_process_is_not_broken() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    worktree::prepare(&ws(repo.path()), "w1", "swarm/s/t", &base).expect("prepare");
    let lock = repo.path().join(".git/worktrees/w1/index.lock");
    // A live process (this one) has the lock open, as git does while it works.
    let _held = std::fs::File::create(&lock).expect("hold lock");
    let common = repo.path().join(".git");
    let err = locks::clear_stale(&common, "w1", None).expect_err("held lock must not be broken");
    let text = err.to_string();
    assert!(text.contains("index.lock") && text.contains(&std::process::id().to_string()), "{text}");
    assert!(lock.exists());
    // The last-resort repair does not get around it either.
    assert!(worktree::discard(&ws(repo.path()), "w1").is_err());
    assert!(lock.exists() && repo.path().join(".git/workspaces/w1").exists());
    // Locks of other worktrees and shared files are never candidates.
    std::fs::write(common.join("packed-refs.lock"), "").expect("shared lock");
    std::fs::write(common.join("index.lock"), "").expect("main index lock");
    let c = locks::candidates(&common, "w1", Some("swarm/s/t"));
    assert_eq!(c, vec![lock.clone()]);
}

/// The repository's own workspaces directory, `.git/workspaces/`.
fn ws(repo: &std::path::Path) -> worktree::Workspaces {
    worktree::Workspaces::in_repo(repo).expect("workspaces")
}
