//! A finished attempt's log on the sidecar's disk holds no secret value: the
//! worktree, and its `.swarm/logs/`, pass to the next task's worker. A real
//! attempt, a real shell-script worker that says its secret out loud.

use std::time::Duration;

use swarm_proto::v1;
use swarm_sidecar::attempt::{self, Assignment};
use swarm_tests::{TempRepo, script};
use tokio::sync::{mpsc, watch};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/sent.rs"]
mod sent;

const VALUE: &str = "sk-test-0123456789abcdef";

#[tokio::test]
async fn a_finished_attempts_log_on_disk_holds_no_secret_value() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let dir = tempfile::tempdir().expect("dir");
    let secret = dir.path().join("api-key");
    std::fs::write(&secret, format!("{VALUE}\n")).expect("secret");
    // Out loud on both streams, in two writes that the log holds together,
    // and at the end of a line longer than any one read.
    let worker = script(
        repo.path(),
        "w.sh",
        r#"echo "calling with $API_KEY"
echo "stderr: $API_KEY" >&2
printf '%s' "$API_KEY" | head -c 7; printf '%s\n' "${API_KEY#sk-test}"
head -c 100000 /dev/zero | tr '\0' x; echo "$API_KEY"
echo done > out.txt
"#,
    );
    let a = v1::Assign {
        attempt: Some(v1::AttemptRef {
            swarm_id: "s".into(),
            task_id: "t".into(),
            attempt: 1,
            fencing_token: 3,
        }),
        base_commit: base,
        branch: "swarm/s/t".into(),
        title: "Do t".into(),
        task_text: "# Task\n".into(),
        command: vec![worker.to_string_lossy().into_owned()],
        sandbox: Some(v1::SandboxSpec {
            read: vec![worker.parent().expect("script dir").to_string_lossy().into_owned()],
            ..Default::default()
        }),
        secrets: vec![v1::SecretRef {
            name: "API_KEY".into(),
            source: Some(v1::secret_ref::Source::File(secret.to_string_lossy().into_owned())),
        }],
        ..Default::default()
    };
    let ctx = harness::ctx(repo.path(), "w1", None);
    let (_stop, stop_rx) = watch::channel(None);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let assignment = Assignment::try_from(&a).expect("valid assign");
    let run = tokio::spawn(attempt::run(ctx, assignment, stop_rx, tx));
    tokio::time::timeout(Duration::from_secs(30), run).await.expect("attempt ends").expect("join");
    let mut reports = Vec::new();
    while let Ok(r) = rx.try_recv() {
        reports.push(sent::Report::from(r));
    }
    let result = harness::the_result(&reports);
    assert_eq!(result.outcome, v1::Outcome::Success as i32, "{result:?}");

    let logs = harness::worktree(repo.path(), "w1").join(".swarm/logs");
    let log = std::fs::read(logs.join("s.t-1.log")).expect("the attempt's log");
    let text = String::from_utf8_lossy(&log);
    assert!(!text.contains(VALUE), "the value is in the log on disk:\n{text}");
    assert_eq!(text.matches("[redacted API_KEY]").count(), 4, "the worker said it, redacted:\n{text}");
    assert!(text.contains("calling with [redacted API_KEY]") && text.contains("stderr: [redacted API_KEY]"));
    assert!(text.contains(&format!("{}[redacted API_KEY]", "x".repeat(100))), "the long line");
    let names: Vec<_> =
        std::fs::read_dir(&logs).expect("logs").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("s.t-1.log")], "no copy is left beside it");
}
