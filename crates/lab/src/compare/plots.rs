//! The comparison's plots, drawn with [`crate::plot`]: throughput against
//! clients (one line per system, log scale) per workload, and the
//! cycle-latency CDF of every system at each (workload, clients), from the
//! run with the median throughput.

use std::path::Path;

use crate::bench::{median, BenchRow, Summary, CDF_QUANTILES};
use crate::plot::{short, Chart, LineStyle, LogAxis};

/// Systems in the order they appear in the rows.
fn systems(rows: &[BenchRow]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for r in rows {
        if !out.contains(&r.system.as_str()) {
            out.push(&r.system);
        }
    }
    out
}

/// Median cycles/s against clients, one line per system, for `workload`.
fn throughput(summary: &[Summary], systems: &[&str], workload: &str) -> String {
    let points: Vec<&Summary> = summary.iter().filter(|s| s.workload == workload).collect();
    let mut clients: Vec<usize> = points.iter().map(|s| s.clients).collect();
    clients.sort_unstable();
    clients.dedup();
    let y = LogAxis::over(points.iter().map(|s| s.ops_per_sec));
    let what = if workload.ends_with("-handoff") { "hand-offs/s" } else { "cycles/s" };
    let mut chart = Chart::new(
        &format!("{workload}: {what} (median of runs)"),
        "concurrent clients",
        &format!("{what} (log scale)"),
    );
    let fx = |c: usize| {
        let i = clients.iter().position(|&x| x == c).unwrap_or(0);
        if clients.len() == 1 {
            0.5
        } else {
            0.05 + 0.9 * i as f64 / (clients.len() - 1) as f64
        }
    };
    for &c in &clients {
        chart.tick_x(fx(c), &c.to_string());
    }
    for t in y.ticks() {
        chart.tick_y(y.frac(t), &short(t));
    }
    for system in systems {
        let line: Vec<(f64, f64)> =
            points.iter().filter(|s| s.system == *system).map(|s| (fx(s.clients), y.frac(s.ops_per_sec))).collect();
        if !line.is_empty() {
            chart.line(system, &line, LineStyle::Points);
        }
    }
    chart.finish()
}

/// Cycle-latency CDFs at one (workload, clients), one line per system.
fn cdf(rows: &[BenchRow], systems: &[&str], workload: &str, clients: usize) -> String {
    let at: Vec<&BenchRow> = rows.iter().filter(|r| r.workload == workload && r.clients == clients).collect();
    // Per system, the run whose throughput is the median one.
    let chosen: Vec<(&str, &BenchRow)> = systems
        .iter()
        .filter_map(|system| {
            let runs: Vec<&&BenchRow> = at.iter().filter(|r| r.system == *system && r.cycles > 0).collect();
            let mid = median(runs.iter().map(|r| r.ops_per_sec).collect());
            runs.into_iter().find(|r| r.ops_per_sec == mid).map(|r| (*system, *r))
        })
        .collect();
    let x = LogAxis::over(chosen.iter().flat_map(|(_, r)| r.cycle_cdf_us.iter().map(|&v| v as f64)));
    let mut chart = Chart::new(
        &format!("{workload}, {clients} clients: cycle latency CDF"),
        "cycle latency, µs (log scale)",
        "fraction of cycles at or below",
    );
    for t in x.ticks() {
        chart.tick_x(x.frac(t), &short(t));
    }
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        chart.tick_y(q, &format!("{q}"));
    }
    for (system, row) in chosen {
        let line: Vec<(f64, f64)> =
            row.cycle_cdf_us.iter().zip(CDF_QUANTILES).map(|(&v, q)| (x.frac(v as f64), q)).collect();
        chart.line(system, &line, LineStyle::Points);
    }
    chart.finish()
}

/// Writes every plot into `out`; returns (file name, title) pairs.
pub fn write_all(rows: &[BenchRow], summary: &[Summary], out: &Path) -> std::io::Result<Vec<(String, String)>> {
    let systems = systems(rows);
    let mut written = Vec::new();
    let mut pairs: Vec<(&str, usize)> = Vec::new();
    for s in summary {
        if !pairs.contains(&(s.workload.as_str(), s.clients)) {
            pairs.push((s.workload.as_str(), s.clients));
        }
    }
    let mut workloads: Vec<&str> = pairs.iter().map(|p| p.0).collect();
    workloads.dedup();
    for workload in workloads {
        let file = format!("throughput-{workload}.svg");
        std::fs::write(out.join(&file), throughput(summary, &systems, workload))?;
        written.push((file, format!("{workload}: throughput vs clients")));
    }
    for (workload, clients) in pairs {
        let file = format!("cdf-{workload}-{clients}.svg");
        std::fs::write(out.join(&file), cdf(rows, &systems, workload, clients))?;
        written.push((file, format!("{workload}, {clients} clients: cycle latency CDF")));
    }
    Ok(written)
}
