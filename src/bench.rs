//! `leasehold bench`: lock-cycle throughput and latency against a cluster.
//!
//! Each client is one tokio task with its own lock name, looping
//! acquire → release through the [`Client`] (keep-alive HTTP). A run reports
//! cycles per second and percentiles of the cycle and of the acquire alone,
//! from HDR histograms in microseconds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::client::{Client, ClientError};

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

/// Runs `plan.clients` concurrent acquire→release loops on distinct names.
pub async fn run_cycles(client: Arc<Client>, plan: &BenchPlan) -> Result<BenchRow, ClientError> {
    let start = Instant::now();
    let measure_from = start + plan.warmup;
    let stop_at = measure_from + plan.duration;
    let mut tasks = Vec::new();
    for i in 0..plan.clients {
        let client = client.clone();
        let name = format!("bench/{}/{}/{i}", plan.run, plan.clients);
        let owner = format!("bench-client-{i}");
        let ttl_ms = plan.ttl_ms;
        tasks.push(tokio::spawn(async move {
            let mut result = ClientResult { cycles: histogram(), acquires: histogram(), errors: 0 };
            while Instant::now() < stop_at {
                let began = Instant::now();
                let cycle = async {
                    let lease = client.acquire(&name, &owner, ttl_ms).await?;
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
        workload: "cycle-distinct".into(),
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

/// The rows as a Markdown table.
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
    out
}
