//! The web dashboard: a read-only view of swarms, their task graphs, tasks
//! and workers, served on `--ui-listen` beside the gRPC port.
//!
//! Everything it shows comes through the Operator API's reads (the same
//! handlers `swarmctl` reaches, called in-process), and live updates come
//! from `Watch` as server-sent events, so the dashboard can never show
//! something an operator could not read, nor change anything. Its assets
//! are compiled in: no build step at run time and nothing from a CDN.
//!
//! - [`gate`]: who may look (the operator credential, as a bearer header,
//!   a cookie set at login, or an mTLS client certificate);
//! - [`api`]: the JSON reads; [`events`]: the event stream;
//! - [`timeline`]: where a swarm's time went, as a model and its SVG;
//! - [`assets`]: the page, its script and style; [`dto`]: the JSON shapes;
//! - [`tls`]: HTTPS with the controller's certificate when it has one.

pub mod api;
pub mod assets;
pub mod dto;
pub mod events;
pub mod gate;
pub mod timeline;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::api::Shared;
use crate::api::auth::{Authenticator, Security};
use crate::api::operator::OperatorApi;

/// What the dashboard's handlers share.
#[derive(Clone)]
pub struct Ui {
    pub(crate) reads: Arc<OperatorApi>,
    pub(crate) shared: Shared,
}

/// Checks `--ui-listen` against the secure-by-default rule before anything
/// starts: the same rule as the gRPC port, since the dashboard shows what
/// the Operator API's reads show.
pub fn check_listen(addr: SocketAddr, security: &Security) -> Result<(), String> {
    check_listen_for("--ui-listen", "the dashboard", addr, security)
}

/// The rule for any HTTP endpoint that serves the Operator API's data or
/// verbs (`flag` serves `what`).
pub fn check_listen_for(flag: &str, what: &str, addr: SocketAddr, security: &Security) -> Result<(), String> {
    let protected = security.tls_cert.is_some() && security.has_credentials();
    if addr.ip().is_loopback() || protected {
        return Ok(());
    }
    if security.insecure {
        tracing::warn!(%addr, flag, "--insecure: serving {what} on a non-loopback address without TLS and credentials");
        return Ok(());
    }
    Err(format!(
        "refusing {flag} {addr}, which is not a loopback address, without TLS and credentials: give \
         --tls-cert and --tls-key, plus --tokens and/or --client-ca ({what} then serves HTTPS with \
         the same certificate and asks for the operator credential), or --insecure"
    ))
}

/// Binds `addr` and serves the dashboard until `shutdown`; returns the bound
/// address.
pub async fn serve(
    addr: SocketAddr,
    shared: Shared,
    auth: Arc<Authenticator>,
    security: &Security,
    shutdown: CancellationToken,
) -> Result<SocketAddr, std::io::Error> {
    let tls_on = security.tls_cert.is_some();
    let gate = gate::Gate::new(auth, shared.clone(), tls_on, security.client_ca.is_some());
    let ui = Ui { reads: Arc::new(OperatorApi::new(shared.clone())), shared: shared.clone() };
    let span = |bound, tls| tracing::info_span!("ui.serve", %bound, tls);
    let bound = serve_app(addr, router(ui, gate), &shared, security, shutdown, span).await?;
    tracing::info!(%bound, "dashboard serving");
    Ok(bound)
}

/// Binds `addr` and serves `app` on it until `shutdown`, over HTTPS with
/// the controller's certificate when it has one, with each connection's
/// client certificate (if any) as [`tls::PeerCert`]; returns the bound
/// address. The dashboard and the MCP endpoint are served this way.
pub(crate) async fn serve_app(
    addr: SocketAddr,
    app: Router,
    shared: &Shared,
    security: &Security,
    shutdown: CancellationToken,
    span: impl FnOnce(SocketAddr, bool) -> tracing::Span,
) -> Result<SocketAddr, std::io::Error> {
    let tls = tls::config(security).map_err(std::io::Error::other)?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let span = span(bound, tls.is_some());
    match tls {
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config, &shared.tasks, shutdown.clone());
            spawn_server(listener, app, shared, shutdown, span);
        }
        None => spawn_server(listener, app, shared, shutdown, span),
    }
    Ok(bound)
}

fn spawn_server<L>(
    listener: L,
    app: Router,
    shared: &Shared,
    shutdown: CancellationToken,
    span: tracing::Span,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
    for<'a> tls::PeerCert: axum::extract::connect_info::Connected<axum::serve::IncomingStream<'a, L>>,
{
    let make = app.into_make_service_with_connect_info::<tls::PeerCert>();
    shared.tasks.spawn(
        async move {
            let served = axum::serve(listener, make).with_graceful_shutdown(shutdown.cancelled_owned());
            if let Err(e) = served.await {
                tracing::error!(error = %e, "dashboard stopped");
            }
        }
        .instrument(span),
    );
}

fn router(ui: Ui, gate: gate::Gate) -> Router {
    let guarded = Router::new()
        .route("/", get(assets::index))
        .route("/api/swarms", get(api::swarms))
        .route("/api/swarms/{swarm}", get(api::swarm))
        .route("/api/swarms/{swarm}/tasks/{task}", get(api::task))
        .route("/api/swarms/{swarm}/timeline", get(timeline::timeline))
        .route("/api/workers", get(api::workers))
        .route("/api/events", get(events::stream))
        .with_state(ui)
        .layer(axum::middleware::from_fn_with_state(gate.clone(), gate::require));
    Router::new()
        .route("/login", get(gate::login_page).post(gate::login))
        .route("/logout", post(gate::logout))
        .with_state(gate)
        .route("/assets/{file}", get(assets::file))
        .merge(guarded)
        .layer(axum::middleware::from_fn(assets::security_headers))
}
