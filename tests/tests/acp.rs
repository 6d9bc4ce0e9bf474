//! `agent = "acp"` with a real ACP server, offline: `claude-code-acp`
//! from PyPI (`swarm_tests::acp_agent`) drives the Claude Code CLI that the
//! Python Agent SDK bundles, which talks to the scripted Messages API on
//! 127.0.0.1 (`swarm_tests::messages_api`). The sidecar is the ACP client:
//! handshake, prompts, permission requests decided by the plan's policy or
//! asked of the operator, the merged results.
//!
//! Where claude-code-acp cannot be installed (no python3, pip or network)
//! the test prints why and returns; under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use serde_json::{Value, json};
use swarm_proto::v1::{self, TaskState};
use swarm_tests::acp_agent::claude_code_acp;
use swarm_tests::messages_api::{Request, Script, Step};
use swarm_tests::{
    RealClaude, TempRepo, WAIT, claude_task, create_swarm, operator, poll, skip, state_of, stderr, stdout,
    swarmctl, tasks, try_operator, wait_task_state,
};

/// `path` under the CLI's working directory, as a model writes file paths.
fn abs(r: &Request, path: &str) -> String {
    let cwd = r.working_directory().expect("the system prompt names the working directory");
    format!("{cwd}/{path}")
}

/// Waits until `task` is RUNNING with an open question.
async fn wait_question(url: &str, swarm: &str, id: &str) -> String {
    poll(&format!("{swarm}/{id} to ask a question"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let t = tasks(&mut op, swarm).await.remove(id)?;
        let s = state_of(&t);
        assert!(!matches!(s, TaskState::Failed | TaskState::Merged), "{id} ended {s:?} ({})", t.reason);
        (s == TaskState::Running && !t.pending_question.is_empty()).then_some(t.pending_question)
    })
    .await
}

/// Task a's write is asked of the operator (no rule allows it) and
/// allowed; task b, which depends on a, reads a's merged file and writes
/// under a rule that allows it; both merge and the integration tree holds
/// both files.
#[tokio::test(flavor = "multi_thread")]
async fn a_dag_through_claude_code_acp_asks_the_operator_and_merges_both_tasks() {
    const TEST: &str = "a_dag_through_claude_code_acp_asks_the_operator_and_merges_both_tasks";
    let started = std::time::Instant::now();
    let acp = match claude_code_acp() {
        Ok(exe) => exe,
        Err(why) => return skip(TEST, &format!("no claude-code-acp: {why}")),
    };
    let a = Script::new(
        "acp-a",
        vec![
            Step::dynamic(|r| {
                Step::tool("Write", json!({"file_path": abs(r, "a/hello.txt"), "content": "hello from a\n"}))
            }),
            Step::text("Wrote a/hello.txt."),
        ],
    );
    let b = Script::new(
        "acp-b",
        vec![
            Step::dynamic(|r| Step::tool("Read", json!({"file_path": abs(r, "a/hello.txt")}))),
            // Writes what the Read returned: the model saw a's merged file.
            Step::dynamic(|r| {
                let read = r.tool_results().last().map(|t| t.content.clone()).unwrap_or_default();
                let seen = if read.contains("hello from a") { "saw a\n" } else { "no a\n" };
                Step::tool("Write", json!({"file_path": abs(r, "b/seen.txt"), "content": seen}))
            }),
            Step::text("Built on a."),
        ],
    );
    let Some(claude) = RealClaude::start(TEST, vec![a, b]) else { return };
    // The sidecar makes an agent's state directory only for the agents it
    // knows; an ACP agent's is the plan's business.
    let home = claude.home().to_path_buf();
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let venv = acp.parent().and_then(|bin| bin.parent()).unwrap().to_path_buf();
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("acp")
        .remove_default("agent_path")
        .default("agent", r#""acp""#)
        .default("agent_command", &format!("[{:?}]", acp.display().to_string()))
        .default("permissions", r#"{ allow = ["Write(b/**)", "Read"], otherwise = "ask" }"#)
        .sandbox_with(&[&venv], &[&home.join(".claude"), &home.join(".claude.json")], &[claude.api.port()])
        .task(claude_task("a", &["a/**"], "acp-a", "Write a/hello.txt."))
        .task(claude_task("b", &["b/**"], "acp-b", "Build on a.").deps(&["a"]))
        .build();
    let cluster = claude.cluster(&repo, 2);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let question = wait_question(&url, "acp", "a").await;
    assert!(question.contains("Write wants to change") && question.contains("a/hello.txt"), "{question:?}");
    let out = swarmctl(&url, &["answer", "acp/a", "allow"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));

    let a = wait_task_state(&url, "acp", "a", TaskState::Merged).await;
    assert_eq!(a.attempts, 1, "answered in the running attempt");
    wait_task_state(&url, "acp", "b", TaskState::Merged).await;
    let tree = repo.tree("swarm/acp/integration");
    assert_eq!(tree.get("a/hello.txt").map(String::as_str), Some("hello from a\n"), "{tree:?}");
    assert_eq!(tree.get("b/seen.txt").map(String::as_str), Some("saw a\n"), "{tree:?}");

    // What swarm recorded: one permission question (b's write was the
    // rule's), the ACP session of each attempt.
    let mut op = operator(&url).await;
    let events = op
        .get_task(v1::GetTaskRequest { task_id: "acp/a".into() })
        .await
        .expect("GetTask")
        .into_inner()
        .events;
    let questions: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "task.question")
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(questions.len(), 1, "{events:?}");
    assert_eq!(questions[0]["category"], "permission");
    let b_results = claude.api.requests_of("acp-b").last().map(Request::tool_results).unwrap_or_default();
    assert!(b_results.iter().all(|t| !t.is_error), "b's write needed no question: {b_results:#?}");
    eprintln!("{TEST}: {:.1} s", started.elapsed().as_secs_f64());
}
