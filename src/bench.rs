//! `leasehold bench`: lock-cycle throughput and latency against a cluster.
//!
//! Each client is one tokio task looping acquire → release through the
//! [`Client`] (keep-alive HTTP), either on a lock name of its own
//! ([`Workload::Distinct`]) or all on one hot name, waiting in its queue
//! ([`Workload::Hot`]: every cycle after the first is a hand-off). A run
//! reports cycles per second and percentiles of the cycle and of the acquire
//! alone, from HDR histograms in microseconds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::client::{AcquireOptions, Client, ClientError};
use crate::local::{LocalCluster, LocalClusterError, NodeLogs};
use crate::plot::Frame;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("local cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("client: {0}")]
    Client(#[from] ClientError),
    #[error("writing results: {0}")]
    Io(#[from] std::io::Error),
}

/// What the clients contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// A lock name per client: no contention, measures the write path.
    Distinct,
    /// One lock name for all clients, waiting in its queue: hand-offs.
    Hot,
}

impl Workload {
    pub fn label(self) -> &'static str {
        match self {
            Workload::Distinct => "cycle-distinct",
            Workload::Hot => "hot-handoff",
        }
    }
}

/// How long a hot-lock client waits in the queue before giving up a cycle.
const HOT_WAIT: Duration = Duration::from_secs(60);

/// What to measure, and where.
pub struct BenchOptions {
    /// An existing cluster; when empty, a local cluster of `nodes` nodes is
    /// started from `binary` in `out/cluster` and stopped afterwards.
    pub endpoints: Vec<String>,
    pub nodes: usize,
    pub binary: PathBuf,
    pub clients: Vec<usize>,
    pub workloads: Vec<Workload>,
    pub runs: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub ttl_ms: u64,
    /// Folder for `results.json`, `results.md` and `cycles.svg`.
    pub out: PathBuf,
}

/// Runs every (run, clients) pair, printing progress to stderr, and writes
/// the results as JSON, a Markdown table and an SVG plot into `out`.
pub async fn run(options: &BenchOptions) -> Result<Vec<BenchRow>, BenchError> {
    std::fs::create_dir_all(&options.out)?;
    let mut local = None;
    let (endpoints, system) = if options.endpoints.is_empty() {
        let cluster = start_local(options).await?;
        let endpoints = cluster.endpoints();
        local = Some(cluster);
        (endpoints, format!("leasehold-{}", options.nodes))
    } else {
        (options.endpoints.clone(), "leasehold".to_string())
    };
    let client = Arc::new(Client::new(&endpoints)?);
    let total = options.runs * options.clients.len() * options.workloads.len();
    let mut rows = Vec::with_capacity(total);
    // Every run visits every (workload, concurrency), so drift on a shared
    // machine spreads over all of them instead of biasing one.
    for run in 1..=options.runs {
        for &workload in &options.workloads {
            for &clients in &options.clients {
                let plan = BenchPlan {
                    system: system.clone(),
                    workload,
                    clients,
                    run,
                    warmup: options.warmup,
                    duration: options.duration,
                    ttl_ms: options.ttl_ms,
                };
                eprintln!(
                    "bench: [{}/{total}] run {run}, {}, {clients} clients, {:?} ...",
                    rows.len() + 1,
                    workload.label(),
                    options.duration
                );
                let row = run_cycles(client.clone(), &plan).await?;
                eprintln!(
                    "bench:   {:.0} cycles/s, p50 {} µs, p99 {} µs, errors {}",
                    row.ops_per_sec, row.p50_us, row.p99_us, row.errors
                );
                rows.push(row);
            }
        }
    }
    if let Some(mut cluster) = local {
        cluster.stop_all(Duration::from_secs(5));
    }
    std::fs::write(options.out.join("results.json"), serde_json::to_vec_pretty(&rows).expect("rows serialize"))?;
    std::fs::write(options.out.join("results.md"), markdown_table(&rows))?;
    std::fs::write(options.out.join("cycles.svg"), svg_plot(&rows))?;
    Ok(rows)
}

async fn start_local(options: &BenchOptions) -> Result<LocalCluster, BenchError> {
    let dir = options.out.join("cluster");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let addrs = LocalCluster::free_addrs(options.nodes)?;
    let mut cluster = LocalCluster::new(&options.binary, &dir, &addrs, 100, NodeLogs::Files);
    cluster.start_all()?;
    eprintln!("bench: started a local {}-node cluster in {}", options.nodes, dir.display());
    cluster.wait_for_leader(Duration::from_secs(30)).await?;
    Ok(cluster)
}

/// The median of `values` (upper median for even counts).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The medians over runs of one (workload, clients) pair.
pub struct Median {
    pub workload: String,
    pub clients: usize,
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Per (workload, concurrency), the medians over runs, in first-seen order.
pub fn medians(rows: &[BenchRow]) -> Vec<Median> {
    let mut keys: Vec<(&str, usize)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.workload.as_str(), r.clients)) {
            keys.push((r.workload.as_str(), r.clients));
        }
    }
    keys.into_iter()
        .map(|(workload, clients)| {
            let of = |f: fn(&BenchRow) -> f64| {
                median(rows.iter().filter(|r| r.workload == workload && r.clients == clients).map(f).collect())
            };
            Median {
                workload: workload.to_owned(),
                clients,
                ops_per_sec: of(|r| r.ops_per_sec),
                p50_ms: of(|r| r.p50_us as f64 / 1e3),
                p99_ms: of(|r| r.p99_us as f64 / 1e3),
            }
        })
        .collect()
}

/// One measured run at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub system: String,
    pub workload: String,
    pub clients: usize,
    pub run: usize,
    pub cycles: u64,
    pub errors: u64,
    pub ops_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub acquire_p50_us: u64,
    pub acquire_p99_us: u64,
}

pub struct BenchPlan {
    pub system: String,
    pub workload: Workload,
    pub clients: usize,
    pub run: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub ttl_ms: u64,
}

struct ClientResult {
    cycles: Histogram<u64>,
    acquires: Histogram<u64>,
    errors: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("static bounds are valid")
}

/// Runs `plan.clients` concurrent acquire→release loops.
pub async fn run_cycles(client: Arc<Client>, plan: &BenchPlan) -> Result<BenchRow, ClientError> {
    let start = Instant::now();
    let measure_from = start + plan.warmup;
    let stop_at = measure_from + plan.duration;
    let mut tasks = Vec::new();
    for i in 0..plan.clients {
        let client = client.clone();
        let name = match plan.workload {
            Workload::Distinct => format!("bench/{}/{}/{i}", plan.run, plan.clients),
            Workload::Hot => format!("bench/hot/{}/{}", plan.run, plan.clients),
        };
        let options = AcquireOptions { wait: (plan.workload == Workload::Hot).then_some(HOT_WAIT), request_id: None };
        let owner = format!("bench-client-{i}");
        let ttl_ms = plan.ttl_ms;
        tasks.push(tokio::spawn(async move {
            let mut result = ClientResult { cycles: histogram(), acquires: histogram(), errors: 0 };
            while Instant::now() < stop_at {
                let began = Instant::now();
                let cycle = async {
                    let lease = client.acquire_with(&name, &owner, ttl_ms, &options).await?;
                    let acquired = began.elapsed();
                    client.release(&name, lease.token()).await?;
                    Ok::<_, ClientError>(acquired)
                };
                match cycle.await {
                    Ok(acquired) if began >= measure_from => {
                        let _ = result.acquires.record(acquired.as_micros().max(1) as u64);
                        let _ = result.cycles.record(began.elapsed().as_micros().max(1) as u64);
                    }
                    Ok(_) => {}
                    Err(_) => result.errors += 1,
                }
            }
            result
        }));
    }
    let mut cycles = histogram();
    let mut acquires = histogram();
    let mut errors = 0;
    for task in tasks {
        let r = task.await.map_err(|e| ClientError::Decode(format!("bench task failed: {e}")))?;
        cycles.add(&r.cycles).expect("same bounds");
        acquires.add(&r.acquires).expect("same bounds");
        errors += r.errors;
    }
    let measured = stop_at.saturating_duration_since(measure_from).as_secs_f64();
    Ok(BenchRow {
        system: plan.system.clone(),
        workload: plan.workload.label().into(),
        clients: plan.clients,
        run: plan.run,
        cycles: cycles.len(),
        errors,
        ops_per_sec: cycles.len() as f64 / measured,
        p50_us: cycles.value_at_quantile(0.5),
        p99_us: cycles.value_at_quantile(0.99),
        p999_us: cycles.value_at_quantile(0.999),
        acquire_p50_us: acquires.value_at_quantile(0.5),
        acquire_p99_us: acquires.value_at_quantile(0.99),
    })
}

/// The rows as a Markdown table, then the medians over runs.
pub fn markdown_table(rows: &[BenchRow]) -> String {
    let mut out = String::from(
        "| system | workload | clients | run | cycles/s | p50 µs | p99 µs | p99.9 µs | acquire p50 µs | acquire p99 µs | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
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
            r.errors
        ));
    }
    out.push_str(
        "\n| workload | clients | median cycles/s | median p50 ms | median p99 ms |\n|---|---:|---:|---:|---:|\n",
    );
    for m in medians(rows) {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} |\n",
            m.workload, m.clients, m.ops_per_sec, m.p50_ms, m.p99_ms
        ));
    }
    out
}

/// A self-contained SVG: median cycles/s per concurrency as bars, labelled
/// with the median p50 and p99 cycle latency.
pub fn svg_plot(rows: &[BenchRow]) -> String {
    let points = medians(rows);
    let frame = Frame::new(points.iter().map(|p| p.ops_per_sec).fold(1.0, f64::max) * 1.15);
    let (height, left, bottom) = (frame.height, frame.left, frame.bottom);
    let slot = frame.inner_width() / points.len().max(1) as f64;
    let y = |v: f64| frame.y(v);
    let mut svg = frame.open("leasehold acquire→release cycles/s (median of runs)", "cycles/s");
    for (i, m) in points.iter().enumerate() {
        let (ops, p50, p99) = (m.ops_per_sec, m.p50_ms, m.p99_ms);
        let x = left + slot * i as f64 + slot * 0.2;
        let w = slot * 0.6;
        svg.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#4a7ebb\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{ops:.0}/s</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">p50 {p50:.1} · p99 {p99:.1} ms</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{} ×{}</text>\n",
            y(ops),
            height - bottom - y(ops),
            x + w / 2.0,
            y(ops) - 18.0,
            x + w / 2.0,
            y(ops) - 6.0,
            x + w / 2.0,
            height - bottom + 18.0,
            m.workload,
            m.clients
        ));
    }
    svg.push_str("</svg>\n");
    svg
}
