//! TLS, through rustls: the connectors for https nodes, the stream each
//! connection runs on (TCP, with TLS when its endpoint is https), and PEM
//! certificates. A CA file ([`Ca`](crate::Ca)) is parsed by `parse_pem`
//! here, and its certificates come back to `Tls::new` as plain roots: the
//! CA type depends on this file, this file not on it.

use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use rustls::sign::CertifiedKey;

use super::endpoint::Endpoint;
use super::reply::SendError;
use crate::Identity;

/// Longest time to open a TCP connection (and finish a TLS handshake).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// TLS settings, when any endpoint is https: the CA to trust (alone), or
/// else the usual web roots.
#[derive(Clone)]
pub(super) struct Tls {
    pub(super) http1: TlsConnector,
    pub(super) http2: TlsConnector,
}

impl Tls {
    /// `ca`: the certificates of the [`Ca`](crate::Ca) to trust alone;
    /// `identity`: the client certificate to present, if any.
    pub(super) fn new(ca: Option<&[CertificateDer<'static>]>, identity: Option<&Identity>) -> Tls {
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(ca) => {
                for cert in ca {
                    // A certificate rustls cannot use is left out: the handshake
                    // then fails with a clear error instead.
                    let _ = roots.add(cert.clone());
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let config = |alpn: &[u8]| {
            let builder =
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .expect("ring supports the default protocol versions")
                    .with_root_certificates(roots.clone());
            let mut config = match identity {
                Some(identity) => builder.with_client_cert_resolver(Arc::new(Presents(identity.key.clone()))),
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![alpn.to_vec()];
            TlsConnector::from(Arc::new(config))
        };
        Tls { http1: config(b"http/1.1"), http2: config(b"h2") }
    }
}

/// A TCP connection to a node, with TLS when the endpoint is https.
pub(super) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    pub(super) async fn open(endpoint: &Endpoint, tls: Option<&TlsConnector>) -> Result<Stream, SendError> {
        let failed = |message: String| SendError::Connect { endpoint: endpoint.to_string(), message };
        let connect = async {
            let tcp = match endpoint.host.parse::<IpAddr>() {
                Ok(ip) => TcpStream::connect((ip, endpoint.port)).await,
                Err(_) => TcpStream::connect((endpoint.host.as_str(), endpoint.port)).await,
            }
            .map_err(|e| failed(e.to_string()))?;
            // Requests are small and each waits for its answer: no Nagle delay.
            tcp.set_nodelay(true).map_err(|e| failed(e.to_string()))?;
            match (endpoint.https, tls) {
                (true, Some(tls)) => {
                    let name = ServerName::try_from(endpoint.host.clone()).map_err(|e| failed(e.to_string()))?;
                    let tls = tls.connect(name, tcp).await.map_err(|e| {
                        let message = format!("TLS: {e}");
                        match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
                            Some(rustls::Error::InvalidCertificate(_)) => {
                                SendError::Untrusted { endpoint: endpoint.to_string(), message }
                            }
                            _ => failed(message),
                        }
                    })?;
                    Ok(Stream::Tls(Box::new(tls)))
                }
                _ => Ok(Stream::Plain(tcp)),
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, connect).await.map_err(|_| failed("timed out".into()))?
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Presents one certificate to every server that asks for one.
#[derive(Debug)]
struct Presents(Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for Presents {
    fn resolve(&self, _: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A certificate chain and its private key (PEM), for [`Identity`]: the
/// key must be one ring signs with, and the leaf's.
pub(crate) fn certified_key(chain: &[u8], key: &[u8]) -> Result<CertifiedKey, String> {
    use rustls::pki_types::pem::PemObject;
    let chain = parse_pem(chain)?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("private key: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| format!("private key: {e}"))?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| e.to_string())?;
    Ok(certified)
}

/// The certificates of a CA file, for [`Ca`](crate::Ca).
pub(crate) fn parse_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificate in it".into());
    }
    Ok(certs)
}
