//! Every worker exit code's path through real worker scripts, with the
//! operator's retry and answer given through the `swarmctl` binary.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use swarm_proto::v1::{Outcome, TaskState};
use swarm_tests::{
    Cluster, PlanBuilder, TempRepo, attempts, create_swarm, merges_of, outcome_of, stderr, swarmctl, task,
    wait_task_state, worker_script,
};

const SWARM: &str = "codes";
const BRANCH: &str = "swarm/codes/integration";

fn script() -> String {
    worker_script(&[
        ("retry", r#"if [ "$SWARM_ATTEMPT" = 1 ]; then echo "flaky" >&2; exit 1; fi; echo ok > retry.txt"#),
        ("fail", r#"echo "always broken" >&2; exit 1"#),
        (
            "ckpt",
            r#"if [ "$SWARM_ATTEMPT" = 1 ]; then echo part1 > ckpt.txt; exit 2; fi
grep -q part1 ckpt.txt || exit 1
echo part2 >> ckpt.txt"#,
        ),
        (
            "blocked",
            r#"if [ "$SWARM_ATTEMPT" = 1 ]; then echo "need a key" >&2; exit 3; fi; echo ok > blocked.txt"#,
        ),
        (
            "ask",
            r#"if [ "$SWARM_ATTEMPT" = 1 ]; then
  printf '{"status":"question","message":"which?","question":{"id":"q1","text":"Which answer?","category":"design"}}' > "$SWARM_STATUS_FILE"
  exit 4
fi
grep -o forty-two "$SWARM_TASK_FILE" | head -n 1 > ask.txt
test -s ask.txt"#,
        ),
        ("intr", r#"if [ "$SWARM_ATTEMPT" = 1 ]; then exit 130; fi; echo ok > intr.txt"#),
        (
            "verify",
            r#"if [ "$SWARM_ATTEMPT" = 1 ]; then echo bad > verify.txt; else echo good > verify.txt; fi"#,
        ),
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn each_worker_exit_code_takes_its_path() {
    let repo = TempRepo::with_files(&[("worker.sh", &script())]);
    let plan = PlanBuilder::new(SWARM)
        .task(task("ok"))
        .task(task("retry"))
        .task(task("fail").set("retries", "1"))
        .task(task("ckpt"))
        .task(task("blocked"))
        .task(task("ask"))
        .task(task("intr"))
        .task(task("verify").set("verify", r#"[{ name = "good", command = "grep -q good verify.txt" }]"#))
        .build();
    let cluster = Cluster::start(&repo, 3, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // exit 3: BLOCKED until the operator retries.
    wait_task_state(&url, SWARM, "blocked", TaskState::Blocked).await;
    let out = swarmctl(&url, &["retry", "codes/blocked", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "retry: {}", stderr(&out));

    // exit 4 with a question: ESCALATED until answered.
    let t = wait_task_state(&url, SWARM, "ask", TaskState::Escalated).await;
    assert!(!t.pending_question.is_empty(), "the question is shown");
    let out = swarmctl(&url, &["answer", "codes/ask", "forty-two", "--question", "q1"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}", stderr(&out));

    for id in ["ok", "retry", "ckpt", "blocked", "ask", "intr", "verify"] {
        wait_task_state(&url, SWARM, id, TaskState::Merged).await;
        assert_eq!(merges_of(&repo, BRANCH, SWARM, id), 1, "{id} merged once");
    }
    let failed = wait_task_state(&url, SWARM, "fail", TaskState::Failed).await;
    assert_eq!(failed.attempts, 2, "one try plus one retry");
    assert_eq!(merges_of(&repo, BRANCH, SWARM, "fail"), 0);

    let first_outcome = |id: &'static str| {
        let url = url.clone();
        async move {
            let a = attempts(&url, &format!("{SWARM}/{id}")).await;
            (a.len(), a.first().map(outcome_of))
        }
    };
    assert_eq!(first_outcome("ok").await, (1, Some(Outcome::Success)));
    assert_eq!(first_outcome("retry").await, (2, Some(Outcome::Error)));
    assert_eq!(first_outcome("ckpt").await, (2, Some(Outcome::Checkpoint)));
    assert_eq!(first_outcome("blocked").await, (2, Some(Outcome::Blocked)));
    assert_eq!(first_outcome("ask").await, (2, Some(Outcome::Escalation)));
    assert_eq!(first_outcome("intr").await, (2, Some(Outcome::Interrupted)));
    assert_eq!(first_outcome("verify").await, (2, Some(Outcome::VerifyFailed)));

    let tree = repo.tree(BRANCH);
    assert_eq!(tree["ckpt.txt"], "part1\npart2\n", "attempt 2 resumed from the WIP commit");
    assert_eq!(tree["ask.txt"], "forty-two\n", "attempt 2 saw the answer in its task file");
    assert_eq!(tree["verify.txt"], "good\n");
    assert!(!tree.contains_key("fail.txt"));
    assert!(!tree.keys().any(|k| k.starts_with(".swarm/")), ".swarm/ is never committed");
}
