//! Secrets and TLS material: bearer tokens and the cluster secret, read from
//! files or environment variables (never from the command line alone, where
//! `ps` and shell history would show them), and the certificate files of TLS.
//!
//! - The **client token** opens the client API (`/v1/locks…`, `/v1/fence…`,
//!   `/v1/records…`).
//! - The **admin token** opens initialization and membership changes, and the
//!   client API too (like etcd's root user).
//! - The **cluster secret** opens Raft RPC (`/raft/*`): a process that does
//!   not hold it cannot append entries, ask for votes or install snapshots.
//!
//! Each is optional; what has no secret configured stays open.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use subtle::ConstantTimeEq;

/// A secret shorter than this is refused at start: it could be guessed.
pub const MIN_SECRET_LEN: usize = 16;
/// A secret must fit in one HTTP header.
const MAX_SECRET_LEN: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("reading {what} from {path}: {source}")]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what}: give either the file or ${env}, not both")]
    Ambiguous { what: &'static str, env: &'static str },
    #[error(
        "{what} must be {MIN_SECRET_LEN} to {MAX_SECRET_LEN} visible ASCII characters (no spaces or control characters)"
    )]
    Malformed { what: &'static str },
    #[error("{0}")]
    Tls(String),
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
    pub fn new(value: &str, what: &'static str) -> Result<Secret, SecurityError> {
        let visible = value.bytes().all(|b| b.is_ascii_graphic());
        if !visible || !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&value.len()) {
            return Err(SecurityError::Malformed { what });
        }
        Ok(Secret(value.into()))
    }

    /// The secret in `path`; surrounding whitespace (a trailing newline) is
    /// not part of it.
    pub fn from_file(path: &Path, what: &'static str) -> Result<Secret, SecurityError> {
        let text = std::fs::read_to_string(path).map_err(|source| SecurityError::Read {
            what,
            path: path.to_owned(),
            source,
        })?;
        Secret::new(text.trim(), what)
    }

    /// The secret from `file` if given, else from the environment variable
    /// `env` if set, else none. Both at once is an error: which one is meant
    /// would be a guess.
    pub fn load(file: Option<&Path>, env: &'static str, what: &'static str) -> Result<Option<Secret>, SecurityError> {
        let from_env = std::env::var(env).ok().filter(|v| !v.is_empty());
        match (file, from_env) {
            (Some(_), Some(_)) => Err(SecurityError::Ambiguous { what, env }),
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

/// The secrets one node checks (and, for the cluster secret, sends).
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    pub client_token: Option<Secret>,
    pub admin_token: Option<Secret>,
    pub cluster_secret: Option<Secret>,
}

/// Where a node's secrets and TLS files are: `leasehold serve` and
/// `leasehold up` flags, also used by [`LocalCluster`](crate::local::LocalCluster).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecurityFiles {
    /// File holding the client API bearer token (or set $LEASEHOLD_CLIENT_TOKEN).
    #[arg(long, env = "LEASEHOLD_CLIENT_TOKEN_FILE")]
    pub client_token_file: Option<PathBuf>,
    /// File holding the admin bearer token for init and membership (or set $LEASEHOLD_ADMIN_TOKEN).
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// File holding the secret every member sends on Raft RPC (or set $LEASEHOLD_CLUSTER_SECRET).
    #[arg(long, env = "LEASEHOLD_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// TLS certificate chain (PEM). With --tls-key-file, the node serves https only.
    #[arg(long, env = "LEASEHOLD_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert-file.
    #[arg(long, env = "LEASEHOLD_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// CA certificate (PEM) the other nodes' certificates chain to.
    #[arg(long, env = "LEASEHOLD_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

impl SecurityFiles {
    /// The secrets, each from its file or its environment variable.
    pub fn secrets(&self) -> Result<Secrets, SecurityError> {
        Ok(Secrets {
            client_token: Secret::load(self.client_token_file.as_deref(), "LEASEHOLD_CLIENT_TOKEN", "client token")?,
            admin_token: Secret::load(self.admin_token_file.as_deref(), "LEASEHOLD_ADMIN_TOKEN", "admin token")?,
            cluster_secret: Secret::load(
                self.cluster_secret_file.as_deref(),
                "LEASEHOLD_CLUSTER_SECRET",
                "cluster secret",
            )?,
        })
    }

    /// Whether the node serves https.
    pub fn tls(&self) -> bool {
        self.tls_cert_file.is_some()
    }

    /// The TLS server configuration, when a certificate and key are given.
    pub fn server_tls(&self) -> Result<Option<Arc<rustls::ServerConfig>>, SecurityError> {
        let (Some(cert_file), Some(key_file)) = (&self.tls_cert_file, &self.tls_key_file) else {
            return Ok(None);
        };
        let chain = CertificateDer::pem_file_iter(cert_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| SecurityError::Tls(format!("certificate {}: {e}", cert_file.display())))?;
        if chain.is_empty() {
            return Err(SecurityError::Tls(format!("no certificate in {}", cert_file.display())));
        }
        let key = PrivateKeyDer::from_pem_file(key_file)
            .map_err(|e| SecurityError::Tls(format!("private key {}: {e}", key_file.display())))?;
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| SecurityError::Tls(e.to_string()))?
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .map_err(|e| SecurityError::Tls(format!("{}: {e}", cert_file.display())))?;
        // The client library and the nodes speak HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// The CA certificate of `--ca-file`, to trust when calling a node.
    pub fn ca(&self) -> Result<Option<reqwest::Certificate>, SecurityError> {
        self.ca_file.as_deref().map(load_ca).transpose()
    }

    /// The same settings as `leasehold serve` flags (tokens given through the
    /// environment reach child processes by inheritance).
    pub fn serve_args(&self) -> Vec<OsString> {
        let flags = [
            ("--client-token-file", &self.client_token_file),
            ("--admin-token-file", &self.admin_token_file),
            ("--cluster-secret-file", &self.cluster_secret_file),
            ("--tls-cert-file", &self.tls_cert_file),
            ("--tls-key-file", &self.tls_key_file),
            ("--ca-file", &self.ca_file),
        ];
        flags
            .into_iter()
            .filter_map(|(flag, path)| Some([OsString::from(flag), path.as_ref()?.clone().into_os_string()]))
            .flatten()
            .collect()
    }
}

/// A CA certificate (PEM) to trust.
pub fn load_ca(path: &Path) -> Result<reqwest::Certificate, SecurityError> {
    let pem = std::fs::read(path).map_err(|source| SecurityError::Read {
        what: "CA certificate",
        path: path.to_owned(),
        source,
    })?;
    reqwest::Certificate::from_pem(&pem).map_err(|e| SecurityError::Tls(format!("CA {}: {e}", path.display())))
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
