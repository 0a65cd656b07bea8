//! `cargo bench`: the same comparison as `leasehold-lab bench`, with the servers
//! it can find, against the built binary. Results go to
//! `target/tmp/bench-results/` (latest.json, README.md, SVG plots).
//!
//! Knobs (environment): LEASEHOLD_BENCH_SYSTEMS (default: all),
//! LEASEHOLD_BENCH_CLIENTS ("1,16,64"), LEASEHOLD_BENCH_HOT_CLIENTS
//! ("16,64"), LEASEHOLD_BENCH_RUNS (3), LEASEHOLD_BENCH_SECS (10).

use std::path::PathBuf;
use std::time::Duration;

use leasehold_lab::compare::{self, CompareOptions, SystemKind, Workload};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A comma-separated environment list, or `default`.
fn env_list<T: std::str::FromStr>(key: &str, default: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    let text = std::env::var(key).unwrap_or_else(|_| default.into());
    text.split(',').map(|v| v.trim().parse().unwrap_or_else(|e| panic!("{key}: {v:?}: {e:?}"))).collect()
}

fn main() {
    let all = SystemKind::ALL.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(",");
    let options = CompareOptions {
        systems: env_list("LEASEHOLD_BENCH_SYSTEMS", &all),
        endpoints: Vec::new(),
        credentials: Default::default(),
        binary: PathBuf::from(env!("CARGO_BIN_EXE_leasehold")),
        workloads: vec![Workload::Distinct, Workload::Hot],
        clients: env_list("LEASEHOLD_BENCH_CLIENTS", "1,16,64"),
        hot_clients: env_list("LEASEHOLD_BENCH_HOT_CLIENTS", "16,64"),
        herd_clients: env_list("LEASEHOLD_BENCH_HERD_CLIENTS", "64,1000"),
        flood_clients: env_list("LEASEHOLD_BENCH_FLOOD_CLIENTS", "64"),
        flood_connections: env_or("LEASEHOLD_BENCH_FLOOD_CONNECTIONS", 10_000),
        runs: env_or("LEASEHOLD_BENCH_RUNS", 3),
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs(env_or("LEASEHOLD_BENCH_SECS", 10)),
        ttl: Duration::from_secs(10),
        out: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-results"),
        command: "cargo bench --bench cycles".into(),
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(compare::run(&options)).expect("benchmark");
    println!("results in {}", options.out.display());
}
