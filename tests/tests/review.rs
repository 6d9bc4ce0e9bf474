//! The review gate with real processes: a command reviewer attempt and the
//! operator (through swarmctl) each approve, request changes and reject;
//! a task in REVIEW survives a controller restart; a swarm waiting only on
//! the operator's reviews is STALLED.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_proto::v1::{self, TaskState};
use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, create_swarm, operator, stderr, stdout, swarmctl, task, wait_task_state,
    worker_script,
};

/// The reviewer: its decision by task, and for `fixme` by what the diff in
/// its task text shows (so the diff is there, and the second attempt's).
const REVIEWER: &str = r#"#!/bin/sh
set -eu
out="$(dirname "$SWARM_STATUS_FILE")/review.json"
case "$SWARM_TASK_ID" in
good) echo '{"decision": "approve", "message": "looks right"}' > "$out" ;;
bad) echo '{"decision": "reject", "message": "wrong approach"}' > "$out" ;;
fixme)
  if grep -q '^+fixed' "$SWARM_TASK_FILE"; then
    echo '{"decision": "approve", "message": "fixed now"}' > "$out"
  else
    echo '{"decision": "request_changes", "message": "please write fixed"}' > "$out"
  fi ;;
crash) exit 1 ;;
esac
exit 0
"#;

/// `fixme` writes what its task text asks for once a review asked for it.
const FIXME: &str = r#"if grep -q 'please write fixed' "$SWARM_TASK_FILE"; then echo fixed > fixme.txt; else echo first > fixme.txt; fi"#;

async fn swarm(url: &str, id: &str) -> v1::Swarm {
    let mut op = operator(url).await;
    op.get_swarm(v1::GetSwarmRequest { swarm_id: id.into() }).await.unwrap().into_inner()
}

/// The swarm's state once it is `state`, or its last state after a while.
async fn swarm_in_state(url: &str, id: &str, state: v1::SwarmState) -> v1::Swarm {
    let mut s = swarm(url, id).await;
    for _ in 0..200 {
        if s.state == state as i32 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        s = swarm(url, id).await;
    }
    s
}

async fn detail(url: &str, id: &str) -> v1::TaskDetail {
    let mut op = operator(url).await;
    op.get_task(v1::GetTaskRequest { task_id: id.into() }).await.unwrap().into_inner()
}

fn reviews(d: &v1::TaskDetail) -> Vec<(String, String)> {
    let r = d.branch_report.as_ref().expect("a branch report");
    r.reviews.iter().map(|x| (x.decision.clone(), x.by.clone())).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_reviewer_approves_requests_changes_and_rejects() {
    let repo =
        TempRepo::with_files(&[("worker.sh", &worker_script(&[("fixme", FIXME)])), ("review.sh", REVIEWER)]);
    let plan = PlanBuilder::new("rev")
        .default("review", r#"{ command = ["sh", "review.sh"] }"#)
        .task(task("good"))
        .task(task("fixme"))
        .task(task("bad"))
        .task(task("after_bad").deps(&["bad"]))
        .task(task("crash").set("retries", "1"))
        .task(task("plain").set("review", "\"none\""))
        .build();
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // Approved: merged, with the reviewer attempt and the commit it saw.
    let good = wait_task_state(&url, "rev", "good", TaskState::Merged).await;
    assert_eq!(good.recommendation, "ready");
    let d = detail(&url, "rev/good").await;
    assert_eq!(reviews(&d), vec![("approve".to_string(), "rev/good#2".to_string())]);
    let report = d.branch_report.unwrap();
    assert_eq!(report.reviews[0].commit, d.attempts[0].result_commit, "the reviewed commit is the result");
    assert_eq!(report.reviewer, "command");
    assert_eq!(d.attempts[1].state, v1::AttemptState::Succeeded as i32, "the reviewer attempt");

    // Changes requested: the next attempt sees the review in its task text,
    // and the second review sees the new diff.
    let fixme = wait_task_state(&url, "rev", "fixme", TaskState::Merged).await;
    let d = detail(&url, "rev/fixme").await;
    assert_eq!(
        reviews(&d),
        vec![
            ("request_changes".to_string(), "rev/fixme#2".to_string()),
            ("approve".to_string(), "rev/fixme#4".to_string())
        ]
    );
    assert_eq!(fixme.attempts, 4, "work, review, work, review");
    assert_eq!(repo.file("swarm/rev/integration", "fixme.txt").as_deref(), Some("fixed\n"));

    // Rejected: terminal, the branch kept, the dependent never runs.
    let bad = wait_task_state(&url, "rev", "bad", TaskState::Rejected).await;
    assert_eq!(bad.recommendation, "blocked");
    assert!(bad.reason.contains("wrong approach"), "{}", bad.reason);
    let d = detail(&url, "rev/bad").await;
    let kept = d.branch_report.as_ref().unwrap().commit.clone();
    assert_eq!(repo.head("swarm/rev/bad"), kept, "the rejected branch is kept at the reviewed commit");
    assert!(repo.file("swarm/rev/integration", "bad.txt").is_none(), "never merged");

    // A reviewer that crashes is retried like any attempt, then FAILED.
    let crash = wait_task_state(&url, "rev", "crash", TaskState::Failed).await;
    assert!(crash.reason.contains("reviewer"), "{}", crash.reason);
    assert_eq!(crash.attempts, 3, "the work, then two reviewer attempts");
    wait_task_state(&url, "rev", "plain", TaskState::Merged).await;
    let after = wait_task_state(&url, "rev", "after_bad", TaskState::Pending).await;
    assert_eq!(after.attempts, 0, "a rejected task's dependent does not run");

    // The branch report is an event too.
    let events = swarm_tests::events(&url, "rev", 0, 1).await;
    assert!(
        events.iter().any(|e| e.kind == "task.branch_report"
            && e.task_id.ends_with("bad")
            && e.message.contains("blocked")),
        "no branch report event for bad"
    );

    // `retry` takes a REJECTED task back.
    let out = swarmctl(&url, &["retry", "rev/bad", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "retry: {}", stderr(&out));
    let t: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(matches!(t["state"].as_str(), Some("READY" | "RUNNING")), "{t}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_approves_requests_changes_and_rejects_through_swarmctl() {
    let ask =
        r#"if grep -q 'use uppercase' "$SWARM_TASK_FILE"; then echo SAW > b.txt; else echo b > b.txt; fi"#;
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[("b", ask)]))]);
    let plan = PlanBuilder::new("op")
        .default("review", "\"operator\"")
        .task(task("a"))
        .task(task("b"))
        .task(task("c"))
        .build();
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    for t in ["a", "b", "c"] {
        let v = wait_task_state(&url, "op", t, TaskState::Review).await;
        assert_eq!(v.recommendation, "needs_review");
    }

    // Bad input changes nothing: a bad word, a task not in REVIEW.
    let out = swarmctl(&url, &["review", "op/a", "maybe"]);
    assert_eq!(out.status.code(), Some(3), "INVALID_ARGUMENT: {}", stderr(&out));
    assert!(stderr(&out).contains("decision"), "{}", stderr(&out));
    let mut op = operator(&url).await;
    let e = op
        .review_task(v1::ReviewTaskRequest {
            task_id: "op/a".into(),
            decision: "lgtm".into(),
            message: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(detail(&url, "op/a").await.task.unwrap().state, TaskState::Review as i32);

    // Nothing moves without the operator: the swarm is STALLED, and says why.
    let s = swarm_in_state(&url, "op", v1::SwarmState::Stalled).await;
    assert_eq!(s.state, v1::SwarmState::Stalled as i32, "{s:?}");
    assert!(s.stalled_reason.contains("3 REVIEW by the operator"), "{s:?}");
    assert_eq!(s.stalled_tasks, vec!["a", "b", "c"]);

    // REVIEW is stored: it survives a controller restart, and so does the stall.
    cluster.controller.restart_after_kill9();
    let url = cluster.url();
    wait_task_state(&url, "op", "a", TaskState::Review).await;
    let s = swarm(&url, "op").await;
    assert_eq!(s.state, v1::SwarmState::Stalled as i32, "{s:?}");
    assert_eq!(s.stalled_tasks, vec!["a", "b", "c"]);

    let out = swarmctl(&url, &["review", "op/a", "approve", "ship", "it"]);
    assert_eq!(out.status.code(), Some(0), "approve: {}", stderr(&out));
    wait_task_state(&url, "op", "a", TaskState::Merged).await;
    // b and c still wait on the operator once a has merged.
    let s = swarm_in_state(&url, "op", v1::SwarmState::Stalled).await;
    assert_eq!(s.stalled_tasks, vec!["b", "c"], "{s:?}");
    let out = swarmctl(&url, &["review", "op/a", "approve"]);
    assert_eq!(out.status.code(), Some(5), "FAILED_PRECONDITION: {}", stderr(&out));
    assert!(stderr(&out).contains("REVIEW"), "{}", stderr(&out));

    // Changes requested: the next attempt's task text holds the message.
    let out = swarmctl(&url, &["review", "op/b", "request-changes", "use uppercase"]);
    assert_eq!(out.status.code(), Some(0), "request-changes: {}", stderr(&out));
    let b = poll_state(&url, "op/b", TaskState::Review, 2).await;
    assert_eq!(b.attempts, 2);
    swarmctl(&url, &["review", "op/b", "approve"]);
    wait_task_state(&url, "op", "b", TaskState::Merged).await;
    assert_eq!(repo.file("swarm/op/integration", "b.txt").as_deref(), Some("SAW\n"));

    // Rejected, and describe shows the branch report with the history.
    let out = swarmctl(&url, &["review", "op/c", "reject", "not", "needed"]);
    assert_eq!(out.status.code(), Some(0), "reject: {}", stderr(&out));
    wait_task_state(&url, "op", "c", TaskState::Rejected).await;
    let out = swarmctl(&url, &["describe", "task", "op/c"]);
    let text = stdout(&out);
    assert!(text.contains("Recommendation: blocked"), "{text}");
    assert!(text.contains("reject by operator") && text.contains("not needed"), "{text}");
    let out = swarmctl(&url, &["describe", "task", "op/c", "-o", "json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["branch_report"]["recommendation"], "blocked", "{json}");
    assert_eq!(json["branch_report"]["reviews"][0]["decision"], "reject", "{json}");
    assert_eq!(json["task"]["state"], "REJECTED", "{json}");
    let out = swarmctl(&url, &["report", "op"]);
    let md = stdout(&out);
    assert!(md.contains("| c | REJECTED |") && md.contains("| blocked |"), "{md}");
    assert!(md.contains("| a | MERGED |") && md.contains("| ready |"), "{md}");
}

/// Waits until `id` is in `state` with at least `attempts` attempts.
async fn poll_state(url: &str, id: &str, state: TaskState, attempts: u32) -> v1::Task {
    swarm_tests::poll(
        &format!("{id} {state:?} after {attempts} attempts"),
        std::time::Duration::from_secs(60),
        || async {
            let t = detail(url, id).await.task.unwrap();
            (t.state == state as i32 && t.attempts >= attempts).then_some(t)
        },
    )
    .await
}

/// An agent reviewer (fake-claude speaking Claude Code's stream-json): its
/// instructions come first in its task text, and the decision file it
/// writes (the one file its permissions allow) decides.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_reviewer_decides_with_its_decision_file() {
    let fake = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-agents").join("fake-claude");
    let state = swarm_tests::TempDir::new().unwrap();
    let repo = TempRepo::with_files(&[("worker.sh", &worker_script(&[]))]);
    let review = format!(
        "{{ agent = \"claude\", agent_path = {:?}, prompt = '''FAKE: write .swarm/review.json '{{\"decision\":\"reject\",\"message\":\"rename it\"}}' ''' }}",
        fake.to_str().unwrap()
    );
    let plan = PlanBuilder::new("ag")
        .default("env", &format!("{{ FAKE_AGENT_STATE = {:?} }}", state.path().to_str().unwrap()))
        .sandbox(&[], &[state.path()])
        .task(task("x").set("review", &review))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let x = wait_task_state(&url, "ag", "x", TaskState::Rejected).await;
    assert!(x.reason.contains("rename it"), "{}", x.reason);
    let d = detail(&url, "ag/x").await;
    assert_eq!(reviews(&d), vec![("reject".to_string(), "ag/x#2".to_string())]);
    assert_eq!(d.branch_report.unwrap().reviewer, "claude");
    assert_eq!(d.attempts[1].agent, "claude", "the reviewer attempt ran the agent");
}
