//! The controller's errors and their gRPC status codes.

use crate::store::StoreError;

/// What an operator request or a report can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SchedError {
    #[error("{0}")]
    NotFound(String),
    #[error("{field}: {rule}")]
    InvalidArgument { field: String, rule: String },
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// The caller is known but may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// The scheduler has stopped (shutdown, or its store failed).
    #[error("controller unavailable: {0}")]
    Unavailable(String),
}

impl From<SchedError> for tonic::Status {
    fn from(e: SchedError) -> Self {
        let message = e.to_string();
        match e {
            SchedError::NotFound(_) => tonic::Status::not_found(message),
            SchedError::InvalidArgument { .. } => tonic::Status::invalid_argument(message),
            SchedError::FailedPrecondition(_) => tonic::Status::failed_precondition(message),
            SchedError::AlreadyExists(_) => tonic::Status::already_exists(message),
            SchedError::PermissionDenied(_) => tonic::Status::permission_denied(message),
            SchedError::Unavailable(_) => tonic::Status::unavailable(message),
        }
    }
}

/// Why the controller could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("repository {path}: {reason}")]
    Repository { path: String, reason: String },
    #[error("listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error("rebuilding state from the store: {0}")]
    Recovery(String),
    #[error("gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("scheduler thread: {0}")]
    Thread(String),
    /// A supervised thread (scheduler, merger) ended; see `supervise`.
    #[error("controller stopped: {0}")]
    Stopped(String),
    /// TLS, credentials or the secure-by-default rule.
    #[error("{0}")]
    Security(String),
    /// The operator webhooks could not start.
    #[error("operator webhooks: {0}")]
    Notify(String),
}
