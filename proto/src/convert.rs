//! Conversions between wire and domain types.

use std::fmt;

use swarm_core::names::{check_commit, check_id};
use swarm_core::{AttemptState, Outcome, SwarmId, TaskId, TaskKey, TaskState, TierOutcome, Usage};

use crate::v1;

/// A wire message that broke a rule; `field` is its path in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FieldError {
    pub field: String,
    pub rule: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

impl FieldError {
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self { field: field.into(), rule: rule.into() }
    }

    /// Prefixes the path, for errors from nested messages.
    pub fn within(mut self, parent: &str) -> Self {
        self.field = format!("{parent}.{}", self.field);
        self
    }
}

impl From<FieldError> for tonic::Status {
    fn from(e: FieldError) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// A validated `AttemptRef`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptRef {
    pub task: TaskKey,
    pub number: u32,
    pub fencing_token: u64,
}

impl TryFrom<&v1::AttemptRef> for AttemptRef {
    type Error = FieldError;

    fn try_from(r: &v1::AttemptRef) -> Result<Self, FieldError> {
        let swarm = SwarmId::new(r.swarm_id.clone()).map_err(|rule| FieldError::new("swarm_id", rule))?;
        let task = TaskId::new(r.task_id.clone()).map_err(|rule| FieldError::new("task_id", rule))?;
        if r.attempt == 0 {
            return Err(FieldError::new("attempt", "must be at least 1"));
        }
        if r.fencing_token == 0 {
            return Err(FieldError::new("fencing_token", "must be non-zero"));
        }
        Ok(AttemptRef { task: TaskKey::new(swarm, task), number: r.attempt, fencing_token: r.fencing_token })
    }
}

impl From<&AttemptRef> for v1::AttemptRef {
    fn from(r: &AttemptRef) -> Self {
        v1::AttemptRef {
            swarm_id: r.task.swarm.to_string(),
            task_id: r.task.task.to_string(),
            attempt: r.number,
            fencing_token: r.fencing_token,
        }
    }
}

/// Reads a required nested attempt ref.
pub fn required_attempt(field: &str, r: Option<&v1::AttemptRef>) -> Result<AttemptRef, FieldError> {
    let r = r.ok_or_else(|| FieldError::new(field, "is required"))?;
    AttemptRef::try_from(r).map_err(|e| e.within(field))
}

/// A required full commit id.
pub fn required_commit(field: &str, id: &str) -> Result<String, FieldError> {
    check_commit(id).map_err(|rule| FieldError::new(field, rule))?;
    Ok(id.to_string())
}

/// An optional commit id: empty means absent.
pub fn optional_commit(field: &str, id: &str) -> Result<Option<String>, FieldError> {
    if id.is_empty() { Ok(None) } else { required_commit(field, id).map(Some) }
}

/// A required id (worker ids and the like).
pub fn required_id(field: &str, id: &str) -> Result<String, FieldError> {
    check_id(id).map_err(|rule| FieldError::new(field, rule))?;
    Ok(id.to_string())
}

impl From<TaskState> for v1::TaskState {
    fn from(s: TaskState) -> Self {
        match s {
            TaskState::Pending => v1::TaskState::Pending,
            TaskState::Ready => v1::TaskState::Ready,
            TaskState::Running => v1::TaskState::Running,
            TaskState::Succeeded => v1::TaskState::Succeeded,
            TaskState::Merging => v1::TaskState::Merging,
            TaskState::Merged => v1::TaskState::Merged,
            TaskState::Conflict => v1::TaskState::Conflict,
            TaskState::Failed => v1::TaskState::Failed,
            TaskState::Blocked => v1::TaskState::Blocked,
            TaskState::Escalated => v1::TaskState::Escalated,
            TaskState::Cancelled => v1::TaskState::Cancelled,
            TaskState::Review => v1::TaskState::Review,
            TaskState::Rejected => v1::TaskState::Rejected,
        }
    }
}

impl TryFrom<v1::TaskState> for TaskState {
    type Error = FieldError;

    fn try_from(s: v1::TaskState) -> Result<Self, FieldError> {
        Ok(match s {
            v1::TaskState::Unspecified => return Err(FieldError::new("state", "must be specified")),
            v1::TaskState::Pending => TaskState::Pending,
            v1::TaskState::Ready => TaskState::Ready,
            v1::TaskState::Running => TaskState::Running,
            v1::TaskState::Succeeded => TaskState::Succeeded,
            v1::TaskState::Merging => TaskState::Merging,
            v1::TaskState::Merged => TaskState::Merged,
            v1::TaskState::Conflict => TaskState::Conflict,
            v1::TaskState::Failed => TaskState::Failed,
            v1::TaskState::Blocked => TaskState::Blocked,
            v1::TaskState::Escalated => TaskState::Escalated,
            v1::TaskState::Cancelled => TaskState::Cancelled,
            v1::TaskState::Review => TaskState::Review,
            v1::TaskState::Rejected => TaskState::Rejected,
        })
    }
}

impl From<AttemptState> for v1::AttemptState {
    fn from(s: AttemptState) -> Self {
        match s {
            AttemptState::Assigned => v1::AttemptState::Assigned,
            AttemptState::Running => v1::AttemptState::Running,
            AttemptState::Succeeded => v1::AttemptState::Succeeded,
            AttemptState::Failed => v1::AttemptState::Failed,
            AttemptState::Checkpointed => v1::AttemptState::Checkpointed,
            AttemptState::Lost => v1::AttemptState::Lost,
            AttemptState::Fenced => v1::AttemptState::Fenced,
            AttemptState::Cancelled => v1::AttemptState::Cancelled,
            AttemptState::Stopped => v1::AttemptState::Stopped,
            AttemptState::RateLimited => v1::AttemptState::RateLimited,
        }
    }
}

impl From<Outcome> for v1::Outcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Success => v1::Outcome::Success,
            Outcome::Error => v1::Outcome::Error,
            Outcome::Checkpoint => v1::Outcome::Checkpoint,
            Outcome::Blocked => v1::Outcome::Blocked,
            Outcome::Escalation => v1::Outcome::Escalation,
            Outcome::Interrupted => v1::Outcome::Interrupted,
            Outcome::VerifyFailed => v1::Outcome::VerifyFailed,
            Outcome::Signaled => v1::Outcome::Signaled,
            Outcome::Stalled => v1::Outcome::Stalled,
            Outcome::Cancelled => v1::Outcome::Cancelled,
            Outcome::InfraFailed => v1::Outcome::InfraFailed,
            Outcome::RateLimited => v1::Outcome::RateLimited,
        }
    }
}

impl TryFrom<v1::Outcome> for Outcome {
    type Error = FieldError;

    fn try_from(o: v1::Outcome) -> Result<Self, FieldError> {
        Ok(match o {
            v1::Outcome::Unspecified => return Err(FieldError::new("outcome", "must be specified")),
            v1::Outcome::Success => Outcome::Success,
            v1::Outcome::Error => Outcome::Error,
            v1::Outcome::Checkpoint => Outcome::Checkpoint,
            v1::Outcome::Blocked => Outcome::Blocked,
            v1::Outcome::Escalation => Outcome::Escalation,
            v1::Outcome::Interrupted => Outcome::Interrupted,
            v1::Outcome::VerifyFailed => Outcome::VerifyFailed,
            v1::Outcome::Signaled => Outcome::Signaled,
            v1::Outcome::Stalled => Outcome::Stalled,
            v1::Outcome::Cancelled => Outcome::Cancelled,
            v1::Outcome::InfraFailed => Outcome::InfraFailed,
            v1::Outcome::RateLimited => Outcome::RateLimited,
        })
    }
}

impl From<&Usage> for v1::Usage {
    fn from(u: &Usage) -> Self {
        v1::Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl From<&TierOutcome> for v1::TierResult {
    fn from(t: &TierOutcome) -> Self {
        v1::TierResult {
            name: t.name.clone(),
            passed: t.passed,
            blocking: t.blocking,
            exit_code: t.exit_code,
            duration_ms: t.duration_ms,
            output_tail: t.output_tail.clone(),
        }
    }
}

/// As sent, unchecked: for a peer's own journal read back. A report from
/// the network is checked field by field where it is received.
impl From<&v1::TierResult> for TierOutcome {
    fn from(t: &v1::TierResult) -> Self {
        TierOutcome {
            name: t.name.clone(),
            passed: t.passed,
            blocking: t.blocking,
            exit_code: t.exit_code,
            duration_ms: t.duration_ms,
            output_tail: t.output_tail.clone(),
        }
    }
}

/// Decodes a peer's usage report (absent: nothing spent), refusing a cost
/// that is not a plausible number of dollars.
pub fn usage_from_wire(field: &str, u: Option<&v1::Usage>) -> Result<Usage, FieldError> {
    let Some(u) = u else { return Ok(Usage::default()) };
    let usage = Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_creation_tokens: u.cache_creation_tokens,
        cost_usd: u.cost_usd,
    };
    usage.check().map_err(|rule| FieldError::new(field, rule))?;
    Ok(usage)
}

/// An agent's session id: what `--resume` takes, so it must stay a plain
/// token on a command line.
pub fn session_id_from_wire(field: &str, id: &str) -> Result<String, FieldError> {
    let ok = id.len() <= 128 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(FieldError::new(field, "must be at most 128 of [A-Za-z0-9._-]"));
    }
    Ok(id.to_string())
}

/// Decodes a raw enum value from the wire, naming the field when unknown.
pub fn outcome_from_wire(field: &str, raw: i32) -> Result<Outcome, FieldError> {
    let o =
        v1::Outcome::try_from(raw).map_err(|_| FieldError::new(field, format!("unknown outcome {raw}")))?;
    Outcome::try_from(o).map_err(|e| FieldError::new(field, e.rule))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_refs_are_validated_with_field_names() {
        let good =
            v1::AttemptRef { swarm_id: "auth".into(), task_id: "api".into(), attempt: 2, fencing_token: 7 };
        let r = AttemptRef::try_from(&good).expect("valid");
        assert_eq!(r.task.attempt(r.number).to_string(), "auth/api#2");
        let bad = v1::AttemptRef { task_id: "../etc".into(), ..good.clone() };
        let e = required_attempt("result.attempt", Some(&bad)).expect_err("bad task id");
        assert_eq!(e.field, "result.attempt.task_id");
        let e = required_attempt("result.attempt", None).expect_err("missing");
        assert_eq!(e.to_string(), "result.attempt: is required");
        let zero = v1::AttemptRef { fencing_token: 0, ..good };
        assert_eq!(AttemptRef::try_from(&zero).expect_err("zero token").field, "fencing_token");
    }

    #[test]
    fn unknown_enum_values_are_errors() {
        assert!(outcome_from_wire("result.outcome", 99).is_err());
        assert!(outcome_from_wire("result.outcome", 0).is_err());
        assert_eq!(outcome_from_wire("result.outcome", 3), Ok(Outcome::Checkpoint));
    }
}
