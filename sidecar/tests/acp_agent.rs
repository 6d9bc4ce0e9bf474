//! `agent = "acp"` attempts against tiny fake ACP servers (shell scripts
//! that answer the handshake by the ids the client uses): the real attempt
//! driver, a real repository, reports read from the driver's channel.

use std::path::Path;
use std::time::Duration;

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_sidecar::attempt::{self, Assignment, Stop};
use swarm_tests::{TempRepo, script};
use tokio::sync::{mpsc, watch};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/sent.rs"]
mod sent;
use sent::Report;

fn assign(base: &str, agent: &Path) -> v1::Assign {
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
            kind: "acp".into(),
            path: agent.to_string_lossy().into_owned(),
            extra_args: vec!["--acp".into()],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs the attempt, answering each question as `answer` says and sending
/// `stop` once a Progress names the session; returns every report and the
/// result.
async fn run(
    repo: &Path,
    a: v1::Assign,
    answer: impl Fn(&str) -> Option<String>,
    stop: Option<Stop>,
) -> (Vec<Report>, v1::AttemptResult) {
    let assignment = Assignment::try_from(&a).expect("valid assign");
    let (stop_tx, stop_rx) = watch::channel(None);
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
                Report::Progress(p) if !p.session_id.is_empty() && stop.is_some() => {
                    let _ = stop_tx.send(stop);
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

/// The handshake by the client's ids: 0 initialize, 1 session/new, 2 the
/// first prompt.
const HANDSHAKE: &str = r#"read -r init
case "$init" in *'"method":"initialize"'*'"terminal":false'*) ;; *) echo "bad initialize: $init" >&2; exit 9;; esac
echo '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false},"authMethods":[]}}'
read -r new
case "$new" in *'"method":"session/new"'*) ;; *) echo "bad session/new: $new" >&2; exit 9;; esac
echo '{"jsonrpc":"2.0","id":1,"result":{"sessionId":"acp-1"}}'
read -r prompt
case "$prompt" in *'"method":"session/prompt"'*'# Task'*) ;; *) echo "bad prompt: $prompt" >&2; exit 9;; esac
"#;

const TURN: &str = r#"
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"acp-1","update":{"sessionUpdate":"plan","entries":[{"content":"write","priority":"high","status":"in_progress"},{"content":"test","priority":"low","status":"pending"}]}}}'
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"acp-1","update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"Write src/a.rs","kind":"edit","status":"pending","locations":[{"path":"src/a.rs"}]}}}'
printf '%s\n' '{"jsonrpc":"2.0","id":"w1","method":"fs/write_text_file","params":{"sessionId":"acp-1","path":"'"$PWD"'/src/a.rs","content":"fn a() {}\n"}}'
read -r reply; printf '%s\n' "$reply" > .swarm/write1.json
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"acp-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed"}}}'
echo '{"jsonrpc":"2.0","id":"w2","method":"fs/write_text_file","params":{"sessionId":"acp-1","path":"'"$PWD"'/Cargo.toml","content":"x"}}'
read -r reply; printf '%s\n' "$reply" > .swarm/write2.json
echo 'this is not json'
echo '{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"acp-1","toolCall":{"toolCallId":"p","title":"Run: cargo publish","rawInput":{"command":"cargo publish"}},"options":[{"optionId":"yes","name":"Allow","kind":"allow_once"},{"optionId":"no","name":"Reject","kind":"reject_once"}]}}'
read -r reply; printf '%s\n' "$reply" > .swarm/perm.json
echo '{"jsonrpc":"2.0","id":8,"method":"terminal/create","params":{"sessionId":"acp-1","command":"ls"}}'
read -r reply; printf '%s\n' "$reply" > .swarm/terminal.json
echo '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"acp-1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Wrote src/a.rs."}}}}'
echo '{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
while read -r line; do :; done
"#;

#[tokio::test]
async fn an_acp_turn_with_files_and_permissions_ends_in_a_verified_commit() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let fake = script(repo.path(), "acp-ok", &format!("{HANDSHAKE}{TURN}"));
    let (reports, r) =
        run(repo.path(), assign(&base, &fake), |q| (q == "perm-1").then(|| "deny not now".into()), None)
            .await;
    assert_eq!(r.outcome, v1::Outcome::Success as i32, "{r:?}\n{reports:?}");
    assert_eq!(r.files_changed, vec!["src/a.rs"]);
    assert_eq!(r.summary, "Wrote src/a.rs.");
    assert_eq!(r.session_id, "acp-1");
    let wt = harness::worktree(repo.path(), "w1");
    assert_eq!(std::fs::read_to_string(wt.join("src/a.rs")).expect("written by the sidecar"), "fn a() {}\n");
    assert_eq!(std::fs::read_to_string(wt.join("Cargo.toml")).expect("base"), "[package]", "not owned");
    let read = |f: &str| std::fs::read_to_string(wt.join(".swarm").join(f)).expect("reply");
    assert!(read("write1.json").contains(r#""id":"w1","result":{}"#), "{}", read("write1.json"));
    let write2 = read("write2.json");
    assert!(write2.contains(r#""error""#) && write2.contains("owned files"), "{write2}");
    let perm = read("perm.json");
    assert!(perm.contains(r#""id":7"#) && perm.contains(r#""optionId":"no""#), "{perm}");
    assert!(read("terminal.json").contains("-32601"), "terminals are not offered");
    let question = reports.iter().find_map(|r| match r {
        Report::Journaled(Body::Question(q)) => Some(q.clone()),
        _ => None,
    });
    let q = question.expect("a permission question");
    assert_eq!(q.category, "permission");
    assert!(q.text.contains("Bash wants to run: cargo publish"), "{}", q.text);
    assert!(r.log_tail.iter().any(|l| l == "Edit src/a.rs"), "the tool call is a step: {:?}", r.log_tail);
}

#[tokio::test]
async fn a_checkpoint_cancels_the_turn_before_the_agent_is_stopped() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let body = format!(
        r#"{HANDSHAKE}
read -r cancel
printf '%s\n' "$cancel" > .swarm/cancel.json
echo '{{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"cancelled"}}}}'
while read -r line; do :; done
"#
    );
    let fake = script(repo.path(), "acp-cancel", &body);
    let stop = Stop::Checkpoint { grace: Duration::from_secs(2) };
    let (reports, r) = run(repo.path(), assign(&base, &fake), |_| None, Some(stop)).await;
    assert_eq!(r.outcome, v1::Outcome::Checkpoint as i32, "{r:?}\n{reports:?}");
    assert_eq!(r.session_id, "acp-1");
    let cancel = std::fs::read_to_string(harness::worktree(repo.path(), "w1").join(".swarm/cancel.json"))
        .expect("cancel");
    assert!(cancel.contains(r#""method":"session/cancel""#) && cancel.contains("acp-1"), "{cancel}");
}

#[tokio::test]
async fn an_agent_that_lingers_after_its_last_turn_is_stopped_and_the_turn_counts() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("Cargo.toml", Some("[package]"))], "base");
    let body = format!(
        r#"{HANDSHAKE}
mkdir -p src && echo 'fn b() {{}}' > src/b.rs
echo '{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"acp-1","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"Done."}}}}}}}}'
echo '{{"jsonrpc":"2.0","id":2,"result":{{"stopReason":"end_turn"}}}}'
exec sleep 60
"#
    );
    let fake = script(repo.path(), "acp-linger", &body);
    let started = std::time::Instant::now();
    let (reports, r) = run(repo.path(), assign(&base, &fake), |_| None, None).await;
    assert_eq!(r.outcome, v1::Outcome::Success as i32, "{r:?}\n{reports:?}");
    assert_eq!((r.summary.as_str(), r.files_changed.as_slice()), ("Done.", &["src/b.rs".to_string()][..]));
    assert!(started.elapsed() < Duration::from_secs(15), "stopped after a few quiet seconds");
}
