//! The controller's security settings and the secure-by-default rule: a
//! listener that other machines can reach needs TLS and credentials unless
//! the operator says `--insecure`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, Identity as TlsIdentity, ServerTlsConfig};

use super::{Authenticator, TokenEntry, tokens};

/// Flags `--tls-cert`, `--tls-key`, `--client-ca`, `--tokens`, `--insecure`.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Server certificate chain (PEM); with `tls_key`, the listener speaks TLS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Verify client certificates against this CA (mTLS).
    pub client_ca: Option<PathBuf>,
    /// The tokens file (TOML, hashed tokens with roles).
    pub tokens_file: Option<PathBuf>,
    /// Tokens held in memory, e.g. local mode's per-run credentials.
    pub tokens: Vec<TokenEntry>,
    /// Allow a non-loopback listener without TLS or credentials.
    pub insecure: bool,
}

/// What the server needs to enforce [`Security`].
pub struct ServerAuth {
    pub authenticator: Authenticator,
    pub tls: Option<ServerTlsConfig>,
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
}

impl Security {
    /// Whether any credential (tokens or a client CA) is configured.
    pub fn has_credentials(&self) -> bool {
        self.tokens_file.is_some() || !self.tokens.is_empty() || self.client_ca.is_some()
    }

    /// Checks the settings against `listen` and loads certificates and
    /// tokens. The error text names the flags to give.
    pub fn prepare(&self, listen: SocketAddr) -> Result<ServerAuth, String> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some(TlsIdentity::from_pem(read("--tls-cert", c)?, read("--tls-key", k)?)),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key must be given together".into()),
        };
        if self.client_ca.is_some() && tls.is_none() {
            return Err(
                "--client-ca needs --tls-cert and --tls-key (client certificates are checked during TLS)"
                    .into(),
            );
        }
        let mut entries = match &self.tokens_file {
            Some(path) => tokens::load(path).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        entries.extend(self.tokens.iter().cloned());
        let protected = tls.is_some() && self.has_credentials();
        if !listen.ip().is_loopback() && !protected {
            if !self.insecure {
                return Err(format!(
                    "refusing to listen on {listen}, which is not a loopback address, without TLS and \
                     credentials: give --tls-cert and --tls-key, plus --tokens and/or --client-ca \
                     (or --insecure to let anyone who can reach the port do anything, in the clear)"
                ));
            }
            tracing::warn!(
                %listen,
                tls = tls.is_some(),
                credentials = self.has_credentials(),
                "--insecure: serving a non-loopback address without TLS and credentials"
            );
        }
        let server_tls = tls.map(|identity| {
            let mut config = ServerTlsConfig::new().identity(identity);
            if let Some(ca) = &self.client_ca {
                // With tokens configured a caller may authenticate either way,
                // so the handshake must not demand a certificate.
                let ca = read("--client-ca", ca).map(Certificate::from_pem);
                config = match ca {
                    Ok(ca) => config.client_ca_root(ca).client_auth_optional(!entries.is_empty()),
                    Err(e) => return Err(e),
                };
            }
            Ok(config)
        });
        let tls = server_tls.transpose()?;
        let open = !self.has_credentials();
        Ok(ServerAuth { authenticator: Authenticator::new(entries, self.client_ca.is_some(), open), tls })
    }
}
