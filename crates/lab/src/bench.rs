//! Measured lock-cycle runs as rows: the row type `leasehold-lab bench` writes
//! to JSON, the HDR histogram bounds every measurement uses, medians over
//! runs, and the table of every row. The harness that produces the rows is
//! [`crate::compare`].

use hdrhistogram::Histogram;
use serde::Serialize;

/// One measured run of one system at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub system: String,
    pub workload: String,
    pub clients: usize,
    pub run: usize,
    /// Cycles (acquire → release) that ended between the warm-up and the
    /// stop time.
    pub cycles: u64,
    pub errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Cycles per second.
    pub ops_per_sec: f64,
    /// On a hot name every cycle is a hand-off: the same as `ops_per_sec`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoffs_per_sec: Option<f64>,
    /// Cycle latency percentiles.
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    /// Acquire latency percentiles (on a hot name: including the wait).
    pub acquire_p50_us: u64,
    pub acquire_p99_us: u64,
    pub acquire_p999_us: u64,
    /// Cycle latency at each of [`CDF_QUANTILES`], for the CDF plots.
    pub cycle_cdf_us: Vec<u64>,
    /// CPU time (user + system, from `/proc`) the system's servers used in
    /// the measured window, per cycle counted; `None` when their processes
    /// are not the benchmark's own.
    pub server_cpu_us_per_cycle: Option<f64>,
    /// The same for the harness process, which runs every client.
    pub client_cpu_us_per_cycle: Option<f64>,
    /// How far the Raft term moved from before the clients' first cycle to
    /// after their last (0: the leader held; each election a candidate
    /// starts moves it by one), where the system reports its term.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_changes: Option<u64>,
    /// How long that term was watched, warm-up and drain included: the time
    /// elections per hour are counted over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub term_watched_ms: Option<u64>,
    /// Herds and floods: the servers' resident memory at the end, summed, in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_rss_mib: Option<f64>,
    /// Floods: idle connections open against the server at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_connections: Option<usize>,
    /// Semaphores: the harness's count of holders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semaphore: Option<SemaphoreCount>,
}

/// The holders of a semaphore the harness counted at each grant of one
/// measurement, warm-up and drain included (see `holders_at_grants` in
/// `compare/workload.rs`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SemaphoreCount {
    pub limit: u32,
    /// The most clients certainly holding a permit at one grant.
    pub most_holders: u64,
    /// Grants at which more than `limit` clients certainly held one: each
    /// a violation.
    pub over_limit: u64,
}

/// The quantiles `cycle_cdf_us` samples.
pub const CDF_QUANTILES: [f64; 19] =
    [0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999, 1.0];

/// A histogram of microseconds from 1 µs to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("static bounds are valid")
}

/// The median of `values` (upper median for even counts); 0 when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Every row as a Markdown table.
/// A CPU-per-cycle figure for a table: whole µs, `–` when not measured.
pub fn cpu_cell(us: Option<f64>) -> String {
    us.map_or_else(|| "–".to_string(), |us| format!("{us:.0}"))
}

pub fn rows_table(rows: &[BenchRow]) -> String {
    let mut out = String::from(
        "| system | workload | clients | run | cycles/s | p50 µs | p99 µs | p99.9 µs | acquire p50 µs | acquire p99 µs | acquire p99.9 µs | server CPU µs/cycle | client CPU µs/cycle | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.system,
            r.workload,
            r.clients,
            r.run,
            r.ops_per_sec,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.acquire_p50_us,
            r.acquire_p99_us,
            r.acquire_p999_us,
            cpu_cell(r.server_cpu_us_per_cycle),
            cpu_cell(r.client_cpu_us_per_cycle),
            r.errors
        ));
    }
    out
}

/// Medians over runs of one (workload, clients, system).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub workload: String,
    pub clients: usize,
    pub system: String,
    pub runs: usize,
    pub ops_per_sec: f64,
    /// Median over runs of this system's cycles/s ÷ leasehold-3's in the
    /// same run.
    pub ops_vs_baseline: Option<f64>,
    /// The same for the cycle p50.
    pub p50_vs_baseline: Option<f64>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub acquire_p50_us: f64,
    pub acquire_p99_us: f64,
    pub acquire_p999_us: f64,
    /// Medians over runs of the servers' and the clients' CPU µs per cycle.
    pub server_cpu_us_per_cycle: Option<f64>,
    pub client_cpu_us_per_cycle: Option<f64>,
    pub errors: u64,
}
