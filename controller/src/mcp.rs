//! The MCP endpoint: `/mcp` (Streamable HTTP) on `--mcp-listen`, serving
//! `swarm_mcp`'s tools to orchestrating agents.
//!
//! A request is authenticated as the Operator API's callers are (a bearer
//! token of the tokens file or a verified client certificate, over the
//! dashboard's TLS setup); its identity rides with each tool call into the
//! Operator API, called in-process, where every RPC is authorized by the
//! one role table (`swarm_auth::METHODS`) before its handler runs. So an
//! MCP caller may do exactly what the same credential may do through
//! `swarmctl`, and a refusal is counted and audited the same way.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use swarm_proto::v1::operator_service_server::OperatorServiceServer;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;

use crate::api::Shared;
use crate::api::auth::{Authenticator, Identity, Security, on_denied};
use crate::api::operator::OperatorApi;
use crate::ui::tls::PeerCert;

/// Largest JSON-RPC request body: a plan is at most 1 MiB of TOML, escaped.
const MAX_BODY_BYTES: usize = 4 << 20;

/// Refuses an `--mcp-listen` that would expose the operator's verbs without
/// TLS and credentials, as `--ui-listen` is refused.
pub fn check_listen(addr: SocketAddr, security: &Security) -> Result<(), String> {
    crate::ui::check_listen_for("--mcp-listen", "the MCP endpoint", addr, security)
}

/// Serves `/mcp` on `addr` until `shutdown`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    shared: Shared,
    auth: Arc<Authenticator>,
    security: &Security,
    shutdown: CancellationToken,
) -> Result<SocketAddr, std::io::Error> {
    let operator = swarm_mcp::operator(InProcess {
        api: OperatorServiceServer::new(OperatorApi::new(shared.clone())),
        shared: shared.clone(),
    });
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = shutdown.child_token();
    config.max_request_body_bytes = MAX_BODY_BYTES;
    if !auth.is_open() {
        // Credentials guard this endpoint, wherever it is reached from; the
        // Host check (against DNS rebinding) is for open loopback servers.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(swarm_mcp::SwarmTools::new(operator.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    let gate = Gate { auth, shared: shared.clone() };
    let app = Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gate, identify));
    let span = |bound, tls| tracing::info_span!("mcp.serve", %bound, tls);
    let bound = crate::ui::serve_app(addr, app, &shared, security, shutdown, span).await?;
    tracing::info!(%bound, "MCP serving at /mcp");
    Ok(bound)
}

#[derive(Clone)]
struct Gate {
    auth: Arc<Authenticator>,
    shared: Shared,
}

/// Puts the caller's [`Identity`] on the request, or answers 401.
async fn identify(
    State(gate): State<Gate>,
    ConnectInfo(peer): ConnectInfo<PeerCert>,
    mut request: Request,
    next: Next,
) -> Response {
    match gate.auth.identify_caller(request.headers(), peer.0.as_deref()) {
        Ok(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Err(status) => {
            let denial = swarm_auth::Denial { status, principal: None, what: "mcp".into() };
            on_denied(&gate.shared, &denial);
            let body = serde_json::json!({ "error": denial.status.message() });
            let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"swarm\""));
            response
        }
    }
}

/// The Operator API in-process, for the tools: each call is authorized for
/// the identity on its request against the role table, exactly as the
/// gRPC edge's layer does for a network caller.
#[derive(Clone)]
struct InProcess {
    api: OperatorServiceServer<OperatorApi>,
    shared: Shared,
}

impl tower::Service<http::Request<Body>> for InProcess {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<http::Request<Body>>::poll_ready(&mut self.api, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_string();
        let verdict = match request.extensions().get::<Identity>() {
            Some(identity) => Authenticator::authorize(identity, &path),
            None => Err(swarm_auth::Denial {
                status: tonic::Status::unauthenticated("no identity on the MCP request"),
                principal: None,
                what: path.clone(),
            }),
        };
        if let Err(denial) = verdict {
            on_denied(&self.shared, &denial);
            return Box::pin(async move { Ok(denial.status.into_http()) });
        }
        let call = tower::Service::call(&mut self.api, request);
        Box::pin(call)
    }
}
