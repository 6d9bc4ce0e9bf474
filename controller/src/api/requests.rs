//! Every Operator API request checked at the edge, before anything reaches
//! the scheduler: each function takes a request as it came off the wire
//! and returns what the call hands on, or `INVALID_ARGUMENT` naming the
//! field and the rule. The handlers in `operator.rs`, `budget.rs` and
//! `logs.rs` call these, and the fuzzer calls them on decoded bytes
//! (a plan's text is checked by `Plan::parse`, fuzzed on its own).

use swarm_core::plan::budget::{check_tokens, check_usd};
use swarm_core::{SwarmId, TaskKey, TaskState};
use swarm_proto::FieldError;
use swarm_proto::convert::required_id;
use swarm_proto::v1;
use tonic::Status;

use super::{convert, watch};
use crate::scheduler::{BudgetChange, BudgetTarget, Page};

/// How much of a log a read returns without `tail_bytes`, and at most:
/// rules of the request, so they sit with its check, which `logs.rs`
/// calls.
pub const DEFAULT_TAIL: u64 = 1 << 20;
pub const MAX_TAIL: u64 = 16 << 20;

/// A swarm id: a root swarm's, or a child swarm's (`app/auth`).
pub fn swarm_id(field: &str, id: &str) -> Result<String, Status> {
    SwarmId::new(id).map_err(|rule| FieldError::new(field, rule))?;
    Ok(id.to_string())
}

/// Free text (a reason, an answer, a message): bounded, printable.
pub fn bounded(field: &str, s: String) -> Result<String, Status> {
    swarm_core::names::check_text(&s, convert::MAX_TEXT).map_err(|rule| FieldError::new(field, rule))?;
    Ok(s)
}

fn non_empty(field: &str, s: String) -> Result<String, Status> {
    if s.trim().is_empty() {
        return Err(FieldError::new(field, "must not be empty").into());
    }
    bounded(field, s)
}

pub fn list_tasks(req: v1::ListTasksRequest) -> Result<(String, Vec<TaskState>, Page), Status> {
    let swarm = swarm_id("swarm_id", &req.swarm_id)?;
    let mut states = Vec::new();
    for (i, raw) in req.states.iter().enumerate() {
        let s = v1::TaskState::try_from(*raw)
            .map_err(|_| FieldError::new(format!("states[{i}]"), format!("unknown task state {raw}")))?;
        states.push(TaskState::try_from(s).map_err(|e| FieldError::new(format!("states[{i}]"), e.rule))?);
    }
    Ok((swarm, states, Page::new(req.page_size, req.page_token)?))
}

/// The swarm watched (all of them: `None`) and where the stream starts.
/// `from_now` with a cursor is ambiguous (which one wins?), so it is refused.
pub fn watch(req: &v1::WatchRequest) -> Result<(Option<String>, watch::Start), Status> {
    let swarm = if req.swarm_id.is_empty() { None } else { Some(swarm_id("swarm_id", &req.swarm_id)?) };
    if !req.from_now {
        return Ok((swarm, watch::Start::After { id: req.after_event_id, wait: req.wait_for_after }));
    }
    if req.after_event_id != 0 {
        return Err(FieldError::new(
            "after_event_id",
            "must be 0 with from_now (which starts after the newest event)",
        )
        .into());
    }
    if req.wait_for_after {
        return Err(
            FieldError::new("wait_for_after", "needs a cursor in after_event_id, not from_now").into()
        );
    }
    Ok((swarm, watch::Start::FromNow))
}

pub fn cancel_task(req: v1::CancelTaskRequest) -> Result<(TaskKey, String), Status> {
    Ok((convert::task_key("task_id", &req.task_id)?, bounded("reason", req.reason)?))
}

pub fn cancel_swarm(req: v1::CancelSwarmRequest) -> Result<(String, String), Status> {
    Ok((swarm_id("swarm_id", &req.swarm_id)?, bounded("reason", req.reason)?))
}

/// The task, the decision (`approve`, `request-changes`, `reject`) and
/// the message.
pub fn review_task(req: v1::ReviewTaskRequest) -> Result<(TaskKey, String, String), Status> {
    let task = convert::task_key("task_id", &req.task_id)?;
    let decision = req.decision.trim().to_string();
    if !matches!(decision.as_str(), "approve" | "request-changes" | "reject") {
        let rule = format!("must be approve, request-changes or reject, not {:?}", req.decision);
        return Err(FieldError::new("decision", rule).into());
    }
    Ok((task, decision, bounded("message", req.message)?))
}

/// The task, the question answered (empty: the pending one) and the text.
pub fn answer(req: v1::AnswerRequest) -> Result<(TaskKey, String, String), Status> {
    let task = convert::task_key("task_id", &req.task_id)?;
    let question_id = if req.question_id.is_empty() {
        String::new()
    } else {
        required_id("question_id", &req.question_id)?
    };
    Ok((task, question_id, non_empty("text", req.text)?))
}

pub fn send_message(req: v1::SendMessageRequest) -> Result<(TaskKey, String), Status> {
    Ok((convert::task_key("task_id", &req.task_id)?, non_empty("text", req.text)?))
}

/// The swarm and the branch to move (`None`: the plan's target).
pub fn land(req: v1::LandRequest) -> Result<(String, Option<String>), Status> {
    let swarm = swarm_id("swarm_id", &req.swarm_id)?;
    if !req.target_branch.is_empty() {
        swarm_core::names::check_branch(&req.target_branch)
            .map_err(|rule| FieldError::new("target_branch", rule))?;
    }
    Ok((swarm, (!req.target_branch.is_empty()).then_some(req.target_branch)))
}

/// A root swarm's id, or a task id (`<swarm>/<task>`). A child swarm's id
/// (`app/auth`) reads as its parent task's: the budget of a task with a
/// sub-plan is not enforced (it runs no agent), so this names the task.
fn budget_target(field: &str, id: &str) -> Result<BudgetTarget, Status> {
    if id.is_empty() {
        return Err(FieldError::new(field, "must not be empty").into());
    }
    if !id.contains('/') {
        let swarm = SwarmId::new(id).map_err(|rule| FieldError::new(field, rule))?;
        return Ok(BudgetTarget::Swarm(swarm));
    }
    TaskKey::parse(id).map(BudgetTarget::Task).map_err(|rule| FieldError::new(field, rule).into())
}

/// A dollar amount: 0 removes the cap.
fn usd(field: &str, v: Option<f64>) -> Result<Option<f64>, Status> {
    match v {
        Some(0.0) => Ok(Some(0.0)),
        Some(v) => Ok(Some(check_usd(field, v).map_err(|e| FieldError::new(field, e.rule))?)),
        None => Ok(None),
    }
}

fn tokens(field: &str, v: Option<u64>) -> Result<Option<u64>, Status> {
    match v {
        Some(0) => Ok(Some(0)),
        Some(v) => Ok(Some(check_tokens(field, v).map_err(|e| FieldError::new(field, e.rule))?)),
        None => Ok(None),
    }
}

pub fn set_budget(req: &v1::SetBudgetRequest) -> Result<(BudgetTarget, BudgetChange), Status> {
    let target = budget_target("target", &req.target)?;
    let change = BudgetChange {
        usd: usd("usd", req.usd)?,
        tokens: tokens("tokens", req.tokens)?,
        max_usd_per_hour: usd("max_usd_per_hour", req.max_usd_per_hour)?,
    };
    if matches!(target, BudgetTarget::Task(_)) && change.max_usd_per_hour.is_some() {
        let rule = "the burn-rate breaker is set on a swarm, not a task";
        return Err(FieldError::new("max_usd_per_hour", rule).into());
    }
    if change == BudgetChange::default() {
        return Err(FieldError::new("usd", "set usd, tokens or max_usd_per_hour").into());
    }
    Ok((target, change))
}

/// A root or child swarm to pause or resume.
pub fn swarm(id: &str) -> Result<SwarmId, Status> {
    SwarmId::new(id).map_err(|rule| FieldError::new("swarm_id", rule).into())
}

/// The swarm, whether its running attempts stop, and why.
pub fn pause(req: v1::PauseSwarmRequest) -> Result<(SwarmId, bool, String), Status> {
    let swarm = swarm(&req.swarm_id)?;
    Ok((swarm, req.stop, bounded("reason", req.reason)?))
}

/// The task and how many bytes of its log's end to send first.
pub fn read_attempt_log(req: &v1::ReadAttemptLogRequest) -> Result<(TaskKey, u64), Status> {
    let task = convert::task_key("task_id", &req.task_id)?;
    let tail = match req.tail_bytes {
        0 => DEFAULT_TAIL,
        n if n > MAX_TAIL => {
            return Err(FieldError::new("tail_bytes", format!("at most {} bytes", MAX_TAIL)).into());
        }
        n => n,
    };
    Ok((task, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_target_is_a_swarm_or_a_task_and_bad_amounts_name_their_field() {
        assert!(matches!(budget_target("target", "app"), Ok(BudgetTarget::Swarm(_))));
        assert!(matches!(budget_target("target", "app/api"), Ok(BudgetTarget::Task(_))));
        assert!(budget_target("target", "").is_err());
        let e = usd("usd", Some(-1.0)).expect_err("negative");
        assert!(e.message().starts_with("usd:"), "{}", e.message());
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(usd("max_usd_per_hour", Some(f64::NAN)).is_err());
        assert_eq!(usd("usd", Some(0.0)).expect("zero"), Some(0.0));
        assert_eq!(tokens("tokens", Some(0)).expect("zero"), Some(0));
    }

    #[test]
    fn bad_requests_name_the_field_and_the_rule() {
        fn field<T>(r: Result<T, Status>) -> String {
            let e = r.map(drop).expect_err("refused");
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            e.message().split(':').next().unwrap_or_default().to_string()
        }
        let req = v1::ListTasksRequest { swarm_id: "s".into(), states: vec![999], ..Default::default() };
        assert_eq!(field(list_tasks(req)), "states[0]");
        assert_eq!(
            field(cancel_task(v1::CancelTaskRequest { task_id: "s".into(), ..Default::default() })),
            "task_id"
        );
        let review =
            v1::ReviewTaskRequest { task_id: "s/a".into(), decision: "maybe".into(), ..Default::default() };
        assert_eq!(field(review_task(review)), "decision");
        let blank = v1::AnswerRequest { task_id: "s/a".into(), text: " ".into(), ..Default::default() };
        assert_eq!(field(answer(blank)), "text");
        let land_req = v1::LandRequest { swarm_id: "s".into(), target_branch: "a..b".into() };
        assert_eq!(field(land(land_req)), "target_branch");
        let task_breaker =
            v1::SetBudgetRequest { target: "s/a".into(), max_usd_per_hour: Some(1.0), ..Default::default() };
        assert_eq!(field(set_budget(&task_breaker)), "max_usd_per_hour");
        let huge =
            v1::ReadAttemptLogRequest { task_id: "s/a".into(), tail_bytes: u64::MAX, ..Default::default() };
        assert_eq!(field(read_attempt_log(&huge)), "tail_bytes");
        let watch_req = v1::WatchRequest { swarm_id: "../x".into(), ..Default::default() };
        assert_eq!(field(watch(&watch_req)), "swarm_id");
        let both = v1::WatchRequest { after_event_id: 5, from_now: true, ..Default::default() };
        assert_eq!(field(watch(&both)), "after_event_id");
        let wait_now = v1::WatchRequest { from_now: true, wait_for_after: true, ..Default::default() };
        assert_eq!(field(watch(&wait_now)), "wait_for_after");
    }

    #[test]
    fn from_now_is_a_flag_and_every_cursor_value_is_a_cursor() {
        use super::watch::Start;
        let start = |req: v1::WatchRequest| watch(&req).expect("valid").1;
        assert_eq!(start(v1::WatchRequest { from_now: true, ..Default::default() }), Start::FromNow);
        for id in [0, 7, u64::MAX] {
            let req = v1::WatchRequest { after_event_id: id, ..Default::default() };
            assert_eq!(start(req), Start::After { id, wait: false });
        }
        let waits = v1::WatchRequest { after_event_id: u64::MAX, wait_for_after: true, ..Default::default() };
        assert_eq!(start(waits), Start::After { id: u64::MAX, wait: true });
    }
}
