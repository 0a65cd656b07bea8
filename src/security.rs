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

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use leasehold_client::load_ca;
use leasehold_proto::{Secret, SecretError};

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("{0}")]
    Tls(String),
}

/// The secrets one node checks (and, for the cluster secret, sends).
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    pub client_token: Option<Secret>,
    pub admin_token: Option<Secret>,
    pub cluster_secret: Option<Secret>,
}

/// Where a node's secrets and TLS files are (`leasehold serve` flags).
#[derive(Debug, Clone, Default)]
pub struct SecurityFiles {
    /// File holding the client API bearer token (or set $LEASEHOLD_CLIENT_TOKEN).
    pub client_token_file: Option<PathBuf>,
    /// File holding the admin bearer token for init and membership (or set $LEASEHOLD_ADMIN_TOKEN).
    pub admin_token_file: Option<PathBuf>,
    /// File holding the secret every member sends on Raft RPC (or set $LEASEHOLD_CLUSTER_SECRET).
    pub cluster_secret_file: Option<PathBuf>,
    /// TLS certificate chain (PEM). With --tls-key-file, the node serves https only.
    pub tls_cert_file: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert-file.
    pub tls_key_file: Option<PathBuf>,
    /// CA certificate (PEM) the other nodes' certificates chain to.
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
        // Clients speak HTTP/2 (preferred: many waits on one connection) or
        // HTTP/1.1; the other nodes ask for the peer transport.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), crate::peer::ALPN.to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// The TLS client settings of the peer transport: the nodes' certificates
    /// must chain to `--ca-file`. `None` without TLS, or without a CA file
    /// (then Raft RPC goes over HTTP, which trusts the built-in roots).
    pub fn peer_tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, SecurityError> {
        let (true, Some(ca_file)) = (self.tls(), &self.ca_file) else { return Ok(None) };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca_file)
            .map_err(|e| SecurityError::Tls(format!("CA {}: {e}", ca_file.display())))?
        {
            let cert = cert.map_err(|e| SecurityError::Tls(format!("CA {}: {e}", ca_file.display())))?;
            roots.add(cert).map_err(|e| SecurityError::Tls(format!("CA {}: {e}", ca_file.display())))?;
        }
        let mut config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| SecurityError::Tls(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = vec![crate::peer::ALPN.to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// The CA certificate of `--ca-file`, to trust when calling a node.
    pub fn ca(&self) -> Result<Option<leasehold_client::Ca>, SecurityError> {
        Ok(self.ca_file.as_deref().map(load_ca).transpose()?)
    }
}
