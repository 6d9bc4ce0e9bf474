//! Who may see the dashboard: the holder of an operator credential, as the
//! Operator API's reads require.
//!
//! A browser cannot put a header on a page load or an `EventSource`, so the
//! credential may come three ways, checked in this order:
//!
//! 1. `Authorization: Bearer <token>` (scripts, and reverse proxies that
//!    inject it);
//! 2. the `swarm_token` cookie, set by logging in: the form at `/login`
//!    (token in the body) or a `/?token=<token>` link, which redirects to
//!    `/` at once so the token leaves the address bar and history. The
//!    cookie is `HttpOnly` (scripts cannot read it), `SameSite=Strict`
//!    (other sites cannot ride on it) and `Secure` when served over TLS;
//! 3. a client certificate, when the controller verifies them (mTLS).
//!
//! With no credential configured (loopback only) everyone may look. Every
//! refusal goes through the gRPC edge's [`on_denied`]: counted, logged and
//! audited like any other.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use tonic::Status;

use super::assets;
use super::tls::PeerCert;
use crate::api::Shared;
use crate::api::auth::{Authenticator, Denial, Identity, on_denied};

pub const COOKIE: &str = "swarm_token";

/// The dashboard shows what the Operator API's reads show, so it asks for
/// what they need; `Watch` stands for all of them.
const NEEDS: &str = "/swarm.v1.OperatorService/Watch";

#[derive(Clone)]
pub struct Gate {
    auth: Arc<Authenticator>,
    shared: Shared,
    /// Served over TLS: the cookie is marked `Secure`.
    secure: bool,
    client_certs: bool,
}

impl Gate {
    pub fn new(auth: Arc<Authenticator>, shared: Shared, secure: bool, client_certs: bool) -> Gate {
        Gate { auth, shared, secure, client_certs }
    }

    /// The caller's identity, or why it may not look.
    fn identify(&self, headers: &HeaderMap, peer: &PeerCert) -> Result<Option<Identity>, Denial> {
        if self.auth.is_open() {
            return self.auth.check(NEEDS, &HeaderMap::new(), &http::Extensions::new());
        }
        if headers.contains_key(header::AUTHORIZATION) {
            let mut only = HeaderMap::new();
            if let Some(v) = headers.get(header::AUTHORIZATION) {
                only.insert(header::AUTHORIZATION, v.clone());
            }
            return self.auth.check(NEEDS, &only, &http::Extensions::new());
        }
        if let Some(token) = cookie(headers, COOKIE) {
            return self.check_token(token);
        }
        match peer.0.as_deref() {
            Some(der) if self.client_certs => self.cert_identity(der).map(Some),
            _ => Err(denial(Status::unauthenticated(
                "no credential: log in at /login with an operator token, send `Authorization: Bearer \
                 <token>`, or present a client certificate",
            ))),
        }
    }

    fn check_token(&self, token: &str) -> Result<Option<Identity>, Denial> {
        let bad = || denial(Status::unauthenticated("token: must be printable ASCII without spaces"));
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| bad())?;
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad());
        }
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value);
        self.auth.check(NEEDS, &headers, &http::Extensions::new())
    }

    /// The certificate's identity and role, as the gRPC edge reads and
    /// checks them for the RPCs the dashboard stands for.
    fn cert_identity(&self, der: &[u8]) -> Result<Identity, Denial> {
        let id = self.auth.identify_caller(&HeaderMap::new(), Some(der)).map_err(denial)?;
        Authenticator::authorize(&id, NEEDS).map_err(|d| Denial { what: "dashboard".into(), ..d })?;
        Ok(id)
    }

    fn refuse(&self, d: Denial, page: bool) -> Response {
        on_denied(&self.shared, &d);
        let code = match d.status.code() {
            tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        };
        let mut response = if page {
            (code, assets::login_page(d.status.message())).into_response()
        } else {
            (code, Json(serde_json::json!({ "error": d.status.message() }))).into_response()
        };
        if code == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"swarm\""));
        }
        response
    }

    /// A redirect to `to` that stores `token` in the cookie.
    fn logged_in(&self, token: &str, to: &'static str) -> Response {
        let secure = if self.secure { "; Secure" } else { "" };
        let set = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}");
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
        match HeaderValue::from_str(&set) {
            Ok(v) => {
                response.headers_mut().insert(header::SET_COOKIE, v);
                response
            }
            // check_token refused anything a header cannot carry.
            Err(_) => self.refuse(denial(Status::unauthenticated("token: not a valid cookie value")), true),
        }
    }
}

fn denial(status: Status) -> Denial {
    Denial { status, principal: None, what: "dashboard".into() }
}

/// A cookie's value from the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// In front of every page, read and stream: lets the caller through with
/// its identity in the request's extensions, or refuses.
pub async fn require(
    State(gate): State<Gate>,
    ConnectInfo(peer): ConnectInfo<PeerCert>,
    mut req: Request,
    next: Next,
) -> Response {
    let page = !req.uri().path().starts_with("/api/");
    // A `/?token=` link logs in and drops the token from the address.
    if req.uri().path() == "/" {
        let query: Option<Query<HashMap<String, String>>> = Query::try_from_uri(req.uri()).ok();
        if let Some(token) = query.as_ref().and_then(|q| q.get("token")) {
            return match gate.check_token(token) {
                Ok(_) => gate.logged_in(token, "/"),
                Err(d) => gate.refuse(d, true),
            };
        }
    }
    match gate.identify(req.headers(), &peer) {
        Ok(identity) => {
            if let Some(id) = identity {
                req.extensions_mut().insert(id);
            }
            next.run(req).await
        }
        Err(d) => gate.refuse(d, page),
    }
}

pub async fn login_page() -> Response {
    (StatusCode::OK, assets::login_page("")).into_response()
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
}

#[tracing::instrument(skip_all)]
pub async fn login(State(gate): State<Gate>, Form(form): Form<LoginForm>) -> Response {
    let token = form.token.trim();
    match gate.check_token(token) {
        Ok(_) => gate.logged_in(token, "/"),
        Err(d) => gate.refuse(d, true),
    }
}

pub async fn logout() -> Response {
    let clear = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/login")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&clear) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; swarm_token=swarm_ab"));
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&h, COOKIE), Some("swarm_ab"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
