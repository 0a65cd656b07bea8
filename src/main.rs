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

fn main() {
    // The crash points' actions, from `FAILPOINTS`, for the whole process.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    // A test that sets crash points on a binary built without them would
    // otherwise wait for a crash that cannot come.
    #[cfg(not(feature = "failpoints"))]
    if std::env::var_os("FAILPOINTS").is_some() {
        eprintln!("leasehold: FAILPOINTS is set, but this binary was built without the `failpoints` feature: no crash point will fire");
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `bench`, `chaos`, `demo`: a usage error that names the binary they moved to.
    if let Some(moved) = cli::moved_to_lab(&args) {
        eprintln!("{moved}");
        std::process::exit(cli::exit::Exit::Usage.code());
    }
    // Before parsing: the file's settings reach clap as environment variables.
    if let Err(e) = cli::config::apply(&args) {
        eprintln!("leasehold: {e:#}");
        std::process::exit(cli::exit::SERVER_FAILED);
    }
    let cli = cli::Cli::parse_from(args);
    cli::logging::init(cli.logging.log_format);
    let server = cli.is_server();
    let outcome = cli.runtime().context("tokio runtime").and_then(|rt| rt.block_on(cli.run()));
    let code = match outcome {
        Ok(code) => code,
        Err(e) => {
            let exit = cli::exit::failed("leasehold", &e);
            if server {
                cli::exit::SERVER_FAILED
            } else {
                exit.code()
            }
        }
    };
    std::process::exit(code)
}
