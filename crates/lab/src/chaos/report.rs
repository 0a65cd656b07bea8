//! The fault suite's output: per fault kind, operations, grants (of them,
//! multi-lock grants and grants under a session), faults injected,
//! unavailability window (fault → next successful grant) and violations, as
//! Markdown and JSON, with the run's totals per kind of operation, and a
//! timeline plot (SVG).

use std::collections::BTreeMap;

use serde::Serialize;

use super::nemesis::{FaultKind, FaultRecord};
use crate::history::{CheckReport, LinearizabilityReport, OpKind, OpResult, Operation, ResourceWrite, Verdict};
use crate::plot::{Chart, LineStyle};

/// One fault instance with what happened from its start to the next fault's.
#[derive(Debug, Clone, Serialize)]
pub struct FaultOutcome {
    #[serde(flatten)]
    pub record: FaultRecord,
    pub operations: usize,
    pub grants: usize,
    pub multi_grants: usize,
    pub session_grants: usize,
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
    /// Grants of a multi-lock acquire (one per acquire, whatever its names).
    pub multi_grants: usize,
    /// Grants of an acquire (single or multi) under a session.
    pub session_grants: usize,
    pub max_unavailability_ms: Option<u64>,
    pub violations: usize,
}

/// What a run was.
pub struct RunSetup {
    pub nodes: usize,
    pub clients: usize,
    /// How many clients run each kind of cycle.
    pub workload: String,
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
    /// How many clients run each kind of cycle.
    pub workload: String,
    /// How nodes were hosted (namespaces, or the loopback fallback).
    pub hosts: String,
    pub seconds: f64,
    pub operations: usize,
    pub grants: usize,
    /// Of the grants, multi-lock ones and ones under a session.
    pub multi_grants: usize,
    pub session_grants: usize,
    /// Per kind of operation: how many were sent and how many took effect.
    pub by_kind: Vec<KindTotals>,
    /// Sessions created (acknowledged), and of them deleted by an
    /// acknowledged delete, and never deleted (abandoned to expire, or
    /// whose delete went unanswered).
    pub sessions: SessionTotals,
    pub resource_writes: usize,
    pub refused_stale_writes: usize,
    pub rows: Vec<FaultRow>,
    pub faults: Vec<FaultOutcome>,
    pub violation_counts: BTreeMap<String, usize>,
    pub violation_examples: Vec<String>,
    /// The linearizability check of the whole history, once it has run.
    pub linearizability: Option<Linearizability>,
    /// The semaphore and read/write clients' side, once checked.
    pub sharing: Option<SharingTotals>,
}

/// The semaphore and read/write clients' operations and what their check found.
#[derive(Debug, Clone, Serialize)]
pub struct SharingTotals {
    pub operations: usize,
    pub grants: usize,
    pub violations: usize,
}

impl SharingTotals {
    pub fn of(record: &super::sharing::SharingRecord, violations: &[crate::history::Violation]) -> SharingTotals {
        use crate::history::ViolationKind::{GrantTokenOrder, PermitsOverLimit, SharedExclusion};
        let violations = violations
            .iter()
            .filter(|v| matches!(v.kind, PermitsOverLimit | SharedExclusion | GrantTokenOrder))
            .count();
        SharingTotals { operations: record.operations.len(), grants: record.grants(), violations }
    }
}

/// The linearizability check's verdict, with how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct Linearizability {
    #[serde(flatten)]
    pub report: LinearizabilityReport,
    /// Wall-clock time of the check on the harness machine.
    pub seconds: f64,
}

/// The operations of one kind in a run.
#[derive(Debug, Clone, Serialize)]
pub struct KindTotals {
    pub kind: OpKind,
    pub sent: usize,
    /// Of them, under a session.
    pub in_session: usize,
    /// Granted, released, alive (session), or a read answered.
    pub succeeded: usize,
    pub refused: usize,
    pub unknown: usize,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SessionTotals {
    pub created: usize,
    pub deleted: usize,
    pub not_deleted: usize,
}

fn is_grant(op: &Operation) -> bool {
    op.is_grant()
}

fn is_multi_grant(op: &Operation) -> bool {
    op.is_grant() && matches!(op.kind, OpKind::MultiAcquireTry | OpKind::MultiAcquireWait)
}

fn is_session_grant(op: &Operation) -> bool {
    op.is_grant() && op.session.is_some()
}

const KINDS: [OpKind; 13] = [
    OpKind::AcquireTry,
    OpKind::AcquireWait,
    OpKind::MultiAcquireTry,
    OpKind::MultiAcquireWait,
    OpKind::Renew,
    OpKind::Release,
    OpKind::MultiRelease,
    OpKind::Read,
    OpKind::SessionCreate,
    OpKind::KeepAlive,
    OpKind::SessionDelete,
    OpKind::PutRecord,
    OpKind::GetRecord,
];

fn kind_totals(operations: &[Operation]) -> Vec<KindTotals> {
    KINDS
        .iter()
        .map(|kind| {
            let of: Vec<&Operation> = operations.iter().filter(|op| op.kind == *kind).collect();
            let count = |f: fn(&OpResult) -> bool| of.iter().filter(|op| f(&op.result)).count();
            KindTotals {
                kind: *kind,
                sent: of.len(),
                in_session: of.iter().filter(|op| op.session.is_some() && !kind.is_session()).count(),
                succeeded: count(|r| !matches!(r, OpResult::Refused { .. } | OpResult::Unknown { .. })),
                refused: count(|r| matches!(r, OpResult::Refused { .. })),
                unknown: count(|r| matches!(r, OpResult::Unknown { .. })),
            }
        })
        .filter(|t| t.sent > 0)
        .collect()
}

fn session_totals(operations: &[Operation]) -> SessionTotals {
    let created: std::collections::BTreeSet<u64> = operations
        .iter()
        .filter(|op| op.kind == OpKind::SessionCreate && matches!(op.result, OpResult::SessionAlive { .. }))
        .filter_map(|op| op.session)
        .collect();
    let deleted: std::collections::BTreeSet<u64> = operations
        .iter()
        .filter(|op| op.kind == OpKind::SessionDelete && op.result == OpResult::Released)
        .filter_map(|op| op.session)
        .collect();
    let deleted = created.intersection(&deleted).count();
    SessionTotals { created: created.len(), deleted, not_deleted: created.len() - deleted }
}

impl ChaosReport {
    pub fn build(
        setup: RunSetup,
        operations: &[Operation],
        writes: &[ResourceWrite],
        faults: &[FaultRecord],
        check: &CheckReport,
    ) -> ChaosReport {
        let RunSetup { nodes, clients, workload, hosts, end_us } = setup;
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
                    multi_grants: span.iter().filter(|op| is_multi_grant(op)).count(),
                    session_grants: span.iter().filter(|op| is_session_grant(op)).count(),
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
                    multi_grants: of.iter().map(|o| o.multi_grants).sum(),
                    session_grants: of.iter().map(|o| o.session_grants).sum(),
                    max_unavailability_ms: injected.iter().filter_map(|o| o.unavailability_ms).max(),
                    violations: of.iter().map(|o| o.violations).sum(),
                })
            })
            .collect();
        ChaosReport {
            nodes,
            clients,
            workload,
            hosts,
            seconds: end_us as f64 / 1e6,
            operations: operations.len(),
            grants: operations.iter().filter(|op| is_grant(op)).count(),
            multi_grants: operations.iter().filter(|op| is_multi_grant(op)).count(),
            session_grants: operations.iter().filter(|op| is_session_grant(op)).count(),
            by_kind: kind_totals(operations),
            sessions: session_totals(operations),
            resource_writes: writes.len(),
            refused_stale_writes: writes.iter().filter(|w| !w.accepted).count(),
            rows,
            faults: outcomes,
            violation_counts: check.counts().into_iter().map(|(k, n)| (format!("{k:?}"), n)).collect(),
            violation_examples: check.examples(3),
            linearizability: None,
            sharing: None,
        }
    }

    /// Total violations found by the checker, and components found not
    /// linearizable.
    pub fn violations(&self) -> usize {
        let not_linearizable = self.linearizability.as_ref().map_or(0, |l| l.report.violations.len());
        self.violation_counts.values().sum::<usize>() + not_linearizable
    }

    /// The table per fault, then the run's totals, as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Fault suite: {} nodes, {} clients ({}; client i runs kind i mod 3), {:.0} s, {}.\n\n\
             | fault | injected | operations | grants | of them multi-lock | of them under a session | max unavailability (ms) | violations |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
            self.nodes, self.clients, self.workload, self.seconds, self.hosts
        );
        for r in &self.rows {
            let injected =
                if r.skipped > 0 { format!("{} ({} skipped)", r.injected, r.skipped) } else { r.injected.to_string() };
            let unavailable = r.max_unavailability_ms.map_or("–".to_string(), |ms| ms.to_string());
            out.push_str(&format!(
                "| {} | {injected} | {} | {} | {} | {} | {unavailable} | {} |\n",
                r.label, r.operations, r.grants, r.multi_grants, r.session_grants, r.violations
            ));
        }
        out.push_str(
            "\nOperations by kind (a multi-lock operation counts once, whatever its names):\n\n\
             | operation | sent | of them under a session | took effect | refused | unknown |\n\
             |---|---:|---:|---:|---:|---:|\n",
        );
        for t in &self.by_kind {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                serde_json::to_value(t.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                t.sent,
                t.in_session,
                t.succeeded,
                t.refused,
                t.unknown
            ));
        }
        let s = &self.sessions;
        out.push_str(&format!(
            "\nSessions: {} created, {} deleted, {} left to expire (abandoned, or their delete unanswered).\n",
            s.created, s.deleted, s.not_deleted
        ));
        out.push_str(&format!(
            "\nTotal: {} operations, {} grants ({} multi-lock, {} under a session), {} resource writes ({} stale writes refused), {} violations.\n",
            self.operations,
            self.grants,
            self.multi_grants,
            self.session_grants,
            self.resource_writes,
            self.refused_stale_writes,
            self.violations()
        ));
        for example in &self.violation_examples {
            out.push_str(&format!("- {example}\n"));
        }
        if let Some(s) = &self.sharing {
            out.push_str(&format!(
                "\nSemaphore and read/write clients: {} operations, {} grants, {} violations (limit, exclusion, token order).\n",
                s.operations, s.grants, s.violations
            ));
        }
        if let Some(l) = &self.linearizability {
            out.push_str(&l.markdown());
        }
        out
    }

    /// Grants per second over the run, with one lane per fault kind under
    /// it ([`timeline_svg`]).
    pub fn timeline_svg(&self, operations: &[Operation]) -> String {
        let faults: Vec<&FaultRecord> = self.faults.iter().map(|f| &f.record).collect();
        timeline_svg(self.seconds, &faults, operations)
    }
}

/// Grants per second over `seconds`, and under the chart one lane per
/// kind of injected fault with a bar from each start to its heal: faults
/// of different kinds overlap in time (a clock jump during a partition),
/// and shaded over the chart they would hide each other.
fn timeline_svg(seconds: f64, faults: &[&FaultRecord], operations: &[Operation]) -> String {
    let seconds = seconds.ceil().max(1.0) as usize;
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
        "seconds since the start (lanes below: each fault kind, from its start to its heal)",
        "grants/s",
    );
    for i in 0..=4 {
        // Whole seconds, so that each label stands where its second is.
        let second = seconds * i / 4;
        chart.tick_x(second as f64 / seconds as f64, &second.to_string());
        let f = i as f64 / 4.0;
        chart.tick_y(f, &format!("{:.0}", y_max * f));
    }
    // In the order of the fault kinds, so a kind has the same lane in
    // every run that injects it.
    let mut lanes: BTreeMap<FaultKind, Vec<(f64, f64)>> = BTreeMap::new();
    for f in faults.iter().filter(|f| f.injected) {
        lanes.entry(f.kind).or_default().push((fx(f.started_us), fx(f.healed_us)));
    }
    for (kind, spans) in &lanes {
        chart.lane(kind.label(), spans);
    }
    let points: Vec<(f64, f64)> =
        per_second.iter().enumerate().map(|(s, n)| (fx(s as u64 * 1_000_000), *n as f64 / y_max)).collect();
    chart.line("grants/s", &points, LineStyle::Trace);
    chart.finish()
}

impl Linearizability {
    /// The verdict, then each component out of budget and each window that
    /// is not linearizable, as Markdown.
    pub fn markdown(&self) -> String {
        let r = &self.report;
        let mut out = format!(
            "\nLinearizability (the whole history against the model of the lock table, see docs/fault-suite.md): \
             {}; checked in {:.1} s, budget {} nodes per component.\n",
            r.summary(),
            self.seconds,
            r.budget
        );
        if r.verdict == Verdict::Unknown {
            out.push_str("The search ran out of budget on these components (their verdict is unknown, not clean):\n");
        }
        for component in &r.out_of_budget {
            out.push_str(&format!("- {component}\n"));
        }
        for (i, w) in r.violations.iter().enumerate() {
            out.push_str(&format!(
                "\nNot linearizable #{}: {} between {:.3}s and {:.3}s.\n\nModel state at the dead end:\n",
                i + 1,
                w.keys.join(", "),
                w.from_us as f64 / 1e6,
                w.to_us as f64 / 1e6
            ));
            let lines = |title: &str, lines: &[String]| {
                let body: String = lines.iter().map(|l| format!("- {l}\n")).collect();
                format!("{title}\n{body}")
            };
            out.push_str(&lines("", &w.state));
            out.push_str(&lines("\nLast operations linearized on these keys:", &w.linearized));
            out.push_str(&lines("\nOperations that could go next, none of which fits:", &w.stuck));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane bar of the SVG: its label and its box (x, y, width, height).
    fn lane_bars(svg: &str) -> Vec<(String, [f64; 4])> {
        svg.lines()
            .filter(|l| l.starts_with("<rect class=\"lane\""))
            .map(|l| {
                let attr = |name: &str| -> f64 {
                    let from = l.find(&format!(" {name}=\"")).expect("attribute") + name.len() + 3;
                    l[from..].split('"').next().expect("value").parse().expect("number")
                };
                let title = l.split("<title>").nth(1).and_then(|t| t.split("</title>").next()).expect("title");
                (title.to_string(), [attr("x"), attr("y"), attr("width"), attr("height")])
            })
            .collect()
    }

    fn record(kind: FaultKind, from_s: u64, to_s: u64, injected: bool) -> FaultRecord {
        FaultRecord { kind, injected, started_us: from_s * 1_000_000, healed_us: to_s * 1_000_000, note: String::new() }
    }

    // Two kinds overlapping in time get a lane each, whose bars do not
    // overlap; two faults of one kind share its lane; a skipped fault draws
    // nothing.
    #[test]
    fn each_fault_kind_has_its_own_lane() {
        let records = [
            record(FaultKind::KillLeader, 10, 20, true),
            record(FaultKind::ClockForward, 15, 25, true),
            record(FaultKind::KillLeader, 40, 45, true),
            record(FaultKind::PartitionLeader, 30, 35, false),
        ];
        let faults: Vec<&FaultRecord> = records.iter().collect();
        let svg = timeline_svg(60.0, &faults, &[]);
        let bars = lane_bars(&svg);
        assert_eq!(bars.len(), 3, "{svg}");
        let of = |kind: FaultKind| -> Vec<[f64; 4]> {
            bars.iter().filter(|(label, _)| label == kind.label()).map(|(_, b)| *b).collect()
        };
        let (kills, jumps) = (of(FaultKind::KillLeader), of(FaultKind::ClockForward));
        assert_eq!((kills.len(), jumps.len()), (2, 1), "{bars:?}");
        assert_eq!(kills[0][1], kills[1][1], "one kind, one lane");
        let [kill, jump] = [kills[0], jumps[0]];
        assert!(kill[0] < jump[0] && jump[0] < kill[0] + kill[2], "the two overlap in time");
        let apart = kill[1] + kill[3] <= jump[1] || jump[1] + jump[3] <= kill[1];
        assert!(apart, "but not in the drawing: {kill:?} {jump:?}");
        for kind in [FaultKind::KillLeader, FaultKind::ClockForward] {
            assert_eq!(svg.matches(&format!(">{}</text>", kind.label())).count(), 1, "one label per lane");
        }
        assert!(!svg.contains(FaultKind::PartitionLeader.label()), "skipped faults draw nothing");
        let height: f64 =
            svg.split("height=\"").nth(1).and_then(|h| h.split('"').next()).expect("height").parse().expect("number");
        assert!(bars.iter().all(|(_, b)| b[1] + b[3] <= height), "the canvas grew to hold the lanes");
    }
}
