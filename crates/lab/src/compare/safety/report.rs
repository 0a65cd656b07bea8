//! The results of the safety run: the counts of one (system, fault)
//! ([`SafetyRow`]), worked out from the history, and the report over all
//! of them ([`SafetyReport`]) with its JSON and Markdown output.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::SafetyFault;
use crate::compare::report::Machine;
use crate::history::{OpKind, OpResult, Operation, ResourceWrite};

/// The counts of one (system, fault).
#[derive(Debug, Clone, Serialize)]
pub struct SafetyRow {
    pub system: String,
    pub fault: SafetyFault,
    /// Grants acknowledged to the two holders.
    pub grants: usize,
    pub double_grants: usize,
    pub stale_writes_accepted: usize,
    pub overlapping_sections: usize,
    pub lost_grants: usize,
    /// What was done, or why the fault was not run (skipped for a missing
    /// program, with how to install it, or failed).
    pub note: String,
    /// Not run: the counts mean nothing.
    pub skipped: bool,
}

impl SafetyRow {
    /// What the lock service is to blame for: double grants, stale writes
    /// accepted, lost grants, and overlapping sections except under a
    /// paused holder, where the unfenced resource overlaps whatever the
    /// service does (that is the case fencing exists for).
    pub fn violations(&self) -> usize {
        let sections = if self.fault == SafetyFault::PausedHolder { 0 } else { self.overlapping_sections };
        self.double_grants + self.stale_writes_accepted + self.lost_grants + sections
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SafetyReport {
    pub command: String,
    pub machine: Machine,
    pub ttl_ms: u64,
    pub rows: Vec<SafetyRow>,
    /// Systems not run at all, with why and how to install their server.
    pub skipped: Vec<(String, String)>,
}

/// One acknowledged grant, on the harness clock.
pub(super) struct GrantSpan<'a> {
    client: &'a str,
    /// Send time of the acquire that won it.
    sent_us: u64,
    received_us: u64,
    /// When its client stopped counting on it: the end of its validity, or
    /// the send of its release if earlier.
    end_us: u64,
}

pub(super) fn grants(operations: &[Operation]) -> Vec<GrantSpan<'_>> {
    operations
        .iter()
        .filter_map(|op| match op.result {
            OpResult::Granted { token, ttl_ms } if op.kind == OpKind::AcquireWait => {
                let released = operations
                    .iter()
                    .filter(|r| r.kind == OpKind::Release && r.client == op.client && r.token == Some(token))
                    .map(|r| r.sent_us)
                    .min();
                let valid = op.sent_us + ttl_ms * 1000;
                Some(GrantSpan {
                    client: &op.client,
                    sent_us: op.sent_us,
                    received_us: op.received_us,
                    end_us: released.map_or(valid, |r| r.min(valid)),
                })
            }
            _ => None,
        })
        .collect()
}

/// Writes the fenced resource accepted from a client whose grant another
/// client's later grant had already superseded.
pub(super) fn stale_writes(grants: &[GrantSpan], fenced: &[ResourceWrite]) -> usize {
    fenced
        .iter()
        .filter(|w| w.accepted)
        .filter(|w| {
            // The writer's grant: its latest acknowledged before the write.
            let own = grants
                .iter()
                .filter(|g| g.client == w.request.client && g.received_us <= w.received_us)
                .map(|g| g.received_us)
                .max();
            own.is_some_and(|own| {
                grants
                    .iter()
                    .any(|g| g.client != w.request.client && g.received_us > own && g.received_us < w.received_us)
            })
        })
        .count()
}

/// Grants another client was also granted by an acquire sent after the
/// grant was acknowledged, while it was still valid and not released: the
/// system forgot it.
pub(super) fn lost_grants(grants: &[GrantSpan]) -> usize {
    grants
        .iter()
        .filter(|g| {
            grants.iter().any(|h| h.client != g.client && h.sent_us > g.received_us && h.received_us < g.end_us)
        })
        .count()
}

impl SafetyReport {
    /// safety.json, safety.md, and the safety section of README.md.
    pub fn write(&self, out: &Path) -> std::io::Result<()> {
        std::fs::write(out.join("safety.json"), serde_json::to_vec_pretty(self).expect("report serializes"))?;
        let markdown = self.markdown();
        std::fs::write(out.join("safety.md"), &markdown)?;
        let readme = out.join("README.md");
        let existing = std::fs::read_to_string(&readme).unwrap_or_default();
        let kept = existing.split(SECTION_MARK).next().unwrap_or_default().trim_end();
        let separator = if kept.is_empty() { "" } else { "\n\n" };
        std::fs::write(readme, format!("{kept}{separator}{SECTION_MARK}\n{markdown}"))
    }

    /// The leasehold rows' [violations](SafetyRow::violations): the smoke
    /// test expects none.
    pub fn leasehold_violations(&self) -> usize {
        self.rows.iter().filter(|r| r.system.starts_with("leasehold")).map(SafetyRow::violations).sum()
    }

    /// One table per fault.
    pub fn markdown(&self) -> String {
        let mut md = String::from("## Safety under faults\n\n");
        md += &format!(
            "`{}` — ttl {} ms; {} ({} CPUs, load {} → {}).\n\n",
            self.command,
            self.ttl_ms,
            self.machine.cpu_model,
            self.machine.available_parallelism,
            self.machine.load_at_start,
            self.machine.load_at_end
        );
        let mut by_fault: BTreeMap<SafetyFault, Vec<&SafetyRow>> = BTreeMap::new();
        for row in &self.rows {
            by_fault.entry(row.fault).or_default().push(row);
        }
        for (fault, rows) in by_fault {
            md += &format!("### {}\n\n", fault.title());
            md += "| system | grants | double grants | stale writes accepted (fenced) | overlapping sections (unfenced) | acknowledged grants lost | what happened |\n";
            md += "|---|---:|---:|---:|---:|---:|---|\n";
            for r in rows {
                let n = |v: usize| if r.skipped { "–".to_string() } else { v.to_string() };
                md += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    r.system,
                    n(r.grants),
                    n(r.double_grants),
                    n(r.stale_writes_accepted),
                    n(r.overlapping_sections),
                    n(r.lost_grants),
                    r.note
                );
            }
            md += "\n";
        }
        for (system, why) in &self.skipped {
            md += &format!("- {system} skipped: {why}\n");
        }
        md
    }
}

/// Where the safety section of the results README begins.
const SECTION_MARK: &str = "<!-- leasehold bench --safety -->";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Phase, WriteRequest};

    fn grant(client: &str, sent: u64, received: u64, ttl_ms: u64) -> Operation {
        Operation {
            kind: OpKind::AcquireWait,
            lock: "l".into(),
            client: client.into(),
            request_id: None,
            token: None,
            sent_us: sent,
            received_us: received,
            result: OpResult::Granted { token: 1, ttl_ms },
        }
    }

    fn write(client: &str, at: u64, accepted: bool) -> ResourceWrite {
        let request =
            WriteRequest { resource: "l".into(), client: client.into(), lock: "l".into(), token: 0, phase: Phase::End };
        ResourceWrite { request, accepted, received_us: at }
    }

    // A's write after B's later grant is stale when accepted, and not when
    // refused; B's own writes are not.
    #[test]
    fn writes_under_a_superseded_grant_are_stale() {
        let ops = [grant("A", 0, 10, 1_000), grant("B", 20, 1_500_000, 1_000)];
        let spans = grants(&ops);
        assert_eq!(stale_writes(&spans, &[write("A", 100, true), write("B", 1_600_000, true)]), 0);
        assert_eq!(stale_writes(&spans, &[write("A", 1_700_000, true)]), 1);
        assert_eq!(stale_writes(&spans, &[write("A", 1_700_000, false)]), 0);
    }

    // A grant is lost when another client, asking after it was acknowledged,
    // gets the lock while it is still valid; not once it has run out.
    #[test]
    fn a_grant_taken_while_valid_is_lost() {
        let taken = [grant("A", 0, 10, 1_000), grant("B", 20, 500_000, 1_000)];
        assert_eq!(lost_grants(&grants(&taken)), 1);
        let expired = [grant("A", 0, 10, 1_000), grant("B", 20, 1_000_100, 1_000)];
        assert_eq!(lost_grants(&grants(&expired)), 0);
    }
}
