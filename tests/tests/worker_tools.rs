//! swarm's MCP tools for workers, called by the real Claude Code CLI
//! running a task in its sandbox: the sidecar gives the CLI the `swarm`
//! server through `--mcp-config` (its own binary as a bridge to the
//! attempt's socket), and the scripted model calls `mcp__swarm__<tool>`.
//! What is asserted is what swarm recorded (events, outcomes, sessions,
//! the merged tree) and what the model was told (the tool results).
//!
//! Where the CLI cannot be installed each test says why and returns;
//! under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::time::Duration;

use serde_json::{Value, json};
use swarm_proto::v1::{self, Outcome, TaskState};
use swarm_tests::messages_api::{Request, Script, Step, ToolResult};
use swarm_tests::{
    RealClaude, TempRepo, WAIT, attempts, claude_task, create_swarm, operator, outcome_of, poll, state_of,
    stderr, stdout, swarmctl, tasks, try_operator, wait_task_state,
};

/// Shorter than the operator takes to answer below: a pending `ask` must
/// count as waiting on the operator, not as an idle agent.
const IDLE_SECS: u64 = 4;

fn results_seen(claude: &RealClaude, script: &str) -> Vec<ToolResult> {
    claude.api.requests_of(script).last().map(Request::tool_results).unwrap_or_default()
}

async fn task_events(url: &str, task_id: &str) -> Vec<v1::Event> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().events
}

/// Waits until `swarm/id` is in `state` with a pending question, and returns it.
async fn wait_question_in(url: &str, swarm: &str, id: &str, state: TaskState) -> String {
    poll(&format!("{swarm}/{id} to wait on a question in {state:?}"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let t = tasks(&mut op, swarm).await.remove(id)?;
        let s = state_of(&t);
        assert!(!matches!(s, TaskState::Failed | TaskState::Merged), "{id} ended {s:?} ({})", t.reason);
        (s == state && !t.pending_question.is_empty()).then_some(t.pending_question)
    })
    .await
}

fn answer(url: &str, task: &str, text: &str) {
    let out = swarmctl(url, &["answer", task, text]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_reports_asks_and_checkpoints_through_its_tools_and_resumes_its_session() {
    let script = Script::new(
        "tools",
        vec![
            Step::tool("mcp__swarm__progress", json!({"step": "reading", "percent": 10, "note": "starting"})),
            Step::tool("mcp__swarm__context", json!({})),
            Step::tool("mcp__swarm__ask", json!({"question": "Which colour?", "choices": ["green", "blue"]})),
            Step::file("Write", "src/colour.txt", json!({"content": "green\n"})),
            Step::tool(
                "mcp__swarm__checkpoint",
                json!({"summary": "colour written", "next_action": "shade"}),
            ),
            Step::text("Checkpointed; ending my turn."),
            // The resumed session goes on from here.
            Step::file("Write", "src/shade.txt", json!({"content": "dark\n"})),
            Step::text("Done."),
        ],
    );
    let test = "a_worker_reports_asks_and_checkpoints_through_its_tools_and_resumes_its_session";
    let later = Script::new("later", vec![Step::text("Nothing to do.")]);
    let Some(claude) = RealClaude::start(test, vec![script, later]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan_env("wt", &[("ENABLE_TOOL_SEARCH", "false")])
        .default("retries", "0")
        .default("idle_timeout_secs", &IDLE_SECS.to_string())
        .default("permissions", r#"{ allow = ["Edit(src/**)", "Edit(docs/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "tools", "Write the colour files."))
        .task(claude_task("later", &["docs/**"], "later", "Document the colours.").deps(&["t"]))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let question = wait_question_in(&url, "wt", "t", TaskState::Running).await;
    assert!(question.contains("Which colour?"), "{question:?}");
    tokio::time::sleep(Duration::from_secs(IDLE_SECS + 2)).await;
    answer(&url, "wt/t", "green");

    let t = wait_task_state(&url, "wt", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0);
    let all = attempts(&url, "wt/t").await;
    assert_eq!(all.len(), 2, "{all:?}");
    // An idle agent would have ended STALLED (and the task FAILED, with no
    // retries) while the operator took longer than the idle timeout.
    assert_eq!(outcome_of(&all[0]), Outcome::Checkpoint, "{}", all[0].error);
    assert!(all[0].summary.contains("colour written") && all[0].summary.contains("shade"), "{all:?}");
    assert_eq!(outcome_of(&all[1]), Outcome::Success, "{}", all[1].error);
    assert_eq!(all[1].session_id, all[0].session_id, "the checkpointed session resumed");
    let tree = repo.tree("swarm/wt/integration");
    assert_eq!(tree.get("src/colour.txt").map(String::as_str), Some("green\n"), "{tree:?}");
    assert_eq!(tree.get("src/shade.txt").map(String::as_str), Some("dark\n"), "{tree:?}");

    let seen = results_seen(&claude, "tools");
    let by_tool =
        |name: &str| seen.iter().find(|r| r.tool == name).unwrap_or_else(|| panic!("{name}: {seen:#?}"));
    for r in &seen {
        assert!(!r.is_error, "{} failed: {}", r.tool, r.content);
    }
    assert!(by_tool("mcp__swarm__progress").content.contains("\"recorded\":true"), "{seen:#?}");
    let context = &by_tool("mcp__swarm__context").content;
    assert!(
        context.contains("SCRIPT: tools") && context.contains("src/**"),
        "the task and its files: {context}"
    );
    assert!(context.contains("wt/t#1"), "{context}");
    let context: Value = serde_json::from_str(context).unwrap();
    assert_eq!(
        context["siblings"][0]["id"], "later",
        "the swarm around the task, from the controller: {context}"
    );
    assert_eq!(context["siblings"][0]["state"], "PENDING", "{context}");
    assert_eq!(context["siblings"][0]["owned_files"], json!(["docs/**"]), "{context}");
    assert_eq!(context["dependencies"], json!([]), "{context}");
    assert!(by_tool("mcp__swarm__ask").content.contains("\"answer\":\"green\""), "{seen:#?}");
    assert!(by_tool("mcp__swarm__checkpoint").content.contains("\"checkpointed\":true"), "{seen:#?}");

    let events = task_events(&url, "wt/t").await;
    let said = |kind: &str, text: &str| events.iter().any(|e| e.kind == kind && e.message.contains(text));
    assert!(
        said("task.status", "10% reading: starting"),
        "the progress call is in the event log: {events:#?}"
    );
    let asked: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "task.question")
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(asked.len(), 1, "{events:#?}");
    assert_eq!(asked[0]["category"], "question");
    assert_eq!(asked[0]["options"], json!(["green", "blue"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_through_the_tool_waits_for_the_operator_and_the_session_resumes_with_the_answer() {
    let script = Script::new(
        "esc",
        vec![
            Step::file("Write", "src/draft.txt", json!({"content": "draft\n"})),
            Step::tool(
                "mcp__swarm__escalate",
                json!({"category": "ambiguous_spec", "detail": "Two specs disagree on the port."}),
            ),
            Step::text("Escalated."),
            Step::file("Write", "src/port.txt", json!({"content": "8080\n"})),
            Step::text("Done."),
        ],
    );
    let test =
        "an_escalation_through_the_tool_waits_for_the_operator_and_the_session_resumes_with_the_answer";
    let Some(claude) = RealClaude::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan_env("esc", &[("ENABLE_TOOL_SEARCH", "false")])
        .default("retries", "0")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "esc", "Write the port file."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let question = wait_question_in(&url, "esc", "t", TaskState::Escalated).await;
    assert!(question.contains("disagree on the port"), "{question:?}");
    let mut op = operator(&url).await;
    let t = tasks(&mut op, "esc").await.remove("t").unwrap();
    assert!(t.reason.starts_with("ambiguous_spec:"), "{}", t.reason);
    answer(&url, "esc/t", "use 8080");

    wait_task_state(&url, "esc", "t", TaskState::Merged).await;
    let all = attempts(&url, "esc/t").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(outcome_of(&all[0]), Outcome::Escalation);
    assert!(!all[0].result_commit.is_empty(), "the escalated work was kept: {all:?}");
    assert_eq!(all[1].session_id, all[0].session_id, "the escalated session resumed");
    let tree = repo.tree("swarm/esc/integration");
    assert_eq!(tree.get("src/draft.txt").map(String::as_str), Some("draft\n"), "kept work: {tree:?}");
    assert_eq!(tree.get("src/port.txt").map(String::as_str), Some("8080\n"), "{tree:?}");
    let resumed = claude.api.requests_of("esc").into_iter().find(|r| r.step == Some(3)).expect("step 3");
    assert!(resumed.user_text().contains("use 8080"), "the answer reached the resumed session");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_splits_its_task_and_takes_its_childrens_work_through_a_controller_kill9() {
    let child_prompt =
        |text: &str, script: &str| format!("{text}\n\n{}", swarm_tests::messages_api::marker(script));
    let children = json!([
        {"id": "a", "files": ["src/a/**"], "prompt": child_prompt("Write a.", "child-a")},
        {"id": "b", "files": ["src/b/**"], "deps": ["a"], "prompt": child_prompt("Write b.", "child-b")},
    ]);
    let parent = Script::new(
        "split",
        vec![
            Step::file("Write", "src/main.txt", json!({"content": "main\n"})),
            Step::tool("mcp__swarm__spawn", json!({ "tasks": children })),
            Step::tool("mcp__swarm__wait_children", json!({"timeout_secs": 300})),
            Step::file("Write", "src/after.txt", json!({"content": "after\n"})),
            Step::text("Done, with my children's work."),
        ],
    );
    let child = |name: &str, path: &'static str, content: &str| {
        Script::new(name, vec![Step::file("Write", path, json!({ "content": content })), Step::text("Done.")])
    };
    let scripts =
        vec![parent, child("child-a", "src/a/x.txt", "a\n"), child("child-b", "src/b/y.txt", "b\n")];
    let test = "an_agent_splits_its_task_and_takes_its_childrens_work_through_a_controller_kill9";
    let Some(claude) = RealClaude::start(test, scripts) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan_env("sp", &[("ENABLE_TOOL_SEARCH", "false")])
        .default("retries", "0")
        .default("idle_timeout_secs", &IDLE_SECS.to_string())
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "split", "Write the files, with helpers."))
        .build();
    // The parent holds one sidecar while its children run on the other.
    let mut cluster = claude.cluster(&repo, 2);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // Once the child exists (the parent is in wait_children), the controller dies.
    poll("the spawned child swarm sp/t", WAIT, || async {
        let mut op = try_operator(&url).await?;
        let t = tasks(&mut op, "sp").await.remove("t")?;
        assert!(!matches!(state_of(&t), TaskState::Failed), "t failed: {}", t.reason);
        let children = tasks(&mut op, "sp/t").await;
        (children.len() == 2).then_some(())
    })
    .await;
    cluster.controller.restart_after_kill9();

    let t = wait_task_state(&url, "sp", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0, "{}", t.reason);
    let all = attempts(&url, "sp/t").await;
    assert_eq!(all.len(), 1, "one attempt took its children's work: {all:?}");
    let mut op = operator(&url).await;
    let kids = tasks(&mut op, "sp/t").await;
    for id in ["a", "b"] {
        assert_eq!(state_of(&kids[id]), TaskState::Merged, "{id}: {}", kids[id].reason);
    }
    let tree = repo.tree("swarm/sp/integration");
    for (path, content) in [
        ("src/main.txt", "main\n"),
        ("src/a/x.txt", "a\n"),
        ("src/b/y.txt", "b\n"),
        ("src/after.txt", "after\n"),
    ] {
        assert_eq!(tree.get(path).map(String::as_str), Some(content), "{path}: {tree:?}");
    }

    let seen = results_seen(&claude, "split");
    let by_tool =
        |name: &str| seen.iter().find(|r| r.tool == name).unwrap_or_else(|| panic!("{name}: {seen:#?}"));
    for r in &seen {
        assert!(!r.is_error, "{} failed: {}", r.tool, r.content);
    }
    let spawned: Value = serde_json::from_str(&by_tool("mcp__swarm__spawn").content).unwrap();
    assert_eq!(spawned["child"], "sp/t", "{spawned}");
    let waited: Value = serde_json::from_str(&by_tool("mcp__swarm__wait_children").content).unwrap();
    assert_eq!(waited["state"], "COMPLETED", "{waited}");
    assert!(waited["merge_commit"].as_str().is_some_and(|c| c.len() == 40), "{waited}");
    let states: Vec<&str> =
        waited["tasks"].as_array().unwrap().iter().filter_map(|t| t["state"].as_str()).collect();
    assert_eq!(states, ["MERGED", "MERGED"], "{waited}");
    let events = task_events(&url, "sp/t").await;
    assert!(events.iter().any(|e| e.kind == "task.spawned"), "{events:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_task_that_spawned_cancels_its_running_children() {
    let child_prompt = format!("Write c.\n\n{}", swarm_tests::messages_api::marker("slow-child"));
    let parent = Script::new(
        "spawner",
        vec![
            Step::tool(
                "mcp__swarm__spawn",
                json!({"tasks": [{"id": "c", "files": ["src/c/**"], "prompt": child_prompt}]}),
            ),
            Step::tool("mcp__swarm__wait_children", json!({"timeout_secs": 300})),
            Step::text("Done."),
        ],
    );
    // The child waits on the operator, so it is RUNNING when the cancel comes.
    let child = Script::new(
        "slow-child",
        vec![Step::tool("mcp__swarm__ask", json!({"question": "Which c?"})), Step::text("Done.")],
    );
    let test = "cancelling_a_task_that_spawned_cancels_its_running_children";
    let Some(claude) = RealClaude::start(test, vec![parent, child]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan_env("cx", &[("ENABLE_TOOL_SEARCH", "false")])
        .default("retries", "0")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "spawner", "Split the work."))
        .build();
    let cluster = claude.cluster(&repo, 2);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_question_in(&url, "cx/t", "c", TaskState::Running).await;

    let out = swarmctl(&url, &["cancel", "cx/t", "--reason", "not needed"]);
    assert_eq!(out.status.code(), Some(0), "cancel: {}{}", stdout(&out), stderr(&out));
    wait_task_state(&url, "cx", "t", TaskState::Cancelled).await;
    wait_task_state(&url, "cx/t", "c", TaskState::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_children_of_an_agent_whose_sidecar_was_killed_reach_the_tasks_next_attempt() {
    let child_prompt = format!("Write k.\n\n{}", swarm_tests::messages_api::marker("kid"));
    let parent = Script::new(
        "lost-parent",
        vec![
            Step::tool(
                "mcp__swarm__spawn",
                json!({"tasks": [{"id": "k", "files": ["src/k/**"], "prompt": child_prompt}]}),
            ),
            Step::tool("mcp__swarm__wait_children", json!({"timeout_secs": 300})),
            Step::file("Write", "src/after.txt", json!({"content": "after\n"})),
            Step::text("Done."),
        ],
    );
    // The child waits on the operator until the parent's sidecar is gone.
    let kid = Script::new(
        "kid",
        vec![
            Step::tool("mcp__swarm__ask", json!({"question": "Go on?"})),
            Step::file("Write", "src/k/k.txt", json!({"content": "k\n"})),
            Step::text("Done."),
        ],
    );
    let test = "the_children_of_an_agent_whose_sidecar_was_killed_reach_the_tasks_next_attempt";
    let Some(claude) = RealClaude::start(test, vec![parent, kid]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan_env("lp", &[("ENABLE_TOOL_SEARCH", "false")])
        .default("retries", "0")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "lost-parent", "Split the work."))
        .build();
    let home = claude.home().to_str().unwrap().to_string();
    let mut cluster = swarm_tests::Cluster::start_env(&repo, 2, swarm_tests::FAST_LEASES, &[("HOME", &home)]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_question_in(&url, "lp/t", "k", TaskState::Running).await;

    // The parent's sidecar dies while its agent waits on the child.
    let holder = attempts(&url, "lp/t").await[0].worker_id.clone();
    let n: usize = holder.trim_start_matches('w').parse().unwrap();
    cluster.sidecars[n - 1].kill9();
    cluster.sidecars[n - 1] =
        swarm_tests::spawn_sidecar_env(&url, repo.path(), &holder, &[], &[("HOME", &home)]);
    answer(&url, "lp/t/k", "yes");

    let t = wait_task_state(&url, "lp", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0, "{}", t.reason);
    assert!(attempts(&url, "lp/t").await.len() >= 2, "the task ran again after its sidecar died");
    let tree = repo.tree("swarm/lp/integration");
    // Whatever the next attempt's agent did (the script's session was cut
    // mid-call), the child's work is in the task's result.
    assert_eq!(tree.get("src/k/k.txt").map(String::as_str), Some("k\n"), "the child's work: {tree:?}");
    let mut op = operator(&url).await;
    assert_eq!(tasks(&mut op, "lp/t").await.len(), 1, "one child, however often the parent ran");
}
