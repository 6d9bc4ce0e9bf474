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
                let message = match credential_hint(status.code()) {
                    Some(hint) => format!("{message}\n{hint}"),
                    None => message,
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

/// What a person refused for their credential does next: the controller
/// says what was wrong with it, only swarmctl knows its own flags.
fn credential_hint(code: Code) -> Option<&'static str> {
    match code {
        Code::Unauthenticated => Some(
            "hint: give an operator's bearer token (--token, SWARM_TOKEN or --token-file; \
             `swarmctl token create --role operator` makes one for the controller's --tokens file) \
             or a client certificate (--cert and --key, with --ca for https://)",
        ),
        Code::PermissionDenied => Some(
            "hint: this credential is known but its role may not do this; \
             operator commands need a token or certificate of role operator or admin",
        ),
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_credential_says_which_flags_give_one() {
        let e = anyhow::Error::new(tonic::Status::unauthenticated("unknown bearer token"));
        let f = Failure::from_error(&e);
        assert_eq!(f.code, FAILURE);
        assert!(f.message.starts_with("unknown bearer token\nhint:"), "{}", f.message);
        assert!(f.message.contains("--token") && f.message.contains("--cert"), "{}", f.message);
        let e = anyhow::Error::new(tonic::Status::permission_denied("token:w1 has role sidecar"));
        assert!(Failure::from_error(&e).message.contains("role operator or admin"));
        let e = anyhow::Error::new(tonic::Status::not_found("task a/b not found"));
        let f = Failure::from_error(&e);
        assert_eq!((f.code, f.message.as_str()), (NOT_FOUND, "task a/b not found"));
    }
}
