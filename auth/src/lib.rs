//! Who may call swarm, and what: the roles, the identities callers are
//! resolved to (a bearer token from the hashed tokens file, or a verified
//! client certificate's `spiffe://swarm/<role>/<name>` URI SAN), the one
//! table of which role each RPC needs, and the controller's security
//! settings with the secure-by-default rule.
//!
//! The controller puts [`Authenticator`] in front of every gRPC service and
//! its dashboard; `swarmctl` issues the certificates and tokens it accepts.
//! Nothing here does I/O beyond reading the files it is pointed at.

pub mod cert;
pub mod setup;
pub mod tokens;

use globset::GlobMatcher;
use sha2::{Digest, Sha256};
use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

pub use setup::{Security, ServerAuth};
pub use tokens::{TokenEntry, TokensError};

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Connect, FetchPack, PushPack, GetTaskContext, SpawnChildren and GetChildren, for the
    /// worker ids it may claim.
    Sidecar,
    /// The Operator API's reads and Create, Cancel, Retry, Answer.
    Operator,
    /// Everything an operator may do, plus DrainWorker and Land.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Sidecar => "sidecar",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "sidecar" => Some(Role::Sidecar),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// The worker ids a sidecar identity may claim in its Hello: a glob such as
/// `build-*`, or `*`.
#[derive(Debug, Clone)]
pub struct WorkerPattern {
    raw: String,
    matcher: GlobMatcher,
}

impl WorkerPattern {
    pub fn new(raw: &str) -> Result<WorkerPattern, String> {
        if raw.is_empty() {
            return Err("must not be empty".into());
        }
        let glob = globset::Glob::new(raw).map_err(|e| format!("not a valid glob: {e}"))?;
        Ok(WorkerPattern { raw: raw.to_string(), matcher: glob.compile_matcher() })
    }

    pub fn matches(&self, worker_id: &str) -> bool {
        self.matcher.is_match(worker_id)
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

/// Who is calling, as resolved at the edge; handlers find it in the
/// request's extensions.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `token:<name>`, `cert:<SAN URI>`, or `anonymous`.
    pub principal: String,
    pub role: Role,
    /// For sidecar identities: the worker ids it may claim.
    pub workers: Option<WorkerPattern>,
    /// With no credentials configured on a loopback listener (or with
    /// `--insecure`), every caller holds every role.
    pub unrestricted: bool,
}

impl Identity {
    fn anonymous() -> Identity {
        Identity { principal: "anonymous".into(), role: Role::Admin, workers: None, unrestricted: true }
    }

    /// Whether this identity holds `need` (admin implies operator).
    pub fn grants(&self, need: Role) -> bool {
        self.unrestricted
            || matches!(
                (self.role, need),
                (Role::Sidecar, Role::Sidecar)
                    | (Role::Operator, Role::Operator)
                    | (Role::Admin, Role::Operator | Role::Admin)
            )
    }

    /// Whether this identity may speak for `worker_id`.
    pub fn covers_worker(&self, worker_id: &str) -> bool {
        self.unrestricted
            || (self.role == Role::Sidecar && self.workers.as_ref().is_some_and(|p| p.matches(worker_id)))
    }
}

/// What each RPC needs. One table: a method that is not listed needs admin,
/// so a new RPC is closed until someone decides who may call it.
const METHODS: &[(&str, Role)] = &[
    ("/swarm.v1.SidecarService/Connect", Role::Sidecar),
    ("/swarm.v1.SidecarService/FetchPack", Role::Sidecar),
    ("/swarm.v1.SidecarService/PushPack", Role::Sidecar),
    ("/swarm.v1.SidecarService/GetTaskContext", Role::Sidecar),
    ("/swarm.v1.SidecarService/SpawnChildren", Role::Sidecar),
    ("/swarm.v1.SidecarService/GetChildren", Role::Sidecar),
    ("/swarm.v1.OperatorService/CreateSwarm", Role::Operator),
    ("/swarm.v1.OperatorService/GetSwarm", Role::Operator),
    ("/swarm.v1.OperatorService/ListSwarms", Role::Operator),
    ("/swarm.v1.OperatorService/ListTasks", Role::Operator),
    ("/swarm.v1.OperatorService/GetTask", Role::Operator),
    ("/swarm.v1.OperatorService/ListWorkers", Role::Operator),
    ("/swarm.v1.OperatorService/Watch", Role::Operator),
    ("/swarm.v1.OperatorService/CancelTask", Role::Operator),
    ("/swarm.v1.OperatorService/CancelSwarm", Role::Operator),
    ("/swarm.v1.OperatorService/RetryTask", Role::Operator),
    ("/swarm.v1.OperatorService/ReviewTask", Role::Operator),
    ("/swarm.v1.OperatorService/Answer", Role::Operator),
    ("/swarm.v1.OperatorService/SendMessage", Role::Operator),
    ("/swarm.v1.OperatorService/ReadAttemptLog", Role::Operator),
    ("/swarm.v1.OperatorService/SetBudget", Role::Operator),
    ("/swarm.v1.OperatorService/PauseSwarm", Role::Operator),
    ("/swarm.v1.OperatorService/ResumeSwarm", Role::Operator),
    ("/swarm.v1.OperatorService/DrainWorker", Role::Admin),
    ("/swarm.v1.OperatorService/Land", Role::Admin),
];

/// Services anyone may call: probes and tooling need no credential.
const OPEN_SERVICES: &[&str] = &[
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// The role an RPC path needs; `None` for the open services.
pub fn required_role(path: &str) -> Option<Role> {
    if OPEN_SERVICES.iter().any(|p| path.starts_with(p)) {
        return None;
    }
    Some(METHODS.iter().find(|(m, _)| *m == path).map(|(_, r)| *r).unwrap_or(Role::Admin))
}

/// A refused request.
#[derive(Debug, Clone)]
pub struct Denial {
    pub status: Status,
    /// The principal, when the caller was identified.
    pub principal: Option<String>,
    /// The RPC path, or what was checked.
    pub what: String,
}

/// How callers are authenticated.
pub struct Authenticator {
    tokens: Vec<TokenEntry>,
    /// Client certificates are verified by the TLS layer against `--client-ca`.
    client_certs: bool,
    /// No credentials configured: everyone is anonymous with every role.
    open: bool,
}

impl Authenticator {
    /// `open`: no credential is configured, so every caller is anonymous
    /// with every role (allowed only on loopback or with `--insecure`).
    pub fn new(tokens: Vec<TokenEntry>, client_certs: bool, open: bool) -> Authenticator {
        Authenticator { tokens, client_certs, open }
    }

    /// Whether any credential is configured.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Resolves the caller and checks it may call `path`.
    pub fn check(
        &self,
        path: &str,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Option<Identity>, Denial> {
        if required_role(path).is_none() {
            return Ok(None);
        }
        let identity = self.identify(headers, extensions).map_err(|status| Denial {
            status,
            principal: None,
            what: path.to_string(),
        })?;
        Authenticator::authorize(&identity, path)?;
        Ok(Some(identity))
    }

    fn identify(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> Result<Identity, Status> {
        let certs = extensions.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.peer_certs());
        self.identify_caller(headers, certs.as_deref().and_then(|c| c.first()).map(|der| der.as_ref()))
    }

    /// Who the caller is, from its bearer token or the DER of its verified
    /// client certificate, without a role check: for an endpoint that
    /// authorizes each call it makes later (the MCP endpoint, whose tools
    /// call the Operator API in-process).
    pub fn identify_caller(
        &self,
        headers: &http::HeaderMap,
        peer_cert: Option<&[u8]>,
    ) -> Result<Identity, Status> {
        if self.open {
            return Ok(Identity::anonymous());
        }
        if let Some(value) = headers.get(http::header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| Status::unauthenticated("authorization header: expected `Bearer <token>`"))?;
            return self.token_identity(token);
        }
        match peer_cert {
            Some(der) if self.client_certs => cert::identity(der)
                .map_err(|reason| Status::unauthenticated(format!("client certificate: {reason}"))),
            _ => Err(Status::unauthenticated(
                "no credential: send `authorization: Bearer <token>` or connect with a client certificate",
            )),
        }
    }

    /// Checks that an identity already resolved may call `path`.
    pub fn authorize(identity: &Identity, path: &str) -> Result<(), Denial> {
        let Some(need) = required_role(path) else { return Ok(()) };
        if identity.grants(need) {
            return Ok(());
        }
        Err(Denial {
            status: Status::permission_denied(format!(
                "{} has role {} but {path} needs role {}",
                identity.principal,
                identity.role.as_str(),
                need.as_str()
            )),
            principal: Some(identity.principal.clone()),
            what: path.to_string(),
        })
    }

    fn token_identity(&self, token: &str) -> Result<Identity, Status> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Look at every entry so the time taken does not say which matched.
        let mut found = None;
        for entry in &self.tokens {
            if constant_time_eq(&entry.sha256, &digest) {
                found = Some(entry);
            }
        }
        let entry = found.ok_or_else(|| Status::unauthenticated("unknown bearer token"))?;
        Ok(Identity {
            principal: format!("token:{}", entry.name),
            role: entry.role,
            workers: entry.workers.clone(),
            unrestricted: false,
        })
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn auth(entries: &str) -> Authenticator {
        Authenticator::new(tokens::parse(entries).unwrap(), false, false)
    }

    fn bearer(t: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, format!("Bearer {t}").parse().unwrap());
        h
    }

    fn file() -> String {
        let line = |name: &str, role: &str, workers: Option<&str>, token: &str| {
            let mut s = format!("[[tokens]]\nname = \"{name}\"\nrole = \"{role}\"\n");
            if let Some(w) = workers {
                s.push_str(&format!("workers = \"{w}\"\n"));
            }
            s.push_str(&format!("sha256 = \"{}\"\n", tokens::hash_hex(token)));
            s
        };
        [
            line("ci", "sidecar", Some("build-*"), "side"),
            line("alice", "operator", None, "op"),
            line("root", "admin", None, "adm"),
        ]
        .join("\n")
    }

    #[test]
    fn roles_follow_the_table() {
        let a = auth(&file());
        let ext = http::Extensions::new();
        let list = "/swarm.v1.OperatorService/ListTasks";
        let land = "/swarm.v1.OperatorService/Land";
        let connect = "/swarm.v1.SidecarService/Connect";
        let code = |path: &str, h: &http::HeaderMap| a.check(path, h, &ext).err().map(|d| d.status.code());
        assert_eq!(code(list, &http::HeaderMap::new()), Some(tonic::Code::Unauthenticated));
        assert_eq!(code(list, &bearer("nope")), Some(tonic::Code::Unauthenticated));
        assert_eq!(code(list, &bearer("side")), Some(tonic::Code::PermissionDenied));
        assert_eq!(code(connect, &bearer("side")), None);
        assert_eq!(code(list, &bearer("op")), None);
        assert_eq!(code(land, &bearer("op")), Some(tonic::Code::PermissionDenied));
        assert_eq!(code(land, &bearer("adm")), None);
        assert_eq!(code(connect, &bearer("adm")), Some(tonic::Code::PermissionDenied));
        assert_eq!(code("/grpc.health.v1.Health/Check", &http::HeaderMap::new()), None);
        assert_eq!(
            code("/swarm.v1.OperatorService/SomethingNew", &bearer("op")),
            Some(tonic::Code::PermissionDenied)
        );
        let side = a.check(connect, &bearer("side"), &ext).unwrap().unwrap();
        assert!(side.covers_worker("build-7"));
        assert!(!side.covers_worker("other-1"));
    }

    #[test]
    fn no_credentials_means_anonymous_with_every_role() {
        let a = Authenticator::new(Vec::new(), false, true);
        let id = a.check("/swarm.v1.OperatorService/Land", &http::HeaderMap::new(), &http::Extensions::new());
        let id = id.unwrap().unwrap();
        assert!(id.unrestricted && id.grants(Role::Sidecar) && id.covers_worker("x"));
    }

    /// Every RPC of the swarm.v1 services has an explicit row in the table.
    #[test]
    fn every_rpc_is_in_the_table() {
        use prost::Message as _;
        let set = prost_types::FileDescriptorSet::decode(swarm_proto::FILE_DESCRIPTOR_SET).unwrap();
        let mut seen = 0;
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                    assert!(METHODS.iter().any(|(m, _)| *m == path), "{path} has no row in auth::METHODS");
                    seen += 1;
                }
            }
        }
        assert_eq!(seen, METHODS.len());
    }
}
