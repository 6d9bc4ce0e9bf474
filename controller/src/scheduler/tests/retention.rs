//! Retention forgets a swarm tree that ended longer ago than the window,
//! from the model and the store alike, and nothing that still moves.

use std::time::{Duration, Instant};

use swarm_core::{Outcome, SwarmId, TaskState};
use tokio::sync::oneshot;

use super::super::command::{Command, OperatorOp};
use super::super::model::SwarmState;
use super::order::create;
use super::recovery::recovered;
use super::{Rig, state};
use crate::SchedError;

fn retain_for(rig: &mut Rig, window: Duration) {
    rig.sched.shared.timing.forget_finished_after = Some(window);
    rig.sched.parts.retention.sweep_every_turn();
}

fn swarm_state(rig: &mut Rig, id: &str) -> Result<SwarmState, SchedError> {
    let (reply, mut rx) = oneshot::channel();
    rig.sched.turn([Command::Operator(OperatorOp::GetSwarm { swarm: id.into(), reply })]).expect("turn");
    rx.try_recv().expect("replied").map(|v| SwarmState::parse(&v.state).expect("a state this build knows"))
}

/// Every stored row and event of `swarm` (its children included), and the
/// `swarm.forgotten` events.
fn stored(rig: &Rig, swarm: &str) -> (i64, i64) {
    let db = rusqlite::Connection::open(rig._dir.path().join("swarm.db")).expect("open");
    let like = format!("{swarm}/%");
    let rows: i64 = db
        .query_row(
            "SELECT (SELECT COUNT(*) FROM swarms WHERE id = ?1 OR id LIKE ?2)
                  + (SELECT COUNT(*) FROM swarm_progress WHERE swarm = ?1 OR swarm LIKE ?2)
                  + (SELECT COUNT(*) FROM tasks WHERE swarm = ?1 OR swarm LIKE ?2)
                  + (SELECT COUNT(*) FROM attempts WHERE swarm = ?1 OR swarm LIKE ?2)
                  + (SELECT COUNT(*) FROM events WHERE swarm = ?1 OR swarm LIKE ?2)",
            rusqlite::params![swarm, like],
            |r| r.get(0),
        )
        .expect("count");
    let forgotten: i64 = db
        .query_row("SELECT COUNT(*) FROM events WHERE kind = 'swarm.forgotten'", [], |r| r.get(0))
        .expect("count");
    (rows, forgotten)
}

#[test]
fn a_swarm_that_ended_longer_ago_than_the_window_leaves_the_model_and_the_store_and_others_stay() {
    let mut rig = Rig::new(0);
    retain_for(&mut rig, Duration::from_secs(3600));
    let a = rig.take_assign().expect("a assigned");
    rig.report(a, Outcome::Success);
    assert_eq!(swarm_state(&mut rig, "s").expect("s"), SwarmState::Completed);
    create(&mut rig, "t", "", "[[tasks]]\nid = \"x\"\nfiles = [\"x.txt\"]\n");
    rig.sched.turn([]).expect("turn");
    let x = rig.take_assign().expect("t/x assigned to w1");
    assert_eq!(x.task.swarm.as_str(), "t");

    rig.sched.turn([]).expect("turn");
    assert_eq!(swarm_state(&mut rig, "s").expect("s"), SwarmState::Completed, "kept within the window");
    assert!(stored(&rig, "s").0 > 0);

    retain_for(&mut rig, Duration::ZERO);
    rig.sched.turn([]).expect("turn");
    assert!(matches!(swarm_state(&mut rig, "s"), Err(SchedError::NotFound(_))), "s is forgotten");
    assert_eq!(stored(&rig, "s"), (0, 1), "no row or event of s is left; one swarm.forgotten event");
    let live = rig.sched.shared.model.indexes();
    assert!(!live.swarms.contains_key("s"), "{live:?}");
    let of_s = |k: &swarm_core::TaskKey| k.swarm.as_str() == "s";
    assert!(!live.ready.iter().chain(&live.running).chain(live.dependents.keys()).any(of_s), "{live:?}");
    assert!(!rig.sched.shared.model.tasks().keys().any(of_s));
    assert!(!rig.sched.shared.model.attempts().keys().any(|(k, _)| of_s(k)));
    assert_eq!(recovered(&rig).shared.model.indexes(), live, "a restart holds what the live run holds");

    // The swarm that runs is untouched; the forgotten id is free again.
    assert_eq!(swarm_state(&mut rig, "t").expect("t"), SwarmState::Active);
    assert!(live.bound.get("w1").is_some_and(|(k, _)| k.swarm.as_str() == "t"), "{live:?}");
    create(&mut rig, "s", "", "[[tasks]]\nid = \"again\"\nfiles = [\"again.txt\"]\n");
    assert_eq!(swarm_state(&mut rig, "s").expect("s again"), SwarmState::Active);
}

#[test]
fn a_cancelled_swarm_is_kept_until_its_last_live_attempt_stops() {
    let mut rig = Rig::new(0);
    retain_for(&mut rig, Duration::ZERO);
    let a = rig.take_assign().expect("a assigned");
    let (reply, mut rx) = oneshot::channel();
    let cancel = OperatorOp::CancelSwarm { swarm: "s".into(), reason: "enough".into(), reply };
    rig.sched.turn([Command::Operator(cancel)]).expect("turn");
    rx.try_recv().expect("replied").expect("cancelled");
    for _ in 0..3 {
        rig.sched.turn([]).expect("turn");
    }
    assert_eq!(swarm_state(&mut rig, "s").expect("kept"), SwarmState::Cancelled, "its attempt is still live");
    // (Reported under a long window: the report reads the task back.)
    retain_for(&mut rig, Duration::from_secs(3600));
    rig.report(a, Outcome::Cancelled);
    retain_for(&mut rig, Duration::ZERO);
    rig.sched.turn([]).expect("turn");
    assert!(matches!(swarm_state(&mut rig, "s"), Err(SchedError::NotFound(_))));
    assert_eq!(stored(&rig, "s").0, 0);
}

#[test]
fn a_child_swarm_is_forgotten_with_its_root_and_not_before() {
    let tasks = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n\
                 [[tasks.subtasks]]\nid = \"x\"\nfiles = [\"a.txt\"]\n\
                 [[tasks]]\nid = \"b\"\nfiles = [\"b.txt\"]\ndeps = [\"a\"]\n";
    let mut rig = Rig::build(0, 64, tasks);
    retain_for(&mut rig, Duration::ZERO);
    let child = SwarmId::new("s/a").expect("id");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut b = None;
    while b.is_none() {
        assert!(Instant::now() < deadline, "s/a/x merged and s/b assigned in time: {:?}", rig.detail());
        rig.sched.turn([]).expect("turn");
        while let Ok(cmd) = rig.merged.try_recv() {
            rig.sched.turn([cmd]).expect("turn");
        }
        match rig.take_assign() {
            Some(x) if x.task.swarm == child => rig.report(x, Outcome::Success),
            Some(other) => b = Some(other),
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    // The child ended long before its root; it stays while the root runs.
    assert_eq!(state(&rig.detail().task), TaskState::Merged);
    assert_eq!(swarm_state(&mut rig, "s/a").expect("child kept"), SwarmState::Completed);
    rig.report(b.expect("b"), Outcome::Success);
    // b's merge result comes back from the merger; the root then ends and
    // goes, its child with it.
    while swarm_state(&mut rig, "s").is_ok() {
        assert!(Instant::now() < deadline, "s forgotten in time");
        while let Ok(cmd) = rig.merged.recv_timeout(Duration::from_millis(20)) {
            rig.sched.turn([cmd]).expect("turn");
        }
        rig.sched.turn([]).expect("turn");
    }
    assert!(matches!(swarm_state(&mut rig, "s/a"), Err(SchedError::NotFound(_))));
    assert_eq!(stored(&rig, "s"), (0, 1), "the tree goes as one, with one event");
    assert!(rig.sched.shared.model.swarms().is_empty());
}
