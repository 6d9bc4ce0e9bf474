//! Loose objects written into files made ahead of time: git reads them as its own, and no file of
//! ours outlives the process that made it for long.

use std::os::unix::fs::PermissionsExt as _;

use swarm_git::{Integrator, MergeRequest, MergeStrategy};
use swarm_tests::TempRepo;

const BRANCH: &str = "swarm/demo/integration";

fn pool_root(repo: &TempRepo) -> std::path::PathBuf {
    repo.path().join(".git/swarm-object-files")
}

#[test]
fn merge_commits_written_through_ready_files_are_git_objects_and_the_files_go_with_the_integrator() {
    let repo = TempRepo::new();
    let base = repo.commit(None, &[("a.txt", Some("a\n"))], "base");
    repo.set_branch(BRANCH, &base);
    let tasks: Vec<String> = (0..5)
        .map(|n| repo.commit(Some(&base), &[(format!("t{n}.txt").as_str(), Some("t\n"))], "task"))
        .collect();
    let integrator = Integrator::open(repo.path()).expect("open");
    let dirs: Vec<_> = std::fs::read_dir(pool_root(&repo)).expect("ready files").flatten().collect();
    assert_eq!(dirs.len(), 1, "one directory per integrator");
    let ready = dirs[0].path();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_dir(&ready).expect("ready").count() < tasks.len() {
        assert!(std::time::Instant::now() < deadline, "files are made ahead of time");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut head = base;
    for (n, task) in tasks.iter().enumerate() {
        let report = integrator
            .integrate(&MergeRequest {
                integration_branch: BRANCH.into(),
                expected_head: head.clone(),
                task_commit: task.clone(),
                strategy: MergeStrategy::Merge,
                attempt_label: format!("demo/t{n}#1"),
                title: format!("t{n}"),
                summary: "s".into(),
            })
            .expect("integrate");
        head = report.result;
        let object = repo.path().join(".git/objects").join(&head[..2]).join(&head[2..]);
        let mode = std::fs::metadata(&object).expect("a loose object").permissions().mode();
        assert_eq!(mode & 0o777, 0o444, "read-only, as git makes them");
        assert_eq!(repo.git(&["cat-file", "-t", &head]).trim(), "commit");
        assert!(!ready.join(n.to_string()).exists(), "merge {n} took ready file {n}");
    }
    let fsck = repo.git(&["fsck", "--strict", "--no-dangling"]);
    assert!(!fsck.contains("error") && !fsck.contains("garbage"), "{fsck}");
    let tree = repo.git(&["ls-tree", "--name-only", BRANCH]);
    assert_eq!(tree.lines().count(), 6, "{tree}");
    drop(integrator);
    let left = std::fs::read_dir(pool_root(&repo)).expect("root").count();
    assert_eq!(left, 0, "the integrator's files went with it");
}

#[test]
fn files_left_by_a_killed_process_are_removed_by_the_next_integrator_on_its_host() {
    let repo = TempRepo::new();
    let base = repo.commit(None, &[("a.txt", Some("a\n"))], "base");
    repo.set_branch(BRANCH, &base);
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead = child.id();
    child.wait().expect("wait");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let host = host.trim();
    let abandoned = pool_root(&repo).join(format!("{dead}-0@{host}"));
    std::fs::create_dir_all(&abandoned).expect("mkdir");
    std::fs::write(abandoned.join("7"), "").expect("file");
    let live = pool_root(&repo).join(format!("{}-999@{host}", std::process::id()));
    std::fs::create_dir_all(&live).expect("mkdir");
    // Another host's process: its pid means nothing here.
    let elsewhere = pool_root(&repo).join(format!("{dead}-0@another-host"));
    std::fs::create_dir_all(&elsewhere).expect("mkdir");

    let _integrator = Integrator::open(repo.path()).expect("open");
    assert!(!abandoned.exists(), "the dead process's files are gone");
    assert!(live.exists(), "a live process's files are left alone");
    assert!(elsewhere.exists(), "another host's files are left to it");
}
