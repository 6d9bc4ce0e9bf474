//! The review gate's one invariant at the scheduler: a decision applies
//! only to the commit that was reviewed.

use super::*;
use crate::scheduler::command::ReviewVerdict;

fn reviewer_result(rig: &mut Rig, attempt: ReportedAttempt, commit: &str, decision: &str) {
    rig.seq += 1;
    let r = ResultReport {
        attempt,
        outcome: Outcome::Success,
        exit_code: 0,
        signal: None,
        commit: Some(commit.to_string()),
        files_changed: vec![],
        tiers: vec![],
        summary: String::new(),
        error: String::new(),
        log_tail: vec![],
        category: String::new(),
        usage: Default::default(),
        session_id: String::new(),
        rate_limit_reset_ms: 0,
        rate_limit_kind: String::new(),
        review: Some(ReviewVerdict { decision: decision.into(), message: "m".into(), error: String::new() }),
    };
    let cmd = Command::Report {
        worker: "w1".into(),
        session: 1,
        seq: rig.seq,
        report: Report::Result(Box::new(r)),
    };
    rig.sched.turn([cmd]).expect("turn");
}

#[test]
fn a_reviewer_approving_another_commit_than_the_reviewed_one_decides_nothing() {
    let mut rig =
        Rig::build(1, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nreview = { command = \"true\" }\n");
    let work = rig.take_assign().expect("assigned");
    rig.report(work, Outcome::Success);
    let d = rig.detail();
    assert_eq!(state(&d.task), TaskState::Review);
    let reviewed = d.branch_report.as_ref().expect("a branch report").commit.clone();
    assert!(!reviewed.is_empty());

    // The reviewer attempt (#2) names the base instead of the result.
    let review = rig.take_assign().expect("a reviewer attempt");
    assert_eq!(review.number, 2);
    let base = rig.base.clone();
    reviewer_result(&mut rig, review, &base, "approve");
    let d = rig.detail();
    assert_eq!(state(&d.task), TaskState::Review, "not approved: {}", d.task.reason);
    assert_eq!(d.attempts[1].state, "FAILED");
    assert!(d.branch_report.as_ref().expect("a branch report").reviews.is_empty(), "no decision recorded");

    // The next reviewer names the reviewed commit: that approval counts.
    let again = rig.take_assign().expect("the reviewer is retried");
    assert_eq!(again.number, 3);
    reviewer_result(&mut rig, again, &reviewed, "approve");
    let d = rig.detail();
    assert!(matches!(state(&d.task), TaskState::Merging | TaskState::Merged), "{:?}", state(&d.task));
    assert_eq!(d.branch_report.as_ref().expect("a branch report").reviews.len(), 1);
    assert_eq!(d.branch_report.as_ref().expect("a branch report").reviews[0].commit, reviewed);
}

#[test]
fn cancelling_a_task_in_review_stops_its_reviewer() {
    let mut rig =
        Rig::build(1, 64, "[[tasks]]\nid = \"a\"\nfiles = [\"a.txt\"]\nreview = { command = \"true\" }\n");
    let work = rig.take_assign().expect("assigned");
    rig.report(work, Outcome::Success);
    let review = rig.take_assign().expect("a reviewer attempt");
    assert!(rig.op(|reply| OperatorOp::CancelTask { task: Rig::key(), reason: "no".into(), reply }));
    let d = rig.detail();
    assert_eq!(state(&d.task), TaskState::Cancelled);
    assert_eq!(d.attempts[1].state, "CANCELLED", "the reviewer attempt");
    let mut cancelled = false;
    while let Ok(m) = rig.outbound.try_recv() {
        cancelled |= matches!(m, Outbound::Cancel { ref attempt, .. } if attempt.number == review.number);
    }
    assert!(cancelled, "a Cancel went to the reviewer's sidecar");
    // Its late verdict is fenced: nothing changes.
    let reviewed = d.branch_report.as_ref().expect("a branch report").commit.clone();
    reviewer_result(&mut rig, review, &reviewed, "approve");
    let d = rig.detail();
    assert_eq!(state(&d.task), TaskState::Cancelled);
    assert!(d.branch_report.as_ref().expect("a branch report").reviews.is_empty());
}
