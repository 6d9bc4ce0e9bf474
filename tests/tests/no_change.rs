//! An attempt that succeeds without changing a file, with the real
//! controller, sidecar and `tests/fake-agents/fake-claude`: an agent whose
//! only command is denied (so it never runs) and which then says it did the
//! work fails with "no change" after its retries, unless its task sets
//! `on_empty = "merge"`; a command that changes nothing merges, and both
//! merges say "no change".
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::Path;

use swarm_proto::v1::{AttemptState, TaskState};
use swarm_tests::{
    Cluster, PlanBuilder, TaskBuilder, TempDir, TempRepo, attempts, create_swarm, operator, stderr, stdout,
    swarmctl, task, wait_task_state,
};

const NO_CHANGE: &str = "no change: the agent changed no file";

fn claude_plan(name: &str, state: &TempDir) -> PlanBuilder {
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-agents").join("fake-claude");
    PlanBuilder::new(name)
        .remove_default("command")
        .default("agent", r#""claude""#)
        .default("agent_path", &format!("{:?}", fake.to_str().unwrap()))
        .default("env", &format!("{{ FAKE_AGENT_STATE = {:?} }}", state.path().to_str().unwrap()))
        // Its Bash is denied, as Codex's own failed sandbox did to its command.
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .sandbox(&[], &[state.path()])
}

/// An agent task whose command is denied and which claims success anyway.
fn idle_agent(id: &str) -> TaskBuilder {
    let prompt =
        "'''\nThe fake agent acts this out.\n\nFAKE: bash touch src/out.txt\nFAKE: text Wrote out.txt.\n'''";
    task(id).files(&[&format!("src/{id}/")]).set("prompt", prompt)
}

async fn event_messages(url: &str, task_id: &str, kind: &str) -> Vec<String> {
    let mut op = operator(url).await;
    let req = swarm_proto::v1::GetTaskRequest { task_id: task_id.into() };
    let events = op.get_task(req).await.unwrap().into_inner().events;
    events.into_iter().filter(|e| e.kind == kind).map(|e| e.message).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_changed_nothing_fails_unless_on_empty_merges_and_a_command_merges() {
    let state = tempfile::Builder::new().prefix("fake-agent-state-").tempdir().unwrap();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("nc", &state)
        .task(idle_agent("strict").set("retries", "1"))
        .task(idle_agent("lenient").set("on_empty", r#""merge""#))
        .task(task("cmd").files(&["src/cmd/"]).set("command", r#""true""#))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let strict = wait_task_state(&url, "nc", "strict", TaskState::Failed).await;
    assert!(strict.reason.starts_with(NO_CHANGE), "{}", strict.reason);
    let tries = attempts(&url, "nc/strict").await;
    assert_eq!(tries.len(), 2, "the first attempt and its one retry: {tries:?}");
    for a in &tries {
        assert_eq!(a.state, AttemptState::Failed as i32, "{a:?}");
        assert_eq!(a.error, NO_CHANGE, "{a:?}");
    }
    let out = swarmctl(&url, &["report", "nc"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(NO_CHANGE), "the report names why strict failed:\n{}", stdout(&out));
    let said = event_messages(&url, "nc/strict", "task.no_change").await;
    assert_eq!(said.len(), 2, "one task.no_change per attempt: {said:?}");
    assert!(said.iter().all(|m| m.ends_with(NO_CHANGE)), "{said:?}");

    let lenient = wait_task_state(&url, "nc", "lenient", TaskState::Merged).await;
    assert!(lenient.reason.ends_with("with no change"), "{}", lenient.reason);
    assert_eq!(lenient.attempts, 1);
    let merged = event_messages(&url, "nc/lenient", "task.merged").await;
    assert!(merged.iter().all(|m| m.ends_with("with no change")), "{merged:?}");
    let out = swarmctl(&url, &["describe", "task", "nc/lenient"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let describe = stdout(&out);
    assert!(describe.contains("with no change"), "{describe}");
    assert!(describe.contains("task.no_change"), "{describe}");
    assert!(describe.contains("no change: its result changes no file"), "the branch report: {describe}");

    // A command may rightly have nothing to change: it merges by default.
    let cmd = wait_task_state(&url, "nc", "cmd", TaskState::Merged).await;
    assert_eq!(cmd.attempts, 1, "{}", cmd.reason);
    assert!(cmd.reason.ends_with("with no change"), "{}", cmd.reason);
}
