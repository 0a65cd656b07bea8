//! leasehold-cli: the command-line pieces the `leasehold` and `leasehold-lab`
//! binaries share, so the lab's commands parse flags, log and exit exactly as
//! the product's do, without either binary linking the other's code.
//!
//! - [`duration`] — the one duration syntax of every duration flag.
//! - [`exit`] — the exit statuses, and how a failed command says why.
//! - [`logging`] — `--log-format` and the process's logger.
//! - [`CredentialFiles`] — the bearer secret's and the CA's flags and
//!   variables, for commands that talk to a cluster.
//! - [`raise_fd_limit`] — for a node's connections or a benchmark's herd.

mod credentials;
pub mod duration;
pub mod exit;
pub mod logging;

pub use credentials::CredentialFiles;

/// Raises the soft limit on open files to the hard one and returns it: a
/// node should use what the operator allowed (`LimitNOFILE=`, `ulimit -Hn`)
/// without asking for a wrapper script, and a benchmark's herd needs a
/// socket per client. Falls back to the soft limit.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::info!(soft, hard, error = %e, "could not raise the open-files limit");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    }
}
