//! Smoke run of `leasehold-lab bench --safety`, so it cannot rot: every
//! installed system (real leasehold nodes, redis-server and etcd processes,
//! real holder processes of `leasehold-lab` SIGSTOPped and servers killed -9) runs each of its
//! faults once, leasehold shows no safety violation, and the report files
//! are written. Asserts correctness only; what Redis, Redlock and etcd
//! suffer is reported, not asserted.

use std::time::Duration;

use leasehold_lab::compare::safety::{self, SafetyOptions, FAULTS};
use leasehold_lab::compare::servers::find_binary;
use leasehold_lab::compare::SystemKind;
use leasehold_lab::fault::FaultKind;

/// Upper bound on the whole smoke run: twelve (system, fault) scenarios,
/// each starting its own servers, on a loaded machine.
const SMOKE_BOUND: Duration = Duration::from_secs(360);

// Ensures every installed system ran each fault that applies to it (the
// clock jump on Redis may be skipped only when no libc-malloc redis-server
// is installed), leasehold shows zero violations under every fault, and
// safety.json, safety.md and the README section are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_installed_system_runs_its_faults_and_leasehold_stays_safe() {
    let _alone = crate::exclusive().await;
    let out = tempfile::tempdir().expect("temp dir");
    let systems = vec![SystemKind::leasehold(3), SystemKind::Redis, SystemKind::Redlock, SystemKind::Etcd];
    let options = SafetyOptions {
        systems: systems.clone(),
        binary: crate::common::leasehold_binary(),
        holder_binary: env!("CARGO_BIN_EXE_leasehold-lab").into(),
        ttl: Duration::from_secs(3),
        out: out.path().to_path_buf(),
        command: "crates/lab/tests/commands/safety.rs smoke".into(),
    };
    crate::common::step("safety smoke run");
    let report = tokio::time::timeout(SMOKE_BOUND, safety::run(&options))
        .await
        .expect("smoke run exceeded its time bound")
        .expect("smoke run");

    crate::common::step("every installed system ran its faults");
    let installed = |kind: &SystemKind| match kind {
        SystemKind::Leasehold { .. } => true,
        SystemKind::Etcd => find_binary("etcd", "etcd-server").is_ok(),
        _ => find_binary("redis-server", "redis-server").is_ok(),
    };
    for kind in &systems {
        let system = kind.to_string();
        if !installed(kind) {
            assert!(report.skipped.iter().any(|(s, _)| *s == system), "{system} reported as skipped");
            continue;
        }
        for fault in FAULTS.into_iter().filter(|f| safety::applies(*f, *kind)) {
            let row = report
                .rows
                .iter()
                .find(|r| r.system == system && r.fault == fault)
                .unwrap_or_else(|| panic!("no row for {system} under {fault:?}"));
            let may_skip = fault == FaultKind::ClockForward && !matches!(kind, SystemKind::Leasehold { .. });
            if row.skipped {
                assert!(may_skip, "{system} skipped {fault:?}: {}", row.note);
                assert!(row.note.contains("install"), "the skip says how to install what is missing: {}", row.note);
                continue;
            }
            assert!(row.grants >= 2, "{system} under {fault:?}: both holders were granted the lock: {row:?}");
        }
    }

    // Kleppmann's case is built so that Redlock grants twice (A holds A, B,
    // C; B gets C, D, E): a count of 0 means the scenario lost its shape.
    crate::common::step("Kleppmann's Redlock case gives two holders at once");
    if let Some(row) = report.rows.iter().find(|r| r.system == "redlock" && r.fault == FaultKind::KillFollower) {
        assert!(!row.skipped, "{row:?}");
        assert_eq!(row.double_grants, 1, "{row:?}");
    }

    crate::common::step("leasehold shows no safety violation");
    assert_eq!(report.leasehold_violations(), 0, "{}", report.markdown());

    crate::common::step("the report files are written, and the server data is gone");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("safety.json")).expect("safety.json")).expect("JSON");
    assert_eq!(json["rows"].as_array().expect("rows").len(), report.rows.len());
    let markdown = std::fs::read_to_string(out.path().join("safety.md")).expect("safety.md");
    for fault in FAULTS {
        assert!(markdown.contains(safety::title(fault)), "safety.md has a table for {fault:?}");
    }
    let readme = std::fs::read_to_string(out.path().join("README.md")).expect("README.md");
    assert!(readme.contains("## Safety under faults"), "README.md has the safety section");
    assert!(!out.path().join("servers").exists(), "server data removed");
}
