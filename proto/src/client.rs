//! Client channels to the controller: TLS from `https://` URLs (with an
//! optional client certificate for mTLS) and a bearer token on every call.
//!
//! The sidecar and swarmctl both build their channels here, so the two
//! agree on flags, file formats and error text.

use std::path::{Path, PathBuf};

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A channel that adds the bearer token (if any) to every request.
pub type AuthChannel = InterceptedService<Channel, BearerToken>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{flag} {path}: {reason}")]
    File { flag: &'static str, path: String, reason: String },
    #[error("{0}")]
    Config(String),
}

/// Where the client's credentials come from: the `--ca`, `--cert`, `--key`,
/// `--token` and `--token-file` flags of the sidecar and swarmctl.
#[derive(Clone, Default)]
pub struct ClientAuth {
    /// The CA that signed the controller's certificate (PEM).
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS; needs `key`.
    pub cert: Option<PathBuf>,
    /// Client private key (PEM).
    pub key: Option<PathBuf>,
    /// Bearer token, sent as `authorization: Bearer <token>`.
    pub token: Option<String>,
    /// A file whose first line is the bearer token (read on each connect).
    pub token_file: Option<PathBuf>,
}

impl std::fmt::Debug for ClientAuth {
    // Never print the token itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuth")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .finish()
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| ClientError::File {
        flag,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

impl ClientAuth {
    /// Whether any TLS material was given.
    pub fn has_tls(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// An endpoint for `url`: TLS for `https://` (the server is verified
    /// against `--ca`), plain HTTP/2 for `http://`.
    pub fn endpoint(&self, url: &str) -> Result<Endpoint, ClientError> {
        let endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| ClientError::Config(format!("controller URL {url:?}: {e}")))?;
        let https = url.starts_with("https://");
        if !https {
            if self.has_tls() {
                return Err(ClientError::Config(format!(
                    "--ca/--cert/--key need an https:// controller URL, got {url:?}"
                )));
            }
            return Ok(endpoint);
        }
        let ca = self.ca.as_deref().ok_or_else(|| {
            ClientError::Config(format!(
                "{url}: https:// needs --ca (the CA that signed the controller's certificate)"
            ))
        })?;
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("--ca", ca)?));
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                tls = tls.identity(Identity::from_pem(read("--cert", cert)?, read("--key", key)?));
            }
            (None, None) => {}
            _ => return Err(ClientError::Config("--cert and --key must be given together".into())),
        }
        endpoint.tls_config(tls).map_err(|e| ClientError::Config(format!("TLS for {url}: {e}")))
    }

    /// The interceptor that adds the token to each request.
    pub fn bearer(&self) -> Result<BearerToken, ClientError> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(file)) => {
                let text = String::from_utf8(read("--token-file", file)?).map_err(|_| ClientError::File {
                    flag: "--token-file",
                    path: file.display().to_string(),
                    reason: "not UTF-8".into(),
                })?;
                Some(text.lines().next().unwrap_or_default().trim().to_string())
            }
            (None, None) => None,
        };
        let value = match token.filter(|t| !t.is_empty()) {
            Some(t) => Some(
                MetadataValue::try_from(format!("Bearer {t}"))
                    .map_err(|_| ClientError::Config("--token: only visible ASCII is allowed".into()))?,
            ),
            None => None,
        };
        Ok(BearerToken(value))
    }

    /// Wraps a connected channel so every call carries the token.
    pub fn wrap(&self, channel: Channel) -> Result<AuthChannel, ClientError> {
        Ok(InterceptedService::new(channel, self.bearer()?))
    }
}

/// Adds `authorization: Bearer <token>` when a token was configured.
#[derive(Clone)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "BearerToken(<redacted>)" } else { "BearerToken(none)" })
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn http_with_tls_flags_is_refused_and_https_needs_ca() {
        let auth = ClientAuth { ca: Some("/nonexistent".into()), ..Default::default() };
        assert!(auth.endpoint("http://127.0.0.1:1").unwrap_err().to_string().contains("https://"));
        let none = ClientAuth::default();
        assert!(none.endpoint("https://127.0.0.1:1").unwrap_err().to_string().contains("--ca"));
        assert!(auth.endpoint("https://127.0.0.1:1").unwrap_err().to_string().contains("--ca /nonexistent"));
    }

    #[test]
    fn token_goes_into_authorization() {
        let auth = ClientAuth { token: Some(" abc \n".into()), ..Default::default() };
        let mut b = auth.bearer().unwrap();
        let req = b.call(tonic::Request::new(())).unwrap();
        assert_eq!(req.metadata().get("authorization").unwrap(), "Bearer abc");
        assert!(!format!("{auth:?}").contains("abc"));
    }
}
