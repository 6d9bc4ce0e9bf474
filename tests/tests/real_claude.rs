//! The real Claude Code CLI as the worker (`agent = "claude"`), offline:
//! the CLI the Python Agent SDK bundles (`swarm_tests::claude_cli`) talks
//! to a scripted Messages API on 127.0.0.1 (`swarm_tests::messages_api`),
//! which answers each conversation from the script its task's prompt names
//! and records what the CLI sent. These are the scenarios of
//! `tests/agents.rs` that the real CLI can act out; what they assert is
//! what swarm records (states, outcomes, merged trees, usage, questions)
//! and what reached the "model" (tool results, denials, resumed sessions).
//!
//! Where the CLI cannot be installed (no python3, pip or network) each test
//! prints why and returns; under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use serde_json::{Value, json};
use swarm_proto::v1::{self, AttemptState, Outcome, TaskState};
use swarm_tests::messages_api::{Request, Script, Step, Tokens, ToolResult, unix_now_s};
use swarm_tests::{
    RealClaude, TempRepo, WAIT, attempts, claude_task, create_swarm, operator, outcome_of, poll, state_of,
    stderr, stdout, swarmctl, tasks, try_operator, wait_task_state,
};

fn integration(swarm: &str) -> String {
    format!("swarm/{swarm}/integration")
}

fn attempt_state(a: &v1::Attempt) -> AttemptState {
    AttemptState::try_from(a.state).unwrap_or(AttemptState::Unspecified)
}

fn usage_of(u: Option<&v1::Usage>) -> (u64, u64, u64, u64) {
    let u = u.cloned().unwrap_or_default();
    (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_creation_tokens)
}

/// The tool results of `script`'s last request: everything the model was told.
fn results_seen(claude: &RealClaude, script: &str) -> Vec<ToolResult> {
    claude.api.requests_of(script).last().map(Request::tool_results).unwrap_or_default()
}

/// Waits until `task` is RUNNING with an open question other than `not`.
async fn wait_question(url: &str, swarm: &str, id: &str, not: &str) -> String {
    poll(&format!("{swarm}/{id} to ask a question"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let t = tasks(&mut op, swarm).await.remove(id)?;
        let s = state_of(&t);
        assert!(!matches!(s, TaskState::Failed | TaskState::Merged), "{id} ended {s:?} ({})", t.reason);
        (s == TaskState::Running && !t.pending_question.is_empty() && t.pending_question != not)
            .then_some(t.pending_question)
    })
    .await
}

async fn task_events(url: &str, task_id: &str) -> Vec<v1::Event> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().events
}

/// The file tools write what the script says, Bash runs an allowed
/// command, the merged tree holds the result, and the tokens of every API
/// call are the attempt's usage.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_by_the_real_cli_merges_and_its_usage_is_recorded() {
    let t1 = Tokens { input: 100, output: 20, cache_read: 1000, cache_creation: 50 };
    let t2 = Tokens { input: 200, output: 30, cache_read: 2000, cache_creation: 0 };
    let t3 = Tokens { input: 300, output: 40, cache_read: 0, cache_creation: 7 };
    let t4 = Tokens { input: 400, output: 10, cache_read: 4000, cache_creation: 0 };
    let script = Script::new(
        "edit",
        vec![
            Step::dynamic(move |r| {
                Step::tool("Write", json!({"file_path": r.abs("src/greeting.txt"), "content": "hello\n"}))
                    .say("I will write the greeting.")
                    .usage(t1)
            }),
            Step::dynamic(move |r| {
                let path = r.abs("src/greeting.txt");
                let input = json!({"file_path": path, "old_string": "hello", "new_string": "hello, world"});
                Step::tool("Edit", input).usage(t2)
            }),
            Step::tool("Bash", json!({"command": "cp src/greeting.txt src/copy.txt", "description": "copy"}))
                .usage(t3),
            Step::text("The greeting is written.").usage(t4),
        ],
    );
    let Some(claude) =
        RealClaude::start("an_edit_by_the_real_cli_merges_and_its_usage_is_recorded", vec![script])
    else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("edit")
        .default("permissions", r#"{ allow = ["Edit(src/**)", "Bash(cp:*)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "edit", "Write the greeting."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "edit", "t", TaskState::Merged).await;

    let tree = repo.tree(&integration("edit"));
    assert_eq!(tree.get("src/greeting.txt").map(String::as_str), Some("hello, world\n"), "{tree:?}");
    assert_eq!(tree.get("src/copy.txt").map(String::as_str), Some("hello, world\n"), "{tree:?}");
    assert_eq!(t.attempts, 1);
    let results = results_seen(&claude, "edit");
    let tools: Vec<(&str, bool)> = results.iter().map(|r| (r.tool.as_str(), r.is_error)).collect();
    assert_eq!(tools, [("Write", false), ("Edit", false), ("Bash", false)], "{results:#?}");

    let a = &attempts(&url, "edit/t").await[0];
    assert_eq!(outcome_of(a), Outcome::Success, "{}", a.error);
    assert_eq!(a.agent, "claude");
    let requests = claude.api.requests_of("edit");
    assert_eq!(requests.len(), 4, "{}", claude.api.summary());
    for r in &requests {
        assert_eq!(r.headers.get("x-api-key").map(String::as_str), Some("test"));
        let session = r.headers.get("x-claude-code-session-id").map(String::as_str);
        assert_eq!(session, Some(a.session_id.as_str()), "the CLI's session is the attempt's");
    }
    let sum = |f: fn(&Tokens) -> u64| [t1, t2, t3, t4].iter().map(f).sum::<u64>();
    let want = (sum(|t| t.input), sum(|t| t.output), sum(|t| t.cache_read), sum(|t| t.cache_creation));
    assert_eq!(usage_of(a.usage.as_ref()), want, "{:?}", a.usage);
    assert!(a.usage.as_ref().is_some_and(|u| u.cost_usd > 0.0), "the CLI prices the tokens: {:?}", a.usage);
    assert_eq!(usage_of(t.usage.as_ref()), want);

    let out = swarmctl(&url, &["describe", "task", "edit/t", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["task"]["usage"]["output_tokens"], want.1, "{json}");
    assert_eq!(json["attempts"][0]["session_id"], a.session_id.as_str(), "{json}");
}

/// A command no rule allows goes to the operator: "allow" lets it run,
/// "deny <reason>" refuses it, and the model is told the reason.
#[tokio::test(flavor = "multi_thread")]
async fn permission_questions_go_to_the_operator_and_the_model_sees_the_denial() {
    let bash = |command: &str| Step::tool("Bash", json!({"command": command, "description": "write"}));
    let script = Script::new(
        "perm",
        vec![
            bash("mkdir -p src && echo one > src/one.txt"),
            bash("mkdir -p src && echo two > src/two.txt"),
            Step::text("One of two written."),
        ],
    );
    let Some(claude) = RealClaude::start(
        "permission_questions_go_to_the_operator_and_the_model_sees_the_denial",
        vec![script],
    ) else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("perm")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "ask" }"#)
        .task(claude_task("t", &["src/**"], "perm", "Write two files."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let first = wait_question(&url, "perm", "t", "").await;
    assert!(first.contains("echo one"), "the question names the command: {first:?}");
    let out = swarmctl(&url, &["answer", "perm/t", "allow"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));
    let second = wait_question(&url, "perm", "t", &first).await;
    assert!(second.contains("echo two"), "{second:?}");
    let out = swarmctl(&url, &["answer", "perm/t", "deny two is not part of this task"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));

    let t = wait_task_state(&url, "perm", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1, "answered in the running attempt");
    let tree = repo.tree(&integration("perm"));
    assert_eq!(tree.get("src/one.txt").map(String::as_str), Some("one\n"), "{tree:?}");
    assert!(!tree.contains_key("src/two.txt"), "the denied command never ran: {tree:?}");

    let results = results_seen(&claude, "perm");
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(!results[0].is_error, "{results:#?}");
    assert!(results[1].is_error, "the denial is an error result: {results:#?}");
    assert!(results[1].content.contains("two is not part of this task"), "{results:#?}");

    let events = task_events(&url, "perm/t").await;
    let questions: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "task.question")
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(questions.len(), 2, "{events:?}");
    assert!(questions.iter().all(|q| q["category"] == "permission"), "{questions:?}");
    assert_eq!(events.iter().filter(|e| e.kind == "task.answered").count(), 2);
}

/// A task that depends on another starts from its merge: the second
/// agent reads what the first wrote and builds on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_dependent_task_starts_from_its_dependencys_merge() {
    let first = Script::new(
        "dag-a",
        vec![
            Step::file("Write", "a/base.txt", json!({"content": "base from a\n"})),
            Step::text("Wrote the base."),
        ],
    );
    let second = Script::new(
        "dag-b",
        vec![
            Step::file("Read", "a/base.txt", json!({})),
            // Writes what the Read returned: the model saw a's merged file.
            Step::dynamic(|r| {
                let read = r.tool_results().last().map(|t| t.content.clone()).unwrap_or_default();
                let seen = if read.contains("base from a") { "saw a\n" } else { "no base\n" };
                Step::tool("Write", json!({"file_path": r.abs("b/derived.txt"), "content": seen}))
            }),
            Step::text("Built on the base."),
        ],
    );
    let Some(claude) =
        RealClaude::start("a_dependent_task_starts_from_its_dependencys_merge", vec![first, second])
    else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("dag")
        .default("permissions", r#"{ allow = ["Edit", "Read"], otherwise = "deny" }"#)
        .task(claude_task("a", &["a/**"], "dag-a", "Write the base."))
        .task(claude_task("b", &["b/**"], "dag-b", "Build on the base.").deps(&["a"]))
        .build();
    let cluster = claude.cluster(&repo, 2);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "dag", "b", TaskState::Merged).await;

    let tree = repo.tree(&integration("dag"));
    assert_eq!(tree.get("a/base.txt").map(String::as_str), Some("base from a\n"), "{tree:?}");
    assert_eq!(tree.get("b/derived.txt").map(String::as_str), Some("saw a\n"), "{tree:?}");
    let a_done = claude.api.requests_of("dag-a").last().unwrap().unix_ms;
    let b_start = claude.api.requests_of("dag-b").first().unwrap().unix_ms;
    assert!(b_start > a_done, "b's agent started after a's finished");
}

/// API errors end the attempt as the adapter maps them: a 500 is the
/// attempt's error (retried like a failed worker; here no retries are
/// left); a 529 and an API key's 429 are usage limits of unknown reset,
/// which hold the worker back for the controller's default wait.
#[tokio::test(flavor = "multi_thread")]
async fn api_errors_end_the_attempt_as_errors_or_usage_limits() {
    let scripts = vec![
        Script::new("e500", vec![Step::server_error()]),
        Script::new("e529", vec![Step::overloaded()]),
        Script::new("e429", vec![Step::rate_limited(unix_now_s() + 3600)]),
    ];
    let Some(claude) = RealClaude::start("api_errors_end_the_attempt_as_errors_or_usage_limits", scripts)
    else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let plan = claude
        .plan("errs")
        .default("retries", "0")
        .default("permissions", r#"{ allow = ["Edit"], otherwise = "deny" }"#)
        .task(claude_task("broken", &["broken/**"], "e500", "Try."))
        .task(claude_task("busy", &["busy/**"], "e529", "Try."))
        .task(claude_task("limited", &["limited/**"], "e429", "Try."))
        .build();
    let cluster = claude.cluster(&repo, 3);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let broken = wait_task_state(&url, "errs", "broken", TaskState::Failed).await;
    let a = &attempts(&url, "errs/broken").await[0];
    assert_eq!(outcome_of(a), Outcome::Error, "{a:?}");
    assert!(a.error.contains("API Error: 500"), "the CLI's message: {:?} ({})", a.error, broken.reason);

    for task in ["busy", "limited"] {
        let a = poll(&format!("errs/{task}#1 to end"), WAIT, || async {
            let all = attempts(&url, &format!("errs/{task}")).await;
            all.first().filter(|a| attempt_state(a) != AttemptState::Running && a.outcome != 0).cloned()
        })
        .await;
        assert_eq!(outcome_of(&a), Outcome::RateLimited, "{task}: {a:?}");
        assert_eq!(attempt_state(&a), AttemptState::RateLimited);
        let mut op = operator(&url).await;
        let t = tasks(&mut op, "errs").await.remove(task).unwrap();
        assert_eq!(t.retries_used, 0, "{task}: a usage limit spends no retry");
    }
    let mut op = operator(&url).await;
    let workers = op.list_workers(v1::ListWorkersRequest::default()).await.unwrap().into_inner().workers;
    let now_ms = unix_now_s() as i64 * 1000;
    let held: Vec<i64> =
        workers.iter().map(|w| w.rate_limited_until_unix_ms - now_ms).filter(|d| *d > 0).collect();
    assert_eq!(held.len(), 2, "two workers are held back: {workers:?}");
    // Neither the 529 nor an API key's 429 carries a reset the CLI passes
    // on (it ignores retry-after and the unified headers): the default wait.
    assert!(held.iter().all(|d| (40_000..=65_000).contains(d)), "held for ~60 s: {held:?}");
    for s in ["e500", "e529", "e429"] {
        assert_eq!(
            claude.api.requests_of(s).len(),
            1,
            "no retry after x-should-retry: false:\n{}",
            claude.api.summary()
        );
    }
}

/// A subscriber's usage limit (a CLI logged in with an OAuth token gets
/// the 429's reset as a `rate_limit_event`) ends the attempt RATE_LIMITED;
/// after the reset a new attempt resumes the same session with
/// `--resume`, the conversation goes on where it stopped, and no retry is
/// spent.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_usage_limit_waits_for_the_reset_and_resumes_the_same_session() {
    let (limited, reset_at) =
        Step::limit_lifting_after(6, Step::file("Write", "src/b.txt", json!({"content": "two\n"})));
    let script = Script::new(
        "limit",
        vec![
            Step::file("Write", "src/a.txt", json!({"content": "one\n"})),
            limited,
            Step::text("Both written."),
        ],
    );
    let Some(claude) = RealClaude::start(
        "a_subscriber_usage_limit_waits_for_the_reset_and_resumes_the_same_session",
        vec![script],
    ) else {
        return;
    };
    let repo = TempRepo::with_files(&[]);
    let oauth = [("ANTHROPIC_API_KEY", ""), ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-test")];
    let plan = claude
        .plan_env("rl", &oauth)
        .default("retries", "0")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(claude_task("t", &["src/**"], "limit", "Write two files."))
        .build();
    let cluster = claude.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let first = poll("attempt #1 to end RATE_LIMITED", WAIT, || async {
        let a = attempts(&url, "rl/t").await.first()?.clone();
        assert!(!matches!(outcome_of(&a), Outcome::Error | Outcome::Signaled), "{a:?}");
        (outcome_of(&a) == Outcome::RateLimited).then_some(a)
    })
    .await;
    assert_eq!(attempt_state(&first), AttemptState::RateLimited);
    let reset = *reset_at.get().expect("the limit was met");
    let mut op = operator(&url).await;
    let workers = op.list_workers(v1::ListWorkersRequest::default()).await.unwrap().into_inner().workers;
    let w1 = workers.iter().find(|w| w.id == "w1").unwrap();
    let reset_ms = reset as i64 * 1000;
    assert!(
        w1.rate_limited_until_unix_ms >= reset_ms && w1.rate_limited_until_unix_ms < reset_ms + 10_000,
        "held until the reset the CLI reported ({reset_ms}): {w1:?}"
    );

    let t = wait_task_state(&url, "rl", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0, "a usage limit spends no retry");
    let all = attempts(&url, "rl/t").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(outcome_of(&all[1]), Outcome::Success, "{}", all[1].error);
    assert_eq!(all[1].session_id, all[0].session_id, "the same session");
    let tree = repo.tree(&integration("rl"));
    assert_eq!(tree.get("src/a.txt").map(String::as_str), Some("one\n"), "{tree:?}");
    assert_eq!(tree.get("src/b.txt").map(String::as_str), Some("two\n"), "{tree:?}");

    let requests = claude.api.requests_of("limit");
    let steps: Vec<usize> = requests.iter().filter_map(|r| r.step).collect();
    assert_eq!(steps, [0, 1, 1, 2], "the resumed conversation went on at step 1:\n{}", claude.api.summary());
    let resumed = &requests[2];
    assert!(resumed.unix_ms as i64 >= reset_ms, "not before the reset");
    assert_eq!(resumed.headers.get("x-claude-code-session-id"), Some(&all[0].session_id));
    assert!(resumed.headers.get("authorization").is_some_and(|a| a.starts_with("Bearer ")), "OAuth");
    assert!(resumed.user_text().contains("Continue the task"), "the resume's message follows the old ones");
}
