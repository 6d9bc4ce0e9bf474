//! Signatures a receiver checks to know a notification came from this
//! controller and is fresh.
//!
//! `X-Swarm-Signature: sha256=<hex>` is HMAC-SHA256 with the shared secret
//! over `<timestamp>.<body>`, and `X-Swarm-Timestamp` is that timestamp
//! (Unix seconds). The timestamp is inside what is signed, so a receiver
//! that refuses old timestamps refuses a replayed body; every attempt is
//! signed afresh, so a retry is not mistaken for a replay.

use std::fmt;
use std::fmt::Write as _;

use ring::hmac;

pub const SIGNATURE_HEADER: &str = "x-swarm-signature";
pub const TIMESTAMP_HEADER: &str = "x-swarm-timestamp";

/// The shared secret, kept out of `Debug` output and logs.
#[derive(Clone)]
pub struct Signer {
    key: hmac::Key,
}

impl Signer {
    pub fn new(secret: &[u8]) -> Signer {
        Signer { key: hmac::Key::new(hmac::HMAC_SHA256, secret) }
    }

    /// The `X-Swarm-Signature` value for `body` sent at `timestamp`.
    pub fn sign(&self, timestamp: u64, body: &[u8]) -> String {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(timestamp.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        let tag = ctx.sign();
        let mut out = String::with_capacity(7 + 64);
        out.push_str("sha256=");
        for b in tag.as_ref() {
            // Writing to a String cannot fail.
            let _ = write!(out, "{b:02x}");
        }
        out
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Signer(<secret>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_the_timestamp_and_the_exact_body() {
        let s = Signer::new(b"k3y");
        // `printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac k3y`
        assert_eq!(
            s.sign(1_700_000_000, br#"{"a":1}"#),
            "sha256=fd5a70e965043f7df6309c2c3b5ff5a8ffa99b1f5175e9a311459e73c4634d4a"
        );
        assert_ne!(s.sign(1_700_000_001, br#"{"a":1}"#), s.sign(1_700_000_000, br#"{"a":1}"#));
        assert_ne!(s.sign(1_700_000_000, br#"{"a": 1}"#), s.sign(1_700_000_000, br#"{"a":1}"#));
    }

    #[test]
    fn the_secret_is_not_printed() {
        assert_eq!(format!("{:?}", Signer::new(b"hunter2")), "Signer(<secret>)");
    }
}
