//! Coding agents as workers (`agent = "claude" | "codex"`): the real
//! controller and sidecar drive `tests/fake-agents/fake-claude` and
//! `fake-codex`, which speak Claude Code's stream-json (with `can_use_tool`
//! control requests) and `codex exec --json`, really write files in the
//! worktree, and act out the scenario written as `FAKE:` lines in the task's
//! prompt (the mini-language is documented at the top of each fake). Each
//! fake logs its command lines, sessions and what it did under
//! `FAKE_AGENT_STATE`, which the tests read back.
#![allow(clippy::unwrap_used)] // tests: a panic is the report

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use swarm_proto::v1::{self, AttemptState, Outcome, TaskState};
use swarm_tests::{
    Cluster, Gate, PlanBuilder, TaskBuilder, TempDir, TempRepo, WAIT, attempts, create_swarm, operator,
    outcome_of, poll, spawn_sidecar, state_of, stderr, stdout, swarmctl, task, tasks, try_operator, try_poll,
    wait_task_state,
};

fn integration(swarm: &str) -> String {
    format!("swarm/{swarm}/integration")
}

/// A fake agent's executable.
fn fake_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-agents").join(name)
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    format!("{s:?}")
}

/// A task prompt: `FAKE:` lines in a TOML literal multi-line string.
fn prompt(lines: &[&str]) -> String {
    format!("'''\nThe fake agent acts this out.\n\n{}\n'''", lines.join("\n"))
}

/// The fakes' state directory (`FAKE_AGENT_STATE`) and readers for it.
struct Fake {
    dir: TempDir,
}

impl Fake {
    fn new() -> Fake {
        Fake { dir: tempfile::Builder::new().prefix("fake-agent-state-").tempdir().unwrap() }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn jsonl(&self, file: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path().join(file)).unwrap_or_default();
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// One record per agent process started for `task`, in order.
    fn runs(&self, task: &str) -> Vec<Value> {
        self.jsonl("runs.jsonl").into_iter().filter(|r| r["task"] == task).collect()
    }

    /// The fake's events of kind `what` for `task`.
    fn events(&self, task: &str, what: &str) -> Vec<Value> {
        self.jsonl("events.jsonl").into_iter().filter(|e| e["task"] == task && e["event"] == what).collect()
    }

    /// How many tool uses of `task` wrote a file ending in `path`.
    fn writes_of(&self, task: &str, path: &str) -> usize {
        let file = |e: &Value| e["input"]["file_path"].as_str().unwrap_or_default().ends_with(path);
        self.events(task, "tool").iter().filter(|e| file(e)).count()
    }

    fn session(&self, id: &str) -> Value {
        let text = std::fs::read_to_string(self.path().join("sessions").join(format!("{id}.json")))
            .unwrap_or_else(|e| panic!("session {id}: {e}"));
        serde_json::from_str(&text).unwrap()
    }

    /// Everything the fakes logged, for failure messages.
    fn dump(&self) -> String {
        let runs = std::fs::read_to_string(self.path().join("runs.jsonl")).unwrap_or_default();
        let events = std::fs::read_to_string(self.path().join("events.jsonl")).unwrap_or_default();
        format!("runs.jsonl:\n{runs}\nevents.jsonl:\n{events}")
    }
}

/// A plan whose tasks run fake-claude, logging into `fake`'s directory.
/// Edits under `src/` are allowed; anything else is denied unless a test
/// sets its own `permissions`.
fn claude_plan(name: &str, fake: &Fake) -> PlanBuilder {
    PlanBuilder::new(name)
        .remove_default("command")
        .default("agent", r#""claude""#)
        .default("agent_path", &toml_str(fake_path("fake-claude").to_str().unwrap()))
        .default("env", &format!("{{ FAKE_AGENT_STATE = {} }}", toml_str(fake.path().to_str().unwrap())))
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "deny" }"#)
        .sandbox(&[], &[fake.path()])
}

/// A task owning `globs` whose prompt is `lines`.
fn agent_task(id: &str, globs: &[&str], lines: &[&str]) -> TaskBuilder {
    task(id).files(globs).set("prompt", &prompt(lines))
}

fn argv(run: &Value) -> Vec<String> {
    run["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

/// Whether `args` holds `flag` directly followed by `value`.
fn has_pair(args: &[String], flag: &str, value: &str) -> bool {
    args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// A task's events through GetTask.
async fn task_events(url: &str, task_id: &str) -> Vec<v1::Event> {
    let mut op = operator(url).await;
    let req = v1::GetTaskRequest { task_id: task_id.to_string() };
    op.get_task(req).await.expect("GetTask").into_inner().events
}

async fn get_task(url: &str, swarm: &str, id: &str) -> v1::Task {
    let mut op = operator(url).await;
    tasks(&mut op, swarm).await.remove(id).unwrap_or_else(|| panic!("no task {swarm}/{id}"))
}

/// Waits until `task` is RUNNING with an open question other than `not`;
/// returns its text.
async fn wait_question(url: &str, swarm: &str, id: &str, not: &str) -> String {
    poll(&format!("{swarm}/{id} to ask a question while RUNNING"), WAIT, || async {
        let mut op = try_operator(url).await?;
        let t = tasks(&mut op, swarm).await.remove(id)?;
        assert!(
            !matches!(state_of(&t), TaskState::Failed | TaskState::Cancelled | TaskState::Merged),
            "{swarm}/{id} ended {:?} ({}) before asking",
            state_of(&t),
            t.reason
        );
        (state_of(&t) == TaskState::Running && !t.pending_question.is_empty() && t.pending_question != not)
            .then_some(t.pending_question)
    })
    .await
}

fn usage_of(u: Option<&v1::Usage>) -> (u64, u64, u64, u64, f64) {
    let u = u.cloned().unwrap_or_default();
    (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_creation_tokens, u.cost_usd)
}

fn attempt_state(a: &v1::Attempt) -> AttemptState {
    AttemptState::try_from(a.state).unwrap_or(AttemptState::Unspecified)
}

/// Tool uses are the task's progress while the agent works, its files are
/// what merges, and the agent runs with the machine-interface flags, the
/// plan's settings and the worker environment, in the task's worktree.
#[tokio::test(flavor = "multi_thread")]
async fn claude_tool_uses_are_progress_and_the_files_it_writes_merge() {
    let fake = Fake::new();
    let gate = Gate::new();
    let gate_line = format!("FAKE: gate {}", gate.path.display());
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("tools", &fake)
        .default("model", r#""fake-model-1""#)
        .default("max_turns", "40")
        .default("permissions", r#"{ allow = ["Edit(src/**)", "Bash(cp:*)"], otherwise = "deny" }"#)
        .task(agent_task(
            "t",
            &["src/**"],
            &[
                "FAKE: write src/a.txt hello",
                "FAKE: edit src/a.txt hello bye",
                "FAKE: bash cp src/a.txt src/b.txt",
                "FAKE: read src/a.txt",
                "FAKE: todo 3/4",
                &gate_line,
                "FAKE: text all done",
            ],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // The agent waits at the gate after its tool uses: they are the progress.
    let running = poll("the agent's tool uses as the task's step", WAIT, || async {
        let mut op = try_operator(&url).await?;
        let t = tasks(&mut op, "tools").await.remove("t")?;
        (state_of(&t) == TaskState::Running && !t.step.is_empty()).then_some(t)
    })
    .await;
    let percent = try_poll(Duration::from_secs(5), || async {
        let t = get_task(&url, "tools", "t").await;
        (t.percent == 75).then_some(())
    })
    .await;
    let t = get_task(&url, "tools", "t").await;
    assert!(percent.is_some(), "TodoWrite 3 of 4 done is 75%: percent {} step {:?}", t.percent, t.step);
    eprintln!("step while the agent waits: {:?} (first seen {:?})", t.step, running.step);
    gate.open();

    let t = wait_task_state(&url, "tools", "t", TaskState::Merged).await;
    let tree = repo.tree(&integration("tools"));
    assert_eq!(tree.get("src/a.txt").map(String::as_str), Some("bye\n"), "{tree:?}");
    assert_eq!(tree.get("src/b.txt").map(String::as_str), Some("bye\n"), "{tree:?}");
    assert!(!tree.keys().any(|k| k.starts_with(".swarm")), "{tree:?}");
    assert_eq!(t.attempts, 1);

    let runs = fake.runs("t");
    assert_eq!(runs.len(), 1, "one agent process:\n{}", fake.dump());
    let args = argv(&runs[0]);
    for flag in ["-p", "--verbose"] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    assert!(has_pair(&args, "--output-format", "stream-json"), "{args:?}");
    assert!(has_pair(&args, "--input-format", "stream-json"), "{args:?}");
    assert!(has_pair(&args, "--permission-prompt-tool", "stdio"), "{args:?}");
    assert!(has_pair(&args, "--model", "fake-model-1"), "{args:?}");
    assert!(has_pair(&args, "--max-turns", "40"), "{args:?}");
    assert!(!args.iter().any(|a| a == "--resume"), "a first attempt starts a new session: {args:?}");
    let env = &runs[0]["env"];
    assert_eq!(env["SWARM_SWARM_ID"], "tools");
    assert_eq!(env["SWARM_TASK_ID"], "t");
    assert_eq!(env["SWARM_ATTEMPT"], "1");
    assert_eq!(env["SWARM_WORKER_ID"], "w1");
    assert!(env["SWARM_STATUS_FILE"].as_str().unwrap().ends_with(".swarm/status.json"), "{env}");
    assert!(env["SWARM_TASK_FILE"].as_str().unwrap().ends_with(".swarm/task.md"), "{env}");
    assert!(env["TRACEPARENT"].as_str().is_some_and(|t| t.starts_with("00-")), "{env}");
    let cwd = PathBuf::from(runs[0]["cwd"].as_str().unwrap());
    assert_ne!(cwd.canonicalize().unwrap(), repo.path().canonicalize().unwrap(), "runs in its worktree");

    // Every tool use ran, none was refused.
    let tools = fake.events("t", "tool");
    let names: Vec<&str> = tools.iter().map(|e| e["tool"].as_str().unwrap()).collect();
    assert_eq!(names, ["Write", "Edit", "Bash", "Read", "TodoWrite"], "{}", fake.dump());
    assert!(tools.iter().all(|e| e["is_error"] == false), "{}", fake.dump());

    let attempt = &attempts(&url, "tools/t").await[0];
    assert_eq!(attempt.agent, "claude");
    assert_eq!(attempt.session_id, runs[0]["session"].as_str().unwrap());
    assert_eq!(outcome_of(attempt), Outcome::Success);
}

/// A request no rule decides goes to the operator as a question; "allow"
/// lets the tool run, "deny" refuses it and the agent goes on.
#[tokio::test(flavor = "multi_thread")]
async fn permission_requests_go_to_the_operator_who_allows_one_and_denies_another() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("perm", &fake)
        .default("permissions", r#"{ allow = ["Edit(src/**)"], otherwise = "ask" }"#)
        .task(agent_task(
            "t",
            &["src/**"],
            &[
                "FAKE: bash \"mkdir -p src && echo one > src/one.txt\"",
                "FAKE: bash \"mkdir -p src && echo two > src/two.txt\"",
                "FAKE: write src/done.txt done",
            ],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // The first through swarmctl ...
    let first = wait_question(&url, "perm", "t", "").await;
    assert!(first.contains("echo one"), "the question names the command: {first:?}");
    let out = swarmctl(&url, &["answer", "perm/t", "allow"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));

    // ... the second through the Answer RPC.
    let second = wait_question(&url, "perm", "t", &first).await;
    assert!(second.contains("echo two"), "{second:?}");
    let mut op = operator(&url).await;
    let req = v1::AnswerRequest { task_id: "perm/t".into(), question_id: String::new(), text: "deny".into() };
    op.answer(req).await.expect("Answer");

    let t = wait_task_state(&url, "perm", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1, "answered in the running attempt");
    let tree = repo.tree(&integration("perm"));
    assert_eq!(tree.get("src/one.txt").map(String::as_str), Some("one\n"), "{tree:?}\n{}", fake.dump());
    assert!(!tree.contains_key("src/two.txt"), "the denied command never ran: {tree:?}");
    assert_eq!(tree.get("src/done.txt").map(String::as_str), Some("done\n"), "{tree:?}");

    let asked: Vec<(String, String)> = fake
        .events("t", "permission")
        .iter()
        .filter(|e| e["tool"] == "Bash")
        .map(|e| {
            (e["input"]["command"].as_str().unwrap().to_string(), e["behavior"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        asked,
        [
            ("mkdir -p src && echo one > src/one.txt".to_string(), "allow".to_string()),
            ("mkdir -p src && echo two > src/two.txt".into(), "deny".into())
        ],
        "{}",
        fake.dump()
    );
    let events = task_events(&url, "perm/t").await;
    let questions: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "task.question")
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(questions.len(), 2, "{events:?}");
    assert!(questions.iter().all(|q| q["category"] == "permission"), "{questions:?}");
    assert_eq!(events.iter().filter(|e| e.kind == "task.answered").count(), 2);
    assert_eq!(fake.runs("t").len(), 1, "one process throughout");
}

/// An edit outside the task's owned globs is refused by the policy before
/// it happens, even when a rule would allow it, without asking anyone; the
/// agent goes on and its other edits merge.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_outside_the_owned_globs_is_refused_before_it_happens() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("own", &fake)
        .default("permissions", r#"{ allow = ["Edit", "Write"], otherwise = "ask" }"#)
        .task(agent_task(
            "t",
            &["src/**"],
            &["FAKE: write src/ok.txt ok", "FAKE: write outside.txt nope", "FAKE: write src/after.txt after"],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "own", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1);

    let tree = repo.tree(&integration("own"));
    assert!(tree.contains_key("src/ok.txt") && tree.contains_key("src/after.txt"), "{tree:?}");
    assert!(!tree.contains_key("outside.txt"), "{tree:?}");
    let runs = fake.runs("t");
    let cwd = PathBuf::from(runs[0]["cwd"].as_str().unwrap());
    assert!(!cwd.join("outside.txt").exists(), "the refused write never happened");

    let writes = fake.events("t", "tool");
    let outside: Vec<&Value> = writes
        .iter()
        .filter(|e| e["input"]["file_path"].as_str().unwrap().ends_with("/outside.txt"))
        .collect();
    assert_eq!(outside.len(), 1, "{}", fake.dump());
    assert_eq!(outside[0]["allowed"], false, "{}", fake.dump());
    assert_eq!(outside[0]["is_error"], true);
    let events = task_events(&url, "own/t").await;
    assert!(!events.iter().any(|e| e.kind == "task.question"), "refused without asking: {events:?}");
}

/// The agent asks a question and ends its turn; the operator's answer goes
/// to the same agent process as its next message, and what it does with it
/// merges. No new attempt, no new process.
#[tokio::test(flavor = "multi_thread")]
async fn a_question_is_answered_in_session() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("qa", &fake)
        .task(agent_task(
            "t",
            &["src/**"],
            &[
                "FAKE: write src/before.txt before",
                "FAKE: question q1 \"Which colour?\" src/colour.txt",
                "FAKE: write src/after.txt after",
            ],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let question = wait_question(&url, "qa", "t", "").await;
    assert_eq!(question, "Which colour?");
    let out = swarmctl(&url, &["answer", "qa/t", "blue", "--question", "q1"]);
    assert_eq!(out.status.code(), Some(0), "answer: {}{}", stdout(&out), stderr(&out));

    let t = wait_task_state(&url, "qa", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1);
    let tree = repo.tree(&integration("qa"));
    // The answer reaches the agent as its next message (which may say what it answers).
    let colour = tree.get("src/colour.txt").unwrap_or_else(|| panic!("{tree:?}"));
    assert!(colour.contains("blue"), "{colour:?}");
    assert!(tree.contains_key("src/before.txt") && tree.contains_key("src/after.txt"), "{tree:?}");

    let runs = fake.runs("t");
    assert_eq!(runs.len(), 1, "the same process went on:\n{}", fake.dump());
    let session = fake.session(runs[0]["session"].as_str().unwrap());
    assert!(session["answers"]["q1"].as_str().unwrap().contains("blue"), "{session}");
    assert_eq!(session["processes"].as_array().unwrap().len(), 1);
    let events = task_events(&url, "qa/t").await;
    assert!(events.iter().any(|e| e.kind == "task.question"), "{events:?}");
    assert!(events.iter().any(|e| e.kind == "task.answered"), "{events:?}");
}

/// A usage limit ends the attempt RATE_LIMITED with its work kept; after
/// the reset a new attempt resumes the same session (`--resume`), which goes
/// on where it stopped, and no retry is spent (the plan allows none).
#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_waits_for_the_reset_and_resumes_the_same_session() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("rl", &fake)
        .default("retries", "0")
        .task(agent_task(
            "t",
            &["src/**"],
            &["FAKE: write src/a.txt one", "FAKE: rate-limit 3", "FAKE: write src/b.txt two"],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // While the limit holds, the worker is marked until the reset.
    let first = poll("attempt #1 to end RATE_LIMITED", WAIT, || async {
        let all = attempts(&url, "rl/t").await;
        let a = all.first()?.clone();
        assert!(
            !matches!(outcome_of(&a), Outcome::Error | Outcome::Signaled),
            "attempt #1 ended {:?}: {}",
            outcome_of(&a),
            a.error
        );
        (outcome_of(&a) == Outcome::RateLimited).then_some(a)
    })
    .await;
    assert_eq!(attempt_state(&first), AttemptState::RateLimited);
    let limited = fake.events("t", "rate_limited");
    assert_eq!(limited.len(), 1, "{}", fake.dump());
    let reset_ms = limited[0]["resets_at"].as_i64().unwrap() * 1000;
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    if now_ms + 500 < reset_ms {
        let mut op = operator(&url).await;
        let workers = op.list_workers(v1::ListWorkersRequest::default()).await.unwrap().into_inner().workers;
        let w1 = workers.iter().find(|w| w.id == "w1").unwrap();
        assert!(w1.rate_limited_until_unix_ms >= reset_ms, "limited until the reset ({reset_ms}): {w1:?}");
    }

    let t = wait_task_state(&url, "rl", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0, "a rate limit spends no retry");
    let all = attempts(&url, "rl/t").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(outcome_of(&all[1]), Outcome::Success);
    let tree = repo.tree(&integration("rl"));
    assert_eq!(tree.get("src/a.txt").map(String::as_str), Some("one\n"), "{tree:?}");
    assert_eq!(tree.get("src/b.txt").map(String::as_str), Some("two\n"), "{tree:?}");

    let runs = fake.runs("t");
    assert_eq!(runs.len(), 2, "{}", fake.dump());
    let session = runs[0]["session"].as_str().unwrap();
    assert!(has_pair(&argv(&runs[1]), "--resume", session), "resumes the same session: {:?}", argv(&runs[1]));
    assert_eq!(runs[1]["session"], session);
    assert!(
        runs[1]["time_ms"].as_i64().unwrap() >= reset_ms,
        "not before the reset ({reset_ms}):\n{}",
        fake.dump()
    );
    assert_eq!(fake.session(session)["resumes"], 1);
    assert_eq!(all[0].session_id, session);
    assert_eq!(all[1].session_id, session);
    assert_eq!(
        fake.writes_of("t", "src/a.txt"),
        1,
        "the resumed session did not start over:\n{}",
        fake.dump()
    );
}

/// An error result fails the attempt like exit 1: retried while retries
/// last, then FAILED; the agent's error message is on the attempt.
#[tokio::test(flavor = "multi_thread")]
async fn an_error_result_is_retried_and_then_fails_the_task() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("err", &fake)
        .default("retries", "1")
        .default("permissions", r#"{ allow = ["Edit"], otherwise = "deny" }"#)
        .task(agent_task(
            "flaky",
            &["flaky/**"],
            &["FAKE[attempt=1]: error \"first try broke\"", "FAKE: write flaky/x.txt fixed"],
        ))
        .task(agent_task("broken", &["broken/**"], &["FAKE: error \"always broken\""]))
        .build();
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    let flaky = wait_task_state(&url, "err", "flaky", TaskState::Merged).await;
    assert_eq!(flaky.retries_used, 1);
    let all = attempts(&url, "err/flaky").await;
    assert_eq!(outcome_of(&all[0]), Outcome::Error, "{all:?}");
    assert!(all[0].error.contains("first try broke"), "the agent's message: {:?}", all[0].error);
    assert_eq!(outcome_of(&all[1]), Outcome::Success);
    assert_eq!(repo.file(&integration("err"), "flaky/x.txt").as_deref(), Some("fixed\n"));

    let broken = wait_task_state(&url, "err", "broken", TaskState::Failed).await;
    let all = attempts(&url, "err/broken").await;
    assert_eq!(all.len(), 2, "{all:?}");
    for a in &all {
        assert_eq!(outcome_of(a), Outcome::Error);
        assert_eq!(attempt_state(a), AttemptState::Failed);
        assert!(a.error.contains("always broken"), "{:?}", a.error);
    }
    assert!(broken.merge_commit.is_empty());
    assert_eq!(fake.runs("broken").len(), 2);
}

/// An agent that dies mid-stream (half a JSON line, no result) fails its
/// attempt like any worker exiting 1; the retry merges.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_crashes_mid_stream_fails_the_attempt_and_the_retry_merges() {
    crash_then_merge("exits", "FAKE[attempt=1]: crash 1", Outcome::Error).await;
}

/// An agent killed by a signal before its result is SIGNALED, as any
/// worker killed by a signal; the retry merges.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_by_a_signal_is_signaled_and_the_retry_merges() {
    crash_then_merge("killed", "FAKE[attempt=1]: crash signal", Outcome::Signaled).await;
}

async fn crash_then_merge(swarm: &str, crash: &str, outcome: Outcome) {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan(swarm, &fake)
        .task(agent_task("t", &["src/**"], &["FAKE: write src/x.txt x", crash, "FAKE: write src/y.txt y"]))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, swarm, "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 2);
    assert_eq!(t.retries_used, 1);
    let all = attempts(&url, &format!("{swarm}/t")).await;
    assert_eq!(outcome_of(&all[0]), outcome, "{all:?}");
    assert_eq!(attempt_state(&all[0]), AttemptState::Failed);
    assert!(all[0].error.contains("before its result"), "{:?}", all[0].error);
    assert_eq!(outcome_of(&all[1]), Outcome::Success);
    let tree = repo.tree(&integration(swarm));
    assert!(tree.contains_key("src/x.txt") && tree.contains_key("src/y.txt"), "{tree:?}");
}

/// Lines that are not JSON, unknown event types, unknown fields and unknown
/// content blocks are skipped; the attempt succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_unknown_lines_are_skipped() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("odd", &fake)
        .task(agent_task(
            "t",
            &["src/**"],
            &["FAKE: malformed", "FAKE: write src/a.txt a", "FAKE: malformed", "FAKE: write src/b.txt b"],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "odd", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1);
    assert_eq!(outcome_of(&attempts(&url, "odd/t").await[0]), Outcome::Success);
    let tree = repo.tree(&integration("odd"));
    assert!(tree.contains_key("src/a.txt") && tree.contains_key("src/b.txt"), "{tree:?}");
}

/// A sidecar that shuts down while its agent works checkpoints the work (a
/// WIP commit); the next attempt, in the same worktree, resumes the agent's
/// session with `--resume`, and the session goes on where it stopped.
#[tokio::test(flavor = "multi_thread")]
async fn the_attempt_after_a_checkpoint_resumes_the_session() {
    let fake = Fake::new();
    let gate = Gate::new();
    let gate_line = format!("FAKE: gate {}", gate.path.display());
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("ckpt", &fake)
        .task(agent_task(
            "t",
            &["src/**"],
            &["FAKE: write src/a.txt one", &gate_line, "FAKE: write src/b.txt two"],
        ))
        .build();
    let mut cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;

    // The agent wrote a.txt and waits at the gate: stop its sidecar.
    poll("the agent to write src/a.txt", WAIT, || async {
        (fake.writes_of("t", "src/a.txt") > 0).then_some(())
    })
    .await;
    let status = cluster.sidecars[0].terminate();
    assert!(status.is_some_and(|s| s.success()), "the sidecar shuts down cleanly: {status:?}");
    cluster.sidecars.push(spawn_sidecar(&url, repo.path(), "w1", &[]));
    let t = wait_task_state(&url, "ckpt", "t", TaskState::Merged).await;

    let all = attempts(&url, "ckpt/t").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(outcome_of(&all[0]), Outcome::Checkpoint, "{all:?}");
    assert_eq!(attempt_state(&all[0]), AttemptState::Checkpointed);
    assert!(!all[0].result_commit.is_empty(), "a WIP commit");
    assert_eq!(outcome_of(&all[1]), Outcome::Success);
    assert_eq!(t.retries_used, 0, "a checkpoint is progress, not a failure");

    let runs = fake.runs("t");
    assert_eq!(runs.len(), 2, "{}", fake.dump());
    let session = runs[0]["session"].as_str().unwrap();
    assert!(has_pair(&argv(&runs[1]), "--resume", session), "{:?}", argv(&runs[1]));
    assert_eq!(fake.session(session)["resumes"], 1);
    assert_eq!(all[1].session_id, session);
    let tree = repo.tree(&integration("ckpt"));
    assert_eq!(tree.get("src/a.txt").map(String::as_str), Some("one\n"), "{tree:?}");
    assert_eq!(tree.get("src/b.txt").map(String::as_str), Some("two\n"), "{tree:?}");
    assert_eq!(
        fake.writes_of("t", "src/a.txt"),
        1,
        "the resumed session did not start over:\n{}",
        fake.dump()
    );
}

/// What each attempt spent is recorded on it, summed on its task, and
/// summed over the tasks on the swarm; swarmctl shows it.
#[tokio::test(flavor = "multi_thread")]
async fn usage_and_cost_are_recorded_per_attempt_and_summed_per_task_and_swarm() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("use", &fake)
        .default("retries", "1")
        .default("permissions", r#"{ allow = ["Edit"], otherwise = "deny" }"#)
        .task(agent_task(
            "one",
            &["one/**"],
            &["FAKE: usage 1000 200 300 400 0.5", "FAKE: write one/x.txt x"],
        ))
        .task(agent_task(
            "two",
            &["two/**"],
            &[
                "FAKE[attempt=1]: usage 10 20 30 40 0.125",
                "FAKE[attempt=1]: error \"spent and failed\"",
                "FAKE[attempt=2]: usage 1 2 3 4 0.25",
                "FAKE: write two/x.txt x",
            ],
        ))
        .build();
    let cluster = Cluster::start(&repo, 2, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let one = wait_task_state(&url, "use", "one", TaskState::Merged).await;
    let two = wait_task_state(&url, "use", "two", TaskState::Merged).await;

    let a1 = attempts(&url, "use/one").await;
    assert_eq!(usage_of(a1[0].usage.as_ref()), (1000, 200, 300, 400, 0.5));
    assert_eq!(usage_of(one.usage.as_ref()), (1000, 200, 300, 400, 0.5));
    let a2 = attempts(&url, "use/two").await;
    assert_eq!(usage_of(a2[0].usage.as_ref()), (10, 20, 30, 40, 0.125), "a failed attempt's usage counts");
    assert_eq!(usage_of(a2[1].usage.as_ref()), (1, 2, 3, 4, 0.25));
    assert_eq!(usage_of(two.usage.as_ref()), (11, 22, 33, 44, 0.375));

    let mut op = operator(&url).await;
    let swarm = op.get_swarm(v1::GetSwarmRequest { swarm_id: "use".into() }).await.unwrap().into_inner();
    assert_eq!(usage_of(swarm.usage.as_ref()), (1011, 222, 333, 444, 0.875));

    let out = swarmctl(&url, &["describe", "task", "use/two", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["task"]["usage"]["cost_usd"], 0.375, "{json}");
    assert_eq!(json["task"]["usage"]["input_tokens"], 11, "{json}");
    assert_eq!(json["attempts"][0]["usage"]["output_tokens"], 20, "{json}");
    assert_eq!(json["attempts"][1]["agent"], "claude", "{json}");
    let runs = fake.runs("two");
    assert_eq!(json["attempts"][1]["session_id"], runs[1]["session"], "{json}");
}

/// codex exec: its items are the progress, its file changes merge, and its
/// token usage is the attempt's.
#[tokio::test(flavor = "multi_thread")]
async fn codex_runs_a_task_and_its_usage_is_recorded() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = PlanBuilder::new("cx")
        .remove_default("command")
        .default("agent", r#""codex""#)
        .default("agent_path", &toml_str(fake_path("fake-codex").to_str().unwrap()))
        .default("model", r#""gpt-fake""#)
        .default("extra_args", r#"["--sandbox", "workspace-write"]"#)
        .default("env", &format!("{{ FAKE_AGENT_STATE = {} }}", toml_str(fake.path().to_str().unwrap())))
        .sandbox(&[], &[fake.path()])
        .task(agent_task(
            "t",
            &["src/**"],
            &[
                "FAKE: write src/c.txt codex",
                "FAKE: bash \"echo ran > src/d.txt\"",
                "FAKE: todo 1/2",
                "FAKE: malformed",
                "FAKE: usage 500 100 50",
            ],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "cx", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1);
    let tree = repo.tree(&integration("cx"));
    assert_eq!(tree.get("src/c.txt").map(String::as_str), Some("codex\n"), "{tree:?}");
    assert_eq!(tree.get("src/d.txt").map(String::as_str), Some("ran\n"), "{tree:?}");

    let runs = fake.runs("t");
    assert_eq!(runs.len(), 1, "{}", fake.dump());
    let args = argv(&runs[0]);
    assert_eq!(args.first().map(String::as_str), Some("exec"), "{args:?}");
    assert!(args.iter().any(|a| a == "--json"), "{args:?}");
    assert!(has_pair(&args, "--model", "gpt-fake") || has_pair(&args, "-m", "gpt-fake"), "{args:?}");
    assert!(has_pair(&args, "--sandbox", "workspace-write"), "extra_args pass through: {args:?}");

    let a = &attempts(&url, "cx/t").await[0];
    assert_eq!(a.agent, "codex");
    assert_eq!(a.session_id, runs[0]["session"].as_str().unwrap(), "the thread id is the session");
    let (input, output, cache_read, _, _) = usage_of(a.usage.as_ref());
    assert_eq!((output, cache_read), (50, 100), "{:?}", a.usage);
    // codex counts cached tokens inside input_tokens; either reading is fine.
    assert!(input == 500 || input == 400, "{:?}", a.usage);
    assert_eq!(usage_of(t.usage.as_ref()).0, input);
}

/// codex's usage limit (only a message saying when to try again) ends the
/// attempt RATE_LIMITED; after the wait `codex exec resume <thread>` goes on
/// with the same thread, and no retry is spent.
#[tokio::test(flavor = "multi_thread")]
async fn codex_resumes_its_thread_after_a_usage_limit() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = PlanBuilder::new("cxrl")
        .remove_default("command")
        .default("retries", "0")
        .default("agent", r#""codex""#)
        .default("agent_path", &toml_str(fake_path("fake-codex").to_str().unwrap()))
        .default("extra_args", r#"["--sandbox", "workspace-write"]"#)
        .default("env", &format!("{{ FAKE_AGENT_STATE = {} }}", toml_str(fake.path().to_str().unwrap())))
        .sandbox(&[], &[fake.path()])
        .task(agent_task(
            "t",
            &["src/**"],
            &["FAKE: write src/a.txt one", "FAKE: rate-limit 2", "FAKE: write src/b.txt two"],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    let t = wait_task_state(&url, "cxrl", "t", TaskState::Merged).await;
    assert_eq!(t.retries_used, 0);

    let all = attempts(&url, "cxrl/t").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(outcome_of(&all[0]), Outcome::RateLimited, "{all:?}");
    assert_eq!(outcome_of(&all[1]), Outcome::Success, "{all:?}");
    let runs = fake.runs("t");
    assert_eq!(runs.len(), 2, "{}", fake.dump());
    let thread = runs[0]["session"].as_str().unwrap();
    assert!(has_pair(&argv(&runs[1]), "resume", thread), "{:?}", argv(&runs[1]));
    assert_eq!(fake.session(thread)["resumes"], 1);
    let reset_ms = fake.events("t", "rate_limited")[0]["resets_at"].as_i64().unwrap() * 1000;
    assert!(runs[1]["time_ms"].as_i64().unwrap() >= reset_ms, "not before the reset:\n{}", fake.dump());
    let tree = repo.tree(&integration("cxrl"));
    assert_eq!(tree.get("src/a.txt").map(String::as_str), Some("one\n"), "{tree:?}");
    assert_eq!(tree.get("src/b.txt").map(String::as_str), Some("two\n"), "{tree:?}");
}

/// `swarmctl message` reaches a running agent: the message lands in its
/// worktree (`.swarm/messages/`, task.md) at once, is recorded as an event,
/// and goes to the same agent process as its next user message.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_message_reaches_the_running_agent_as_its_next_message() {
    let fake = Fake::new();
    let repo = TempRepo::with_files(&[]);
    let plan = claude_plan("msg", &fake)
        .task(agent_task(
            "t",
            &["src/**"],
            // The agent waits for the message's file, then goes on.
            &["FAKE: write src/a.txt one", "FAKE: gate .swarm/messages/m1.md", "FAKE: write src/b.txt two"],
        ))
        .build();
    let cluster = Cluster::start(&repo, 1, &[]);
    let url = cluster.url();
    create_swarm(&url, &plan).await;
    poll("the agent's first write", WAIT, || async { (!fake.events("t", "tool").is_empty()).then_some(()) })
        .await;
    let out = swarmctl(&url, &["message", "msg/t", "Use blue for the button."]);
    assert_eq!(out.status.code(), Some(0), "message: {}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("message m1 sent"), "{}", stderr(&out));

    let t = wait_task_state(&url, "msg", "t", TaskState::Merged).await;
    assert_eq!(t.attempts, 1);
    let tree = repo.tree(&integration("msg"));
    assert!(tree.contains_key("src/a.txt") && tree.contains_key("src/b.txt"), "{tree:?}");
    let got: Vec<String> =
        fake.events("t", "user_message").iter().map(|e| e["text"].as_str().unwrap().to_string()).collect();
    assert!(
        got.iter().any(|m| m.contains("A message from the operator (m1)") && m.contains("Use blue")),
        "the agent's user messages: {got:?}\n{}",
        fake.dump()
    );
    assert_eq!(fake.runs("t").len(), 1, "the same process took it:\n{}", fake.dump());
    let events = task_events(&url, "msg/t").await;
    assert!(events.iter().any(|e| e.kind == "task.message" && e.message.contains("Use blue")), "{events:?}");
    let worktree = repo.path().join(".git/workspaces/w1/.swarm");
    let task_md = std::fs::read_to_string(worktree.join("task.md")).unwrap();
    assert!(task_md.contains("## Messages from the operator") && task_md.contains("Use blue"), "{task_md}");

    // A task that is not running has no worker to message.
    let out = swarmctl(&url, &["message", "msg/t", "too late"]);
    assert_eq!(out.status.code(), Some(5), "FailedPrecondition: {}", stderr(&out));
}
