//! The fault suite's output: per fault kind, operations, grants, faults
//! injected, unavailability window (fault → next successful grant) and
//! violations, as Markdown and JSON, and a timeline plot (SVG).

use std::collections::BTreeMap;

use serde::Serialize;

use super::nemesis::{FaultKind, FaultRecord};
use crate::history::{CheckReport, OpKind, OpResult, Operation, ResourceWrite};
use crate::plot::{Chart, LineStyle};

/// One fault instance with what happened from its start to the next fault's.
#[derive(Debug, Clone, Serialize)]
pub struct FaultOutcome {
    #[serde(flatten)]
    pub record: FaultRecord,
    pub operations: usize,
    pub grants: usize,
    /// From the fault's start to the answer of the first grant sent after it.
    pub unavailability_ms: Option<u64>,
    /// Whether a grant was sent after the fault was healed and acknowledged.
    pub granted_after_heal: bool,
    pub violations: usize,
}

/// One row of the table: every instance of one fault kind.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRow {
    pub fault: FaultKind,
    pub label: &'static str,
    pub injected: usize,
    pub skipped: usize,
    pub operations: usize,
    pub grants: usize,
    pub max_unavailability_ms: Option<u64>,
    pub violations: usize,
}

/// What a run was.
pub struct RunSetup {
    pub nodes: usize,
    pub clients: usize,
    /// How nodes were hosted (namespaces, or the loopback fallback).
    pub hosts: String,
    /// When the run ended, µs on the harness clock.
    pub end_us: u64,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    pub nodes: usize,
    pub clients: usize,
    /// How nodes were hosted (namespaces, or the loopback fallback).
    pub hosts: String,
    pub seconds: f64,
    pub operations: usize,
    pub grants: usize,
    pub resource_writes: usize,
    pub refused_stale_writes: usize,
    pub rows: Vec<FaultRow>,
    pub faults: Vec<FaultOutcome>,
    pub violation_counts: BTreeMap<String, usize>,
    pub violation_examples: Vec<String>,
}

fn is_grant(op: &Operation) -> bool {
    matches!(op.kind, OpKind::AcquireTry | OpKind::AcquireWait) && matches!(op.result, OpResult::Granted { .. })
}

impl ChaosReport {
    pub fn build(
        setup: RunSetup,
        operations: &[Operation],
        writes: &[ResourceWrite],
        faults: &[FaultRecord],
        check: &CheckReport,
    ) -> ChaosReport {
        let RunSetup { nodes, clients, hosts, end_us } = setup;
        let outcomes: Vec<FaultOutcome> = faults
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let until = faults.get(i + 1).map_or(end_us, |next| next.started_us);
                let span: Vec<&Operation> =
                    operations.iter().filter(|op| (f.started_us..until).contains(&op.sent_us)).collect();
                let next_grant = operations
                    .iter()
                    .filter(|op| is_grant(op) && op.sent_us >= f.started_us)
                    .map(|op| op.received_us)
                    .min();
                FaultOutcome {
                    record: f.clone(),
                    operations: span.len(),
                    grants: span.iter().filter(|op| is_grant(op)).count(),
                    unavailability_ms: next_grant.map(|at| (at - f.started_us) / 1000),
                    granted_after_heal: operations.iter().any(|op| is_grant(op) && op.sent_us >= f.healed_us),
                    violations: check.violations.iter().filter(|v| (f.started_us..until).contains(&v.at_us)).count(),
                }
            })
            .collect();
        let rows = FaultKind::ALL
            .iter()
            .filter_map(|kind| {
                let of: Vec<&FaultOutcome> = outcomes.iter().filter(|o| o.record.kind == *kind).collect();
                let injected: Vec<&&FaultOutcome> = of.iter().filter(|o| o.record.injected).collect();
                (!of.is_empty()).then(|| FaultRow {
                    fault: *kind,
                    label: kind.label(),
                    injected: injected.len(),
                    skipped: of.len() - injected.len(),
                    operations: of.iter().map(|o| o.operations).sum(),
                    grants: of.iter().map(|o| o.grants).sum(),
                    max_unavailability_ms: injected.iter().filter_map(|o| o.unavailability_ms).max(),
                    violations: of.iter().map(|o| o.violations).sum(),
                })
            })
            .collect();
        ChaosReport {
            nodes,
            clients,
            hosts,
            seconds: end_us as f64 / 1e6,
            operations: operations.len(),
            grants: operations.iter().filter(|op| is_grant(op)).count(),
            resource_writes: writes.len(),
            refused_stale_writes: writes.iter().filter(|w| !w.accepted).count(),
            rows,
            faults: outcomes,
            violation_counts: check.counts().into_iter().map(|(k, n)| (format!("{k:?}"), n)).collect(),
            violation_examples: check.examples(3),
        }
    }

    /// Total violations found by the checker.
    pub fn violations(&self) -> usize {
        self.violation_counts.values().sum()
    }

    /// The table per fault, then the run's totals, as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Fault suite: {} nodes, {} clients, {:.0} s, {}.\n\n\
             | fault | injected | operations | grants | max unavailability (ms) | violations |\n\
             |---|---:|---:|---:|---:|---:|\n",
            self.nodes, self.clients, self.seconds, self.hosts
        );
        for r in &self.rows {
            let injected =
                if r.skipped > 0 { format!("{} ({} skipped)", r.injected, r.skipped) } else { r.injected.to_string() };
            let unavailable = r.max_unavailability_ms.map_or("–".to_string(), |ms| ms.to_string());
            out.push_str(&format!(
                "| {} | {injected} | {} | {} | {unavailable} | {} |\n",
                r.label, r.operations, r.grants, r.violations
            ));
        }
        out.push_str(&format!(
            "\nTotal: {} operations, {} grants, {} resource writes ({} stale writes refused), {} violations.\n",
            self.operations,
            self.grants,
            self.resource_writes,
            self.refused_stale_writes,
            self.violations()
        ));
        for example in &self.violation_examples {
            out.push_str(&format!("- {example}\n"));
        }
        out
    }

    /// Grants per second over the run, with every injected fault shaded
    /// from its start to its heal.
    pub fn timeline_svg(&self, operations: &[Operation]) -> String {
        let seconds = self.seconds.ceil().max(1.0) as usize;
        let mut per_second = vec![0usize; seconds + 1];
        for op in operations.iter().filter(|op| is_grant(op)) {
            if let Some(slot) = per_second.get_mut((op.received_us / 1_000_000) as usize) {
                *slot += 1;
            }
        }
        let y_max = per_second.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.15;
        let fx = |us: u64| us as f64 / 1e6 / seconds as f64;
        let mut chart = Chart::new(
            "leasehold under faults: grants per second",
            "seconds since the start (shaded: a fault, from its start to its heal)",
            "grants/s",
        );
        for i in 0..=4 {
            // Whole seconds, so that each label stands where its second is.
            let second = seconds * i / 4;
            chart.tick_x(second as f64 / seconds as f64, &second.to_string());
            let f = i as f64 / 4.0;
            chart.tick_y(f, &format!("{:.0}", y_max * f));
        }
        for f in self.faults.iter().filter(|f| f.record.injected) {
            chart.band(fx(f.record.started_us), fx(f.record.healed_us), f.record.kind.label());
        }
        let points: Vec<(f64, f64)> =
            per_second.iter().enumerate().map(|(s, n)| (fx(s as u64 * 1_000_000), *n as f64 / y_max)).collect();
        chart.line("grants/s", &points, LineStyle::Trace);
        chart.finish()
    }
}
