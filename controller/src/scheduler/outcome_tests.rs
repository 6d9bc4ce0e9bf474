use swarm_core::plan::OnEmpty;
use swarm_core::{AttemptState, Outcome, TaskKey, Usage};

use super::{Effect, Facts, INFRA_BACKOFF_MS, Then, effect_of};
use crate::scheduler::TierOutcome;
use crate::scheduler::model::messages::{ReportedAttempt, ResultReport};

fn report(outcome: Outcome) -> ResultReport {
    ResultReport {
        attempt: ReportedAttempt { task: TaskKey::parse("s/t").expect("key"), number: 2, token: 7 },
        outcome,
        exit_code: 0,
        signal: None,
        commit: Some("c0ffee".into()),
        files_changed: vec!["src/a.rs".into()],
        tiers: Vec::new(),
        summary: String::new(),
        error: String::new(),
        log_tail: Vec::new(),
        category: String::new(),
        usage: Usage::default(),
        session_id: String::new(),
        rate_limit_reset_ms: 0,
        rate_limit_kind: String::new(),
        review: None,
    }
}

fn facts() -> Facts {
    Facts { answered: None, no_change: None, on_empty: OnEmpty::Fail }
}

#[test]
fn a_success_with_a_commit_succeeds_and_one_without_fails() {
    let e = effect_of(&report(Outcome::Success), facts());
    assert_eq!(e.attempt, AttemptState::Succeeded);
    assert_eq!(e.then, Then::Succeed { commit: "c0ffee".into(), reason: "attempt 2 succeeded".into() });
    let mut none = report(Outcome::Success);
    none.commit = None;
    let e = effect_of(&none, facts());
    assert_eq!(e.attempt, AttemptState::Failed);
    assert_eq!(e.then, Then::FailOrRetry("reported success without a commit".into()));
}

#[test]
fn no_change_fails_or_merges_as_the_plan_says_and_is_said_either_way() {
    let why = "no change: the agent changed no file".to_string();
    let fail = effect_of(&report(Outcome::Success), Facts { no_change: Some(why.clone()), ..facts() });
    assert_eq!(fail.attempt, AttemptState::Failed);
    assert_eq!(fail.attempt_error.as_deref(), Some(why.as_str()));
    assert_eq!(fail.no_change.as_deref(), Some(why.as_str()));
    assert_eq!(fail.then, Then::FailOrRetry(why.clone()));

    let merge = effect_of(
        &report(Outcome::Success),
        Facts { no_change: Some(why.clone()), on_empty: OnEmpty::Merge, ..facts() },
    );
    assert_eq!(merge.attempt, AttemptState::Succeeded);
    assert_eq!(merge.no_change.as_deref(), Some(why.as_str()));
    assert!(matches!(merge.then, Then::Succeed { ref reason, .. } if reason.ends_with("with no change")));
}

#[test]
fn failures_name_what_failed_with_the_first_line_of_the_detail() {
    let mut exit = report(Outcome::Error);
    exit.exit_code = 1;
    exit.error = "cargo test failed\nmore".into();
    assert_eq!(effect_of(&exit, facts()).then, Then::FailOrRetry("exit 1: cargo test failed".into()));

    let mut never_ran = report(Outcome::Error);
    never_ran.exit_code = -1;
    assert_eq!(effect_of(&never_ran, facts()).then, Then::FailOrRetry("attempt failed".into()));

    let mut killed = report(Outcome::Signaled);
    killed.signal = Some(9);
    assert_eq!(effect_of(&killed, facts()).then, Then::FailOrRetry("worker killed by signal 9".into()));

    let mut verify = report(Outcome::VerifyFailed);
    let tier = |name: &str, passed, blocking| TierOutcome {
        name: name.into(),
        passed,
        blocking,
        exit_code: i32::from(!passed),
        duration_ms: 1,
        output_tail: String::new(),
    };
    verify.tiers = vec![tier("unit", false, true), tier("lint", false, false), tier("e2e", true, true)];
    let e = effect_of(&verify, facts());
    assert_eq!(e.attempt, AttemptState::Failed);
    assert_eq!(e.then, Then::FailOrRetry("verification failed (unit)".into()));
}

#[test]
fn work_is_kept_by_exactly_the_outcomes_that_resume() {
    let keeps: Vec<Outcome> =
        Outcome::ALL.iter().copied().filter(|o| effect_of(&report(*o), facts()).keep_work).collect();
    assert_eq!(keeps, [Outcome::Checkpoint, Outcome::Escalation, Outcome::RateLimited]);
}

#[test]
fn moves_that_run_the_task_again_yield_to_a_cancel_and_stops_for_the_operator_do_not() {
    let yields = |o: Outcome| effect_of(&report(o), facts()).then.yields_to_cancel();
    for o in [
        Outcome::Error,
        Outcome::Checkpoint,
        Outcome::RateLimited,
        Outcome::InfraFailed,
        Outcome::Interrupted,
        Outcome::Cancelled,
    ] {
        assert!(yields(o), "{o:?}");
    }
    for o in [Outcome::Success, Outcome::Blocked, Outcome::Escalation] {
        assert!(!yields(o), "{o:?}");
    }
}

#[test]
fn an_escalation_asks_unless_its_question_was_answered_as_it_ended() {
    let mut asked = report(Outcome::Escalation);
    asked.error = "which database?".into();
    asked.category = "decision".into();
    let e: Effect = effect_of(&asked, facts());
    assert_eq!(e.attempt, AttemptState::Stopped);
    assert_eq!(e.then, Then::Escalate { question: "which database?".into(), category: "decision".into() });

    let answered = effect_of(&asked, Facts { answered: Some("q2".into()), ..facts() });
    assert_eq!(
        answered.then,
        Then::Ready { reason: "answered (q2) while attempt 2 ended".into(), delay_ms: 0 }
    );
    assert!(answered.keep_work);
}

#[test]
fn an_infrastructure_failure_spends_no_retry_and_backs_off() {
    let e = effect_of(&report(Outcome::InfraFailed), facts());
    assert_eq!(e.attempt, AttemptState::Failed);
    assert!(matches!(e.then, Then::Ready { delay_ms, .. } if delay_ms == INFRA_BACKOFF_MS));
    let limited = effect_of(&report(Outcome::RateLimited), facts());
    assert_eq!(limited.attempt, AttemptState::RateLimited);
    assert_eq!(limited.then, Then::WaitForLimit);
    assert!(limited.note.is_some_and(|n| n.contains("usage limit")));
}
