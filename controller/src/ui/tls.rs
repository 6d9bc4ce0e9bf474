//! HTTPS for the dashboard with the controller's own certificate and key,
//! and, with `--client-ca`, client certificates verified against that CA
//! (optional when tokens are configured, as on the gRPC port).
//!
//! Handshakes run in their own tasks, each bounded in time, so one slow or
//! silent client cannot hold up the others' connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig, crypto};
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use crate::api::auth::Security;

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client certificate of the connection (DER), if it showed one.
#[derive(Debug, Clone, Default)]
pub struct PeerCert(pub Option<Arc<[u8]>>);

impl Connected<IncomingStream<'_, TcpListener>> for PeerCert {
    fn connect_info(_: IncomingStream<'_, TcpListener>) -> PeerCert {
        PeerCert(None)
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for PeerCert {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> PeerCert {
        let (_, session) = stream.io().get_ref();
        PeerCert(session.peer_certificates().and_then(|c| c.first()).map(|c| Arc::from(c.as_ref())))
    }
}

fn pem_error(flag: &str, e: impl std::fmt::Display) -> String {
    format!("{flag}: {e}")
}

/// The dashboard's TLS settings: `None` when the controller has no
/// certificate (then it serves plain HTTP, on loopback unless `--insecure`).
pub fn config(security: &Security) -> Result<Option<Arc<ServerConfig>>, String> {
    let (Some(cert), Some(key)) = (&security.tls_cert, &security.tls_key) else { return Ok(None) };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem_error("--tls-cert", e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error("--tls-cert", e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error("--tls-key", e))?;
    let provider = Arc::new(crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &security.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| pem_error("--client-ca", e))? {
                roots
                    .add(c.map_err(|e| pem_error("--client-ca", e))?)
                    .map_err(|e| pem_error("--client-ca", e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            // With tokens a browser may log in instead of showing a certificate.
            let tokens = security.tokens_file.is_some() || !security.tokens.is_empty();
            let verifier = if tokens { verifier.allow_unauthenticated() } else { verifier };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| pem_error("--client-ca", e))?)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| format!("TLS: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// Accepts TCP connections and hands on those whose handshake completed.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    pub fn new(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> TlsListener {
        let local = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, ready) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let span = tracing::info_span!("ui.tls_accept", %local);
        let handshakes = tasks.clone();
        tasks.spawn(
            async move {
                loop {
                    let accepted = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        a = listener.accept() => a,
                    };
                    let (tcp, peer) = match accepted {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::debug!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    handshakes.spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(tls)) => {
                                let _ = tx.send((tls, peer)).await;
                            }
                            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
            }
            .instrument(span),
        );
        TlsListener { local, ready }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor stopped at shutdown; the server stops calling.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
