//! `cargo bench`: the same lock-cycle benchmark as `leasehold bench`, against
//! a local 3-node cluster started from the built binary. Results go to
//! `target/tmp/bench-results/` (JSON, Markdown table, SVG plot); both the
//! distinct-names and the hot-lock workloads run.
//!
//! Knobs (environment): LEASEHOLD_BENCH_CLIENTS (default "1,16"),
//! LEASEHOLD_BENCH_RUNS (3), LEASEHOLD_BENCH_SECS (10).

use std::path::PathBuf;
use std::time::Duration;

use leasehold::bench::{self, BenchOptions, Workload};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let clients = std::env::var("LEASEHOLD_BENCH_CLIENTS").unwrap_or_else(|_| "1,16".into());
    let options = BenchOptions {
        endpoints: Vec::new(),
        nodes: 3,
        binary: PathBuf::from(env!("CARGO_BIN_EXE_leasehold")),
        clients: clients.split(',').map(|c| c.trim().parse().expect("LEASEHOLD_BENCH_CLIENTS: numbers")).collect(),
        workloads: vec![Workload::Distinct, Workload::Hot],
        runs: env_or("LEASEHOLD_BENCH_RUNS", 3),
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs(env_or("LEASEHOLD_BENCH_SECS", 10)),
        ttl_ms: 10_000,
        out: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-results"),
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let rows = runtime.block_on(bench::run(&options)).expect("benchmark");
    println!("{}", bench::markdown_table(&rows));
    println!("results in {}", options.out.display());
}
