//! Agent attempts end to end against tiny fake `claude` scripts: the real
//! attempt driver, a real repository, reports read from the driver's channel.

use std::path::Path;
use std::time::Duration;

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_sidecar::attempt::{self, Assignment};
use swarm_tests::{TempRepo, script};
use tokio::sync::{mpsc, watch};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/sent.rs"]
mod sent;
use sent::Report;

fn assign(base: &str, agent: &Path, resume: &str) -> v1::Assign {
    v1::Assign {
        attempt: Some(v1::AttemptRef {
            swarm_id: "s".into(),
            task_id: "api".into(),
            attempt: 1,
            fencing_token: 9,
        }),
        base_commit: base.into(),
        branch: "swarm/s/api".into(),
        title: "Do api".into(),
        task_text: "# Task\nWrite src/a.rs\n".into(),
        owned_globs: vec!["src/**".into()],
        agent: Some(v1::AgentSpec {
            kind: "claude".into(),
            path: agent.to_string_lossy().into_owned(),
            resume_session: resume.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs the attempt, answering each question as `answer` says; returns
/// every report and the result.
async fn run(
    repo: &Path,
    a: v1::Assign,
    answer: impl Fn(&str) -> Option<String>,
) -> (Vec<Report>, v1::AttemptResult) {
    let assignment = Assignment::try_from(&a).expect("valid assign");
    let (_stop_tx, stop_rx) = watch::channel(None);
    let (answers_tx, answers_rx) = mpsc::unbounded_channel();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(attempt::run_with_answers(
        harness::ctx(repo, "w1", Some(Duration::from_secs(20))),
        assignment,
        stop_rx,
        answers_rx,
        tx,
    ));
    let mut reports = Vec::new();
    let result = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(r) = rx.recv().await {
            let r = Report::from(r);
            reports.push(r.clone());
            match r {
                Report::Journaled(Body::Question(q)) => {
                    if let Some(text) = answer(&q.question_id) {
                        answers_tx.send((q.question_id.clone(), text)).expect("answer");
                    }
                }
                Report::Journaled(Body::Result(r)) => return r,
                _ => {}
            }
        }
        panic!("no result: {reports:?}")
    })
    .await
    .expect("attempt ends");
    task.await.expect("join");
    (reports, result)
}

fn statuses(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .filter_map(|r| match r {
            Report::Journaled(Body::Status(s)) => Some(s.message.clone()),
            _ => None,
        })
        .collect()
}

const TURN: &str = r#"read -r init
case "$init" in *'"subtype":"initialize"'*) ;; *) echo "no initialize first: $init" >&2; exit 9;; esac
case "$init" in *'"PreToolUse"'*) ;; *) echo "no PreToolUse hook: $init" >&2; exit 9;; esac
read -r first
case "$first" in *'"type":"user"'*) ;; *) echo "bad first message: $first" >&2; exit 9;; esac
case "$first" in *'# Task'*) ;; *) echo "no task text: $first" >&2; exit 9;; esac
echo '{"type":"system","subtype":"init","session_id":"sess-1","future_field":true}'
mkdir -p src && echo 'fn a() {}' > src/a.rs
echo '{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"src/a.rs"}}],"usage":{"input_tokens":5,"output_tokens":3}}}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}'
echo 'this is not json'
echo '{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"cargo publish"}}}'
read -r reply; printf '%s\n' "$reply" > .swarm/reply1.json
echo '{"type":"control_request","request_id":"r2","request":{"subtype":"can_use_tool","tool_name":"Edit","input":{"file_path":"Cargo.toml"}}}'
read -r reply; printf '%s\n' "$reply" > .swarm/reply2.json
echo '{"type":"control_request","request_id":"r3","request":{"subtype":"mcp_message","server_name":"x"}}'
read -r reply; printf '%s\n' "$reply" > .swarm/reply3.json
echo '{"type":"result","subtype":"success","is_error":false,"result":"Edited src/a.rs","session_id":"sess-1","total_cost_usd":0.5,"usage":{"input_tokens":5,"output_tokens":3}}'
while read -r line; do :; done
"#;

#[tokio::test]
async fn a_claude_turn_with_permissions_ends_in_a_verified_commit() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let fake = script(repo.path(), "claude-ok", TURN);
    let (reports, r) =
        run(repo.path(), assign(&base, &fake, ""), |q| (q == "perm-1").then(|| "deny not now".into())).await;
    assert_eq!(r.outcome, v1::Outcome::Success as i32, "{r:?}\n{reports:?}");
    assert_eq!(r.files_changed, vec!["src/a.rs"]);
    assert_eq!(r.summary, "Edited src/a.rs");
    assert_eq!(r.session_id, "sess-1");
    let u = r.usage.expect("usage");
    assert_eq!((u.input_tokens, u.output_tokens, u.cost_usd), (5, 3, 0.5));
    let wt = harness::worktree(repo.path(), "w1");
    let read = |f: &str| std::fs::read_to_string(wt.join(".swarm").join(f)).expect("reply");
    let reply1 = read("reply1.json");
    assert!(reply1.contains(r#""behavior":"deny""#) && reply1.contains("not now"), "{reply1}");
    let reply2 = read("reply2.json");
    assert!(reply2.contains("Cargo.toml") && reply2.contains("owned"), "{reply2}");
    assert!(read("reply3.json").contains(r#""subtype":"error""#));
    let questions: Vec<_> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Journaled(Body::Question(q)) => Some(q.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(questions.len(), 1, "only the Bash request asks: {questions:?}");
    assert_eq!(
        (questions[0].category.as_str(), questions[0].text.lines().next()),
        ("permission", Some("Bash wants to run: cargo publish"))
    );
    let st = statuses(&reports);
    assert!(
        st.iter().any(|m| m.starts_with("permission denied: Bash wants to run: cargo publish")),
        "{st:?}"
    );
    assert!(st.iter().any(|m| m.starts_with("permission denied: Edit wants to change Cargo.toml")), "{st:?}");
    assert!(st.iter().any(|m| m.starts_with("agent printed an unparseable line")), "{st:?}");
    assert!(reports.iter().any(|r| matches!(r, Report::Progress(p) if p.session_id == "sess-1")));
    let rec = swarm_sidecar::agent::session::read(&wt).expect("agent-session.json");
    assert_eq!((rec.session_id.as_str(), rec.commit.as_str()), ("sess-1", r.commit.as_str()));
}

#[tokio::test]
async fn a_usage_limit_keeps_the_work_and_the_next_attempt_resumes_it() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let limited = script(
        repo.path(),
        "claude-limited",
        r#"read -r init; read -r first
echo '{"type":"system","subtype":"init","session_id":"sess-2"}'
mkdir -p src && echo wip > src/b.rs
echo '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1900000000,"rateLimitType":"five_hour"},"uuid":"u","session_id":"sess-2"}'
echo '{"type":"result","subtype":"error_during_execution","is_error":true,"result":"Claude AI usage limit reached|1900000000","session_id":"sess-2"}'
while read -r line; do :; done
"#,
    );
    let (_, r) = run(repo.path(), assign(&base, &limited, ""), |_| None).await;
    assert_eq!(r.outcome, v1::Outcome::RateLimited as i32, "{r:?}");
    assert_eq!((r.rate_limit_reset_unix_ms, r.rate_limit_kind.as_str()), (1_900_000_000_000, "five_hour"));
    assert_eq!((r.session_id.as_str(), r.files_changed.clone()), ("sess-2", vec!["src/b.rs".to_string()]));

    let resumed = script(
        repo.path(),
        "claude-resumed",
        r#"echo "$@" > .swarm/args.txt
read -r init; read -r first; printf '%s\n' "$first" > .swarm/first.json
echo '{"type":"system","subtype":"init","session_id":"sess-2"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"finished","session_id":"sess-2","total_cost_usd":0.1}'
while read -r line; do :; done
"#,
    );
    let (_, r2) = run(repo.path(), assign(&r.commit, &resumed, "sess-2"), |_| None).await;
    assert_eq!(r2.outcome, v1::Outcome::Success as i32, "{r2:?}");
    let wt = harness::worktree(repo.path(), "w1");
    let args = std::fs::read_to_string(wt.join(".swarm/args.txt")).expect("args");
    assert!(args.contains("--resume sess-2"), "{args}");
    let first = std::fs::read_to_string(wt.join(".swarm/first.json")).expect("first");
    assert!(first.contains("Continue the task") && first.contains("# Task"), "{first}");

    // A session whose work is not what the attempt starts from is not resumed.
    let (_, r3) = run(repo.path(), assign(&base, &resumed, "sess-2"), |_| None).await;
    assert_eq!(r3.outcome, v1::Outcome::Success as i32);
    let args = std::fs::read_to_string(wt.join(".swarm/args.txt")).expect("args");
    assert!(!args.contains("--resume"), "{args}");
}

#[tokio::test]
async fn a_question_keeps_the_agent_waiting_for_the_answer() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let fake = script(
        repo.path(),
        "claude-asks",
        r#"read -r init; read -r first
echo '{"type":"system","subtype":"init","session_id":"sess-3"}'
echo '{"status":"question","question":{"id":"q1","text":"Which port?","category":"ambiguous_spec"}}' > .swarm/status.json
echo '{"type":"result","subtype":"success","is_error":false,"result":"asked","session_id":"sess-3"}'
read -r answer
case "$answer" in *8080*) ;; *) echo "bad answer: $answer" >&2; exit 7;; esac
mkdir -p src && echo 8080 > src/port.rs
echo '{"status":"done"}' > .swarm/status.json
echo '{"type":"result","subtype":"success","is_error":false,"result":"port set","session_id":"sess-3"}'
while read -r line; do :; done
"#,
    );
    let (_, r) = run(repo.path(), assign(&base, &fake, ""), |q| (q == "q1").then(|| "use 8080".into())).await;
    assert_eq!(r.outcome, v1::Outcome::Success as i32, "{r:?}");
    assert_eq!((r.summary.as_str(), r.files_changed.clone()), ("port set", vec!["src/port.rs".to_string()]));
}

#[tokio::test]
async fn an_agent_dying_mid_turn_is_an_error() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let fake = script(
        repo.path(),
        "claude-dies",
        "read -r first\necho '{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\"}'\nexit 3",
    );
    let (_, r) = run(repo.path(), assign(&base, &fake, ""), |_| None).await;
    assert_eq!(r.outcome, v1::Outcome::Error as i32);
    assert_eq!(r.error, "agent exited with code 3 before its result");
    assert_eq!(r.exit_code, 3);

    let killed = script(repo.path(), "claude-killed", "read -r first\nkill -9 $$");
    let (_, r) = run(repo.path(), assign(&base, &killed, ""), |_| None).await;
    assert_eq!(r.outcome, v1::Outcome::Signaled as i32, "{r:?}");
    assert_eq!(r.error, "agent killed by signal 9 before its result");

    let missing = repo.path().join("no-such-claude");
    let (_, r) = run(repo.path(), assign(&base, &missing, ""), |_| None).await;
    assert_eq!(r.outcome, v1::Outcome::Error as i32);
    assert!(r.error.contains("cannot start"), "{}", r.error);
}

#[tokio::test]
async fn a_blocked_status_maps_to_blocked() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let fake = script(
        repo.path(),
        "claude-blocked",
        r#"read -r init; read -r first
echo '{"status":"blocked","message":"needs the db schema"}' > .swarm/status.json
echo '{"type":"result","subtype":"success","is_error":false,"result":"stuck","session_id":"s"}'
while read -r line; do :; done
"#,
    );
    let (_, r) = run(repo.path(), assign(&base, &fake, ""), |_| None).await;
    assert_eq!(r.outcome, v1::Outcome::Blocked as i32, "{r:?}");
    assert_eq!(r.error, "needs the db schema");
}

#[tokio::test]
async fn a_lost_agent_attempt_is_checkpointed_with_its_session() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let fake = script(
        repo.path(),
        "claude-first",
        r#"read -r init; read -r first
echo '{"type":"system","subtype":"init","session_id":"sess-9"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"sess-9"}'
while read -r line; do :; done
"#,
    );
    let a = assign(&base, &fake, "");
    let (_, first) = run(repo.path(), a.clone(), |_| None).await;
    assert_eq!(first.outcome, v1::Outcome::Success as i32);
    // What a killed sidecar's agent left behind.
    let wt = harness::worktree(repo.path(), "w1");
    std::fs::create_dir_all(wt.join("src")).expect("mkdir");
    std::fs::write(wt.join("src/half.rs"), "// half done").expect("write");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let assignment = Assignment::try_from(&a).expect("valid");
    attempt::checkpoint_lost(harness::ctx(repo.path(), "w1", Some(Duration::from_secs(20))), assignment, tx)
        .await;
    let Some(Report::Journaled(Body::Result(r))) = rx.recv().await.map(Report::from) else {
        panic!("a result")
    };
    assert_eq!(r.outcome, v1::Outcome::Checkpoint as i32, "{r:?}");
    assert_eq!(r.session_id, "sess-9");
    assert!(r.files_changed.contains(&"src/half.rs".to_string()), "{r:?}");
    let rec = swarm_sidecar::agent::session::read(&wt).expect("record");
    assert_eq!(rec.commit, r.commit);
}
