//! The scheduler driven turn by turn (no threads but the merger's),
//! checked against a small model of the task lifecycle.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use proptest::prelude::*;
use swarm_core::plan::Plan;
use swarm_core::{Outcome, TaskKey, TaskState};
use tokio::sync::oneshot;

mod agents;
mod budget;
mod durations;
mod forge;
mod order;
mod pipeline;
mod recovery;
mod retention;
mod review;

use super::command::{Command, HelloInfo, OperatorOp, Report, ReportedAttempt, ResultReport};
use super::model::Session;
use super::outbound::Outbound;
use super::views::TaskDetailView;
use super::{Scheduler, Timing};
use crate::merger;
use crate::store::Store;

/// A task view's state as the scheduler's enum (the view carries its name).
fn state(t: &swarm_view::TaskView) -> TaskState {
    t.state.parse().expect("a state this build knows")
}

/// The Hello of a sidecar with no labels, nothing in hand and no secret yet.
fn fresh_hello(worker: &str) -> HelloInfo {
    HelloInfo {
        worker_id: worker.into(),
        labels: Default::default(),
        host: "h".into(),
        last_acked_seq: 0,
        attempt_in_hand: None,
        resume_secret: String::new(),
        principal: None,
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    sched: Scheduler,
    merged: flume::Receiver<Command>,
    outbound: crate::scheduler::outbound::OutboundRx,
    seq: u64,
    base: String,
    repo: std::path::PathBuf,
    /// The first session's close signal.
    closed: tokio_util::sync::CancellationToken,
}

fn git(repo: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Rig {
    fn new(retries: u32) -> Rig {
        Rig::with_queue(retries, 64)
    }

    /// w1's outbound queue holds `queue` messages.
    fn with_queue(retries: u32, queue: usize) -> Rig {
        Rig::build(retries, queue, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n")
    }

    /// A swarm of `tasks` (plan TOML), and w1 connected without labels.
    fn build(retries: u32, queue: usize, tasks: &str) -> Rig {
        Rig::build_with(retries, queue, "", tasks)
    }

    /// As [`Rig::build`], with `top` (plan-level fields) above the defaults.
    fn build_with(retries: u32, queue: usize, top: &str, tasks: &str) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README"), "x\n").expect("write");
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        git(&repo, &["branch", "swarm/s/integration"]);
        let store = Store::open(&dir.path().join("swarm.db")).expect("store");
        let (results, merged) = flume::unbounded();
        let (handle, _thread) = merger::spawn(&repo, super::merger_sink(results)).expect("merger");
        let timing =
            Timing { lease_ttl: Duration::from_secs(3600), lost_grace: Duration::ZERO, ..Timing::default() };
        let mut sched = Scheduler::recover(store, timing, handle).expect("recover");
        let text = format!(
            "name = \"s\"\n{top}[defaults]\ncommand = \"true\"\nretries = {retries}\nbackoff_initial_ms = 0\nbackoff_max_ms = 0\n{tasks}"
        );
        let plan = Arc::new(Plan::parse(&text).expect("plan"));
        let (reply, mut rx) = oneshot::channel();
        sched
            .turn([Command::Operator(OperatorOp::CreateSwarm {
                plan_text: text,
                plan,
                integration_head: base.clone(),
                origin: None,
                reply,
            })])
            .expect("turn");
        rx.try_recv().expect("replied").expect("created");
        let (tx, outbound) = crate::scheduler::outbound::outbound_queue(queue);
        let closed = tokio_util::sync::CancellationToken::new();
        let session =
            Session { id: 1, tx, last_seen: Arc::new(AtomicU64::new(u64::MAX / 2)), closed: closed.clone() };
        let hello = fresh_hello("w1");
        let heard = Command::Heard { worker: "w1".into(), session: 1 };
        sched.turn([Command::Hello { hello, session }, heard]).expect("turn");
        Rig { _dir: dir, sched, merged, outbound, seq: 0, base, repo, closed }
    }

    fn key() -> TaskKey {
        TaskKey::parse("s/a").expect("key")
    }

    fn detail(&mut self) -> TaskDetailView {
        let (reply, mut rx) = oneshot::channel();
        self.sched.turn([Command::Operator(OperatorOp::GetTask { task: Rig::key(), reply })]).expect("turn");
        rx.try_recv().expect("replied").expect("task")
    }

    /// The attempt currently assigned to w1, if an Assign is waiting.
    fn take_assign(&mut self) -> Option<ReportedAttempt> {
        let mut last = None;
        while let Ok(m) = self.outbound.try_recv() {
            if let Outbound::Assign(a) = m {
                last = Some(ReportedAttempt {
                    task: a.attempt.task.clone(),
                    number: a.attempt.number,
                    token: a.attempt.token,
                });
            }
        }
        last
    }

    fn report(&mut self, attempt: ReportedAttempt, outcome: Outcome) {
        self.seq += 1;
        let commit = match outcome {
            Outcome::Success => Some(commit_file(&self.repo, &self.base)),
            Outcome::Checkpoint => Some(self.base.clone()),
            _ => None,
        };
        let r = ResultReport {
            attempt,
            outcome,
            exit_code: 0,
            signal: None,
            // What `commit_file` changed: a success that changed nothing
            // is its own case (`on_empty`).
            files_changed: if outcome == Outcome::Success { vec!["a.txt".into()] } else { vec![] },
            commit,
            tiers: vec![],
            summary: String::new(),
            error: String::new(),
            log_tail: vec![],
            category: String::new(),
            usage: Default::default(),
            session_id: String::new(),
            rate_limit_reset_ms: 0,
            rate_limit_kind: String::new(),
            review: None,
        };
        let cmd = Command::Report {
            worker: "w1".into(),
            session: 1,
            seq: self.seq,
            report: Report::Result(Box::new(r)),
        };
        self.sched.turn([cmd]).expect("turn");
        if state(&self.detail().task) == TaskState::Merging {
            let merged = self.merged.recv_timeout(Duration::from_secs(10)).expect("merge result");
            self.sched.turn([merged]).expect("turn");
        }
    }

    fn op(
        &mut self,
        make: impl FnOnce(oneshot::Sender<Result<super::views::TaskView, crate::SchedError>>) -> OperatorOp,
    ) -> bool {
        let (reply, mut rx) = oneshot::channel();
        self.sched.turn([Command::Operator(make(reply))]).expect("turn");
        rx.try_recv().expect("replied").is_ok()
    }
}

fn commit_file(repo: &std::path::Path, base: &str) -> String {
    let r = git2::Repository::open(repo).expect("open");
    let base = r.find_commit(git2::Oid::from_str(base).expect("oid")).expect("commit");
    let blob = r.blob(b"a\n").expect("blob");
    let mut tb = r.treebuilder(Some(&base.tree().expect("tree"))).expect("tb");
    tb.insert("a.txt", blob, 0o100644).expect("insert");
    let tree = r.find_tree(tb.write().expect("write")).expect("tree");
    let sig = git2::Signature::now("w", "w@example.com").expect("sig");
    r.commit(None, &sig, &sig, "a", &tree, &[&base]).expect("commit").to_string()
}

#[derive(Debug, Clone)]
enum Step {
    Report(Outcome),
    Retry,
    Answer,
    Cancel,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop_oneof![
            Just(Outcome::Success),
            Just(Outcome::Error),
            Just(Outcome::VerifyFailed),
            Just(Outcome::Checkpoint),
            Just(Outcome::Blocked),
            Just(Outcome::Escalation),
            Just(Outcome::Interrupted),
            Just(Outcome::Signaled),
        ]
        .prop_map(Step::Report),
        1 => Just(Step::Retry),
        1 => Just(Step::Answer),
        1 => Just(Step::Cancel),
    ]
}

/// The task lifecycle (ARCHITECTURE.md, "Data flow of one attempt"), for one
/// task and one worker.
#[derive(Debug, Clone, PartialEq)]
struct Model {
    state: TaskState,
    retries_used: u32,
    attempts: u32,
    cancel_requested: bool,
}

impl Model {
    fn apply(&mut self, step: &Step, max_retries: u32) {
        use TaskState::*;
        match (step, self.state) {
            (Step::Report(o), Running) => match o {
                Outcome::Success => self.state = Merged,
                Outcome::Error | Outcome::VerifyFailed | Outcome::Signaled if self.cancel_requested => {
                    self.state = Cancelled
                }
                Outcome::Error | Outcome::VerifyFailed | Outcome::Signaled => {
                    if self.retries_used < max_retries {
                        self.retries_used += 1;
                        self.state = Ready;
                    } else {
                        self.state = Failed;
                    }
                }
                Outcome::Checkpoint | Outcome::Interrupted => {
                    self.state = if self.cancel_requested { Cancelled } else { Ready };
                }
                Outcome::Blocked => self.state = Blocked,
                Outcome::Escalation => self.state = Escalated,
                _ => {}
            },
            (Step::Retry, Failed | Blocked | Escalated | Cancelled) => {
                self.retries_used = 0;
                self.cancel_requested = false;
                self.state = Ready;
            }
            (Step::Answer, Escalated | Blocked) => self.state = Ready,
            (Step::Cancel, Running) => self.cancel_requested = true,
            (Step::Cancel, Ready | Blocked | Escalated | Failed) => {
                self.cancel_requested = true;
                self.state = Cancelled;
            }
            _ => {}
        }
        // One idle worker: a READY task is assigned within the same turn.
        if self.state == Ready {
            self.state = Running;
            self.attempts += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_scheduler_follows_the_lifecycle_model(max_retries in 0u32..3, steps in proptest::collection::vec(step(), 1..14)) {
        let mut rig = Rig::new(max_retries);
        let mut model = Model { state: TaskState::Running, retries_used: 0, attempts: 1, cancel_requested: false };
        let mut current = rig.take_assign();
        prop_assert!(current.is_some(), "the ready task is assigned to the idle worker");
        for step in &steps {
            match step {
                Step::Report(o) => {
                    if let Some(a) = current.clone() {
                        rig.report(a, *o);
                    }
                }
                Step::Retry => { rig.op(|reply| OperatorOp::RetryTask { task: Rig::key(), reply }); }
                Step::Answer => {
                    rig.op(|reply| OperatorOp::Answer { task: Rig::key(), question_id: String::new(), text: "yes".into(), reply });
                }
                Step::Cancel => { rig.op(|reply| OperatorOp::CancelTask { task: Rig::key(), reason: String::new(), reply }); }
            }
            model.apply(step, max_retries);
            if let Some(a) = rig.take_assign() {
                current = Some(a);
            }
            let d = rig.detail();
            prop_assert_eq!(state(&d.task), model.state, "after {:?} in {:?}", step, steps);
            prop_assert_eq!(d.task.retries_used, model.retries_used);
            prop_assert_eq!(d.task.attempts, model.attempts);
            let live = d.attempts.iter().filter(|a| a.is_live()).count();
            prop_assert!(live <= 1, "at most one live attempt");
            prop_assert_eq!(live == 1, model.state == TaskState::Running);
            let numbers: Vec<u32> = d.attempts.iter().map(|a| a.number).collect();
            prop_assert_eq!(numbers, (1..=model.attempts).collect::<Vec<_>>());
            if model.state == TaskState::Merged {
                break;
            }
        }
    }
}

#[test]
fn a_full_outbound_queue_closes_the_session_and_the_next_hello_sends_the_assign_again() {
    // Room for the Welcome only: the Assign of the same turn finds the queue full.
    let mut rig = Rig::with_queue(0, 1);
    assert!(rig.closed.is_cancelled(), "a full queue closes the session instead of dropping the Assign");
    assert!(matches!(rig.outbound.try_recv(), Ok(Outbound::Welcome { .. })));
    assert!(rig.outbound.try_recv().is_err(), "nothing but the Welcome was queued");
    assert_eq!(state(&rig.detail().task), TaskState::Running, "the attempt stays current");
    // The stream reader ends on the close and reports the disconnect; the
    // sidecar reconnects without the attempt it never received.
    rig.sched.turn([Command::Disconnected { worker: "w1".into(), session: 1 }]).expect("turn");
    let (tx, outbound) = crate::scheduler::outbound::outbound_queue(64);
    let session = Session {
        id: 2,
        tx,
        last_seen: Arc::new(AtomicU64::new(u64::MAX / 2)),
        closed: tokio_util::sync::CancellationToken::new(),
    };
    // The sidecar reconnects with the secret its first Welcome gave it.
    let resume_secret =
        rig.sched.shared.model.workers().get("w1").map(|w| w.resume_secret.clone()).unwrap_or_default();
    let hello = HelloInfo {
        worker_id: "w1".into(),
        labels: Default::default(),
        host: "h".into(),
        last_acked_seq: 0,
        attempt_in_hand: None,
        resume_secret,
        principal: None,
    };
    rig.sched.turn([Command::Hello { hello, session: session.clone() }]).expect("turn");
    assert!(matches!(outbound.try_recv(), Ok(Outbound::Welcome { attempt_resumed: false, .. })));
    match outbound.try_recv() {
        Ok(Outbound::Assign(a)) => {
            assert_eq!(a.attempt.task, Rig::key());
            assert_eq!(a.attempt.number, 1, "the same attempt, not a new one");
        }
        other => panic!("expected the Assign again, got {other:?}"),
    }
    assert!(!session.closed.is_cancelled());
}

#[test]
fn an_idle_worker_that_can_take_nothing_is_not_rescanned_until_something_changes() {
    let tasks: String = (0..300)
        .map(|i| format!("[[tasks]]\nid = \"t{i}\"\nfiles = [\"t{i}.txt\"]\nlabels = {{ gpu = \"yes\" }}\n"))
        .collect();
    let mut rig = Rig::build(0, 64, &tasks);
    let after_hello = rig.sched.shared.scan.full_scans;
    assert!(after_hello >= 1, "w1 looked once");
    for _ in 0..20 {
        rig.sched.turn([]).expect("turn");
    }
    assert_eq!(rig.sched.shared.scan.full_scans, after_hello, "no rescans while nothing changes");
    assert!(rig.take_assign().is_none(), "w1 has no gpu label");

    // A worker that can take the tasks changes the answer.
    let (tx, outbound) = crate::scheduler::outbound::outbound_queue(64);
    let session = Session {
        id: 2,
        tx,
        last_seen: Arc::new(AtomicU64::new(u64::MAX / 2)),
        closed: tokio_util::sync::CancellationToken::new(),
    };
    let hello = HelloInfo {
        worker_id: "w2".into(),
        labels: [("gpu".to_string(), "yes".to_string())].into(),
        host: "h".into(),
        last_acked_seq: 0,
        attempt_in_hand: None,
        resume_secret: String::new(),
        principal: None,
    };
    let heard = Command::Heard { worker: "w2".into(), session: 2 };
    rig.sched.turn([Command::Hello { hello, session }, heard]).expect("turn");
    let mut assigned = false;
    while let Ok(m) = outbound.try_recv() {
        assigned |= matches!(m, Outbound::Assign(_));
    }
    assert!(assigned, "w2 gets a task at once");
}

/// Connects `worker` on a fresh session without a resume secret; returns
/// what was queued for it by that turn, and its queue.
fn hello_without_secret(
    rig: &mut Rig,
    worker: &str,
    id: u64,
    heard: bool,
) -> (Vec<Outbound>, crate::scheduler::outbound::OutboundRx) {
    let (tx, outbound) = crate::scheduler::outbound::outbound_queue(64);
    let closed = tokio_util::sync::CancellationToken::new();
    let session = Session { id, tx, last_seen: Arc::new(AtomicU64::new(u64::MAX / 2)), closed };
    let hello = fresh_hello(worker);
    let mut commands = vec![Command::Hello { hello, session }];
    if heard {
        commands.push(Command::Heard { worker: worker.into(), session: id });
    }
    rig.sched.turn(commands).expect("turn");
    (std::iter::from_fn(|| outbound.try_recv().ok()).collect(), outbound)
}

#[test]
fn work_waits_until_the_sidecar_speaks_after_its_welcome_so_a_lost_welcome_locks_nothing_out() {
    let mut rig =
        Rig::build(0, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b\"]\n");
    assert!(rig.take_assign().is_some(), "w1, heard, took a task");
    // w2's Welcome never reaches it (its stream broke, or the controller
    // died): it is given nothing meanwhile.
    let (sent, _queue) = hello_without_secret(&mut rig, "w2", 2, false);
    assert!(matches!(sent.as_slice(), [Outbound::Welcome { .. }]), "only the Welcome: {sent:?}");
    rig.sched.turn([Command::Disconnected { worker: "w2".into(), session: 2 }]).expect("turn");
    // So the sidecar, which has no secret, may claim its id again at once,
    // and gets work once it speaks after the Welcome.
    let (sent, outbound) = hello_without_secret(&mut rig, "w2", 3, false);
    assert!(matches!(sent.as_slice(), [Outbound::Welcome { .. }]), "claimed afresh: {sent:?}");
    rig.sched.turn([Command::Heard { worker: "w2".into(), session: 3 }]).expect("turn");
    assert!(matches!(outbound.try_recv(), Ok(Outbound::Assign(_))), "w2 gets a task once heard");
    // A worker given work was heard, so the fencing guarantee stands: a
    // Hello without its secret cannot take the id while it holds the task.
    rig.sched.turn([Command::Disconnected { worker: "w2".into(), session: 3 }]).expect("turn");
    let (sent, _queue) = hello_without_secret(&mut rig, "w2", 4, true);
    assert!(
        matches!(sent.as_slice(), [Outbound::Close { code: super::outbound::CloseCode::AlreadyExists, .. }]),
        "an impostor is refused: {sent:?}"
    );
}

/// A move the lifecycle does not have is a typed refusal from the model
/// and changes nothing; through the core it is refused the same way, and
/// the task goes on from where it was.
#[test]
fn an_illegal_transition_is_refused_and_changes_nothing() {
    let mut rig = Rig::new(0);
    let key = Rig::key();
    let ready = state(&rig.detail().task);
    assert_eq!(ready, TaskState::Running, "w1 took the task at once");
    let applied = rig.sched.shared.model.apply(super::model::Transition::TaskState {
        key: &key,
        to: TaskState::Merged,
        reason: "skipping the merge",
    });
    assert_eq!(
        applied.refused,
        Some(swarm_core::IllegalTransition::Task(TaskState::Running, TaskState::Merged))
    );
    assert_eq!(applied.task_state, None);
    let mut fx = super::Effects::default();
    rig.sched.shared.core(&mut fx).to_review(&key, "no result yet");
    assert!(fx.batch.is_empty(), "nothing to write");
    assert_eq!(state(&rig.detail().task), TaskState::Running);
    let attempt = rig.take_assign().expect("assigned");
    rig.report(attempt, Outcome::Success);
    assert_eq!(state(&rig.detail().task), TaskState::Merged, "the task goes on as if nothing was asked");
}
