//! The `leasehold` binary: sets up logging and the runtime, parses the
//! command line ([`cli`]) and exits with the command's status.

mod cli;

/// glibc's malloc took a fifth of the nodes' and the clients' CPU in the
/// write-path profile (benches/results/profile.md); mimalloc is measured
/// against it with benches/ab.sh.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context;
use clap::Parser;

fn main() -> anyhow::Result<()> {
    // Before parsing: the file's settings reach clap as environment variables.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    cli::config::apply(&args)?;
    let cli = cli::Cli::parse_from(args);
    cli::logging::init(cli.log_format);
    let runtime = tokio::runtime::Runtime::new().context("tokio runtime")?;
    match runtime.block_on(cli.run())? {
        0 => Ok(()),
        code => std::process::exit(code),
    }
}
