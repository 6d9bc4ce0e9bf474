//! The one HTTPS client swarm talks to its outside peers with (the forge's
//! API, the operator's webhooks): HTTP/1.1 on rustls with the ring provider
//! and the system's roots, no OpenSSL, and no redirect followed — a signed
//! body or a token goes only where it was sent.

use std::sync::Arc;
use std::time::Duration;

/// A client bounded by `timeout` per request (`connect` for the
/// connection), naming itself `user_agent`.
pub fn client(timeout: Duration, connect: Duration, user_agent: &str) -> Result<reqwest::Client, String> {
    use tokio_rustls::rustls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls_platform_verifier::Verifier::new(provider.clone()).map_err(|e| format!("TLS roots: {e}"))?;
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .connect_timeout(connect)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(user_agent)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}
