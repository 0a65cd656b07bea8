//! The bearer secret of a secured cluster, defined once for both sides: a
//! client sends it as `authorization: Bearer <secret>`, a node compares what
//! it is presented with against its own in constant time. It lives with the
//! wire contract so that the server need not depend on the client for it.
//!
//! A secret is read from a file or the environment, never from the command
//! line alone, where `ps` and shell history would show it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use subtle::ConstantTimeEq;

/// A secret shorter than this is refused at start: it could be guessed.
pub const MIN_SECRET_LEN: usize = 16;
/// A secret must fit in one HTTP header.
const MAX_SECRET_LEN: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("reading {what} from {path}: {source}")]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what}: give either the file or ${env}, not both")]
    Ambiguous { what: &'static str, env: &'static str },
    #[error(
        "{what} must be {MIN_SECRET_LEN} to {MAX_SECRET_LEN} visible ASCII characters (no spaces or control characters)"
    )]
    Malformed { what: &'static str },
    /// A CA certificate file the client could not use: its parser's
    /// message. The client parses CA files (with rustls, which this crate
    /// leaves out); the variant is here so that every credential file an
    /// operator names fails with this one type.
    #[error("{0}")]
    Ca(String),
    /// A client certificate or its private key the client could not use
    /// (the same reason for being here as [`SecretError::Ca`]).
    #[error("{0}")]
    Certificate(String),
}

/// A shared secret. Its `Debug` form hides the value.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// `value` as a secret, refused unless it is [`MIN_SECRET_LEN`] to 4096
    /// visible ASCII characters (what a bearer token may hold).
    pub fn new(value: &str, what: &'static str) -> Result<Secret, SecretError> {
        let visible = value.bytes().all(|b| b.is_ascii_graphic());
        if !visible || !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&value.len()) {
            return Err(SecretError::Malformed { what });
        }
        Ok(Secret(value.into()))
    }

    /// The secret in `path`; surrounding whitespace (a trailing newline) is
    /// not part of it.
    pub fn from_file(path: &Path, what: &'static str) -> Result<Secret, SecretError> {
        let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
            what,
            path: path.to_owned(),
            source,
        })?;
        Secret::new(text.trim(), what)
    }

    /// The secret from `file` if given, else from the environment variable
    /// `env` if set, else none. Both at once is an error: which one is meant
    /// would be a guess.
    pub fn load(file: Option<&Path>, env: &'static str, what: &'static str) -> Result<Option<Secret>, SecretError> {
        let from_env = std::env::var(env).ok().filter(|v| !v.is_empty());
        match (file, from_env) {
            (Some(_), Some(_)) => Err(SecretError::Ambiguous { what, env }),
            (Some(path), None) => Secret::from_file(path, what).map(Some),
            (None, Some(value)) => Secret::new(value.trim(), what).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// Whether `presented` is this secret, in time that does not depend on
    /// where the two first differ (only on their lengths).
    pub fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }

    /// The value, to send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures a secret matches only itself, whatever the length presented.
    #[test]
    fn secret_matches_only_itself() {
        let secret = Secret::new("0123456789abcdef", "test").unwrap();
        assert!(secret.matches(b"0123456789abcdef"));
        assert!(!secret.matches(b"0123456789abcdeF"));
        assert!(!secret.matches(b"0123456789abcde"));
        assert!(!secret.matches(b"0123456789abcdef0"));
        assert!(!secret.matches(b""));
    }

    // Ensures short, spaced or control-character secrets are refused.
    #[test]
    fn weak_or_malformed_secrets_are_refused() {
        for bad in ["short", "sixteen chars ok", "0123456789abcdef\u{7}", "0123456789abcdéf"] {
            assert!(Secret::new(bad, "test").is_err(), "{bad:?} accepted");
        }
    }

    // Ensures a secret file's trailing newline is not part of the secret.
    #[test]
    fn secret_file_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef\n").unwrap();
        assert!(Secret::from_file(&path, "test").unwrap().matches(b"0123456789abcdef"));
    }
}
