//! Secrets and TLS material: bearer tokens and the cluster secret, read from
//! files or environment variables (never from the command line alone, where
//! `ps` and shell history would show them), and the certificate files of TLS.
//!
//! With no secret configured, every endpoint is open (and the node warns so
//! at start; `leasehold serve` outside loopback then needs `--insecure`).
//! Once **any** secret is configured, everything but `/healthz`, `/readyz`,
//! `/metrics` and the status page's HTML asks for a credential:
//!
//! - The **client token** opens the client API (`/v1/locks…`, `/v1/multi…`,
//!   `/v1/sessions…`, `/v1/fence…`, `/v1/records…`, `/v1/events`).
//! - The **admin token** opens initialization, membership changes,
//!   snapshots, backups and state digests, and the client API too (like
//!   etcd's root user). Nothing else opens them: without an admin token
//!   they are closed.
//! - The **cluster secret** opens Raft RPC (`/raft/*`) and the peer
//!   transport: a process that does not hold it cannot append entries, ask
//!   for votes or install snapshots. Without one the members send none, so
//!   Raft RPC stays open to anyone who reaches the port (warned at start;
//!   refused outside loopback without `--insecure`).
//! - **Peer certificates** (`--peer-cert`, `--peer-key`, `--peer-trusted-ca`,
//!   with a peer port): mutual TLS there, checked in the handshake before
//!   the hello; they stand in for the cluster secret, or add to it.
//! - Any of the three opens what only describes the cluster:
//!   `/v1/cluster/status`, `/v1/cluster/nodes`, `/openapi.json`.
//!
//! docs/operations.md ("Threat model") states what each holder can do.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use leasehold_client::load_ca;
use leasehold_proto::{Secret, SecretError};

/// The ALPN protocols clients may ask for: HTTP/2 (preferred: many waits on
/// one connection) or HTTP/1.1.
pub const CLIENT_ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

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

impl Secrets {
    /// Whether any secret is configured: then every endpoint but health,
    /// readiness, metrics and the status page asks for a credential.
    pub fn any(&self) -> bool {
        self.client_token.is_some() || self.admin_token.is_some() || self.cluster_secret.is_some()
    }

    /// What a node presents when it asks another member for its status
    /// (the bootstrap check, `/v1/cluster/nodes`), where any secret is
    /// taken: the cluster secret, the one meant for members, else a token.
    pub fn for_status_probes(&self) -> Option<Secret> {
        [&self.cluster_secret, &self.client_token, &self.admin_token].into_iter().flatten().next().cloned()
    }

    /// What runs open or closed on a node with these secrets, one warning
    /// each, for the log at start.
    pub fn exposure(&self) -> Vec<&'static str> {
        if !self.any() {
            return vec![
                "running open: no client token, admin token or cluster secret is configured, so anyone who \
                 reaches this node can take and release any lock, change membership, download every lock and \
                 record, and act as a member",
            ];
        }
        let mut warnings = Vec::new();
        if self.cluster_secret.is_none() {
            warnings.push(
                "Raft RPC and the peer transport are open: no cluster secret is configured (--cluster-secret-file), \
                 so anyone who reaches this node can append entries and vote as a member",
            );
        }
        if self.client_token.is_none() && self.admin_token.is_none() {
            warnings.push("the client API is closed: secrets are configured, but no client or admin token");
        }
        if self.admin_token.is_none() {
            warnings.push(
                "the admin API is closed: no admin token is configured (--admin-token-file), so membership \
                 changes, snapshots, backups and digests are refused",
            );
        }
        warnings
    }
}

/// Where a node's secrets and TLS files are (`leasehold serve` flags).
#[derive(Debug, Clone, Default)]
pub struct SecurityFiles {
    /// File holding the client API bearer token (or set $LEASEHOLD_CLIENT_TOKEN).
    pub client_token_file: Option<PathBuf>,
    /// File holding the admin bearer token for init, membership, snapshots, backups and digests
    /// (or set $LEASEHOLD_ADMIN_TOKEN).
    pub admin_token_file: Option<PathBuf>,
    /// File holding the secret every member sends on Raft RPC (or set $LEASEHOLD_CLUSTER_SECRET).
    pub cluster_secret_file: Option<PathBuf>,
    /// TLS certificate chain (PEM). With --tls-key-file, the node serves https only.
    pub tls_cert_file: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert-file.
    pub tls_key_file: Option<PathBuf>,
    /// CA certificate (PEM) the other nodes' certificates chain to.
    pub ca_file: Option<PathBuf>,
    /// This node's certificate chain (PEM) on the peer transport: served on
    /// the peer port and presented when dialing the other members.
    pub peer_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `peer_cert_file`.
    pub peer_key_file: Option<PathBuf>,
    /// CA certificate (PEM) every member's peer certificate chains to: a
    /// peer connection is taken only from a certificate it signed.
    pub peer_trusted_ca_file: Option<PathBuf>,
}

/// Mutual TLS on the peer transport (`--peer-cert`, `--peer-key`,
/// `--peer-trusted-ca`): both sides present a certificate that chains to
/// the trusted CA, so a connection proves it is a member's in the handshake,
/// before it can send a byte of the peer protocol.
#[derive(Clone)]
pub struct PeerCertificates {
    /// The peer listener's: asks every connection for a client certificate.
    pub server: Arc<rustls::ServerConfig>,
    /// Dialing the other members: presents this node's certificate.
    pub client: Arc<rustls::ClientConfig>,
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
        let mut config = tls_server_builder()?
            .with_no_client_auth()
            .with_single_cert(load_chain(cert_file)?, load_key(key_file)?)
            .map_err(|e| SecurityError::Tls(format!("{}: {e}", cert_file.display())))?;
        // Clients ask for one of `CLIENT_ALPN`; the other nodes ask for the
        // peer transport.
        config.alpn_protocols = CLIENT_ALPN.iter().chain([&crate::peer::ALPN]).map(|p| p.to_vec()).collect();
        Ok(Some(Arc::new(config)))
    }

    /// The TLS client settings of the peer transport without peer
    /// certificates: the nodes' certificates must chain to `--ca-file`.
    /// `None` without TLS, or without a CA file (then Raft RPC goes over
    /// HTTP, which trusts the built-in roots).
    pub fn peer_tls(&self) -> Result<Option<Arc<rustls::ClientConfig>>, SecurityError> {
        let (true, Some(ca_file)) = (self.tls(), &self.ca_file) else { return Ok(None) };
        let mut config = tls_client_builder()?.with_root_certificates(load_roots(ca_file)?).with_no_client_auth();
        config.alpn_protocols = vec![crate::peer::ALPN.to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// Whether mutual TLS on the peer transport is configured.
    pub fn has_peer_certificates(&self) -> bool {
        self.peer_cert_file.is_some()
    }

    /// Mutual TLS on the peer transport, when `--peer-cert`, `--peer-key`
    /// and `--peer-trusted-ca` are given (all three or none).
    pub fn peer_certificates(&self) -> Result<Option<PeerCertificates>, SecurityError> {
        let (cert_file, key_file, ca_file) =
            match (&self.peer_cert_file, &self.peer_key_file, &self.peer_trusted_ca_file) {
                (None, None, None) => return Ok(None),
                (Some(cert), Some(key), Some(ca)) => (cert, key, ca),
                _ => {
                    return Err(SecurityError::Tls(
                        "mutual TLS between members needs all of --peer-cert, --peer-key and --peer-trusted-ca".into(),
                    ))
                }
            };
        let (chain, key) = (load_chain(cert_file)?, load_key(key_file)?);
        let roots = Arc::new(load_roots(ca_file)?);
        let tls = |e: rustls::Error| SecurityError::Tls(format!("{}: {e}", cert_file.display()));
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| SecurityError::Tls(format!("{}: {e}", ca_file.display())))?;
        let mut server = tls_server_builder()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(tls)?;
        server.alpn_protocols = vec![crate::peer::ALPN.to_vec()];
        let mut client =
            tls_client_builder()?.with_root_certificates(roots).with_client_auth_cert(chain, key).map_err(tls)?;
        client.alpn_protocols = vec![crate::peer::ALPN.to_vec()];
        Ok(Some(PeerCertificates { server: Arc::new(server), client: Arc::new(client) }))
    }

    /// The CA certificate of `--ca-file`, to trust when calling a node.
    pub fn ca(&self) -> Result<Option<leasehold_client::Ca>, SecurityError> {
        Ok(self.ca_file.as_deref().map(load_ca).transpose()?)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_server_builder() -> Result<rustls::ConfigBuilder<rustls::ServerConfig, rustls::WantsVerifier>, SecurityError> {
    rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| SecurityError::Tls(e.to_string()))
}

fn tls_client_builder() -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, SecurityError> {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| SecurityError::Tls(e.to_string()))
}

/// The certificate chain in `file` (PEM), leaf first.
fn load_chain(file: &Path) -> Result<Vec<CertificateDer<'static>>, SecurityError> {
    let chain = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| SecurityError::Tls(format!("certificate {}: {e}", file.display())))?;
    if chain.is_empty() {
        return Err(SecurityError::Tls(format!("no certificate in {}", file.display())));
    }
    Ok(chain)
}

fn load_key(file: &Path) -> Result<PrivateKeyDer<'static>, SecurityError> {
    PrivateKeyDer::from_pem_file(file).map_err(|e| SecurityError::Tls(format!("private key {}: {e}", file.display())))
}

/// The CA certificates in `file` (PEM), as trust roots.
fn load_roots(file: &Path) -> Result<rustls::RootCertStore, SecurityError> {
    let bad = |e: &dyn std::fmt::Display| SecurityError::Tls(format!("CA {}: {e}", file.display()));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(file).map_err(|e| bad(&e))? {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Option<Secret> {
        Some(Secret::new(s, "test").unwrap())
    }

    // Ensures the start-up warnings name every part that runs open or
    // closed, and none when all three secrets are set; and that a status
    // probe presents the cluster secret first, else a token.
    #[test]
    fn exposure_and_probes_follow_the_secrets() {
        let all = Secrets {
            client_token: secret("client-token-0123456789"),
            admin_token: secret("admin-token-0123456789"),
            cluster_secret: secret("cluster-secret-0123456789"),
        };
        assert!(all.exposure().is_empty(), "{:?}", all.exposure());
        assert_eq!(
            all.for_status_probes().map(|s| s.expose().to_owned()).as_deref(),
            Some("cluster-secret-0123456789")
        );

        let open = Secrets::default();
        assert!(!open.any() && open.for_status_probes().is_none());
        assert!(matches!(open.exposure()[..], [w] if w.starts_with("running open")), "{:?}", open.exposure());

        let only_client = Secrets { client_token: secret("client-token-0123456789"), ..Secrets::default() };
        let warnings = only_client.exposure();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("Raft RPC and the peer transport are open"), "{warnings:?}");
        assert!(warnings[1].starts_with("the admin API is closed"), "{warnings:?}");
        assert_eq!(
            only_client.for_status_probes().map(|s| s.expose().to_owned()).as_deref(),
            Some("client-token-0123456789")
        );

        let only_peer = Secrets { cluster_secret: secret("cluster-secret-0123456789"), ..Secrets::default() };
        let warnings = only_peer.exposure();
        assert!(warnings.iter().any(|w| w.starts_with("the client API is closed")), "{warnings:?}");
    }
}
