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
//! - **Client certificates** (`--client-trusted-ca`, under TLS): the client
//!   listener asks every connection for a certificate that chains to that
//!   CA, as etcd's `--client-cert-auth --trusted-ca-file` does. One that
//!   does not chain is refused in the handshake; none at all is allowed,
//!   so token-only clients (and members sharing the listener) keep working.
//!   A verified certificate's subject Common Name names a user of the
//!   replicated table ([`common_name`]), who is the caller when the request
//!   carries no bearer token (`api/auth.rs`). Like etcd's, the name counts
//!   only where auth is on: on a node without secrets everything is open.
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
    /// CA certificate (PEM) clients' certificates chain to: the client
    /// listener asks for one, and its subject's Common Name names a user.
    pub client_trusted_ca_file: Option<PathBuf>,
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
        let builder = tls_server_builder()?;
        let builder = match &self.client_trusted_ca_file {
            None => builder.with_no_client_auth(),
            // Asked, not required: a client without a certificate (a token
            // holder, or a member dialing this shared listener) completes the
            // handshake; one whose certificate does not chain to the CA does not.
            Some(ca_file) => builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(load_roots(ca_file)?), provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| SecurityError::Tls(format!("{}: {e}", ca_file.display())))?,
            ),
        };
        let mut config = builder
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

/// The client certificate a connection presented and the handshake
/// verified against `--client-trusted-ca`, in each of its requests'
/// extensions: the user its subject names, or why it names none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate(pub Result<Arc<str>, CommonNameError>);

impl ClientCertificate {
    /// The certificate of a TLS connection's client, when it presented one
    /// (the leaf: the first of the chain).
    pub fn of(connection: &rustls::ServerConnection) -> Option<ClientCertificate> {
        let leaf = connection.peer_certificates()?.first()?;
        Some(ClientCertificate(common_name(leaf).map(Arc::from)))
    }
}

/// Why a certificate's subject names no user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommonNameError {
    #[error("the client certificate cannot be read")]
    Malformed,
    #[error("the client certificate's subject has no Common Name")]
    Missing,
    /// Refused rather than picking one: which one a reader takes differs
    /// between libraries, and a name must not depend on that.
    #[error("the client certificate's subject has several Common Names")]
    Several,
    /// Neither a UTF8String, PrintableString nor IA5String, or not valid
    /// UTF-8: user names are text, and a BMPString or a TeletexString is not
    /// decoded to guess at one.
    #[error("the client certificate's Common Name is not UTF-8 text")]
    NotText,
}

/// The subject Common Name (OID 2.5.4.3) of a DER certificate: the one user
/// name it may carry. Reads only as far as the subject, through the DER
/// structure of RFC 5280's `TBSCertificate`; the handshake has verified the
/// certificate already, so nothing here is about trust.
pub fn common_name(certificate: &[u8]) -> Result<String, CommonNameError> {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const VERSION: u8 = 0xa0;
    const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    let expect = |input, tag| match der_element(input) {
        Some((found, contents, rest)) if found == tag => Ok((contents, rest)),
        _ => Err(CommonNameError::Malformed),
    };
    let (certificate, _) = expect(certificate, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    // version [0] (optional), serialNumber, signature, issuer, validity, subject.
    let mut rest = tbs;
    if let Some((VERSION, _, after)) = der_element(rest) {
        rest = after;
    }
    for _ in 0..4 {
        rest = der_element(rest).ok_or(CommonNameError::Malformed)?.2;
    }
    let (mut names, _) = expect(rest, SEQUENCE)?;
    let mut found = None;
    while !names.is_empty() {
        let (mut attributes, after) = expect(names, SET)?;
        names = after;
        while !attributes.is_empty() {
            let (attribute, after) = expect(attributes, SEQUENCE)?;
            attributes = after;
            let (oid, value) = expect(attribute, OID)?;
            if oid != COMMON_NAME {
                continue;
            }
            if found.is_some() {
                return Err(CommonNameError::Several);
            }
            found = Some(match der_element(value) {
                // UTF8String, PrintableString, IA5String.
                Some((0x0c | 0x13 | 0x16, text, _)) => {
                    std::str::from_utf8(text).map_err(|_| CommonNameError::NotText)?.to_owned()
                }
                Some(_) => return Err(CommonNameError::NotText),
                None => return Err(CommonNameError::Malformed),
            });
        }
    }
    found.filter(|name| !name.is_empty()).ok_or(CommonNameError::Missing)
}

/// The first DER element of `input`: its tag, its contents, and what
/// follows it; `None` when it is cut short or its length is not DER's.
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        // Long form, up to 4 length bytes (a certificate is far shorter).
        0x81..=0x84 => {
            let (bytes, rest) = rest.split_at_checked(usize::from(first & 0x7f))?;
            (bytes.iter().fold(0usize, |length, b| (length << 8) | usize::from(*b)), rest)
        }
        _ => return None,
    };
    let (contents, rest) = rest.split_at_checked(length)?;
    Some((tag, contents, rest))
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

#[cfg(test)]
mod common_name_tests {
    use super::*;

    /// A DER element of `tag` around `contents` (short or long length form).
    fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match u8::try_from(contents.len()) {
            Ok(n) if n < 0x80 => out.push(n),
            _ => {
                let len = u16::try_from(contents.len()).unwrap().to_be_bytes();
                out.extend([0x82, len[0], len[1]]);
            }
        }
        out.extend_from_slice(contents);
        out
    }

    /// A certificate's skeleton with `subject`'s attributes, one RDN each
    /// (`(oid, string tag, value)`), or all in one RDN when `one_set`.
    fn certificate(subject: &[(&[u8], u8, &[u8])], one_set: bool) -> Vec<u8> {
        let attribute =
            |(oid, tag, value): &(&[u8], u8, &[u8])| der(0x30, &[der(0x06, oid), der(*tag, value)].concat());
        let name: Vec<u8> = match one_set {
            true => der(0x31, &subject.iter().flat_map(attribute).collect::<Vec<_>>()),
            false => subject.iter().flat_map(|a| der(0x31, &attribute(a))).collect(),
        };
        let tbs = [
            der(0xa0, &der(0x02, &[2])),
            der(0x02, &[1]),
            der(0x30, &[]),
            der(0x30, &[]),
            der(0x30, &[]),
            der(0x30, &name),
        ]
        .concat();
        der(0x30, &[der(0x30, &tbs), der(0x30, &[]), der(0x03, &[0])].concat())
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const ORG: &[u8] = &[0x55, 0x04, 0x0a];
    const UTF8: u8 = 0x0c;

    // Ensures a certificate made by a real issuer (rcgen) yields its CN, and
    // one whose subject has none is refused as naming nobody.
    #[test]
    fn reads_the_common_name_of_real_certificates() {
        let key = rcgen::KeyPair::generate().unwrap();
        let name_of = |subject: &[(rcgen::DnType, rcgen::DnValue)]| {
            let mut params = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
            params.distinguished_name = rcgen::DistinguishedName::new();
            for (kind, value) in subject {
                params.distinguished_name.push(kind.clone(), value.clone());
            }
            common_name(params.self_signed(&key).unwrap().der())
        };
        let text = |s: &str| rcgen::DnValue::Utf8String(s.into());
        let (org, cn) = (rcgen::DnType::OrganizationName, rcgen::DnType::CommonName);
        assert_eq!(name_of(&[(org, text("team")), (cn.clone(), text("alice"))]), Ok("alice".into()));
        assert_eq!(name_of(&[]), Err(CommonNameError::Missing));
        let bmp = rcgen::BmpString::try_from("alice").unwrap();
        assert_eq!(name_of(&[(cn, rcgen::DnValue::BmpString(bmp))]), Err(CommonNameError::NotText));
    }

    // Ensures the edge cases: several CNs (in one RDN or in two) are
    // refused, not one picked; an empty CN or none names nobody; invalid
    // UTF-8 is refused; Printable and IA5 strings are read; truncated or
    // garbage input is malformed, never a panic.
    #[test]
    fn common_name_edge_cases() {
        let name = |subject: &[(&[u8], u8, &[u8])]| common_name(&certificate(subject, false));
        assert_eq!(name(&[(ORG, UTF8, b"team"), (CN, UTF8, b"alice")]), Ok("alice".into()));
        assert_eq!(name(&[(CN, 0x13, b"bob")]), Ok("bob".into()));
        assert_eq!(name(&[(CN, 0x16, b"carol")]), Ok("carol".into()));
        assert_eq!(name(&[(CN, UTF8, "zoë".as_bytes())]), Ok("zoë".into()));
        assert_eq!(name(&[(CN, UTF8, b"alice"), (CN, UTF8, b"bob")]), Err(CommonNameError::Several));
        assert_eq!(
            common_name(&certificate(&[(CN, UTF8, b"alice"), (CN, UTF8, b"alice")], true)),
            Err(CommonNameError::Several)
        );
        assert_eq!(name(&[(ORG, UTF8, b"team")]), Err(CommonNameError::Missing));
        assert_eq!(name(&[(CN, UTF8, b"")]), Err(CommonNameError::Missing));
        assert_eq!(name(&[(CN, UTF8, &[0x61, 0xff, 0x62])]), Err(CommonNameError::NotText));
        assert_eq!(name(&[(CN, 0x1e, &[0, 0x61])]), Err(CommonNameError::NotText));
        let long = "a".repeat(300);
        assert_eq!(name(&[(CN, UTF8, long.as_bytes())]), Ok(long.clone()));

        let whole = certificate(&[(CN, UTF8, b"alice")], false);
        for cut in 0..whole.len() {
            assert_eq!(common_name(&whole[..cut]), Err(CommonNameError::Malformed), "cut at {cut}");
        }
        for garbage in [&[][..], &[0x30, 0x85, 1, 2, 3, 4, 5], &[0x30, 0x80], &[0xff; 16]] {
            assert_eq!(common_name(garbage), Err(CommonNameError::Malformed));
        }
    }
}
