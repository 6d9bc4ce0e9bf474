//! Authentication and authorization at the gRPC edge, in one place.
//!
//! [`AuthLayer`] (the [`Admit`] layer of `admit.rs`) wraps every service
//! of the server. For each request it
//! resolves the caller's [`Identity`] through `swarm_auth`'s
//! [`Authenticator`] (a bearer token from the tokens file, or the verified
//! client certificate of an mTLS connection), checks the identity's role
//! against [`required_role`] of the RPC's path, and puts the identity into
//! the request's extensions for the handlers. Health and reflection stay
//! open. Every denial goes through [`on_denied`].

use std::sync::Arc;

use tonic::Status;

use super::Shared;
use super::admit::{Admit, AdmitLayer};
pub use swarm_auth::*;

/// Every denial passes through here: counted, logged at warn, and the one
/// place to hang auditing on.
pub fn on_denied(shared: &Shared, denial: &Denial) {
    let code = match denial.status.code() {
        tonic::Code::Unauthenticated => "unauthenticated",
        tonic::Code::PermissionDenied => "permission_denied",
        _ => "other",
    };
    shared.metrics.auth_denied.get_or_create(&vec![("code", code)]).inc();
    tracing::warn!(
        code,
        principal = denial.principal.as_deref().unwrap_or("-"),
        what = %denial.what,
        reason = denial.status.message(),
        "request denied"
    );
    // Into the audit log, where the scheduler keeps it to one event per
    // caller and minute (plus a count): a caller must not grow the log at
    // the rate it is refused.
    shared.send_soon(crate::scheduler::Command::Denied {
        client: denial.principal.clone().unwrap_or_else(|| "unauthenticated".into()),
        message: format!("{} denied ({code}): {}", denial.what, denial.status.message()),
    });
}

/// Checks that the caller (from the request's extensions) may speak for
/// `worker_id`; a sidecar's Hello must be covered by its identity.
pub fn authorize_worker(
    shared: &Shared,
    extensions: &tonic::Extensions,
    worker_id: &str,
) -> Result<(), Status> {
    let denial = match extensions.get::<Identity>() {
        Some(id) if id.covers_worker(worker_id) => return Ok(()),
        Some(id) => Denial {
            status: Status::permission_denied(format!(
                "{} may not act as worker {worker_id:?} (it may claim {})",
                id.principal,
                id.workers.as_ref().map(|p| p.as_str()).unwrap_or("no worker ids")
            )),
            principal: Some(id.principal.clone()),
            what: format!("hello as {worker_id}"),
        },
        None => Denial {
            status: Status::permission_denied("no identity on the request"),
            principal: None,
            what: format!("hello as {worker_id}"),
        },
    };
    on_denied(shared, &denial);
    Err(denial.status)
}

/// The layer that puts [`Authenticator`] in front of every service.
pub type AuthLayer = AdmitLayer<Authenticate>;

impl AuthLayer {
    pub fn new(auth: Arc<Authenticator>, shared: Shared) -> AuthLayer {
        AdmitLayer::with(Authenticate { auth, shared })
    }
}

/// The caller's credentials and role, checked for the RPC's path; its
/// identity goes into the request's extensions for the handlers.
#[derive(Clone)]
pub struct Authenticate {
    auth: Arc<Authenticator>,
    shared: Shared,
}

impl Admit for Authenticate {
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), Status> {
        match self.auth.check(req.uri().path(), req.headers(), req.extensions()) {
            Ok(Some(identity)) => {
                req.extensions_mut().insert(identity);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(denial) => {
                on_denied(&self.shared, &denial);
                Err(denial.status)
            }
        }
    }
}
