//! Recovery builds the model's indexes with the transitions that keep them
//! during a run: a scheduler recovered from a store holds the indexes the
//! live one that wrote it held.

use std::time::Duration;

use swarm_core::{Outcome, TaskState};

use super::super::{Scheduler, Timing};
use super::{Rig, state};
use crate::merger;

/// Recovers a second scheduler from the store `rig` has written.
pub(super) fn recovered(rig: &Rig) -> Scheduler {
    let store = rig.sched.store.reopen().expect("reopen");
    let (results, _merged) = flume::unbounded();
    let (handle, _thread) = merger::spawn(&rig.repo, super::super::merger_sink(results)).expect("merger");
    let timing =
        Timing { lease_ttl: Duration::from_secs(3600), lost_grace: Duration::ZERO, ..Timing::default() };
    Scheduler::recover(store, timing, handle).expect("recover")
}

#[test]
fn a_recovered_model_has_the_indexes_the_live_run_built() {
    let tasks = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\n\
                 [[tasks]]\nid = \"b\"\nfiles = [\"b/**\"]\ndeps = [\"a\"]\n\
                 [[tasks]]\nid = \"c\"\nfiles = [\"c.txt\"]\n\
                 [[tasks]]\nid = \"d\"\nfiles = [\"d.txt\"]\ndeps = [\"c\"]\n\
                 [[tasks]]\nid = \"e\"\nfiles = [\"e.txt\"]\ndeps = [\"b\", \"c\"]\n";
    let mut rig = Rig::build(0, 64, tasks);
    let check = |rig: &Rig, when: &str| {
        let live = rig.sched.shared.model.indexes();
        let again = recovered(rig).shared.model.indexes();
        assert_eq!(again, live, "{when}");
    };
    check(&rig, "created, a READY and assigned");
    let a = rig.take_assign().expect("a assigned");
    assert_eq!(a.task, Rig::key());
    rig.report(a, Outcome::Success);
    assert_eq!(state(&rig.detail().task), TaskState::Merged);
    // w1 holds the next task; the other READY ones wait.
    rig.sched.turn([]).expect("turn");
    let next = rig.take_assign().expect("next assigned");
    check(&rig, "a MERGED, one task RUNNING on w1, others READY or PENDING");
    let live = rig.sched.shared.model.indexes();
    assert!(live.running.contains(&next.task), "{live:?}");
    assert!(live.bound.contains_key("w1"), "{live:?}");
    assert!(!live.ready.is_empty() && !live.dependents.is_empty(), "{live:?}");
}

#[test]
fn a_recovered_reviewer_attempt_holds_its_worker_and_no_ownership_as_in_the_live_run() {
    let tasks = "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nreview = { command = \"true\" }\n";
    let mut rig = Rig::build(1, 64, tasks);
    let work = rig.take_assign().expect("assigned");
    assert_eq!(work.task, Rig::key());
    rig.report(work, Outcome::Success);
    assert_eq!(state(&rig.detail().task), TaskState::Review);
    rig.sched.turn([]).expect("turn");
    let reviewer = rig.take_assign().expect("the reviewer is assigned to w1");
    assert_eq!(reviewer.task, Rig::key());
    let live = rig.sched.shared.model.indexes();
    assert!(live.bound.contains_key("w1"), "{live:?}");
    assert!(!live.running.contains(&Rig::key()), "a reviewer owns nothing: {live:?}");
    assert_eq!(recovered(&rig).shared.model.indexes(), live);
}
