//! What a command that talks to a cluster presents when auth or TLS is on:
//! the bearer secret's, the CA's and the client certificate's flags and variables (`leasehold`'s client
//! and operator commands, `leasehold-lab bench --endpoints`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use leasehold_client::{load_ca, load_identity, Credentials, Secret};

/// What a client presents to a cluster with auth or TLS on.
#[derive(Args)]
pub struct CredentialFiles {
    /// CA certificate (PEM) of https nodes; endpoints without a scheme are then https.
    #[arg(long, global = true, env = "LEASEHOLD_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// File holding the bearer token to send (or set $LEASEHOLD_AUTH_TOKEN).
    #[arg(long, global = true, alias = "token-file", env = "LEASEHOLD_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// Client certificate (PEM) to present over https, for nodes with --client-trusted-ca: without a token,
    /// its subject Common Name is the user. Needs --key.
    #[arg(long = "cert", global = true, env = "LEASEHOLD_CERT_FILE", requires = "key_file")]
    cert_file: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long = "key", global = true, env = "LEASEHOLD_KEY_FILE", requires = "cert_file")]
    key_file: Option<PathBuf>,
}

/// The bearer secret's variable. Not `LEASEHOLD_TOKEN`: `leasehold run` sets
/// that to the fencing token in its command's environment, where a
/// `leasehold` call must still find its credentials.
const AUTH_TOKEN_ENV: &str = "LEASEHOLD_AUTH_TOKEN";
/// The token file's variable before `LEASEHOLD_AUTH_TOKEN_FILE`, still read
/// when the new one is not set (it never meant anything else).
const OLD_AUTH_TOKEN_FILE_ENV: &str = "LEASEHOLD_TOKEN_FILE";

impl CredentialFiles {
    /// The token (from the file, or the variables), the CA and the client
    /// certificate, read now.
    pub fn load(&self) -> Result<Credentials> {
        let old_file = || std::env::var_os(OLD_AUTH_TOKEN_FILE_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
        let file = self.auth_token_file.clone().or_else(old_file);
        Ok(Credentials {
            token: Secret::load(file.as_deref(), AUTH_TOKEN_ENV, "auth token")?,
            ca: self.ca_file.as_deref().map(load_ca).transpose()?,
            identity: match (&self.cert_file, &self.key_file) {
                (Some(cert), Some(key)) => Some(load_identity(cert, key)?),
                _ => None,
            },
        })
    }
}

/// Points a user whose credentials were refused at the bearer secret's new
/// variable when the old one seems to hold a secret (a number there is the
/// fencing token of an enclosing `leasehold run`).
pub(crate) fn hint_old_token_variable() {
    let unset = |name| std::env::var_os(name).is_none_or(|v| v.is_empty());
    let old = std::env::var("LEASEHOLD_TOKEN").unwrap_or_default();
    if unset(AUTH_TOKEN_ENV) && unset("LEASEHOLD_AUTH_TOKEN_FILE") && !old.is_empty() && old.parse::<u64>().is_err() {
        eprintln!(
            "leasehold: note: LEASEHOLD_TOKEN is no longer read as the bearer secret (it is the fencing token \
             `leasehold run` sets); set {AUTH_TOKEN_ENV} or LEASEHOLD_AUTH_TOKEN_FILE"
        );
    }
}
