//! What a task took outlives its swarm: a plan run again after retention
//! forgot its last run, and after a restart, weighs its tasks by it.

use std::sync::Arc;
use std::time::Duration;

use swarm_core::plan::Plan;
use swarm_core::{Outcome, TaskKey};
use tokio::sync::oneshot;

use super::super::command::{Command, OperatorOp};
use super::super::model::WeightSource;
use super::Rig;
use super::recovery::recovered;

#[test]
fn a_plan_run_again_after_it_was_forgotten_and_a_restart_weighs_its_tasks_by_the_first_run() {
    let mut rig = Rig::new(0);
    let key = Rig::key();
    assert_eq!(rig.sched.shared.model.expected(&key).map(|e| e.1), Some(WeightSource::Guess));
    let a = rig.take_assign().expect("a assigned");
    // Attempt times are wall-clock ms: the attempt must last a few.
    std::thread::sleep(Duration::from_millis(30));
    rig.report(a, Outcome::Success);
    let (took, source) = rig.sched.shared.model.expected(&key).expect("a is known");
    assert_eq!(source, WeightSource::Attempts, "its own attempt");
    assert!(took >= 30, "{took} ms");

    rig.sched.shared.timing.forget_finished_after = Some(Duration::ZERO);
    rig.sched.parts.retention.sweep_every_turn();
    rig.sched.turn([]).expect("turn");
    assert!(rig.sched.shared.model.swarms().is_empty(), "s is forgotten");

    let mut again = recovered(&rig);
    let text = "name = \"s\"\n[defaults]\ncommand = \"true\"\n[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n\
                [[tasks]]\nid = \"new\"\nfiles = [\"n.txt\"]\n";
    let plan = Arc::new(Plan::parse(text).expect("plan"));
    let (reply, mut rx) = oneshot::channel();
    let create = OperatorOp::CreateSwarm {
        plan_text: text.into(),
        plan,
        integration_head: rig.base.clone(),
        origin: None,
        reply,
    };
    again.turn([Command::Operator(create)]).expect("turn");
    rx.try_recv().expect("replied").expect("created again");
    let model = &again.shared.model;
    assert_eq!(model.expected(&key), Some((took, WeightSource::Earlier)), "the first run's duration");
    let new = TaskKey::parse("s/new").expect("key");
    assert_eq!(model.expected(&new).map(|e| e.1), Some(WeightSource::Guess), "nothing known of a new task");
}
