//! The `leasehold` binary: sets up logging and the runtime, parses the
//! command line ([`cli`]) and exits with the command's status.

mod cli;

/// glibc's malloc took a fifth of the nodes' and the clients' CPU in the
/// write-path profile (benches/results/profile.md); mimalloc is measured
/// against it with benches/ab.sh.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::IsTerminal;

use anyhow::Context;
use clap::Parser;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn,sled=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // Before parsing: the file's settings reach clap as environment variables.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    cli::config::apply(&args)?;
    let cli = cli::Cli::parse_from(args);
    let runtime = tokio::runtime::Runtime::new().context("tokio runtime")?;
    match runtime.block_on(cli.run())? {
        0 => Ok(()),
        code => std::process::exit(code),
    }
}
