//! Budgets, the breaker and pausing, turn by turn.

use swarm_core::{Outcome, SwarmId, TaskState, Usage};
use tokio::sync::oneshot;

use super::super::command::{BudgetChange, BudgetTarget, Command, OperatorOp, Report, ReportedAttempt};
use super::super::model::SwarmState;
use super::super::outbound::{AssignSpec, Outbound};
use super::super::views::SwarmView;
use super::agents::{handle, key, result};
use super::{Rig, state};

fn drain(rx: &mut crate::scheduler::outbound::OutboundRx) -> Vec<Outbound> {
    let mut out = Vec::new();
    while let Ok(m) = rx.try_recv() {
        out.push(m);
    }
    out
}

fn assigned(messages: &[Outbound]) -> Vec<AssignSpec> {
    messages
        .iter()
        .filter_map(|m| if let Outbound::Assign(a) = m { Some((**a).clone()) } else { None })
        .collect()
}

/// The Cancels sent, as (task, checkpoint).
fn cancels(messages: &[Outbound]) -> Vec<(String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Outbound::Cancel { attempt, checkpoint, .. } => Some((attempt.task.to_string(), *checkpoint)),
            _ => None,
        })
        .collect()
}

fn spent(usd: f64) -> Option<Usage> {
    Some(Usage { cost_usd: usd, output_tokens: 10, ..Default::default() })
}

impl Rig {
    fn progress(&mut self, attempt: ReportedAttempt, usage: Option<Usage>, session: &str) {
        let report =
            Report::Progress { attempt, percent: 10, step: "turn".into(), usage, session_id: session.into() };
        self.send("w1", 1, report);
    }

    fn checkpointed(&mut self, attempt: ReportedAttempt, usage: Option<Usage>, session: &str) {
        let mut r = result(attempt, Outcome::Checkpoint);
        r.commit = Some(self.base.clone());
        r.session_id = session.into();
        r.usage = usage.unwrap_or_default();
        self.send("w1", 1, Report::Result(Box::new(r)));
    }

    fn swarm_view(&mut self) -> SwarmView {
        let (reply, mut rx) = oneshot::channel();
        self.sched
            .turn([Command::Operator(OperatorOp::GetSwarm { swarm: "s".into(), reply })])
            .expect("turn");
        rx.try_recv().expect("replied").expect("swarm")
    }

    fn set_budget(&mut self, target: BudgetTarget, usd: f64) {
        let (reply, mut rx) = oneshot::channel();
        let change = BudgetChange { usd: Some(usd), ..Default::default() };
        self.sched.turn([Command::Operator(OperatorOp::SetBudget { target, change, reply })]).expect("turn");
        rx.try_recv().expect("replied").expect("budget set");
    }

    fn pause(&mut self, stop: bool) {
        let (reply, mut rx) = oneshot::channel();
        let swarm = SwarmId::new("s").expect("id");
        let op = OperatorOp::PauseSwarm { swarm, stop, reason: String::new(), reply };
        self.sched.turn([Command::Operator(op)]).expect("turn");
        rx.try_recv().expect("replied").expect("paused");
    }

    fn resume(&mut self) {
        let (reply, mut rx) = oneshot::channel();
        let swarm = SwarmId::new("s").expect("id");
        self.sched.turn([Command::Operator(OperatorOp::ResumeSwarm { swarm, reply })]).expect("turn");
        rx.try_recv().expect("replied").expect("resumed");
    }
}

/// The sidecar's live figure is an estimate from the price table; the
/// agent's own total replaces it. Stopped on an estimate over the cap, a
/// task whose agent then reports less goes on (resuming its session)
/// rather than staying BLOCKED; the Assign carries the plan's prices.
#[test]
fn a_task_stopped_on_an_estimate_goes_on_when_the_agents_own_total_is_under_its_budget() {
    let top = "[prices.\"claude-sonnet\"]\ninput = 2.0\noutput = 10.0\n";
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\nbudget_usd = 1.0\n";
    let mut rig = Rig::build_with(0, 64, top, plan);
    let first = assigned(&drain(&mut rig.outbound));
    let prices = &first[0].agent.as_ref().expect("agent").prices;
    let (price, _) = prices.lookup("claude-sonnet-4-5");
    assert_eq!((price.input, price.output), (2.0, 10.0), "the plan's prices go with the Assign");
    let attempt = handle(&first[0]);
    rig.progress(attempt.clone(), spent(1.05), "sess-a");
    assert_eq!(
        cancels(&drain(&mut rig.outbound)),
        vec![("s/a".to_string(), true)],
        "stopped at the estimate"
    );
    rig.checkpointed(attempt, spent(0.9), "sess-a");
    assert_eq!(state(&rig.task_of("a").task), TaskState::Running, "READY and assigned again");
    let next = assigned(&drain(&mut rig.outbound));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].agent.as_ref().expect("agent").resume_session, "sess-a");
}

#[test]
fn a_task_at_its_budget_is_checkpointed_blocked_and_resumes_its_session_once_raised() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\nbudget_usd = 1.0\n";
    let mut rig = Rig::build(0, 64, plan);
    let first = assigned(&drain(&mut rig.outbound));
    assert_eq!(first.len(), 1);
    let attempt = handle(&first[0]);
    rig.progress(attempt.clone(), spent(0.6), "sess-a");
    assert!(cancels(&drain(&mut rig.outbound)).is_empty(), "under its budget, it runs on");
    rig.progress(attempt.clone(), spent(1.1), "sess-a");
    rig.progress(attempt.clone(), spent(1.2), "sess-a");
    assert_eq!(
        cancels(&drain(&mut rig.outbound)),
        vec![("s/a".to_string(), true)],
        "stopped once, with a checkpoint"
    );
    rig.checkpointed(attempt, spent(1.3), "sess-a");
    let a = rig.task_of("a");
    assert_eq!(state(&a.task), TaskState::Blocked);
    assert!(a.task.reason.starts_with("budget: task spent $1.30"), "{}", a.task.reason);
    assert!(assigned(&drain(&mut rig.outbound)).is_empty());

    rig.set_budget(BudgetTarget::Task(key("a")), 5.0);
    assert_eq!(rig.task_of("a").task.budget_usd, 5.0);
    let next = assigned(&drain(&mut rig.outbound));
    assert_eq!(next.len(), 1, "raised: READY and assigned again");
    assert_eq!(next[0].attempt.number, 2);
    let agent = next[0].agent.as_ref().expect("agent");
    assert_eq!(agent.resume_session, "sess-a", "the stopped session is resumed");
}

#[test]
fn a_swarm_at_its_budget_stops_its_agents_blocks_the_rest_and_continues_when_raised() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n\
        [[tasks]]\nid = \"b\"\nfiles = [\"b.txt\"]\nagent = \"claude\"\n\
        [budget]\nusd = 2.0\n";
    let mut rig = Rig::build(0, 64, plan);
    let first = assigned(&drain(&mut rig.outbound));
    assert_eq!(first.len(), 1, "one worker");
    let attempt = handle(&first[0]);
    rig.progress(attempt.clone(), spent(2.5), "sess-1");
    assert_eq!(cancels(&drain(&mut rig.outbound)).len(), 1);
    let waiting = if first[0].attempt.task == key("a") { "b" } else { "a" };
    let other = rig.task_of(waiting);
    assert_eq!(state(&other.task), TaskState::Blocked, "a READY agent task waits for the budget");
    assert!(other.task.reason.starts_with("budget: swarm spent $2.50"), "{}", other.task.reason);
    rig.checkpointed(attempt, spent(2.5), "sess-1");
    assert!(assigned(&drain(&mut rig.outbound)).is_empty(), "no new agent attempt over budget");
    assert_eq!(rig.swarm_view().state, SwarmState::Stalled.as_str(), "nothing moves without the operator");

    rig.set_budget(BudgetTarget::Swarm(SwarmId::new("s").expect("id")), 25.0);
    let view = rig.swarm_view();
    assert_eq!(view.budget_usd, 25.0);
    assert_eq!(view.state, SwarmState::Active.as_str());
    assert_eq!(assigned(&drain(&mut rig.outbound)).len(), 1, "the swarm continues");
}

#[test]
fn a_paused_swarm_starts_nothing_stop_checkpoints_and_resume_assigns_again() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b.txt\"]\n";
    let mut rig = Rig::build(0, 64, plan);
    let first = assigned(&drain(&mut rig.outbound));
    rig.pause(false);
    assert_eq!(rig.swarm_view().state, SwarmState::Paused.as_str());
    assert!(cancels(&drain(&mut rig.outbound)).is_empty(), "without --stop the attempt finishes");
    rig.pause(true);
    assert_eq!(cancels(&drain(&mut rig.outbound)), vec![(first[0].attempt.task.to_string(), true)]);
    rig.checkpointed(handle(&first[0]), None, "");
    assert_eq!(state(&rig.task_of(first[0].attempt.task.task.as_str()).task), TaskState::Ready);
    for _ in 0..3 {
        rig.sched.turn([]).expect("turn");
    }
    assert!(assigned(&drain(&mut rig.outbound)).is_empty(), "paused: nothing starts");
    assert!(rig.swarm_view().paused_reason.contains("by the operator"));
    rig.resume();
    assert_eq!(rig.swarm_view().state, SwarmState::Active.as_str());
    assert_eq!(assigned(&drain(&mut rig.outbound)).len(), 1);
}

#[test]
fn the_breaker_pauses_the_swarm_asks_the_operator_and_resume_answers_it() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n\
        [budget]\nmax_usd_per_hour = 1.0\n";
    let mut rig = Rig::build(0, 64, plan);
    let attempt = handle(&assigned(&drain(&mut rig.outbound))[0]);
    rig.progress(attempt.clone(), spent(0.8), "s1");
    assert_eq!(rig.swarm_view().state, SwarmState::Active.as_str());
    rig.progress(attempt, spent(1.6), "s1");
    let view = rig.swarm_view();
    assert_eq!(view.state, SwarmState::Paused.as_str());
    assert!(view.paused_reason.contains("max_usd_per_hour"), "{}", view.paused_reason);
    assert!((view.usd_last_hour - 1.6).abs() < 1e-9);
    let a = rig.task_of("a");
    assert!(a.task.pending_question.contains("resume"), "{}", a.task.pending_question);
    assert!(
        !rig.op(|reply| OperatorOp::Answer {
            task: key("a"),
            question_id: String::new(),
            text: "go".into(),
            reply
        }),
        "only resume or pause answers it"
    );
    assert!(rig.op(|reply| OperatorOp::Answer {
        task: key("a"),
        question_id: String::new(),
        text: "resume".into(),
        reply
    }));
    let view = rig.swarm_view();
    assert_eq!(view.state, SwarmState::Active.as_str());
    assert_eq!(view.usd_last_hour, 0.0, "the breaker's window starts afresh");
    assert!(rig.task_of("a").task.pending_question.is_empty());
}

#[test]
fn on_usage_limit_fail_fails_the_task_and_pause_pauses_the_swarm() {
    for (policy, task_state, swarm_state) in
        [("fail", TaskState::Failed, SwarmState::Failed), ("pause", TaskState::Ready, SwarmState::Paused)]
    {
        let plan = format!(
            "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\non_usage_limit = \"{policy}\"\n"
        );
        let mut rig = Rig::build(0, 64, &plan);
        let attempt = handle(&assigned(&drain(&mut rig.outbound))[0]);
        let mut r = result(attempt, Outcome::RateLimited);
        r.commit = Some(rig.base.clone());
        rig.send("w1", 1, Report::Result(Box::new(r)));
        assert_eq!(state(&rig.task_of("a").task), task_state, "{policy}");
        assert_eq!(rig.swarm_view().state, swarm_state.as_str(), "{policy}");
    }
}

/// The resume secret the Welcome among `messages` gave.
fn secret(messages: &[Outbound]) -> String {
    messages
        .iter()
        .find_map(|m| match m {
            Outbound::Welcome { resume_secret, .. } => Some(resume_secret.clone()),
            _ => None,
        })
        .expect("a Welcome")
}

/// w1's sidecar reconnects (session 2) still holding `attempt`.
fn reconnect(
    rig: &mut Rig,
    secret: String,
    attempt: ReportedAttempt,
) -> crate::scheduler::outbound::OutboundRx {
    let (tx, rx) = crate::scheduler::outbound::outbound_queue(64);
    let session = super::super::model::Session {
        id: 2,
        tx,
        last_seen: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX / 2)),
        closed: tokio_util::sync::CancellationToken::new(),
    };
    let hello = super::super::command::HelloInfo {
        attempt_in_hand: Some(attempt),
        resume_secret: secret,
        ..super::fresh_hello("w1")
    };
    rig.sched.turn([Command::Hello { hello, session }]).expect("turn");
    rx
}

#[test]
fn a_worker_that_reconnects_holding_an_attempt_to_stop_is_told_again() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\nbudget_usd = 1.0\n";
    let mut rig = Rig::build(0, 64, plan);
    let first = drain(&mut rig.outbound);
    let attempt = handle(&assigned(&first)[0]);
    rig.progress(attempt.clone(), spent(1.5), "s1");
    assert_eq!(cancels(&drain(&mut rig.outbound)), vec![("s/a".to_string(), true)]);
    // The stream (and the Cancel on it) is lost; the sidecar comes back.
    let mut again = reconnect(&mut rig, secret(&first), attempt);
    assert_eq!(cancels(&drain(&mut again)), vec![("s/a".to_string(), true)], "the budget stop again");

    let mut rig = Rig::build(0, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n");
    let first = drain(&mut rig.outbound);
    let attempt = handle(&assigned(&first)[0]);
    rig.pause(true);
    assert_eq!(cancels(&drain(&mut rig.outbound)).len(), 1);
    let mut again = reconnect(&mut rig, secret(&first), attempt);
    assert_eq!(cancels(&drain(&mut again)), vec![("s/a".to_string(), true)], "the pause's stop again");
}

#[test]
fn a_budget_lowered_below_what_was_spent_stops_at_once() {
    let plan = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nagent = \"claude\"\n";
    let mut rig = Rig::build(0, 64, plan);
    let attempt = handle(&assigned(&drain(&mut rig.outbound))[0]);
    rig.progress(attempt, spent(3.0), "s1");
    assert!(cancels(&drain(&mut rig.outbound)).is_empty(), "no budget, no stop");
    rig.set_budget(BudgetTarget::Swarm(SwarmId::new("s").expect("id")), 2.0);
    assert_eq!(cancels(&drain(&mut rig.outbound)), vec![("s/a".to_string(), true)]);
}
