//! The identity a verified client certificate carries: a URI SAN
//!
//! - `spiffe://swarm/worker/<worker id or glob>` — role sidecar, may claim
//!   the matching worker ids (`spiffe://swarm/worker/*` for any);
//! - `spiffe://swarm/operator/<name>` — role operator;
//! - `spiffe://swarm/admin/<name>` — role admin.
//!
//! The TLS layer has already checked the chain against `--client-ca`.

use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::{Identity, Role, WorkerPattern};

pub const URI_PREFIX: &str = "spiffe://swarm/";

/// The identity of a client certificate (DER), or why it has none.
pub fn identity(der: &[u8]) -> Result<Identity, String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("cannot parse: {e}"))?;
    let san = cert.subject_alternative_name().map_err(|e| format!("bad subjectAltName: {e}"))?;
    let uris = san.iter().flat_map(|s| s.value.general_names.iter()).filter_map(|n| match n {
        GeneralName::URI(u) => Some(*u),
        _ => None,
    });
    for uri in uris {
        let Some(rest) = uri.strip_prefix(URI_PREFIX) else { continue };
        let Some((kind, name)) = rest.split_once('/') else { continue };
        let principal = format!("cert:{uri}");
        return match kind {
            "worker" => {
                let workers = WorkerPattern::new(name).map_err(|e| format!("{uri}: worker pattern {e}"))?;
                Ok(Identity { principal, role: Role::Sidecar, workers: Some(workers), unrestricted: false })
            }
            "operator" | "admin" if !name.is_empty() => {
                let role = if kind == "admin" { Role::Admin } else { Role::Operator };
                Ok(Identity { principal, role, workers: None, unrestricted: false })
            }
            _ => Err(format!("{uri}: expected {URI_PREFIX}worker|operator|admin/<name>")),
        };
    }
    Err(format!("no {URI_PREFIX}<role>/<name> URI SAN"))
}
