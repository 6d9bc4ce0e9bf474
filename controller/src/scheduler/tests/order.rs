//! The order READY tasks are handed out in: priority, remaining critical
//! path, readiness; fair share and `max_parallel` between swarms; a task
//! held off by ownership does not hold the next one.

use std::sync::Arc;

use swarm_core::Outcome;
use swarm_core::plan::Plan;
use tokio::sync::oneshot;

use super::super::command::{Command, OperatorOp};
use super::super::model::ScheduleOrder;
use super::Rig;
use super::agents::{assigns, handle, key};

/// The task ids `rx` was assigned, in order.
fn assigned(rx: &mut crate::scheduler::outbound::OutboundRx) -> Vec<String> {
    assigns(rx).iter().map(|a| a.attempt.task.to_string()).collect()
}

/// Creates swarm `name` (`top` above its defaults) on the rig's base.
pub(super) fn create(rig: &mut Rig, name: &str, top: &str, tasks: &str) {
    let text = format!("name = \"{name}\"\n{top}[defaults]\ncommand = \"true\"\n{tasks}");
    let plan = Arc::new(Plan::parse(&text).expect("plan"));
    let (reply, mut rx) = oneshot::channel();
    let op = OperatorOp::CreateSwarm {
        plan_text: text,
        plan,
        integration_head: rig.base.clone(),
        origin: None,
        reply,
    };
    rig.sched.turn([Command::Operator(op)]).expect("turn");
    rx.try_recv().expect("replied").expect("created");
}

/// `n` independent tasks `<prefix>0..` owning a file each.
fn independent(prefix: &str, n: usize) -> String {
    (0..n).map(|i| format!("[[tasks]]\nid = \"{prefix}{i}\"\nfiles = [\"{prefix}{i}.txt\"]\n")).collect()
}

/// A root `short` with nothing below it, listed first, and a root `long`
/// with a chain of two below it.
const SHORT_AND_LONG: &str = "[[tasks]]\nid = \"short\"\nfiles = [\"short.txt\"]\n\
    [[tasks]]\nid = \"long\"\nfiles = [\"long.txt\"]\n\
    [[tasks]]\nid = \"l2\"\nfiles = [\"l2.txt\"]\ndeps = [\"long\"]\n\
    [[tasks]]\nid = \"l3\"\nfiles = [\"l3.txt\"]\ndeps = [\"l2\"]\n";

#[test]
fn the_task_with_the_longest_chain_below_it_runs_first() {
    let mut rig = Rig::build(0, 64, SHORT_AND_LONG);
    assert_eq!(assigned(&mut rig.outbound), ["s/long"], "readiness order would have given `short`");
    let model = &rig.sched.shared.model;
    // No estimates: every task weighs the same unit, paths count tasks.
    assert_eq!(model.critical_path(&key("long")), Some(3_000));
    assert_eq!(model.critical_path(&key("l2")), Some(2_000));
    assert_eq!(model.critical_path(&key("short")), Some(1_000));
}

#[test]
fn fifo_order_hands_out_tasks_in_readiness_order() {
    let mut rig = Rig::build(0, 64, &format!("{SHORT_AND_LONG}{}", independent("x", 1)));
    assert_eq!(assigned(&mut rig.outbound), ["s/long"]);
    rig.sched.set_schedule_order(ScheduleOrder::Fifo);
    let mut w2 = rig.connect("w2", 2, &[]);
    assert_eq!(assigned(&mut w2), ["s/short"], "the first READY task in plan order");
    let mut w3 = rig.connect("w3", 3, &[]);
    assert_eq!(assigned(&mut w3), ["s/x0"]);
}

#[test]
fn a_higher_priority_runs_before_a_longer_chain() {
    let tasks =
        SHORT_AND_LONG.replacen("files = [\"short.txt\"]\n", "files = [\"short.txt\"]\npriority = 5\n", 1);
    let mut rig = Rig::build(0, 64, &tasks);
    assert_eq!(assigned(&mut rig.outbound), ["s/short"]);
}

#[test]
fn a_negative_priority_runs_after_every_default_one() {
    let tasks =
        format!("{}{}", independent("a", 1).replace("files", "priority = -1\nfiles"), independent("b", 2));
    let mut rig = Rig::build(0, 64, &tasks);
    assert_eq!(assigned(&mut rig.outbound), ["s/b0"]);
    let mut w2 = rig.connect("w2", 2, &[]);
    assert_eq!(assigned(&mut w2), ["s/b1"]);
    let mut w3 = rig.connect("w3", 3, &[]);
    assert_eq!(assigned(&mut w3), ["s/a0"]);
}

#[test]
fn an_estimate_outweighs_a_longer_chain_of_short_tasks() {
    // `long` has two tasks below it, but the three together are expected
    // to take 90 minutes; `big` alone three hours.
    let tasks = SHORT_AND_LONG
        .replace("files = [\"long.txt\"]\n", "files = [\"long.txt\"]\nestimate = \"30m\"\n")
        .replace("files = [\"l2.txt\"]\n", "files = [\"l2.txt\"]\nestimate = \"30m\"\n")
        .replace("files = [\"l3.txt\"]\n", "files = [\"l3.txt\"]\nestimate = \"30m\"\n")
        .replace("files = [\"short.txt\"]\n", "files = [\"short.txt\"]\nestimate = \"3h\"\n");
    let mut rig = Rig::build(0, 64, &tasks);
    assert_eq!(assigned(&mut rig.outbound), ["s/short"]);
    assert_eq!(rig.sched.shared.model.critical_path(&key("long")), Some(90 * 60_000));
}

#[test]
fn a_task_held_off_by_ownership_lets_the_next_one_run() {
    // `long` and `l2`'s sibling `twin` own the same directory: while
    // `long` runs, `twin` (next by its chain) must wait and `short` runs.
    let tasks = "[[tasks]]\nid = \"short\"\nfiles = [\"short.txt\"]\n\
        [[tasks]]\nid = \"long\"\nfiles = [\"shared/\"]\n\
        [[tasks]]\nid = \"l2\"\nfiles = [\"l2.txt\"]\ndeps = [\"long\"]\n\
        [[tasks]]\nid = \"l3\"\nfiles = [\"l3.txt\"]\ndeps = [\"l2\"]\n\
        [[tasks]]\nid = \"twin\"\nfiles = [\"shared/\"]\n\
        [[tasks]]\nid = \"t2\"\nfiles = [\"t2.txt\"]\ndeps = [\"twin\"]\n";
    let mut rig = Rig::build(0, 64, tasks);
    assert_eq!(assigned(&mut rig.outbound), ["s/long"]);
    let mut w2 = rig.connect("w2", 2, &[]);
    assert_eq!(assigned(&mut w2), ["s/short"], "`twin` ranks above `short` but shares `long`'s files");
}

#[test]
fn swarms_share_the_fleet_by_their_weights() {
    let mut rig = Rig::build(0, 64, &independent("s", 4));
    assert_eq!(assigned(&mut rig.outbound), ["s/s0"]);
    create(&mut rig, "t", "share = 2\n", &independent("t", 4));
    // s runs 1 of share 1, t 0 of 2: t is furthest below its share, until
    // it runs twice as many as s; at a tie the swarm ids decide.
    let mut order = Vec::new();
    for (i, w) in ["w2", "w3", "w4", "w5"].iter().enumerate() {
        let mut rx = rig.connect(w, 2 + i as u64, &[]);
        order.extend(
            assigned(&mut rx).into_iter().map(|t| t.split('/').next().unwrap_or_default().to_string()),
        );
    }
    assert_eq!(order, ["t", "t", "s", "t"]);
    assert_eq!(rig.sched.shared.model.running_in(&swarm_core::SwarmId::new("t").expect("id")), 3);
}

#[test]
fn a_higher_priority_swarm_goes_before_its_fair_share() {
    let mut rig = Rig::build(0, 64, &independent("s", 2));
    assert_eq!(assigned(&mut rig.outbound), ["s/s0"]);
    create(&mut rig, "t", "priority = 1\n", &independent("t", 2));
    let mut w2 = rig.connect("w2", 2, &[]);
    assert_eq!(assigned(&mut w2), ["t/t0"]);
    let mut w3 = rig.connect("w3", 3, &[]);
    assert_eq!(assigned(&mut w3), ["t/t1"], "t's priority beats s's smaller load");
}

#[test]
fn a_swarm_at_max_parallel_starts_nothing_until_one_of_its_tasks_ends() {
    let tasks = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n[[tasks]]\nid = \"b\"\nfiles = [\"b.txt\"]\n";
    let mut rig = Rig::build_with(0, 64, "max_parallel = 1\n", tasks);
    let first = assigns(&mut rig.outbound);
    assert_eq!(first.iter().map(|a| a.attempt.task.to_string()).collect::<Vec<_>>(), ["s/a"]);
    let mut w2 = rig.connect("w2", 2, &[]);
    assert!(assigned(&mut w2).is_empty(), "the swarm already runs its one task");
    rig.report(handle(&first[0]), Outcome::Success);
    let mut next = assigned(&mut rig.outbound);
    next.extend(assigned(&mut w2));
    assert_eq!(next, ["s/b"]);
}
