//! Merge integration through the controller: conflicts returned to their
//! owner or held, file ownership enforced or warned, and a crash between
//! moving the integration ref and recording it.

mod support;

use support::*;
use swarm_proto::v1;

fn plan(defaults: &str, tasks: &str) -> String {
    format!(
        "name = \"s\"\n[defaults]\ncommand = \"true\"\nbackoff_initial_ms = 10\nbackoff_max_ms = 20\n{defaults}\n{tasks}"
    )
}

/// Two independent tasks that both own (and will both edit) shared.txt's
/// neighbour: the globs differ so both can run, but their results conflict.
const TWO: &str =
    "[[tasks]]\nid = \"a\"\nfiles = [\"a/**\", \"shared.txt\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b/**\"]\n";

fn trailers(repo: &TempRepo, label: &str) -> usize {
    repo.git(&["log", "--format=%B", "swarm/s/integration"])
        .matches(&format!("Swarm-Attempt: {label}"))
        .count()
}

/// Runs `a` to MERGED writing shared.txt, then gives `b` a result that also
/// writes shared.txt (outside its globs is fine under warn) from the old base.
async fn conflict_setup(h: &Harness, defaults: &str) -> (Sim, v1::Assign) {
    h.create(&plan(defaults, TWO)).await;
    let mut s1 = h.sidecar("w1").await;
    let mut s2 = h.sidecar("w2").await;
    let mut a = s1.assign().await;
    let mut b = s2.assign().await;
    // Both are READY at once: which sidecar's Hello the controller took
    // first decides who holds which; s1 is the one holding a.
    if attempt_ref(&a).task_id != "a" {
        std::mem::swap(&mut s1, &mut s2);
        std::mem::swap(&mut a, &mut b);
    }
    assert_eq!((attempt_ref(&a).task_id.as_str(), attempt_ref(&b).task_id.as_str()), ("a", "b"));
    let ca = h.repo().commit(Some(&a.base_commit), &[("shared.txt", "from a\n")], "a");
    s1.result(&a, v1::Outcome::Success, 0, &ca).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
    // Only b's sidecar may take b's next attempt: a's leaves, and b's
    // result is sent once the controller has seen it go.
    let gone = s1.worker.clone();
    drop(s1);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let workers =
            h.operator().list_workers(v1::ListWorkersRequest::default()).await.expect("workers").into_inner();
        if workers.workers.iter().any(|w| w.id == gone && !w.connected) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{gone} never disconnected");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let cb = h.repo().commit(Some(&b.base_commit), &[("shared.txt", "from b\n"), ("b/x", "x\n")], "b");
    s2.result(&b, v1::Outcome::Success, 0, &cb).await;
    (s2, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_returned_to_its_owner_and_resolved_by_the_next_attempt() {
    let h = Harness::start().await;
    let (mut s2, b) = conflict_setup(&h, "ownership = \"warn\"").await;
    let next = s2.assign().await;
    assert_eq!(attempt_ref(&next).task_id, "b");
    assert_eq!(attempt_ref(&next).attempt, 2);
    assert_ne!(next.base_commit, b.base_commit, "the new attempt starts from the integration head");
    assert!(next.task_text.contains("shared.txt"), "the conflict is described:\n{}", next.task_text);
    let events = h.events().await;
    let conflict = events.iter().find(|e| e.kind == "task.conflict").expect("conflict event");
    assert!(conflict.data.contains("shared.txt"), "paths recorded: {}", conflict.data);
    assert!(
        events.iter().any(|e| e.kind == "task.ownership_warning"),
        "shared.txt is outside b's globs: warned"
    );
    let resolved = h.repo().commit(Some(&next.base_commit), &[("b/x", "x\n")], "b again");
    s2.result(&next, v1::Outcome::Success, 0, &resolved).await;
    h.wait_state("s/b", v1::TaskState::Merged).await;
    let head = h.repo().git(&["rev-parse", "swarm/s/integration"]);
    assert_eq!(h.repo().file(&head, "shared.txt").as_deref(), Some("from a\n"));
    assert_eq!(h.repo().file(&head, "b/x").as_deref(), Some("x\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_under_hold_waits_for_the_operator() {
    let h = Harness::start().await;
    let _held = conflict_setup(&h, "ownership = \"warn\"\non_conflict = \"hold\"").await;
    let d = h.wait_state("s/b", v1::TaskState::Conflict).await;
    assert!(d.task.expect("task").reason.contains("shared.txt"));
    h.operator().retry_task(v1::RetryTaskRequest { task_id: "s/b".into() }).await.expect("retry");
    assert_eq!(h.state("s/b").await, v1::TaskState::Running, "retried: assigned again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_outside_the_owned_globs_is_refused_or_warned() {
    let h = Harness::start().await;
    h.create(&plan("retries = 0", "[[tasks]]\nid = \"a\"\nfiles = [\"a/**\"]\n[[tasks]]\nid = \"w\"\nfiles = [\"w/**\"]\nownership = \"warn\"\n")).await;
    let mut s1 = h.sidecar("w1").await;
    let mut s2 = h.sidecar("w2").await;
    // Both tasks are handed out before either result: a sidecar that
    // finished first could otherwise take the other task too.
    let (t1, t2) = (s1.assign().await, s2.assign().await);
    for (sc, t) in [(&mut s1, t1), (&mut s2, t2)] {
        let id = attempt_ref(&t).task_id.clone();
        let c = h.repo().commit(
            Some(&t.base_commit),
            &[(&format!("{id}/ok"), "ok\n"), (&format!("outside-{id}.txt"), "no\n")],
            "x",
        );
        sc.result(&t, v1::Outcome::Success, 0, &c).await;
    }
    let refused = h.wait_state("s/a", v1::TaskState::Failed).await;
    assert!(refused.task.expect("task").reason.contains("outside-a.txt"), "the reason lists the paths");
    h.wait_state("s/w", v1::TaskState::Merged).await;
    let events = h.events().await;
    let warning = events.iter().find(|e| e.kind == "task.ownership_warning").expect("warning event");
    assert!(warning.message.contains("outside-w.txt"));
    let head = h.repo().git(&["rev-parse", "swarm/s/integration"]);
    assert!(h.repo().file(&head, "outside-a.txt").is_none(), "the refused result was not merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_ref_move_and_the_store_commit_leaves_exactly_one_merge() {
    let mut h = Harness::start().await;
    h.create(&plan("", "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n")).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let base = a.base_commit.clone();
    let c = h.repo().commit(Some(&base), &[("a.txt", "A\n")], "a");
    sc.result(&a, v1::Outcome::Success, 0, &c).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
    drop(sc);
    let merged_head = h.repo().git(&["rev-parse", "swarm/s/integration"]);
    assert_eq!(trailers(h.repo(), "s/a#1"), 1);
    if let Some(c) = h.controller.take() {
        c.shutdown().await.expect("stop");
    }
    // Rewind the store to the moment after the ref moved and before the
    // MERGED transition was committed: the task is MERGING and the swarm's
    // recorded head is the old one.
    let db = h.repo().path().join(".git/swarm/swarm.db");
    let conn = rusqlite::Connection::open(&db).expect("db");
    conn.execute("UPDATE tasks SET state = 'MERGING', merge_commit = '' WHERE id = 'a'", [])
        .expect("rewind task");
    conn.execute("UPDATE swarm_progress SET integration_head = ?1, state = 'ACTIVE'", [&base])
        .expect("rewind swarm");
    drop(conn);

    h.restart().await;
    let d = h.wait_state("s/a", v1::TaskState::Merged).await;
    assert_eq!(d.task.expect("task").merge_commit, merged_head, "the landed merge is recognized");
    assert_eq!(h.repo().git(&["rev-parse", "swarm/s/integration"]), merged_head, "no second merge commit");
    assert_eq!(trailers(h.repo(), "s/a#1"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_attempt_that_adds_nothing_still_merges_its_checkpoint() {
    let h = Harness::start().await;
    h.create(&plan("", "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n")).await;
    let mut sc = h.sidecar("w1").await;
    let a1 = sc.assign().await;
    let wip = h.repo().commit(Some(&a1.base_commit), &[("a.txt", "half\n")], "WIP");
    sc.result(&a1, v1::Outcome::Checkpoint, 2, &wip).await;
    let a2 = sc.assign().await;
    assert_eq!(a2.base_commit, wip);
    // The second attempt finds the work done and commits nothing new: its
    // result is its base, the WIP commit, which the integration branch
    // does not hold yet.
    sc.result(&a2, v1::Outcome::Success, 0, &wip).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
    let head = h.repo().git(&["rev-parse", "swarm/s/integration"]);
    assert_eq!(h.repo().file(&head, "a.txt").as_deref(), Some("half\n"));
}
