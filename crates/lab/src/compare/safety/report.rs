//! The results of the safety run: the counts of one (system, fault)
//! ([`SafetyRow`]), worked out from the history, and the report over all
//! of them ([`SafetyReport`]) with its JSON and Markdown output.

use std::path::Path;

use serde::Serialize;

use super::{title, FAULTS};
use crate::compare::report::Machine;
use crate::fault::FaultKind;

/// The counts of one (system, fault).
#[derive(Debug, Clone, Serialize)]
pub struct SafetyRow {
    pub system: String,
    pub fault: FaultKind,
    /// Grants acknowledged to the two holders.
    pub grants: usize,
    /// The history checker's overlapping grant windows.
    pub double_grants: usize,
    /// Writes the fenced resource accepted under a grant another client's
    /// later grant had superseded (the checker's `superseded_writes_accepted`).
    pub superseded_writes_accepted: usize,
    /// The history checker's overlapping sections at the unfenced resource.
    pub overlapping_sections: usize,
    /// Acknowledged grants another client was granted while they were still
    /// valid (the checker's `grants_taken_while_valid`).
    pub grants_taken_while_valid: usize,
    /// What was done, or why the fault was not run (skipped for a missing
    /// program, with how to install it, or failed).
    pub note: String,
    /// Not run: the counts mean nothing.
    pub skipped: bool,
}

impl SafetyRow {
    /// What the lock service is to blame for: double grants, superseded
    /// writes accepted, grants taken while valid, and overlapping sections except under a
    /// paused holder, where the unfenced resource overlaps whatever the
    /// service does (that is the case fencing exists for).
    pub fn violations(&self) -> usize {
        let sections = if self.fault == FaultKind::PausedClient { 0 } else { self.overlapping_sections };
        self.double_grants + self.superseded_writes_accepted + self.grants_taken_while_valid + sections
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
        for fault in FAULTS {
            let rows: Vec<&SafetyRow> = self.rows.iter().filter(|r| r.fault == fault).collect();
            if rows.is_empty() {
                continue;
            }
            md += &format!("### {}\n\n", title(fault));
            md += "| system | grants | double grants | writes accepted under a superseded grant (fenced) | overlapping sections (unfenced) | acknowledged grants taken while valid | what happened |\n";
            md += "|---|---:|---:|---:|---:|---:|---|\n";
            for r in rows {
                let n = |v: usize| if r.skipped { "–".to_string() } else { v.to_string() };
                md += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    r.system,
                    n(r.grants),
                    n(r.double_grants),
                    n(r.superseded_writes_accepted),
                    n(r.overlapping_sections),
                    n(r.grants_taken_while_valid),
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
