//! The `leasehold` command line, grouped by who uses it:
//!
//! - [`server`] — operators: `serve`, `up`, `member`, `backup`, `restore`, `status`, `user`, `role`;
//! - [`client`] — applications and scripts: `acquire` … `gate`, `run`;
//! - here: `completions` and `man`, generated from these clap types, and the
//!   pointer to `leasehold-lab` for the harness commands that moved there
//!   ([`moved_to_lab`]).
//!
//! Each module holds its clap types and turns them into the library's
//! options; no library type derives a clap trait. [`config`] reads `serve
//! --config`. What the lab's commands share with these — [`duration`], the
//! one duration syntax of every duration flag, [`exit`], [`logging`] and the
//! credential flags — is in `leasehold-cli`.

mod client;
pub mod config;
mod output;
mod server;

pub use leasehold_cli::{duration, exit, logging};

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Parser, Subcommand};

use leasehold_cli::CredentialFiles;
use leasehold_client::Client;

/// What every command has in common, for `leasehold --help` (docs/cli.md
/// says it at length).
const CONVENTIONS: &str = "\
A Raft-replicated lease lock service with fencing tokens.

Durations: every duration flag takes 10s, 250ms, 2m, 1h, 1.5s or 1m30s. Flags
that used to take a number keep their old name (--ttl-ms, --tick-ms, ...), and
a bare number there still means milliseconds.

Output: -o table (aligned columns) or -o json; without -o, a table on a
terminal and JSON when stdout is a pipe or a file.

Credentials: the bearer secret comes from --auth-token-file (alias
--token-file), $LEASEHOLD_AUTH_TOKEN_FILE or $LEASEHOLD_AUTH_TOKEN, the CA of
https nodes from --ca-file or $LEASEHOLD_CA_FILE. $LEASEHOLD_TOKEN is the
fencing token `leasehold run` gives its command, never a secret.

The whole reference is docs/cli.md.";

#[derive(Parser)]
#[command(
    name = "leasehold",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("LEASEHOLD_COMMIT"), ")"),
    about = "A Raft-replicated lease lock service with fencing tokens",
    long_about = CONVENTIONS,
    after_long_help = exit::TABLE
)]
pub struct Cli {
    #[command(flatten)]
    pub logging: logging::LogFormatArg,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    #[command(flatten)]
    Server(server::ServerCmd),
    #[command(flatten)]
    Client(client::ClientCmd),
    /// Print a shell completion script, e.g. `source <(leasehold completions bash)`.
    Completions {
        /// bash, zsh, fish (or elvish, powershell).
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, or with --out write one page per command.
    Man {
        /// Folder for leasehold.1, leasehold-acquire.1, ... (created if absent).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

impl Cli {
    /// Whether the command is a server (`serve`, `up`), whose failures all
    /// exit with [`exit::SERVER_FAILED`].
    pub fn is_server(&self) -> bool {
        matches!(&self.command, Cmd::Server(command) if command.is_server())
    }

    /// The tokio runtime the command runs on: `serve --worker-threads`
    /// threads (1: a current-thread runtime), else one per CPU.
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let threads = match &self.command {
            Cmd::Server(command) => command.worker_threads(),
            _ => None,
        };
        match threads {
            Some(1) => tokio::runtime::Builder::new_current_thread().enable_all().build(),
            Some(n) => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build(),
            None => tokio::runtime::Runtime::new(),
        }
    }

    /// Runs the command; `Ok` carries the process exit status.
    pub async fn run(self) -> Result<i32> {
        match self.command {
            Cmd::Server(command) => command.run(self.logging.log_format).await.map(|()| exit::Exit::Ok.code()),
            Cmd::Client(command) => command.run().await,
            Cmd::Completions { shell } => {
                // Into memory first: clap_complete panics on a failed write
                // (`leasehold completions bash | head`).
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut Cli::command(), "leasehold", &mut script);
                output::write_stdout(&script)?;
                Ok(exit::Exit::Ok.code())
            }
            Cmd::Man { out } => {
                match out {
                    Some(dir) => {
                        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                        clap_mangen::generate_to(Cli::command(), &dir)
                            .with_context(|| format!("writing man pages to {}", dir.display()))?;
                    }
                    None => {
                        let mut page = Vec::new();
                        clap_mangen::Man::new(Cli::command()).render(&mut page)?;
                        output::write_stdout(&page)?;
                    }
                }
                Ok(exit::Exit::Ok.code())
            }
        }
    }
}

/// Which cluster a command talks to, with which credentials, and how it
/// prints the answer.
#[derive(Args)]
struct Target {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    output: output::OutputArg,
}

impl Target {
    fn client(&self) -> Result<Client> {
        self.cluster.client()
    }
}

/// Which cluster a command talks to, and with which credentials (`run`
/// takes these alone: it prints nothing of its own).
#[derive(Args)]
struct ClusterArgs {
    /// Any nodes of the cluster, comma-separated host:port.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7701,127.0.0.1:7702,127.0.0.1:7703"
    )]
    endpoints: Vec<String>,
    #[command(flatten)]
    credentials: CredentialFiles,
}

impl ClusterArgs {
    fn client(&self) -> Result<Client> {
        Ok(Client::with_credentials(&self.endpoints, &self.credentials.load()?)?)
    }
}

/// The harness commands that became the `leasehold-lab` binary's, so that
/// the product (and its package) no longer links the benchmark, the fault
/// suite or the PostgreSQL demo.
const MOVED_TO_LAB: [&str; 3] = ["bench", "chaos", "demo"];

/// For a command line that runs one of [`MOVED_TO_LAB`]: the one line that
/// says where it went, with the same arguments. Checked before clap parses,
/// so these names stay out of `--help` and take any arguments they took.
pub fn moved_to_lab(args: &[OsString]) -> Option<String> {
    let command = args.get(1)?.to_str()?;
    if !MOVED_TO_LAB.contains(&command) {
        return None;
    }
    let same: Vec<String> = args[1..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
    Some(format!("leasehold: `{command}` moved to the leasehold-lab binary: leasehold-lab {}", same.join(" ")))
}

/// The path of this binary, which `up` starts as node processes.
fn this_binary() -> Result<PathBuf> {
    std::env::current_exe().context("locating the leasehold binary")
}

/// Resolves at the first SIGTERM, SIGINT or SIGHUP: a server's shutdown.
async fn stop_signal() {
    match leasehold_client::signals::Signals::new() {
        Ok(mut signals) => {
            signals.recv().await;
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot catch stop signals; Ctrl-C kills the process");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    // Ensures each moved command names the binary it moved to with the very
    // arguments it was given, and no other command (nor a flag of one) does.
    #[test]
    fn moved_commands_point_to_the_lab_with_their_arguments() {
        let line = moved_to_lab(&args("leasehold bench --systems leasehold-3 --runs 1")).expect("bench moved");
        assert_eq!(
            line,
            "leasehold: `bench` moved to the leasehold-lab binary: leasehold-lab bench --systems leasehold-3 --runs 1"
        );
        let line = moved_to_lab(&args("/usr/bin/leasehold demo payments --no-fencing")).expect("demo moved");
        assert!(line.ends_with(": leasehold-lab demo payments --no-fencing"), "{line}");
        assert!(moved_to_lab(&args("leasehold chaos")).expect("chaos moved").ends_with(": leasehold-lab chaos"));
        for kept in ["leasehold up", "leasehold serve --help", "leasehold get bench", "leasehold"] {
            assert_eq!(moved_to_lab(&args(kept)), None, "{kept}");
        }
    }
}
