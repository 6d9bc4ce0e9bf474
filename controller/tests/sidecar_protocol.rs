//! The Sidecar API through a real tonic client playing a sidecar, against a
//! real controller on 127.0.0.1 over a real git repository.

mod support;

use std::time::Duration;

use support::*;
use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;

fn plan(extra_defaults: &str, tasks: &str) -> String {
    format!(
        "name = \"s\"\n[defaults]\ncommand = \"true\"\nbackoff_initial_ms = 10\nbackoff_max_ms = 20\n{extra_defaults}\n{tasks}"
    )
}

const CHAIN: &str = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n[[tasks]]\nid = \"b\"\ndeps = [\"a\"]\nfiles = [\"b.txt\"]\n";
const ONE: &str = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_merges_and_dependents_start_from_the_new_head() {
    let h = Harness::start().await;
    h.create(&plan("", CHAIN)).await;
    let mut sc = h.sidecar("w1").await;
    assert_eq!(sc.welcome.lease_ttl_ms, 2_000);
    assert_eq!(sc.welcome.heartbeat_interval_ms, 200);
    let a = sc.assign().await;
    assert_eq!(a.branch, "swarm/s/a");
    assert_eq!(attempt_ref(&a).attempt, 1);
    assert!(a.task_text.contains("a.txt"), "task text names owned files");
    sc.started(&a).await;
    assert_eq!(h.task("s/a").await.attempts[0].state, v1::AttemptState::Running as i32);
    let commit = h.repo().commit(Some(&a.base_commit), &[("a.txt", "A\n")], "a");
    sc.result(&a, v1::Outcome::Success, 0, &commit).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;

    let b = sc.assign().await;
    assert_eq!(
        h.repo().file(&b.base_commit, "a.txt").as_deref(),
        Some("A\n"),
        "b starts from a head holding a"
    );
    sc.started(&b).await;
    let commit = h.repo().commit(Some(&b.base_commit), &[("b.txt", "B\n")], "b");
    sc.result(&b, v1::Outcome::Success, 0, &commit).await;
    h.wait_state("s/b", v1::TaskState::Merged).await;
    let head = h.repo().git(&["rev-parse", "swarm/s/integration"]);
    assert_eq!(h.repo().file(&head, "a.txt").as_deref(), Some("A\n"));
    assert_eq!(h.repo().file(&head, "b.txt").as_deref(), Some("B\n"));
    let swarm = h
        .operator()
        .get_swarm(v1::GetSwarmRequest { swarm_id: "s".into() })
        .await
        .expect("swarm")
        .into_inner();
    assert_eq!(swarm.state, v1::SwarmState::Completed as i32);
    assert_eq!(swarm.integration_head, head);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_1_retries_with_backoff_then_fails() {
    let h = Harness::start().await;
    h.create(&plan("retries = 1", ONE)).await;
    let mut sc = h.sidecar("w1").await;
    let a1 = sc.assign().await;
    sc.result(&a1, v1::Outcome::Error, 1, "").await;
    let a2 = sc.assign().await;
    assert_eq!(attempt_ref(&a2).attempt, 2);
    assert!(attempt_ref(&a2).fencing_token > attempt_ref(&a1).fencing_token, "each assign has a fresh token");
    assert!(
        a2.task_text.contains("attempt 1: exit 1"),
        "the next attempt hears of the failure:\n{}",
        a2.task_text
    );
    sc.result(&a2, v1::Outcome::Error, 1, "").await;
    let d = h.wait_state("s/a", v1::TaskState::Failed).await;
    assert!(d.task.expect("task").reason.contains("retries exhausted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_2_checkpoint_resumes_from_the_wip_commit_without_using_a_retry() {
    let h = Harness::start().await;
    h.create(&plan("retries = 0", ONE)).await;
    let mut sc = h.sidecar("w1").await;
    let a1 = sc.assign().await;
    let wip = h.repo().commit(Some(&a1.base_commit), &[("a.txt", "half\n")], "WIP");
    sc.result(&a1, v1::Outcome::Checkpoint, 2, &wip).await;
    let a2 = sc.assign().await;
    assert_eq!(a2.base_commit, wip, "resumes from the WIP commit");
    let t = h.task("s/a").await.task.expect("task");
    assert_eq!(t.retries_used, 0);
    assert_eq!(h.task("s/a").await.attempts[0].state, v1::AttemptState::Checkpointed as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_3_blocks_and_exit_4_escalates_until_answered() {
    let h = Harness::start().await;
    h.create(&plan(
        "",
        "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b.txt\"]\n",
    ))
    .await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    assert_eq!(attempt_ref(&a).task_id, "a", "plan order");
    sc.send(Body::Status(v1::Status {
        attempt: Some(attempt_ref(&a)),
        status: v1::WorkerStatus::Blocked as i32,
        message: "need creds".into(),
    }))
    .await;
    sc.result(&a, v1::Outcome::Blocked, 3, "").await;
    h.wait_state("s/a", v1::TaskState::Blocked).await;

    let b = sc.assign().await;
    let q = sc
        .send(Body::Question(v1::Question {
            attempt: Some(attempt_ref(&b)),
            question_id: "q1".into(),
            text: "which db?".into(),
            category: "ambiguous_spec".into(),
            options: vec!["sqlite".into(), "postgres".into()],
        }))
        .await;
    sc.acked(q).await;
    let asked = h.task("s/b").await.task.expect("task");
    assert_eq!(
        asked.pending_options,
        ["sqlite", "postgres"],
        "the options reach the operator with the question"
    );
    let seq = sc
        .send(Body::Result(v1::AttemptResult {
            attempt: Some(attempt_ref(&b)),
            outcome: v1::Outcome::Escalation as i32,
            exit_code: 4,
            category: "ambiguous_spec".into(),
            ..Default::default()
        }))
        .await;
    sc.acked(seq).await;
    let d = h.wait_state("s/b", v1::TaskState::Escalated).await;
    assert_eq!(d.task.expect("task").pending_question, "which db?");

    let mut op = h.operator();
    let wrong = op
        .answer(v1::AnswerRequest { task_id: "s/b".into(), question_id: "q9".into(), text: "x".into() })
        .await
        .expect_err("wrong question id");
    assert_eq!(wrong.code(), tonic::Code::FailedPrecondition);
    op.answer(v1::AnswerRequest { task_id: "s/b".into(), question_id: "q1".into(), text: "postgres".into() })
        .await
        .expect("answer");
    let b2 = sc.assign().await;
    assert_eq!(attempt_ref(&b2).task_id, "b");
    assert!(b2.task_text.contains("postgres"), "the answer is in the next attempt's task text");
    let commit = h.repo().commit(Some(&b2.base_commit), &[("b.txt", "B\n")], "b");
    sc.result(&b2, v1::Outcome::Success, 0, &commit).await;

    assert_eq!(h.state("s/a").await, v1::TaskState::Blocked, "blocked waits for the operator");
    op.retry_task(v1::RetryTaskRequest { task_id: "s/a".into() }).await.expect("retry blocked");
    let again = sc.assign().await;
    assert_eq!(attempt_ref(&again).task_id, "a");
    assert_eq!(attempt_ref(&again).attempt, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_130_is_ready_again_or_cancelled_when_asked() {
    let h = Harness::start().await;
    h.create(&plan("", ONE)).await;
    let mut sc = h.sidecar("w1").await;
    let a1 = sc.assign().await;
    sc.result(&a1, v1::Outcome::Interrupted, 130, "").await;
    let a2 = sc.assign().await;
    assert_eq!(attempt_ref(&a2).attempt, 2);
    h.operator()
        .cancel_task(v1::CancelTaskRequest { task_id: "s/a".into(), reason: "stop".into() })
        .await
        .expect("cancel");
    match sc.next_non_ack().await {
        v1::controller_message::Body::Cancel(c) => assert_eq!(c.attempt.expect("ref").attempt, 2),
        other => panic!("expected cancel, got {other:?}"),
    }
    assert_eq!(h.state("s/a").await, v1::TaskState::Running, "running until the worker stops");
    sc.result(&a2, v1::Outcome::Interrupted, 130, "").await;
    h.wait_state("s/a", v1::TaskState::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_reassigns_and_the_stale_report_is_fenced() {
    let h = Harness::start().await;
    h.create(&plan("", ONE)).await;
    let mut old = h.sidecar("w1").await;
    let a1 = old.assign().await;
    old.started(&a1).await;
    old.silence();
    // w1 goes silent; w2 is idle and takes the task once the lease expires.
    let mut new = h.sidecar("w2").await;
    let a2 = new.assign().await;
    assert_eq!(attempt_ref(&a2).attempt, 2);
    let d = h.task("s/a").await;
    assert_eq!(d.attempts[0].state, v1::AttemptState::Lost as i32);
    // The old sidecar wakes up: its stream was dropped when its lease
    // expired, so it reconnects holding the stale attempt and reports
    // success. The report is fenced and changes nothing.
    let secret = old.secret();
    drop(old);
    let mut old = Sim::connect(h.channel.clone(), "w1", Some(attempt_ref(&a1)), 1, &secret).await;
    assert!(!old.welcome.attempt_resumed, "the stale attempt is not resumed");
    let commit = h.repo().commit(Some(&a1.base_commit), &[("a.txt", "stale\n")], "stale");
    old.result(&a1, v1::Outcome::Success, 0, &commit).await;
    assert_eq!(h.state("s/a").await, v1::TaskState::Running);
    let events = h.events().await;
    assert!(events.iter().any(|e| e.kind == "report.fenced" && e.attempt == 1), "fenced report recorded");
    assert_eq!(
        h.repo().git(&["rev-parse", "swarm/s/integration"]),
        h.repo().git(&["rev-parse", "main"]),
        "nothing merged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_reconnects_before_its_lease_expires_resumes_its_attempt() {
    let h = Harness::start().await;
    h.create(&plan("", ONE)).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    sc.started(&a).await;
    let (last, secret) = (sc.seq, sc.secret());
    drop(sc);
    let mut back = Sim::connect(h.channel.clone(), "w1", Some(attempt_ref(&a)), last, &secret).await;
    assert!(back.welcome.attempt_resumed);
    assert_eq!(back.secret(), secret, "a proven secret stays valid");
    assert_eq!(back.welcome.last_applied_seq, last);
    let commit = h.repo().commit(Some(&a.base_commit), &[("a.txt", "A\n")], "a");
    back.result(&a, v1::Outcome::Success, 0, &commit).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
    assert_eq!(h.task("s/a").await.attempts.len(), 1, "no second attempt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_back_without_its_attempt_gets_the_same_assign_again() {
    let h = Harness::start().await;
    h.create(&plan("", ONE)).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let secret = sc.secret();
    drop(sc);
    let mut back = Sim::connect(h.channel.clone(), "w1", None, 0, &secret).await;
    assert!(!back.welcome.attempt_resumed);
    let again = back.assign().await;
    assert_eq!(attempt_ref(&again), attempt_ref(&a), "same attempt, same fencing token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_sequence_number_is_applied_once() {
    let h = Harness::start().await;
    h.create(&plan("retries = 5", ONE)).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    let result = Body::Result(v1::AttemptResult {
        attempt: Some(attempt_ref(&a)),
        outcome: v1::Outcome::Error as i32,
        exit_code: 1,
        ..Default::default()
    });
    let seq = sc.seq + 1;
    sc.send_raw(seq, result.clone()).await;
    sc.acked(seq).await;
    sc.send_raw(seq, result).await;
    sc.acked(seq).await;
    let t = h.task("s/a").await.task.expect("task");
    assert_eq!(t.retries_used, 1, "the replayed result was not applied twice");
    let events = h.events().await;
    assert_eq!(
        events.iter().filter(|e| e.kind == "attempt.state" && e.message.contains("FAILED")).count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_a_controller_restart() {
    let mut h = Harness::start_with(|c| c.lease_ttl = Duration::from_secs(30)).await;
    h.create(&plan("", CHAIN)).await;
    let mut sc = h.sidecar("w1").await;
    let a = sc.assign().await;
    sc.started(&a).await;
    let (last, secret) = (sc.seq, sc.secret());
    drop(sc);
    h.restart().await;
    assert_eq!(h.state("s/a").await, v1::TaskState::Running);
    let mut back = Sim::connect(h.channel.clone(), "w1", Some(attempt_ref(&a)), last, &secret).await;
    assert!(back.welcome.attempt_resumed, "the attempt survives the restart");
    let commit = h.repo().commit(Some(&a.base_commit), &[("a.txt", "A\n")], "a");
    back.result(&a, v1::Outcome::Success, 0, &commit).await;
    h.wait_state("s/a", v1::TaskState::Merged).await;
    let b = back.assign().await;
    assert_eq!(attempt_ref(&b).task_id, "b");
}
