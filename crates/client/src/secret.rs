//! The CA a secured cluster's https nodes chain to, from a PEM file. (The
//! bearer [`Secret`](crate::Secret) is [`leasehold_proto`]'s: nodes check
//! the same type.)

use std::path::Path;
use std::sync::Arc;

use leasehold_proto::SecretError;

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
