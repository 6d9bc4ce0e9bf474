//! Agent attempts in the scheduler: usage limits, session resume, usage
//! sums and permission answers.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use swarm_core::{Outcome, TaskKey, TaskState, Usage};
use tokio::sync::oneshot;

use super::super::command::{Command, HelloInfo, OperatorOp, Report, ReportedAttempt, ResultReport};
use super::super::model::Session;
use super::super::now_ms;
use super::super::outbound::{AssignSpec, Outbound};
use super::{Rig, state};

const AGENT_PLAN: &str = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n\
    [[tasks]]\nid = \"b\"\nfiles = [\"b.txt\"]\nagent = \"claude\"\n\
    [[tasks]]\nid = \"c\"\nfiles = [\"c.txt\"]\n";

pub(super) fn key(t: &str) -> TaskKey {
    TaskKey::parse(&format!("s/{t}")).expect("key")
}

pub(super) fn assigns(rx: &mut crate::scheduler::outbound::OutboundRx) -> Vec<AssignSpec> {
    let mut out = Vec::new();
    while let Ok(m) = rx.try_recv() {
        if let Outbound::Assign(a) = m {
            out.push(*a);
        }
    }
    out
}

pub(super) fn handle(a: &AssignSpec) -> ReportedAttempt {
    ReportedAttempt { task: a.attempt.task.clone(), number: a.attempt.number, token: a.attempt.token }
}

pub(super) fn result(attempt: ReportedAttempt, outcome: Outcome) -> ResultReport {
    ResultReport {
        attempt,
        outcome,
        exit_code: 0,
        signal: None,
        commit: None,
        files_changed: vec![],
        tiers: vec![],
        summary: String::new(),
        error: String::new(),
        log_tail: vec![],
        category: String::new(),
        usage: Usage::default(),
        session_id: String::new(),
        rate_limit_reset_ms: 0,
        rate_limit_kind: String::new(),
        review: None,
    }
}

impl Rig {
    pub(super) fn send(&mut self, worker: &str, session: u64, report: Report) {
        self.seq += 1;
        let cmd = Command::Report { worker: worker.into(), session, seq: self.seq, report };
        self.sched.turn([cmd]).expect("turn");
    }

    pub(super) fn connect(
        &mut self,
        worker: &str,
        id: u64,
        labels: &[(&str, &str)],
    ) -> crate::scheduler::outbound::OutboundRx {
        let (tx, rx) = crate::scheduler::outbound::outbound_queue(64);
        let session = Session {
            id,
            tx,
            last_seen: Arc::new(AtomicU64::new(u64::MAX / 2)),
            closed: tokio_util::sync::CancellationToken::new(),
        };
        let hello = HelloInfo {
            worker_id: worker.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            host: "h".into(),
            last_acked_seq: 0,
            attempt_in_hand: None,
            resume_secret: String::new(),
            principal: None,
        };
        let heard = Command::Heard { worker: worker.into(), session: id };
        self.sched.turn([Command::Hello { hello, session }, heard]).expect("turn");
        rx
    }

    pub(super) fn task_of(&mut self, t: &str) -> super::super::views::TaskDetailView {
        let (reply, mut rx) = oneshot::channel();
        self.sched.turn([Command::Operator(OperatorOp::GetTask { task: key(t), reply })]).expect("turn");
        rx.try_recv().expect("replied").expect("task")
    }
}

#[test]
fn a_usage_limit_spends_no_retry_and_holds_only_agent_tasks_until_the_reset() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n\
        [[tasks]]\nid = \"c\"\nfiles = [\"c.txt\"]\n";
    let mut rig = Rig::build(0, 64, plan);
    let first = assigns(&mut rig.outbound);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].attempt.task, key("a"), "w1 takes the first READY task");
    assert!(first[0].agent.is_some() && first[0].command.is_empty());
    let mut r = result(handle(&first[0]), Outcome::RateLimited);
    r.session_id = "sess-a".into();
    r.commit = Some(rig.base.clone());
    r.rate_limit_reset_ms = (now_ms() + 300) as u64;
    r.rate_limit_kind = "five_hour".into();
    rig.send("w1", 1, Report::Result(Box::new(r)));

    let a = rig.task_of("a");
    assert_eq!(state(&a.task), TaskState::Ready);
    assert_eq!(a.task.retries_used, 0, "a usage limit spends no retry (the plan allows none)");
    assert_eq!(a.attempts[0].state, "RATE_LIMITED");
    // The command task goes ahead on the limited worker; the agent task does not.
    let next = assigns(&mut rig.outbound);
    assert_eq!(next.iter().map(|a| a.attempt.task.clone()).collect::<Vec<_>>(), vec![key("c")]);
    let (reply, mut rx) = oneshot::channel();
    rig.sched
        .turn([Command::Operator(OperatorOp::ListWorkers { page: Default::default(), reply })])
        .expect("turn");
    let (workers, _) = rx.try_recv().expect("replied").expect("workers");
    assert_eq!(workers[0].rate_limit_key, "worker=w1");
    assert!(workers[0].rate_limited_until_unix_ms > now_ms(), "get workers shows the limit");

    // Once c is done and the reset has passed, the limited task resumes
    // on its own worker, continuing its session.
    let mut done = result(handle(&next[0]), Outcome::Blocked);
    done.error = "waits for the operator".into();
    rig.send("w1", 1, Report::Result(Box::new(done)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let resumed = loop {
        rig.sched.turn([]).expect("turn");
        if let Some(a) = assigns(&mut rig.outbound).into_iter().find(|a| a.attempt.task == key("a")) {
            break a;
        }
        assert!(std::time::Instant::now() < deadline, "the limited task never resumed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(resumed.attempt.number, 2);
    assert_eq!(resumed.base_commit, rig.base, "resumes from its WIP commit");
    assert_eq!(resumed.agent.as_ref().map(|g| g.resume_session.as_str()), Some("sess-a"));
}

#[test]
fn workers_sharing_an_account_share_its_limit_and_others_do_not() {
    let mut rig = Rig::build(0, 64, AGENT_PLAN);
    let first = assigns(&mut rig.outbound);
    let mut r = result(handle(&first[0]), Outcome::RateLimited);
    r.rate_limit_reset_ms = (now_ms() + 60_000) as u64;
    rig.send("w1", 1, Report::Result(Box::new(r)));
    // w1 (no account label) is limited on its own; it takes the command task.
    assert_eq!(assigns(&mut rig.outbound)[0].attempt.task, key("c"));
    // w2 carries an account nobody limited: it takes the other agent task.
    let mut w2 = rig.connect("w2", 2, &[("account", "team-b")]);
    let got = assigns(&mut w2);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attempt.task, key("b"));
}

#[test]
fn a_checkpointed_session_waits_for_its_worker_and_resumes_there() {
    let mut rig = Rig::build(0, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n");
    let first = assigns(&mut rig.outbound);
    let mut r = result(handle(&first[0]), Outcome::Checkpoint);
    r.commit = Some(rig.base.clone());
    r.session_id = "sess-1".into();
    r.usage = Usage { input_tokens: 10, output_tokens: 5, cost_usd: 0.25, ..Default::default() };
    // A second worker is idle before the checkpoint arrives.
    let mut w2 = rig.connect("w2", 2, &[]);
    rig.send("w1", 1, Report::Result(Box::new(r)));
    assert!(assigns(&mut w2).is_empty(), "w2 must not start the task afresh while w1 holds its session");
    let again = assigns(&mut rig.outbound);
    assert_eq!(again.len(), 1, "w1 takes its own task back");
    assert_eq!(again[0].agent.as_ref().map(|g| g.resume_session.as_str()), Some("sess-1"));

    // Usage is kept per attempt and summed on the task and the swarm.
    let mut ok = result(handle(&again[0]), Outcome::Error);
    ok.usage = Usage { input_tokens: 1, output_tokens: 2, cost_usd: 0.5, ..Default::default() };
    ok.error = "boom".into();
    rig.send("w1", 1, Report::Result(Box::new(ok)));
    let a = rig.task_of("a");
    assert_eq!(a.attempts[0].session_id, "sess-1");
    assert_eq!(a.attempts[0].agent, "claude");
    assert_eq!(a.task.usage.input_tokens, 11);
    assert_eq!(a.task.usage.cost_usd, 0.75);
    let (reply, mut rx) = oneshot::channel();
    rig.sched.turn([Command::Operator(OperatorOp::GetSwarm { swarm: "s".into(), reply })]).expect("turn");
    assert_eq!(rx.try_recv().expect("replied").expect("swarm").usage.output_tokens, 7);
}

#[test]
fn a_failed_attempt_starts_a_fresh_session() {
    let mut rig = Rig::build(1, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n");
    let first = assigns(&mut rig.outbound);
    let mut r = result(handle(&first[0]), Outcome::Error);
    r.session_id = "sess-1".into();
    rig.send("w1", 1, Report::Result(Box::new(r)));
    let again = assigns(&mut rig.outbound);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].agent.as_ref().map(|g| g.resume_session.as_str()), Some(""));
}

#[test]
fn a_permission_question_takes_allow_or_deny_and_nothing_else() {
    let mut rig = Rig::build(0, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n");
    let first = assigns(&mut rig.outbound);
    let q = Report::Question {
        attempt: handle(&first[0]),
        id: "perm-1".into(),
        text: "Bash wants to run: cargo publish".into(),
        category: "permission".into(),
        options: Vec::new(),
    };
    rig.send("w1", 1, q);
    let answer = |rig: &mut Rig, text: &str| {
        let (reply, mut rx) = oneshot::channel();
        let op = OperatorOp::Answer { task: key("a"), question_id: String::new(), text: text.into(), reply };
        rig.sched.turn([Command::Operator(op)]).expect("turn");
        rx.try_recv().expect("replied")
    };
    let refused = answer(&mut rig, "sure, go ahead").expect_err("not allow/deny");
    assert!(refused.to_string().contains("allow"), "{refused}");
    assert!(
        rig.task_of("a").task.pending_question.contains("cargo publish"),
        "a refused answer changes nothing"
    );
    answer(&mut rig, "deny not on a Friday").expect("deny with a reason");
    let sent = std::iter::from_fn(|| rig.outbound.try_recv().ok())
        .find_map(|m| match m {
            Outbound::Answer { question_id, text, .. } => Some((question_id, text)),
            _ => None,
        })
        .expect("the answer goes to the sidecar");
    assert_eq!(sent, ("perm-1".to_string(), "deny not on a Friday".to_string()));
}

#[test]
fn a_permission_question_ends_with_its_attempt() {
    let mut rig = Rig::build(1, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n");
    let first = assigns(&mut rig.outbound);
    let q = Report::Question {
        attempt: handle(&first[0]),
        id: "perm-1".into(),
        text: "Bash wants to run: make".into(),
        category: "permission".into(),
        options: Vec::new(),
    };
    rig.send("w1", 1, q);
    assert!(!rig.task_of("a").task.pending_question.is_empty());
    let mut r = result(handle(&first[0]), Outcome::Error);
    r.error = "agent exited with code 1 before its result".into();
    rig.send("w1", 1, Report::Result(Box::new(r)));
    assert_eq!(rig.task_of("a").task.pending_question, "", "nobody is left to answer it");
}

fn answer(rig: &mut Rig, t: &str, text: &str) {
    let (reply, mut rx) = oneshot::channel();
    let op = OperatorOp::Answer { task: key(t), question_id: String::new(), text: text.into(), reply };
    rig.sched.turn([Command::Operator(op)]).expect("turn");
    rx.try_recv().expect("replied").expect("answered");
}

fn question(attempt: ReportedAttempt, id: &str, text: &str) -> Report {
    Report::Question {
        attempt,
        id: id.into(),
        text: text.into(),
        category: "design".into(),
        options: Vec::new(),
    }
}

#[test]
fn an_answer_given_while_the_asking_worker_exits_is_not_asked_again() {
    let mut rig = Rig::build(0, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n");
    let first = assigns(&mut rig.outbound);
    rig.send("w1", 1, question(handle(&first[0]), "colour", "Which colour?"));
    // The operator answers while the worker is already exiting with code 4.
    answer(&mut rig, "a", "blue");
    let mut r = result(handle(&first[0]), Outcome::Escalation);
    r.error = "Which colour?".into();
    rig.send("w1", 1, Report::Result(Box::new(r)));
    let detail = rig.task_of("a");
    assert_eq!(detail.task.pending_question, "", "the answer given is kept, not asked again");
    let next = assigns(&mut rig.outbound);
    assert_eq!(next.len(), 1, "the task runs again with its answer: {:?}", state(&detail.task));
    assert_eq!(next[0].attempt.number, 2);
}

#[test]
fn an_escalation_after_an_answered_question_still_asks_the_operator() {
    let mut rig = Rig::build(0, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n");
    let first = assigns(&mut rig.outbound);
    rig.send("w1", 1, question(handle(&first[0]), "colour", "Which colour?"));
    answer(&mut rig, "a", "blue");
    let mut r = result(handle(&first[0]), Outcome::Escalation);
    r.error = "blue clashes with the logo; which do we keep?".into();
    rig.send("w1", 1, Report::Result(Box::new(r)));
    let detail = rig.task_of("a");
    assert_eq!(state(&detail.task), TaskState::Escalated);
    assert!(detail.task.pending_question.contains("clashes"), "{:?}", detail.task.pending_question);
    assert!(assigns(&mut rig.outbound).is_empty());
}

/// An agent attempt that claims success with its base as its commit and no
/// file changed: `on_empty` decides between a failure (retried) and a merge
/// that says so.
#[test]
fn an_agent_success_that_changed_nothing_fails_unless_on_empty_merges() {
    let nothing = |rig: &mut Rig, a: &AssignSpec| {
        let mut r = result(handle(a), Outcome::Success);
        r.commit = Some(rig.base.clone());
        r.summary = "Wrote out.txt.".into();
        rig.send("w1", 1, Report::Result(Box::new(r)));
    };
    let mut rig = Rig::build(1, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n");
    let first = assigns(&mut rig.outbound);
    nothing(&mut rig, &first[0]);
    let a = rig.task_of("a");
    assert_eq!(state(&a.task), TaskState::Running, "retried at once (no backoff): {}", a.task.reason);
    assert_eq!(a.task.retries_used, 1, "no change spends a retry");
    assert_eq!(a.attempts[0].state, "FAILED");
    assert_eq!(a.attempts[0].error, "no change: the agent changed no file");
    let second = assigns(&mut rig.outbound);
    nothing(&mut rig, &second[0]);
    let a = rig.task_of("a");
    assert_eq!(state(&a.task), TaskState::Failed);
    assert!(a.task.reason.starts_with("no change: the agent changed no file"), "{}", a.task.reason);

    let mut rig = Rig::build(
        0,
        64,
        "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\non_empty = \"merge\"\n",
    );
    let first = assigns(&mut rig.outbound);
    nothing(&mut rig, &first[0]);
    assert_eq!(rig.task_of("a").task.reason, "merging attempt 1");
    let merged = rig.merged.recv_timeout(std::time::Duration::from_secs(10)).expect("merge result");
    rig.sched.turn([merged]).expect("turn");
    let a = rig.task_of("a");
    assert_eq!(state(&a.task), TaskState::Merged);
    assert!(a.task.reason.ends_with("with no change"), "{}", a.task.reason);
    assert_eq!(a.attempts[0].state, "SUCCEEDED");
}
