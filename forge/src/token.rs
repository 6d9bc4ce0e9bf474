//! The forge credential, kept out of every `Debug`, `Display` and log.

use std::fmt;

use crate::error::ForgeError;

/// An API token (a GitHub App installation token, a fine-grained or a
/// classic personal access token). It has no `Display`, its `Debug` prints
/// `Token(***)`, and the only way to read it is [`Token::expose`], which
/// the HTTP client and `push` call where the header is built.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from its text, trimmed of surrounding whitespace (a token
    /// read from a file usually ends in a newline). It must be non-empty,
    /// at most 1 KiB, and printable ASCII without spaces, since it goes
    /// into an HTTP header.
    pub fn new(text: &str) -> Result<Token, ForgeError> {
        let t = text.trim();
        if t.is_empty() || t.len() > 1024 || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ForgeError::Config {
                message: "the token must be 1..=1024 printable ASCII characters without spaces".into(),
            });
        }
        Ok(Token(t.to_string()))
    }

    /// The secret itself, for the one place a header is built.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_never_prints_and_must_be_header_safe() {
        let t = Token::new(" ghs_abc123\n").unwrap();
        assert_eq!(t.expose(), "ghs_abc123");
        assert_eq!(format!("{t:?}"), "Token(***)");
        assert!(Token::new("").is_err());
        assert!(Token::new("a b").is_err());
        assert!(Token::new("a\r\nX-Evil: 1").is_err());
        assert!(Token::new(&"a".repeat(1025)).is_err());
    }
}
