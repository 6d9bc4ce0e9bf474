//! One attempt end to end, without a controller: real repository, real
//! shell-script workers, the driver's reports read from its channel.

use std::path::Path;
use std::time::Duration;

use swarm_proto::v1;
use swarm_proto::v1::sidecar_message::Body;
use swarm_sidecar::attempt::{self, Assignment, Context, Stop};
use swarm_tests::{TempRepo, poll, script};
use tokio::sync::{mpsc, watch};

#[path = "support/harness.rs"]
mod harness;
#[path = "support/sent.rs"]
mod sent;
use sent::Report;

fn assign(base: &str, worker: &Path, task: &str) -> v1::Assign {
    v1::Assign {
        attempt: Some(v1::AttemptRef {
            swarm_id: "s".into(),
            task_id: task.into(),
            attempt: 1,
            fencing_token: 9,
        }),
        base_commit: base.into(),
        branch: format!("swarm/s/{task}"),
        title: format!("Do {task}"),
        task_text: "# Task\n".into(),
        command: vec![worker.to_string_lossy().into_owned()],
        // The test's scripts sit beside the repository, as a plan's tools
        // outside the worktree would: named for the sandbox to read.
        sandbox: Some(v1::SandboxSpec {
            read: vec![worker.parent().expect("script dir").to_string_lossy().into_owned()],
            ..Default::default()
        }),
        max_restarts: 2,
        ..Default::default()
    }
}

struct Run {
    reports: Vec<Report>,
}

impl Run {
    fn result(&self) -> &v1::AttemptResult {
        harness::the_result(&self.reports)
    }

    fn journaled(&self) -> Vec<&Body> {
        self.reports
            .iter()
            .filter_map(|r| match r {
                Report::Journaled(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    fn outcome(&self) -> v1::Outcome {
        v1::Outcome::try_from(self.result().outcome).expect("outcome")
    }
}

async fn run_with(ctx: Context, a: v1::Assign, stop_after_line: Option<(&str, Stop)>) -> Run {
    let assignment = Assignment::try_from(&a).expect("valid assign");
    let (stop_tx, stop_rx) = watch::channel(None);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(attempt::run(ctx.clone(), assignment, stop_rx, tx));
    if let Some((file, stop)) = stop_after_line {
        let wt = ctx.repo.join(".git/workspaces").join(&ctx.worker_id).join(file);
        poll("worker ready", Duration::from_secs(10), || async { wt.exists().then_some(()) }).await;
        stop_tx.send(Some(stop)).expect("send stop");
    }
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("attempt ends").expect("join");
    let mut reports = Vec::new();
    while let Ok(r) = rx.try_recv() {
        reports.push(Report::from(r));
    }
    Run { reports }
}

#[tokio::test]
async fn exit_0_verifies_commits_and_reports_the_result() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(
        repo.path(),
        "w.sh",
        r#"set -e
test -f "$SWARM_TASK_FILE"
echo "$SWARM_SWARM_ID/$SWARM_TASK_ID#$SWARM_ATTEMPT $SWARM_BRANCH $SWARM_WORKER_ID" > env.txt
echo '{"status":"done","message":"all good","progress":{"percent":100,"step":"done"}}' > "$SWARM_STATUS_FILE"
echo working
"#,
    );
    let mut a = assign(&base, &worker, "api");
    a.verify = vec![
        v1::VerifyTier {
            name: "lint".into(),
            command: "test -f env.txt".into(),
            blocking: true,
            timeout_secs: 10,
        },
        v1::VerifyTier { name: "soft".into(), command: "exit 1".into(), blocking: false, timeout_secs: 10 },
    ];
    let run = run_with(harness::ctx(repo.path(), "w1", None), a, None).await;
    assert_eq!(run.outcome(), v1::Outcome::Success, "{:?}", run.result());
    let r = run.result();
    assert_eq!(r.commit.len(), 40);
    assert_eq!(r.files_changed, vec!["env.txt"]);
    assert_eq!(r.summary, "all good");
    assert_eq!(r.tiers.len(), 2);
    assert!(r.tiers[0].passed && !r.tiers[1].passed);
    let git = repo.git2();
    let commit = git.find_commit(git2::Oid::from_str(&r.commit).expect("oid")).expect("commit");
    assert_eq!(commit.message(), Some("Do api\n\nSwarm-Attempt: s/api#1"));
    let tree = commit.tree().expect("tree");
    assert!(tree.get_name(".swarm").is_none(), ".swarm/ is not committed");
    let blob = tree.get_name("env.txt").expect("env.txt").to_object(&git).expect("obj");
    let text = String::from_utf8_lossy(blob.as_blob().expect("blob").content()).into_owned();
    assert_eq!(text.trim(), "s/api#1 swarm/s/api w1");
    let branch = git.find_branch("swarm/s/api", git2::BranchType::Local).expect("branch");
    assert_eq!(branch.get().target().expect("target").to_string(), r.commit);
    assert!(matches!(run.journaled()[0], Body::Started(s) if s.restarts == 0 && s.pid > 0));
    let log = repo.path().join(".git/workspaces/w1/.swarm/logs/s.api-1.log");
    assert!(std::fs::read_to_string(log).expect("log").contains("working"));
}

#[tokio::test]
async fn failing_blocking_tier_is_verify_failed() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(repo.path(), "w.sh", "echo x > b.txt");
    let mut a = assign(&base, &worker, "t");
    a.verify = vec![
        v1::VerifyTier {
            name: "test".into(),
            command: "echo boom; exit 3".into(),
            blocking: true,
            timeout_secs: 10,
        },
        v1::VerifyTier { name: "never".into(), command: "true".into(), blocking: true, timeout_secs: 10 },
    ];
    let run = run_with(harness::ctx(repo.path(), "w1", None), a, None).await;
    assert_eq!(run.outcome(), v1::Outcome::VerifyFailed);
    let r = run.result();
    assert_eq!(r.tiers.len(), 1, "stops at the first failing blocking tier");
    assert_eq!(r.tiers[0].exit_code, 3);
    assert_eq!(r.tiers[0].output_tail, "boom");
}

#[tokio::test]
async fn exit_2_commits_wip_and_reports_checkpoint() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(
        repo.path(),
        "w.sh",
        r#"echo half > half.txt
echo '{"status":"working","message":"halfway","progress":{"percent":50,"step":"parsing"}}' > "$SWARM_STATUS_FILE"
exit 2"#,
    );
    let run = run_with(harness::ctx(repo.path(), "w1", None), assign(&base, &worker, "t"), None).await;
    assert_eq!(run.outcome(), v1::Outcome::Checkpoint);
    let r = run.result();
    let git = repo.git2();
    let commit = git.find_commit(git2::Oid::from_str(&r.commit).expect("oid")).expect("commit");
    let msg = commit.message().expect("message");
    assert!(msg.starts_with("WIP: checkpoint s/t#1\n"), "{msg}");
    assert!(msg.contains("Progress: 50%") && msg.contains("Step: parsing"), "{msg}");
    assert_eq!(r.files_changed, vec!["half.txt"]);
    assert_eq!(r.exit_code, 2);
}

#[tokio::test]
async fn other_exit_codes_map_with_their_details() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let cases: [(&str, v1::Outcome); 5] = [
        (
            r#"echo '{"status":"blocked","message":"need creds"}' > "$SWARM_STATUS_FILE"; exit 3"#,
            v1::Outcome::Blocked,
        ),
        (
            r#"echo '{"status":"question","message":"unsure","question":{"id":"q1","text":"Which API?","category":"ambiguous_spec"}}' > "$SWARM_STATUS_FILE"; exit 4"#,
            v1::Outcome::Escalation,
        ),
        ("echo failing-line; exit 1", v1::Outcome::Error),
        ("exit 130", v1::Outcome::Interrupted),
        ("kill -TERM $$", v1::Outcome::Signaled),
    ];
    for (i, (body, expected)) in cases.into_iter().enumerate() {
        let worker = script(repo.path(), &format!("w{i}.sh"), body);
        let run = run_with(harness::ctx(repo.path(), "w1", None), assign(&base, &worker, "t"), None).await;
        assert_eq!(run.outcome(), expected, "{body}");
        let r = run.result();
        match expected {
            v1::Outcome::Blocked => assert_eq!(r.error, "need creds"),
            v1::Outcome::Escalation => {
                assert_eq!((r.category.as_str(), r.error.as_str()), ("ambiguous_spec", "Which API?"));
            }
            v1::Outcome::Error => {
                assert_eq!(r.log_tail, vec!["failing-line"]);
                assert_eq!(r.exit_code, 1);
            }
            v1::Outcome::Signaled => assert_eq!(r.signal, Some(15)),
            _ => assert_eq!(r.exit_code, 130),
        }
    }
}

#[tokio::test]
async fn status_updates_are_relayed_and_questions_once() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    // The worker holds each state for 0.5 s, more than two 200 ms polls.
    let worker = script(
        repo.path(),
        "w.sh",
        r#"S="$SWARM_STATUS_FILE"
echo '{"status":"working","message":"start"}' > "$S"; sleep 0.5
echo '{"status":"question","message":"?","question":{"id":"q1","text":"A or B?"}}' > "$S"; sleep 0.5
echo '{"status":"question","message":"still?","question":{"id":"q1","text":"A or B?"}}' > "$S"; sleep 0.5
echo '{"status":"working","progress":{"percent":250}}' > "$S"; sleep 0.5
exit 0"#,
    );
    let run = run_with(harness::ctx(repo.path(), "w1", None), assign(&base, &worker, "t"), None).await;
    let statuses: Vec<String> = run
        .journaled()
        .iter()
        .filter_map(|b| match b {
            Body::Status(s) => Some(s.message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(statuses[..3], ["start", "?", "still?"]);
    assert!(statuses[3].starts_with("invalid status.json: "), "{statuses:?}");
    let questions = run.journaled().iter().filter(|b| matches!(b, Body::Question(_))).count();
    assert_eq!(questions, 1);
    assert_eq!(run.outcome(), v1::Outcome::Success);
}

#[tokio::test]
async fn idle_worker_is_restarted_then_stalled() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(repo.path(), "w.sh", "echo started; exec sleep 30");
    let mut a = assign(&base, &worker, "t");
    a.idle_timeout_secs = 1;
    a.max_restarts = 1;
    let run = run_with(harness::ctx(repo.path(), "w1", None), a, None).await;
    assert_eq!(run.outcome(), v1::Outcome::Stalled);
    let starts: Vec<u32> = run
        .journaled()
        .iter()
        .filter_map(|b| match b {
            Body::Started(s) => Some(s.restarts),
            _ => None,
        })
        .collect();
    assert_eq!(starts, vec![0, 1]);
    assert_eq!(run.result().restarts, 1);
}

#[tokio::test]
async fn cancel_stops_the_group_and_reports_cancelled() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(repo.path(), "w.sh", "trap '' INT; touch ready; while :; do sleep 0.05; done");
    let run = run_with(
        harness::ctx(repo.path(), "w1", None),
        assign(&base, &worker, "t"),
        Some(("ready", Stop::Cancel { grace: Duration::from_millis(200) })),
    )
    .await;
    assert_eq!(run.outcome(), v1::Outcome::Cancelled);
}

#[tokio::test]
async fn silent_stop_reports_no_result() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(repo.path(), "w.sh", "touch ready; exec sleep 30");
    let run = run_with(
        harness::ctx(repo.path(), "w1", None),
        assign(&base, &worker, "t"),
        Some(("ready", Stop::Silent)),
    )
    .await;
    assert!(!run.journaled().iter().any(|b| matches!(b, Body::Result(_))));
}

#[test]
fn answers_go_to_task_md_and_answer_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join(".swarm")).expect("mkdir");
    std::fs::write(dir.path().join(".swarm/task.md"), "# Task\n").expect("task");
    attempt::record_answer(dir.path(), "q1", "Use B.").expect("answer");
    attempt::record_answer(dir.path(), "q2", "Yes.").expect("answer");
    let task = std::fs::read_to_string(dir.path().join(".swarm/task.md")).expect("read");
    assert_eq!(task, "# Task\n\n## Answers\n\n### q1\n\nUse B.\n\n### q2\n\nYes.\n");
    assert_eq!(std::fs::read_to_string(dir.path().join(".swarm/answers/q2.md")).expect("read"), "Yes.");
    assert!(attempt::record_answer(dir.path(), "../x", "no").is_err());
}

#[tokio::test]
async fn output_is_relayed_as_rate_limited_progress() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(
        repo.path(),
        "w.sh",
        r#"echo '{"status":"working","progress":{"percent":30,"step":"build","tests_passing":3,"tests_total":9}}' > "$SWARM_STATUS_FILE"
i=0; while [ $i -lt 15 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done"#,
    );
    let started = std::time::Instant::now();
    let run = run_with(harness::ctx(repo.path(), "w1", None), assign(&base, &worker, "t"), None).await;
    let elapsed = started.elapsed().as_secs_f64();
    let progress: Vec<&v1::Progress> = run
        .reports
        .iter()
        .filter_map(|r| match r {
            Report::Progress(p) => Some(p),
            _ => None,
        })
        .collect();
    assert!(!progress.is_empty());
    assert!(
        progress.len() as f64 <= elapsed * 2.0 + 1.0,
        "{} progress reports in {elapsed:.1} s",
        progress.len()
    );
    let last = progress.last().expect("progress");
    assert_eq!((last.percent, last.step.as_str(), last.tests_total), (30, "build", 9));
    assert!(last.log_tail.len() <= 5 && last.log_tail.iter().all(|l| l.starts_with("line ")), "{last:?}");
}

#[tokio::test]
async fn setup_runs_only_when_the_worktree_is_made() {
    let repo = TempRepo::new();
    let base = repo.commit_on_branch("main", &[("a.txt", Some("a"))], "base");
    let worker = script(repo.path(), "w.sh", "exit 0");
    let marker = repo.path().join(".git/workspaces/w1/.swarm/setup-ran");
    let mut a = assign(&base, &worker, "t1");
    a.setup = vec!["echo $SWARM_TASK_ID > .swarm/setup-ran".into()];
    assert_eq!(
        run_with(harness::ctx(repo.path(), "w1", None), a.clone(), None).await.outcome(),
        v1::Outcome::Success
    );
    assert_eq!(std::fs::read_to_string(&marker).expect("setup ran").trim(), "t1");
    std::fs::remove_file(&marker).expect("rm");
    let mut b = assign(&base, &worker, "t2");
    b.setup = a.setup.clone();
    assert_eq!(
        run_with(harness::ctx(repo.path(), "w1", None), b, None).await.outcome(),
        v1::Outcome::Success
    );
    assert!(!marker.exists(), "setup is not run again on a reused worktree");

    let mut every = assign(&base, &worker, "t2b");
    every.setup = a.setup.clone();
    every.setup_every_attempt = true;
    assert_eq!(
        run_with(harness::ctx(repo.path(), "w1", None), every, None).await.outcome(),
        v1::Outcome::Success
    );
    assert_eq!(
        std::fs::read_to_string(&marker).expect("setup ran again").trim(),
        "t2b",
        "setup_on = \"attempt\" runs it on a reused worktree"
    );

    let mut c = assign(&base, &worker, "t3");
    c.setup = vec!["exit 9".into()];
    let run = run_with(harness::ctx(repo.path(), "w2", None), c, None).await;
    assert_eq!(run.outcome(), v1::Outcome::Error);
    assert!(run.result().error.contains("setup command"), "{:?}", run.result());
}
