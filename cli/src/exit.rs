//! Exit codes scripts can trust, and the mapping from errors onto them.
//! README.md and `swarmctl --help` list the same table.

use swarm_core::plan::PlanError;
use tonic::Code;

pub const SUCCESS: u8 = 0;
/// A generic error; for `run`, some task FAILED or was CANCELLED.
pub const FAILURE: u8 = 1;
/// `run` stopped because the swarm waits on the operator.
pub const WAITING: u8 = 2;
/// A usage or plan error, or the controller rejected an argument.
pub const USAGE: u8 = 3;
pub const NOT_FOUND: u8 = 4;
/// The object is not in a state that allows the request.
pub const PRECONDITION: u8 = 5;
/// The controller cannot be reached (sysexits' EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
pub const INTERRUPTED: u8 = 130;

/// A usage error found by swarmctl itself (bad id, unreadable plan file).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// The controller could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

/// What `main` prints and returns for an error.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn from_error(e: &anyhow::Error) -> Failure {
        for cause in e.chain() {
            if let Some(status) = cause.downcast_ref::<tonic::Status>() {
                if crate::transport::is_transport(status) {
                    // The connection failed mid-command: say how, not just
                    // "transport error".
                    let how = crate::transport::status_text(status);
                    return Failure { code: UNAVAILABLE, message: format!("lost the controller: {how}") };
                }
                let message = if status.message().is_empty() {
                    format!("{:?}", status.code())
                } else {
                    status.message().to_string()
                };
                return Failure { code: status_code(status.code()), message };
            }
            if cause.downcast_ref::<PlanError>().is_some() || cause.downcast_ref::<Usage>().is_some() {
                return Failure { code: USAGE, message: e.to_string() };
            }
            if cause.downcast_ref::<Unreachable>().is_some() {
                return Failure { code: UNAVAILABLE, message: format!("{e:#}") };
            }
        }
        Failure { code: FAILURE, message: format!("{e:#}") }
    }
}

pub fn status_code(code: Code) -> u8 {
    match code {
        Code::InvalidArgument | Code::OutOfRange => USAGE,
        Code::NotFound => NOT_FOUND,
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => PRECONDITION,
        Code::Unavailable => UNAVAILABLE,
        _ => FAILURE,
    }
}
