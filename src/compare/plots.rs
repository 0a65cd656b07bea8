//! Self-contained SVG plots of a comparison: throughput against clients
//! (one line per system, log scale) per workload, and the cycle-latency CDF
//! of every system at each (workload, clients), from the run with the
//! median throughput.

use std::path::Path;

use super::report::Summary;
use crate::bench::{median, BenchRow, CDF_QUANTILES};

const PALETTE: [&str; 8] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

/// A line chart on a fixed 720×420 canvas; coordinates are given as
/// fractions of the plot area, 0..1 from the bottom left.
struct Chart {
    svg: String,
    legend: Vec<(String, &'static str)>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn px(fx: f64, fy: f64) -> (f64, f64) {
    (LEFT + fx * (WIDTH - LEFT - RIGHT), HEIGHT - BOTTOM - fy * (HEIGHT - TOP - BOTTOM))
}

impl Chart {
    fn new(title: &str, x_label: &str, y_label: &str) -> Chart {
        let (x0, y0) = px(0.0, 0.0);
        let (x1, y1) = px(1.0, 1.0);
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{:.0}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n\
             <rect x=\"{x0:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text x=\"18\" y=\"{:.1}\" transform=\"rotate(-90 18 {:.1})\" text-anchor=\"middle\">{}</text>\n",
            WIDTH / 2.0,
            escape(title),
            x1 - x0,
            y0 - y1,
            (x0 + x1) / 2.0,
            HEIGHT - 12.0,
            escape(x_label),
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            escape(y_label),
        );
        Chart { svg, legend: Vec::new() }
    }

    fn tick_x(&mut self, fx: f64, label: &str) {
        let (x, y0) = px(fx, 0.0);
        let (_, y1) = px(fx, 1.0);
        self.svg.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{y0:.1}\" x2=\"{x:.1}\" y2=\"{y1:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            y0 + 16.0,
            escape(label)
        ));
    }

    fn tick_y(&mut self, fy: f64, label: &str) {
        let (x0, y) = px(0.0, fy);
        let (x1, _) = px(1.0, fy);
        self.svg.push_str(&format!(
            "<line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            x0 - 6.0,
            y + 4.0,
            escape(label)
        ));
    }

    /// A polyline with a dot at each point, in the next palette colour.
    fn line(&mut self, name: &str, points: &[(f64, f64)]) {
        let color = PALETTE[self.legend.len() % PALETTE.len()];
        let coords: Vec<String> = points
            .iter()
            .map(|&(fx, fy)| {
                let (x, y) = px(fx.clamp(0.0, 1.0), fy.clamp(0.0, 1.0));
                format!("{x:.1},{y:.1}")
            })
            .collect();
        self.svg.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
            coords.join(" ")
        ));
        for c in &coords {
            let (x, y) = c.split_once(',').expect("formatted as x,y");
            self.svg.push_str(&format!("<circle cx=\"{x}\" cy=\"{y}\" r=\"2.5\" fill=\"{color}\"/>\n"));
        }
        self.legend.push((name.to_string(), color));
    }

    fn finish(mut self) -> String {
        let (x1, y1) = px(1.0, 1.0);
        for (i, (name, color)) in self.legend.iter().enumerate() {
            let y = y1 + 10.0 + 18.0 * i as f64;
            self.svg.push_str(&format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{color}\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                x1 + 12.0,
                y - 4.0,
                x1 + 32.0,
                y + 1.0,
                escape(name)
            ));
        }
        self.svg.push_str("</svg>\n");
        self.svg
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A base-10 logarithmic axis over [lo, hi], widened to whole decades.
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    fn over(values: impl Iterator<Item = f64>) -> LogAxis {
        let (lo, hi) = values.filter(|v| *v > 0.0).fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if hi <= 0.0 {
            return LogAxis { lo: 1.0, hi: 10.0 };
        }
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
        LogAxis { lo, hi }
    }

    fn frac(&self, v: f64) -> f64 {
        (v.max(self.lo).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
    }

    /// Every decade (and 2×, 5× when there are few decades).
    fn ticks(&self) -> Vec<f64> {
        let decades = (self.hi / self.lo).log10().round() as i32;
        let steps: &[f64] = if decades <= 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        (0..=decades)
            .flat_map(|d| steps.iter().map(move |s| self.lo * 10f64.powi(d) * s))
            .filter(|v| *v <= self.hi * 1.0001)
            .collect()
    }
}

/// 1500 → "1.5k", 0.5 → "0.5".
fn short(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

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
    let what = if workload == "hot-handoff" { "hand-offs/s" } else { "cycles/s" };
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
            chart.line(system, &line);
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
        chart.line(system, &line);
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
