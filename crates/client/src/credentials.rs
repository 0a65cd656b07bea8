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
