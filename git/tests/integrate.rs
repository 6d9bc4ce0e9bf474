//! Integration engine behaviour on real repositories.

use swarm_git::{GitError, Integrator, MergeError, MergeRequest, MergeStrategy, SideChange};
use swarm_tests::TempRepo;

const BRANCH: &str = "swarm/demo/integration";

fn request(expected_head: &str, task_commit: &str, strategy: MergeStrategy, label: &str) -> MergeRequest {
    MergeRequest {
        integration_branch: BRANCH.into(),
        expected_head: expected_head.into(),
        task_commit: task_commit.into(),
        strategy,
        attempt_label: label.into(),
        title: "Add the thing".into(),
        summary: "Adds the thing to b.txt.".into(),
    }
}

/// base: a.txt, b.txt; integration: edits a.txt; task: edits b.txt (two commits).
struct Fixture {
    repo: TempRepo,
    base: String,
    head: String,
    task1: String,
    task2: String,
}

fn fixture() -> Fixture {
    let repo = TempRepo::new();
    let base = repo.commit(None, &[("a.txt", Some("a1\na2\na3\n")), ("b.txt", Some("b1\nb2\nb3\n"))], "base");
    let head = repo.commit(Some(&base), &[("a.txt", Some("a1\nA2\na3\n"))], "integration edit");
    let task1 = repo.commit(Some(&base), &[("b.txt", Some("b1\nB2\nb3\n"))], "task: edit b");
    let task2 = repo.commit(Some(&task1), &[("c.txt", Some("c\n"))], "task: add c");
    repo.set_branch(BRANCH, &head);
    Fixture { repo, base, head, task1, task2 }
}

#[test]
fn merge_strategy_makes_a_two_parent_commit_with_the_trailer() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let report = integrator
        .integrate(&request(&f.head, &f.task2, MergeStrategy::Merge, "demo/t#1"))
        .expect("integrate");
    assert_eq!(report.base, f.head);
    assert_eq!(report.cas_retries, 0);
    assert_eq!(f.repo.head(BRANCH), report.result);
    assert_eq!(f.repo.parents(&report.result), vec![f.head.clone(), f.task2.clone()]);
    let message = f.repo.message(&report.result);
    assert!(message.contains("Add the thing") && message.contains("demo/t#1"), "{message}");
    assert!(message.ends_with("\n\nSwarm-Attempt: demo/t#1\n"), "{message}");
    assert_eq!(f.repo.file(&report.result, "a.txt").as_deref(), Some("a1\nA2\na3\n"));
    assert_eq!(f.repo.file(&report.result, "b.txt").as_deref(), Some("b1\nB2\nb3\n"));
    assert_eq!(report.files_changed, vec!["b.txt".to_string(), "c.txt".to_string()]);
}

#[test]
fn squash_strategy_makes_one_single_parent_commit_with_the_summary() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let report = integrator
        .integrate(&request(&f.head, &f.task2, MergeStrategy::Squash, "demo/t#2"))
        .expect("integrate");
    assert_eq!(f.repo.parents(&report.result), vec![f.head.clone()]);
    assert_eq!(f.repo.message(&report.result), "Adds the thing to b.txt.\n\nSwarm-Attempt: demo/t#2\n");
    assert_eq!(f.repo.file(&report.result, "c.txt").as_deref(), Some("c\n"));
    assert_eq!(f.repo.file(&report.result, "a.txt").as_deref(), Some("a1\nA2\na3\n"));
}

#[test]
fn rebase_strategy_replays_each_task_commit() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let report = integrator
        .integrate(&request(&f.head, &f.task2, MergeStrategy::Rebase, "demo/t#3"))
        .expect("integrate");
    let second = report.result.clone();
    let parents = f.repo.parents(&second);
    assert_eq!(parents.len(), 1);
    let first = parents[0].clone();
    assert_eq!(f.repo.parents(&first), vec![f.head.clone()]);
    assert_eq!(f.repo.message(&first), "task: edit b\n\nSwarm-Attempt: demo/t#3\n");
    assert_eq!(f.repo.message(&second), "task: add c\n\nSwarm-Attempt: demo/t#3\n");
    assert_eq!(f.repo.file(&first, "c.txt"), None);
    assert_eq!(f.repo.file(&first, "b.txt").as_deref(), Some("b1\nB2\nb3\n"));
    assert_eq!(f.repo.file(&second, "c.txt").as_deref(), Some("c\n"));
    assert_eq!(f.repo.file(&second, "a.txt").as_deref(), Some("a1\nA2\na3\n"));
    // Original authorship is kept.
    let git = f.repo.git2();
    let commit = git.find_commit(git2::Oid::from_str(&first).expect("oid")).expect("commit");
    assert_eq!(commit.author().name(), Some("Test"));
    assert_eq!(commit.committer().name(), Some("swarm"));
}

#[test]
fn conflicts_name_each_path_and_what_the_integration_branch_did() {
    let repo = TempRepo::new();
    let base = repo.commit(
        None,
        &[("same.txt", Some("1\n2\n3\n")), ("gone.txt", Some("g\n")), ("calm.txt", Some("c\n"))],
        "base",
    );
    let head = repo.commit(Some(&base), &[("same.txt", Some("1\nours\n3\n")), ("gone.txt", None)], "ours");
    let task = repo.commit(
        Some(&base),
        &[("same.txt", Some("1\ntheirs\n3\n")), ("gone.txt", Some("g changed\n")), ("calm.txt", Some("d\n"))],
        "theirs",
    );
    repo.set_branch(BRANCH, &head);
    let integrator = Integrator::open(repo.path()).expect("open");
    for strategy in [MergeStrategy::Merge, MergeStrategy::Squash, MergeStrategy::Rebase] {
        let err =
            integrator.integrate(&request(&head, &task, strategy, "demo/c#1")).expect_err("must conflict");
        let MergeError::Conflict { paths, head: at, .. } = &err else { panic!("not a conflict: {err}") };
        assert_eq!(at, &head);
        let got: Vec<(&str, SideChange)> = paths.iter().map(|p| (p.path.as_str(), p.ours)).collect();
        assert_eq!(got, vec![("gone.txt", SideChange::Deleted), ("same.txt", SideChange::Modified)]);
        assert_eq!(repo.head(BRANCH), head, "a conflict never moves the ref");
    }
}

#[test]
fn a_moved_ref_is_rebuilt_on_the_fresh_head_and_keeps_both_changes() {
    let f = fixture();
    // Someone else lands a commit after the controller read the head.
    let other = f.repo.commit(Some(&f.head), &[("other.txt", Some("o\n"))], "someone else");
    f.repo.set_branch(BRANCH, &other);
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let report = integrator
        .integrate(&request(&f.head, &f.task2, MergeStrategy::Merge, "demo/t#4"))
        .expect("integrate");
    assert_eq!(report.cas_retries, 1);
    assert_eq!(report.base, other);
    assert_eq!(f.repo.parents(&report.result), vec![other.clone(), f.task2.clone()]);
    assert_eq!(f.repo.file(&report.result, "other.txt").as_deref(), Some("o\n"));
    assert_eq!(f.repo.file(&report.result, "c.txt").as_deref(), Some("c\n"));
}

#[test]
fn a_rewound_ref_is_refused() {
    let f = fixture();
    f.repo.set_branch(BRANCH, &f.base);
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let err = integrator
        .integrate(&request(&f.head, &f.task2, MergeStrategy::Merge, "demo/t#5"))
        .expect_err("rewound");
    assert!(matches!(err, MergeError::HeadRewound { .. }), "{err}");
    assert_eq!(f.repo.head(BRANCH), f.base);
}

#[test]
fn cas_gives_up_after_the_retry_budget() {
    let f = fixture();
    let other = f.repo.commit(Some(&f.head), &[("other.txt", Some("o\n"))], "someone else");
    f.repo.set_branch(BRANCH, &other);
    let integrator = Integrator::open(f.repo.path()).expect("open").with_max_cas_retries(0);
    let err = integrator
        .integrate(&request(&f.head, &f.task2, MergeStrategy::Merge, "demo/t#6"))
        .expect_err("no retries allowed");
    assert!(matches!(err, MergeError::CasFailed { retries: 0, .. }), "{err}");
    assert_eq!(f.repo.head(BRANCH), other);
}

#[test]
fn find_landed_finds_the_attempt_trailer_on_the_first_parent_chain() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let landed = integrator
        .integrate(&request(&f.head, &f.task1, MergeStrategy::Squash, "demo/a#1"))
        .expect("integrate");
    let later = f.repo.commit(Some(&landed.result), &[("z.txt", Some("z\n"))], "later");
    f.repo.set_branch(BRANCH, &later);
    assert_eq!(integrator.find_landed(BRANCH, "demo/a#1").expect("find"), Some(landed.result));
    assert_eq!(integrator.find_landed(BRANCH, "demo/a#2").expect("find"), None);
    assert_eq!(integrator.find_landed(BRANCH, "demo/a#").expect("find"), None, "labels match exactly");
    assert!(matches!(integrator.find_landed("nope", "demo/a#1"), Err(GitError::MissingBranch { .. })));
}

#[test]
fn fast_forward_moves_only_forward_and_never_forces() {
    let f = fixture();
    f.repo.set_branch("main", &f.base);
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let ff = integrator.fast_forward("main", &f.head).expect("fast-forward");
    assert_eq!((ff.old.as_str(), ff.new.as_str()), (f.base.as_str(), f.head.as_str()));
    assert_eq!(f.repo.head("main"), f.head);
    // Equal is a no-op.
    integrator.fast_forward("main", &f.head).expect("no-op");
    // A diverged commit is refused and the branch stays.
    let err = integrator.fast_forward("main", &f.task1).expect_err("not a fast-forward");
    match err {
        MergeError::NotFastForward { target, current, new } => {
            assert_eq!(
                (target.as_str(), current.as_str(), new.as_str()),
                ("main", f.head.as_str(), f.task1.as_str())
            );
        }
        other => panic!("unexpected {other}"),
    }
    // Backwards is refused too.
    assert!(matches!(integrator.fast_forward("main", &f.base), Err(MergeError::NotFastForward { .. })));
    assert_eq!(f.repo.head("main"), f.head);
}

#[test]
fn swarm_directory_changes_are_forbidden() {
    let f = fixture();
    let task = f.repo.commit(Some(&f.task1), &[(".swarm/status.json", Some("{}"))], "oops");
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let err = integrator
        .integrate(&request(&f.head, &task, MergeStrategy::Merge, "demo/s#1"))
        .expect_err("forbidden");
    match err {
        MergeError::ForbiddenPath { paths, task_commit } => {
            assert_eq!(paths, vec![".swarm/status.json".to_string()]);
            assert_eq!(task_commit, task);
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(f.repo.head(BRANCH), f.head);
}

#[test]
fn already_contained_task_commits_are_reported() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let err = integrator
        .integrate(&request(&f.head, &f.base, MergeStrategy::Merge, "demo/e#1"))
        .expect_err("contained");
    assert!(matches!(err, MergeError::AlreadyContained { .. }), "{err}");
}

#[test]
fn commits_once_verified_keep_their_answers_and_others_are_still_checked() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    // The same base again and again, as a swarm of no-op results sends it: each call answers the same.
    for _ in 0..3 {
        let err = integrator
            .integrate(&request(&f.head, &f.base, MergeStrategy::Merge, "demo/e#1"))
            .expect_err("contained");
        assert!(matches!(err, MergeError::AlreadyContained { .. }), "{err}");
        assert_eq!(integrator.changed_paths(&f.base, &f.base).expect("same commit"), Vec::<String>::new());
    }
    // Remembering commits found present must not let anything else pass as one.
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err = integrator.changed_paths(&f.base, missing).expect_err("missing");
    assert!(matches!(err, GitError::MissingCommit { .. }), "{err}");
    let tree = f.repo.tree_id(&f.base);
    assert!(matches!(integrator.is_ancestor(&f.base, &tree), Err(GitError::NotACommit { .. })));
}

#[test]
fn bad_input_is_an_error_naming_it() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let err =
        integrator.integrate(&request("zz", &f.task1, MergeStrategy::Merge, "x#1")).expect_err("bad id");
    assert!(err.to_string().contains("\"zz\""), "{err}");
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let err =
        integrator.integrate(&request(&f.head, missing, MergeStrategy::Merge, "x#1")).expect_err("missing");
    assert!(err.to_string().contains(missing), "{err}");
    let mut req = request(&f.head, &f.task1, MergeStrategy::Merge, "x#1");
    req.integration_branch = "bad..name".into();
    assert!(matches!(integrator.integrate(&req), Err(MergeError::Git(GitError::InvalidBranch { .. }))));
    assert!(matches!(integrator.branch_head("-x"), Err(GitError::InvalidBranch { .. })));
    assert!(matches!(integrator.commit_exists("abc"), Err(GitError::InvalidCommitId { .. })));
    let tree = f.repo.tree_id(&f.head);
    assert!(!integrator.commit_exists(&tree).expect("tree id is valid hex"));
    assert!(matches!(integrator.is_ancestor(&tree, &f.head), Err(GitError::NotACommit { .. })));
}

#[test]
fn branch_helpers() {
    let f = fixture();
    let integrator = Integrator::open(f.repo.path()).expect("open");
    assert_eq!(integrator.branch_head("missing").expect("ok"), None);
    assert_eq!(integrator.branch_head(BRANCH).expect("ok"), Some(f.head.clone()));
    assert_eq!(integrator.ensure_branch("new/branch", &f.base).expect("create"), f.base);
    assert_eq!(integrator.ensure_branch("new/branch", &f.head).expect("exists"), f.base, "never moves");
    assert!(integrator.is_ancestor(&f.base, &f.head).expect("ok"));
    assert!(integrator.is_ancestor(&f.head, &f.head).expect("ok"));
    assert!(!integrator.is_ancestor(&f.head, &f.task1).expect("ok"));
    assert!(integrator.commit_exists(&f.task2).expect("ok"));
}

#[test]
fn changed_paths_lists_renames_as_both_paths() {
    let repo = TempRepo::new();
    let base =
        repo.commit(None, &[("dir/old.txt", Some("same\ncontent\n")), ("keep.txt", Some("k\n"))], "base");
    let next = repo.commit(
        Some(&base),
        &[("dir/old.txt", None), ("new/place.txt", Some("same\ncontent\n"))],
        "rename",
    );
    let integrator = Integrator::open(repo.path()).expect("open");
    assert_eq!(
        integrator.changed_paths(&base, &next).expect("diff"),
        vec!["dir/old.txt".to_string(), "new/place.txt".to_string()]
    );
    assert!(integrator.changed_paths(&base, &base).expect("diff").is_empty());
}

/// Found by the differential test: both sides append the same line to `x`; ours also renames `x` to
/// `r`, theirs renames `y` to `r`. gix-merge 0.23 hits an internal `debug_assert!` here in debug
/// builds; the integrator must answer with an error (or a result), never a panic.
#[test]
fn a_gix_internal_assertion_is_not_a_panic() {
    let repo = TempRepo::new();
    let base = repo.commit(
        None,
        &[("x.txt", Some("x1\nx2\nx3\nx4\n")), ("y.txt", Some("y1\ny2\ny3\ny4\n")), ("z.txt", Some("z\n"))],
        "base",
    );
    let ours1 = repo.commit(Some(&base), &[("x.txt", Some("x1\nx2\nx3\nx4\nappended\n"))], "ours 1");
    let head = repo.commit(
        Some(&ours1),
        &[("x.txt", None), ("r.txt", Some("x1\nx2\nx3\nx4\nappended\n"))],
        "ours 2",
    );
    let theirs1 =
        repo.commit(Some(&base), &[("y.txt", None), ("r.txt", Some("y1\ny2\ny3\ny4\n"))], "theirs 1");
    let task = repo.commit(Some(&theirs1), &[("x.txt", Some("x1\nx2\nx3\nx4\nappended\n"))], "theirs 2");
    repo.set_branch(BRANCH, &head);
    let integrator = Integrator::open(repo.path()).expect("open");
    let outcome = integrator.integrate(&request(&head, &task, MergeStrategy::Merge, "demo/g#1"));
    if let Err(MergeError::Git(GitError::Gix { message, .. })) = &outcome {
        assert!(message.contains("panicked"), "{message}");
    }
    // Whatever the outcome, the integrator stays usable.
    assert!(integrator.branch_head(BRANCH).expect("usable").is_some());
}

/// Criss-cross history (two merge bases): the integrator defers to gix's virtual merge base and
/// must agree with `git merge-tree`.
#[test]
fn criss_cross_merges_agree_with_git() {
    let repo = TempRepo::new();
    let base = repo.commit(None, &[("a.txt", Some("1\n2\n3\n4\n5\n6\n")), ("b.txt", Some("b\n"))], "base");
    let x = repo.commit(Some(&base), &[("a.txt", Some("1\nX\n3\n4\n5\n6\n"))], "x");
    let y = repo.commit(Some(&base), &[("b.txt", Some("b\ny\n"))], "y");
    // Each side merges the other's first commit: two merge bases (x and y).
    let ours = repo.commit_with_parents(&[&x, &y], &[("b.txt", Some("b\ny\n"))], "ours merges y");
    let theirs =
        repo.commit_with_parents(&[&y, &x], &[("a.txt", Some("1\nX\n3\n4\n5\n6\n"))], "theirs merges x");
    let head = repo.commit(Some(&ours), &[("c.txt", Some("c\n"))], "ours more");
    let task = repo.commit(Some(&theirs), &[("a.txt", Some("1\nX\n3\n4\n5\nT\n"))], "theirs more");
    repo.set_branch(BRANCH, &head);
    repo.set_branch("task", &task);
    let (code, out) = repo.try_git(&["merge-tree", "--write-tree", BRANCH, "task"]);
    assert_eq!(code, 0, "{out}");
    let integrator = Integrator::open(repo.path()).expect("open");
    let report =
        integrator.integrate(&request(&head, &task, MergeStrategy::Merge, "demo/x#1")).expect("integrate");
    assert_eq!(repo.tree_id(&report.result), out.lines().next().expect("tree line"));
    assert_eq!(repo.file(&report.result, "a.txt").as_deref(), Some("1\nX\n3\n4\n5\nT\n"));
}

/// The sparse fast path must step aside when ours renamed a file the task modifies.
#[test]
fn a_task_edit_follows_a_rename_on_the_integration_branch() {
    let repo = TempRepo::new();
    let content = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\n";
    let base = repo.commit(None, &[("old/name.txt", Some(content)), ("keep.txt", Some("k\n"))], "base");
    let head = repo.commit(Some(&base), &[("old/name.txt", None), ("new/name.txt", Some(content))], "rename");
    let task =
        repo.commit(Some(&base), &[("old/name.txt", Some("l1\nl2\nl3\nl4\nl5\nl6\nl7\nEDIT\n"))], "edit");
    repo.set_branch(BRANCH, &head);
    repo.set_branch("task", &task);
    let (code, out) = repo.try_git(&["merge-tree", "--write-tree", BRANCH, "task"]);
    assert_eq!(code, 0, "{out}");
    let integrator = Integrator::open(repo.path()).expect("open");
    let report =
        integrator.integrate(&request(&head, &task, MergeStrategy::Merge, "demo/r#1")).expect("integrate");
    assert_eq!(repo.tree_id(&report.result), out.lines().next().expect("tree line"));
    assert_eq!(
        repo.file(&report.result, "new/name.txt").as_deref(),
        Some("l1\nl2\nl3\nl4\nl5\nl6\nl7\nEDIT\n")
    );
    assert_eq!(repo.file(&report.result, "old/name.txt"), None);
}

/// A batch lands what the same `integrate` calls one after another would: the same trees, the
/// trailers, one ref update; a conflicting request is reported and skipped; every object is on disk
/// (a fresh `git` process reads them) and `find_landed` finds each attempt.
#[test]
fn a_batch_lands_like_sequential_merges_and_skips_a_conflict() {
    let f = fixture();
    // Thirty tasks each adding their own file (enough objects to be written as one pack), and one
    // that conflicts with the integration branch's edit of a.txt.
    let mut tasks: Vec<String> = (0..30)
        .map(|i| {
            let path = format!("d{i}/f.txt");
            f.repo.commit(Some(&f.base), &[(path.as_str(), Some("x\n"))], &format!("task {i}"))
        })
        .collect();
    let conflicting = f.repo.commit(Some(&f.base), &[("a.txt", Some("a1\nX2\na3\n"))], "conflict");
    tasks.insert(7, conflicting.clone());
    let reqs: Vec<MergeRequest> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| request(&f.head, t, MergeStrategy::Merge, &format!("demo/t{i}#1")))
        .collect();

    let integrator = Integrator::open(f.repo.path()).expect("open");
    let batch = integrator.integrate_batch(&reqs).expect("batch");
    assert_eq!(batch.base, f.head);
    assert_eq!(f.repo.head(BRANCH), batch.head);
    assert_eq!(batch.results.len(), reqs.len());
    for (i, r) in batch.results.iter().enumerate() {
        match r {
            Err(MergeError::Conflict { paths, .. }) if i == 7 => assert_eq!(paths[0].path, "a.txt"),
            Ok(report) if i != 7 => assert_eq!(report.files_changed.len(), 1, "{report:?}"),
            other => panic!("request {i}: {other:?}"),
        }
    }

    // The same requests one at a time, on a second branch at the same head: the same final tree.
    let other = "swarm/demo/sequential";
    f.repo.set_branch(other, &f.head);
    let mut head = f.head.clone();
    for req in &reqs {
        let mut req = req.clone();
        req.integration_branch = other.into();
        req.expected_head = head.clone();
        if let Ok(report) = integrator.integrate(&req) {
            head = report.result;
        }
    }
    let tree = |commit: &str| {
        f.repo.git2().find_commit(git2::Oid::from_str(commit).expect("oid")).expect("commit").tree_id()
    };
    assert_eq!(tree(&batch.head), tree(&head));

    // Everything is on disk for another process, and each landed attempt is found.
    let out = std::process::Command::new("git")
        .args(["fsck", "--connectivity-only", "--no-dangling"])
        .current_dir(f.repo.path())
        .output()
        .expect("git fsck");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fresh = Integrator::open(f.repo.path()).expect("reopen");
    for i in [0usize, 6, 8, 30] {
        let found = fresh.find_landed(BRANCH, &format!("demo/t{i}#1")).expect("find");
        assert_eq!(found.as_deref(), batch.results[i].as_ref().ok().map(|r| r.result.as_str()));
    }
    assert_eq!(fresh.find_landed(BRANCH, "demo/t7#1").expect("find"), None);
}

/// A request whose expected head the batch's head does not contain is refused, not landed.
#[test]
fn a_batch_refuses_a_request_for_another_history() {
    let f = fixture();
    let stray = f.repo.commit(Some(&f.base), &[("z.txt", Some("z\n"))], "not on the branch");
    let t = f.repo.commit(Some(&f.base), &[("y.txt", Some("y\n"))], "task");
    let integrator = Integrator::open(f.repo.path()).expect("open");
    let batch =
        integrator.integrate_batch(&[request(&stray, &t, MergeStrategy::Merge, "demo/y#1")]).expect("batch");
    assert!(matches!(batch.results[0], Err(MergeError::HeadRewound { .. })), "{:?}", batch.results[0]);
    assert_eq!(f.repo.head(BRANCH), f.head);
}

/// A deposed leader's merger can land an attempt after the new leader
/// formed its own request for it (from the head it saw then): the new
/// leader's merge must find that landing, not land the attempt again.
#[test]
fn an_attempt_another_merger_landed_since_the_request_is_not_landed_twice() {
    for strategy in [MergeStrategy::Merge, MergeStrategy::Squash, MergeStrategy::Rebase] {
        let f = fixture();
        let deposed = Integrator::open(f.repo.path()).expect("open");
        let leader = Integrator::open(f.repo.path()).expect("open");
        let label = "demo/t#1";
        // The new leader read the head; the deposed one lands the attempt.
        let seen = f.head.clone();
        let landed =
            deposed.integrate(&request(&seen, &f.task2, strategy, label)).expect("the deposed lands");
        // Then the new leader's request for the same attempt.
        let err = leader.integrate(&request(&seen, &f.task2, strategy, label)).expect_err("already landed");
        match &err {
            MergeError::AlreadyLanded { merge_commit, .. } => {
                assert_eq!(merge_commit, &landed.result, "{strategy:?}")
            }
            other => panic!("{strategy:?}: {other}"),
        }
        assert_eq!(f.repo.head(BRANCH), landed.result, "{strategy:?}: the ref did not move again");
        // A batch formed on the old head finds it too.
        let batch = leader.integrate_batch(&[request(&seen, &f.task2, strategy, label)]).expect("batch");
        assert!(
            matches!(&batch.results[0], Err(MergeError::AlreadyLanded { merge_commit, .. }) if *merge_commit == landed.result),
            "{strategy:?}: {:?}",
            batch.results[0]
        );
        assert_eq!(f.repo.head(BRANCH), landed.result, "{strategy:?}: the batch moved nothing");
    }
}
