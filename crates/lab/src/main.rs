//! The `leasehold-lab` binary: parses the command line ([`cli`]), sets up
//! logging and the runtime, and exits with the command's status, as the
//! `leasehold` binary does.

mod cli;

/// The harness's clients are measured too (CPU per cycle is servers +
/// client): they keep the allocator the nodes use, which they had while the
/// harness was part of the `leasehold` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context;
use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    leasehold_cli::logging::init(cli.logging.log_format);
    let outcome = tokio::runtime::Runtime::new().context("tokio runtime").and_then(|rt| rt.block_on(cli.run()));
    let code = match outcome {
        Ok(code) => code,
        Err(e) => leasehold_cli::exit::failed("leasehold-lab", &e).code(),
    };
    std::process::exit(code)
}
