//! What a client presents to a secured cluster: [`Credentials`], a bearer
//! [`Secret`] and the [`Ca`] its https nodes chain to, read from a PEM file
//! by [`load_ca`]. (The secret is [`leasehold_proto`]'s: nodes check the
//! same type.)

use std::path::Path;
use std::sync::Arc;

use leasehold_proto::{Secret, SecretError};

/// What a client presents to a cluster with auth or TLS on.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Sent as `authorization: Bearer <token>` on every request.
    pub token: Option<Secret>,
    /// Trusted (alone) for https endpoints; endpoints without a scheme are
    /// `https` when it is set.
    pub ca: Option<Ca>,
    /// A client certificate presented in every https handshake: to nodes
    /// started with `--client-trusted-ca`, its subject's Common Name names
    /// the user when no token is sent (a token, if set, wins).
    pub identity: Option<Identity>,
}

impl Credentials {
    /// These credentials, presenting `identity` too.
    pub fn with_identity(mut self, identity: Identity) -> Credentials {
        self.identity = Some(identity);
        self
    }
}

/// A client certificate chain and its private key, checked when loaded (so
/// a wrong key fails here, not in the first handshake).
#[derive(Clone)]
pub struct Identity {
    pub(crate) key: Arc<rustls::sign::CertifiedKey>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identity({} certificates, key hidden)", self.key.cert.len())
    }
}

impl Identity {
    /// From PEM documents: the certificate chain (leaf first) and its key.
    pub fn from_pem(certificate: &[u8], key: &[u8]) -> Result<Identity, SecretError> {
        Identity::parse(certificate, key).map_err(|e| SecretError::Certificate(format!("client certificate: {e}")))
    }

    fn parse(certificate: &[u8], key: &[u8]) -> Result<Identity, String> {
        Ok(Identity { key: Arc::new(crate::http::certified_key(certificate, key)?) })
    }
}

/// A client certificate file and its private key file (PEM).
pub fn load_identity(certificate: &Path, key: &Path) -> Result<Identity, SecretError> {
    let read = |path: &Path, what| {
        std::fs::read(path).map_err(|source| SecretError::Read { what, path: path.to_owned(), source })
    };
    let (pem, key_pem) = (read(certificate, "client certificate")?, read(key, "client certificate key")?);
    Identity::parse(&pem, &key_pem).map_err(|e| {
        SecretError::Certificate(format!(
            "client certificate {} with key {}: {e}",
            certificate.display(),
            key.display()
        ))
    })
}

/// A CA's certificates (from a PEM file): https nodes must chain to them,
/// and to nothing else.
#[derive(Clone)]
pub struct Ca {
    pem: Arc<[u8]>,
    certificates: Arc<[rustls::pki_types::CertificateDer<'static>]>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ca({} certificates)", self.certificates.len())
    }
}

impl Ca {
    /// The certificates of a PEM document; refused when it holds none.
    pub fn from_pem(pem: &[u8]) -> Result<Ca, SecretError> {
        Ca::parse(pem).map_err(|e| SecretError::Ca(format!("CA: {e}")))
    }

    fn parse(pem: &[u8]) -> Result<Ca, String> {
        let certificates = crate::http::parse_pem(pem)?;
        Ok(Ca { pem: pem.into(), certificates: certificates.into() })
    }

    /// The PEM document, for other HTTP clients that trust the same CA.
    pub fn pem(&self) -> &[u8] {
        &self.pem
    }

    pub(crate) fn certificates(&self) -> &[rustls::pki_types::CertificateDer<'static>] {
        &self.certificates
    }
}

/// A CA certificate file (PEM) to trust.
pub fn load_ca(path: &Path) -> Result<Ca, SecretError> {
    let pem = std::fs::read(path).map_err(|source| SecretError::Read {
        what: "CA certificate",
        path: path.to_owned(),
        source,
    })?;
    Ca::parse(&pem).map_err(|e| SecretError::Ca(format!("CA {}: {e}", path.display())))
}
