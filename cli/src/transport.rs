//! Why a connection to the controller failed, said so that a person knows
//! what to change: the transport's own words ("transport error", "operation
//! was canceled", "h2 protocol error") name a symptom, not the cause.

use std::error::Error;

use swarm_proto::client::ClientAuth;

/// The error and its causes as one line, each cause once: hyper and tonic
/// repeat their source's text in their own.
pub fn chain_text(e: &(dyn Error + 'static)) -> String {
    causes(e.to_string(), e.source())
}

/// A failed call's message and its causes, as [`chain_text`]: a status's
/// own text spells out its code and source in full.
pub fn status_text(status: &tonic::Status) -> String {
    causes(status.message().to_string(), status.source())
}

fn causes(first: String, mut cur: Option<&(dyn Error + 'static)>) -> String {
    let mut text = first;
    while let Some(s) = cur {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cur = s.source();
    }
    text
}

/// Whether a call failed below gRPC (the connection, TLS, HTTP/2) rather
/// than with the controller's own answer.
pub fn is_transport(status: &tonic::Status) -> bool {
    let mut cur: Option<&(dyn Error + 'static)> = status.source();
    while let Some(e) = cur {
        if e.is::<tonic::transport::Error>() || e.is::<std::io::Error>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// What went wrong talking to `url`, from the failure's text (`chain`) and
/// the credentials that were offered: the likely cause and the flag that
/// fixes it, followed by the transport's own words.
pub fn explain(url: &str, auth: &ClientAuth, chain: &str) -> String {
    let https = url.starts_with("https://");
    let has_cert = auth.cert.is_some();
    let cause = if chain.contains("Connection refused") {
        Some("nothing listens there; is the controller running, and is this the address it printed?".into())
    } else if chain.contains("UnknownIssuer") || chain.contains("BadSignature") {
        Some(format!(
            "its certificate is not signed by the CA given with --ca ({}); pass the CA that signed the controller's --tls-cert",
            auth.ca.as_deref().map(|p| p.display().to_string()).unwrap_or_default()
        ))
    } else if chain.contains("NotValidForName") {
        Some(
            "its certificate is not valid for the host in the URL; connect by a name or address the certificate carries (`swarmctl certs init --san`)"
                .into(),
        )
    } else if chain.contains("Expired") {
        Some("its certificate has expired; issue a new one".into())
    } else if https && (chain.contains("InvalidContentType") || chain.contains("corrupt message")) {
        Some("it does not speak TLS; use an http:// URL".into())
    } else if !https && (chain.contains("FRAME_SIZE_ERROR") || chain.contains("http2 error")) {
        Some(
            "it speaks TLS (it answered plain HTTP/2 with a protocol error); use an https:// URL with --ca"
                .into(),
        )
    } else if !https && closed_after_handshake(chain) {
        Some("it closed the connection on a plain HTTP/2 request; if it serves TLS, use an https:// URL with --ca".into())
    } else if https && closed_after_handshake(chain) && !has_cert {
        Some(
            "it closed the connection after the TLS handshake, as a controller that requires client certificates (--client-ca) does to a client without one; pass --cert and --key (an operator or admin certificate its CA signed, e.g. operator.pem and operator.key from `swarmctl certs init`)"
                .into(),
        )
    } else if https && closed_after_handshake(chain) {
        Some(
            "it closed the connection after the TLS handshake: it did not accept the client certificate given with --cert (is it signed by the CA the controller's --client-ca names, and not expired?)"
                .into(),
        )
    } else {
        None
    };
    match cause {
        Some(cause) => format!("{cause} ({chain})"),
        None => chain.to_string(),
    }
}

/// A TLS 1.3 server that refuses the client's certificate (or its lack of
/// one) says so in an alert the client reads only after its handshake has
/// completed: the client sees its first request's connection close.
fn closed_after_handshake(chain: &str) -> bool {
    chain.contains("connection closed")
        || chain.contains("operation was canceled")
        || chain.contains("CertificateRequired")
        || chain.contains("certificate required")
        || chain.contains("BadCertificate")
        || chain.contains("fatal alert")
        || chain.contains("broken pipe")
        || chain.contains("Connection reset")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn ca_only() -> ClientAuth {
        ClientAuth { ca: Some(PathBuf::from("ca.pem")), ..ClientAuth::default() }
    }

    #[test]
    fn a_closed_connection_after_tls_without_a_certificate_asks_for_one() {
        let text = explain("https://c:7420", &ca_only(), "operation was canceled: connection closed");
        assert!(text.contains("requires client certificates") && text.contains("--cert and --key"), "{text}");
        assert!(text.ends_with("(operation was canceled: connection closed)"), "{text}");
    }

    #[test]
    fn a_closed_connection_with_a_certificate_says_it_was_not_accepted() {
        let auth = ClientAuth { cert: Some(PathBuf::from("me.pem")), ..ca_only() };
        let text = explain("https://c:7420", &auth, "operation was canceled: connection closed");
        assert!(text.contains("did not accept the client certificate"), "{text}");
    }

    #[test]
    fn plain_http_to_a_tls_controller_says_use_https() {
        let text = explain(
            "http://c:7420",
            &ClientAuth::default(),
            "h2 protocol error: http2 error: FRAME_SIZE_ERROR",
        );
        assert!(text.contains("use an https:// URL"), "{text}");
    }

    #[test]
    fn an_unknown_issuer_names_the_ca_flag() {
        let text = explain("https://c:7420", &ca_only(), "invalid peer certificate: UnknownIssuer");
        assert!(text.contains("not signed by the CA given with --ca (ca.pem)"), "{text}");
    }

    #[test]
    fn an_unrecognised_failure_is_passed_through() {
        assert_eq!(explain("http://c:7420", &ClientAuth::default(), "something odd"), "something odd");
    }

    #[test]
    fn a_repeated_cause_is_printed_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "tcp connect error: {}", self.0)
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused"));
        assert_eq!(chain_text(&e), "tcp connect error: Connection refused");
    }
}
