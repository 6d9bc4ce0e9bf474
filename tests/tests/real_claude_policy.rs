//! What swarm decides for the real Claude Code CLI that the CLI would
//! otherwise decide alone, and what it hears back: ownership enforced at
//! the edit whatever the CLI's permission mode (the sidecar's `PreToolUse`
//! hook), deny rules that cover the reads the CLI never asks about,
//! `AskUserQuestion` answered by the operator with one of its options, and
//! usage summed over the turns one process serves. Same offline setup as
//! `tests/real_claude.rs`: the bundled CLI against a scripted Messages API
//! on 127.0.0.1.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use serde_json::json;
use swarm_proto::v1::{self, TaskState};
use swarm_tests::messages_api::{Request, Script, Step, Tokens};
use swarm_tests::{
    RealClaude, TempRepo, WAIT, attempts, claude_task, create_swarm, operator, poll, state_of, stderr,
    stdout, swarmctl, tasks, try_operator, wait_task_state,
};

fn integration(swarm: &str) -> String {
    format!("swarm/{swarm}/integration")
}

/// The task once it is RUNNING with an open question.
async fn asking(url: &str, swarm: &str, id: &str) -> v1::Task {
    poll(&format!("{swarm}/{id} to ask"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let t = tasks(&mut op, swarm).await.remove(id)?;
        let s = state_of(&t);
        assert!(!matches!(s, TaskState::Failed | TaskState::Merged), "{id} ended {s:?} ({})", t.reason);
        (s == TaskState::Running && !t.pending_question.is_empty()).then_some(t)
    })
    .await
}

fn answer(url: &str, task: &str, text: &str) {
    let out = swarmctl(url, &["answer", task, text]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));
}

async fn event_messages(url: &str, task_id: &str) -> Vec<String> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().events.into_iter().map(|e| e.message).collect()
}

/// Under `acceptEdits`, or with `Write` in `allowed_tools`, the CLI writes
/// without asking; the hook still refuses a file outside the task's globs
/// before it is written, and the model is told why. (`bypassPermissions`
/// is refused by the CLI when it runs as root, as tests here do.)
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_outside_the_owned_files_is_refused_in_every_permission_mode() {
    let steps = |mine: &'static str| {
        vec![
            Step::file("Write", mine, json!({"content": "mine\n"})),
            Step::file("Write", "README.md", json!({"content": "taken over\n"})),
            Step::text("Done."),
        ]
    };
    let scripts =
        vec![Script::new("accept", steps("src/mine.txt")), Script::new("allowed", steps("lib/mine.txt"))];
    let Some(claude) =
        RealClaude::start("an_edit_outside_the_owned_files_is_refused_in_every_permission_mode", scripts)
    else {
        return;
    };
    let repo = TempRepo::with_files(&[("README.md", "the original\n")]);
    // Edits in the worktree's own files are allowed, so the CLI's modes
    // alone decide whether it asks; the hook is what refuses the rest.
    let plan = claude
        .plan("own")
        .default("permissions", r#"{ allow = ["Edit(src/**)", "Edit(lib/**)"], otherwise = "deny" }"#)
        .task(
            claude_task("accept", &["src/**"], "accept", "Write src/mine.txt.")
                .set("permission_mode", "\"acceptEdits\""),
        )
        .task(
            claude_task("allowed", &["lib/**"], "allowed", "Write lib/mine.txt.")
                .set("allowed_tools", "[\"Write\"]"),
        )
        .build();
    let cluster = claude.cluster(&repo, 2);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    for task in ["accept", "allowed"] {
        wait_task_state(&url, "own", task, TaskState::Merged).await;
        let results = claude.api.requests_of(task).last().map(Request::tool_results).unwrap_or_default();
        let shown: Vec<(bool, &str)> = results.iter().map(|r| (r.is_error, r.content.as_str())).collect();
        assert_eq!(results.len(), 2, "{task}: {shown:?}");
        assert!(!results[0].is_error, "{task}: the owned file is written: {shown:?}");
        assert!(results[1].is_error, "{task}: {shown:?}");
        assert!(
            results[1].content.contains("hook")
                && results[1].content.contains("outside this task's owned files"),
            "{task}: refused by swarm's hook, with the reason: {shown:?}"
        );
        let events = event_messages(&url, &format!("own/{task}")).await;
        assert!(
            events.iter().any(|m| m.contains("permission denied: Write wants to change")
                && m.contains("README.md (Write of README.md is outside this task's owned files")),
            "{task}: the refusal is in the event log: {events:#?}"
        );
    }
    let tree = repo.tree(&integration("own"));
    assert_eq!(tree.get("README.md").map(String::as_str), Some("the original\n"), "{tree:?}");
    assert_eq!(tree.get("src/mine.txt").map(String::as_str), Some("mine\n"));
    assert_eq!(tree.get("lib/mine.txt").map(String::as_str), Some("mine\n"));
}

/// The CLI reads inside its directory and runs `cat` without asking; the
/// plan's deny rules, handed to it as `--disallowedTools`, make it refuse
/// both, so the secret never reaches the model.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_denied_by_a_deny_rule_never_reaches_the_model() {
    let script = Script::new(
        "peek",
        vec![
            Step::file("Read", "secret.txt", json!({})),
            Step::tool("Bash", json!({"command": "cat secret.txt", "description": "read"})),
            Step::file("Write", "src/out.txt", json!({"content": "done\n"})),
            Step::text("Could not read it."),
        ],
    );
    let Some(claude) =
        RealClaude::start("a_read_denied_by_a_deny_rule_never_reaches_the_model", vec![script])
    else {
        return;
    };
    let repo = TempRepo::with_files(&[("secret.txt", "TOPSECRET-4711\n")]);
    let plan = claude
        .plan("peek")
        .default(
            "permissions",
            r#"{ allow = ["Edit(src/**)"], deny = ["Read(secret.txt)", "Bash(cat:*)"], otherwise = "deny" }"#,
        )
        .task(claude_task("t", &["src/**"], "peek", "Read the secret."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "peek", "t", TaskState::Merged).await;

    let requests = claude.api.requests_of("peek");
    assert_eq!(requests.len(), 4, "{}", claude.api.summary());
    for r in &requests {
        assert!(!r.body.to_string().contains("TOPSECRET"), "the secret reached the model: {}", r.body);
    }
    let results = requests.last().map(Request::tool_results).unwrap_or_default();
    let errors: Vec<bool> = results.iter().map(|r| r.is_error).collect();
    assert_eq!(errors, [true, true, false], "{results:#?}");
}

/// `AskUserQuestion` becomes an operator question with its options; the
/// operator picks one by number and the model gets that option as the
/// user's answer, in the same process.
#[tokio::test(flavor = "multi_thread")]
async fn ask_user_question_is_answered_with_one_of_its_options() {
    let question = json!({"questions": [{
        "question": "Which colour should the banner be?",
        "header": "Colour",
        "options": [{"label": "red", "description": "loud"}, {"label": "blue", "description": "calm"}],
        "multiSelect": false,
    }]});
    let script = Script::new(
        "ask",
        vec![
            Step::tool("AskUserQuestion", question),
            Step::dynamic(|r| {
                let told = r.tool_results().last().map(|t| t.content.clone()).unwrap_or_default();
                let colour = if told.contains("=\"blue\"") { "blue" } else { "unanswered" };
                Step::tool(
                    "Write",
                    json!({"file_path": r.abs("src/banner.txt"), "content": format!("{colour}\n")}),
                )
            }),
            Step::text("Banner written."),
        ],
    );
    let Some(claude) =
        RealClaude::start("ask_user_question_is_answered_with_one_of_its_options", vec![script])
    else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("ask")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "ask", "Write the banner."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let t = asking(&url, "ask", "t").await;
    assert!(
        t.pending_question.contains("[Colour] Which colour should the banner be?"),
        "{}",
        t.pending_question
    );
    assert_eq!(t.pending_options, ["red", "blue"]);
    let described = swarmctl(&url, &["describe", "task", "ask/t"]);
    assert!(stdout(&described).contains("2. blue"), "{}", stdout(&described));
    answer(&url, "ask/t", "2");

    let t = wait_task_state(&url, "ask", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1, "answered in the running attempt");
    let tree = repo.tree(&integration("ask"));
    assert_eq!(tree.get("src/banner.txt").map(String::as_str), Some("blue\n"), "{tree:?}");
}

/// A question the agent asks through `.swarm/status.json` ends its turn and
/// the answer starts the next one in the same process: the usage recorded
/// is every API call's, not only the last turn's.
#[tokio::test(flavor = "multi_thread")]
async fn usage_is_summed_over_the_turns_of_one_process() {
    let t = [
        Tokens { input: 1000, output: 10, cache_read: 0, cache_creation: 0 },
        Tokens { input: 1100, output: 20, cache_read: 0, cache_creation: 0 },
        Tokens { input: 1200, output: 30, cache_read: 0, cache_creation: 0 },
        Tokens { input: 1300, output: 40, cache_read: 0, cache_creation: 0 },
    ];
    let status = json!({"status": "question", "question": {"id": "q1", "text": "Which name?"}}).to_string();
    let script = Script::new(
        "turns",
        vec![
            Step::dynamic(move |r| {
                Step::tool(
                    "Write",
                    json!({"file_path": r.abs(".swarm/status.json"), "content": status.clone()}),
                )
                .usage(t[0])
            }),
            Step::text("I asked which name.").usage(t[1]),
            Step::dynamic(move |r| {
                let name = if r.user_text().contains("Ada") { "Ada" } else { "unknown" };
                Step::tool(
                    "Write",
                    json!({"file_path": r.abs("src/name.txt"), "content": format!("{name}\n")}),
                )
                .usage(t[2])
            }),
            Step::text("Named.").usage(t[3]),
        ],
    );
    let Some(claude) = RealClaude::start("usage_is_summed_over_the_turns_of_one_process", vec![script])
    else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("turns")
        .default(
            "permissions",
            r#"{ allow = ["Edit(src/**)", "Write(.swarm/status.json)"], otherwise = "deny" }"#,
        )
        .task(claude_task("t", &["src/**"], "turns", "Write the name."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    asking(&url, "turns", "t").await;
    answer(&url, "turns/t", "Ada");
    wait_task_state(&url, "turns", "t", TaskState::Merged).await;

    let tree = repo.tree(&integration("turns"));
    assert_eq!(tree.get("src/name.txt").map(String::as_str), Some("Ada\n"), "{tree:?}");
    let a = &attempts(&url, "turns/t").await[0];
    let u = a.usage.unwrap_or_default();
    let input: u64 = t.iter().map(|t| t.input).sum();
    let output: u64 = t.iter().map(|t| t.output).sum();
    assert_eq!((u.input_tokens, u.output_tokens), (input, output), "both turns count: {u:?}");
}
