//! Smoke run of `leasehold-lab bench`'s comparison harness, so it cannot rot:
//! every installed system (real redis-server and etcd processes, real
//! leasehold clusters) runs a second of each workload, and the report files
//! are written. Asserts correctness only, never speed.

use std::time::Duration;

use leasehold_lab::compare::servers::find_binary;
use leasehold_lab::compare::{self, CompareOptions, SystemKind, Workload};

/// Upper bound on the whole smoke run: seven systems, seven measurements
/// each, plus server start-up on a loaded machine.
const SMOKE_BOUND: Duration = Duration::from_secs(400);

// Ensures every system whose server is installed completes lock cycles in
// every workload, the missing ones are reported as skipped, and latest.json,
// README.md and the plots are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_installed_system_completes_cycles_and_the_report_is_written() {
    let _alone = crate::exclusive().await;
    let out = tempfile::tempdir().expect("temp dir");
    let options = CompareOptions {
        systems: SystemKind::ALL.to_vec(),
        endpoints: Vec::new(),
        credentials: Default::default(),
        binary: env!("CARGO_BIN_EXE_leasehold").into(),
        workloads: Workload::ALL.to_vec(),
        clients: vec![1, 4],
        hot_clients: vec![4],
        herd_clients: vec![8],
        flood_clients: vec![4],
        flood_connections: 32,
        runs: 1,
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs(1),
        ttl: Duration::from_secs(5),
        out: out.path().to_path_buf(),
        command: "tests/compare.rs smoke".into(),
    };
    crate::common::step("comparison smoke run");
    let report = tokio::time::timeout(SMOKE_BOUND, compare::run(&options))
        .await
        .expect("smoke run exceeded its time bound")
        .expect("smoke run");

    crate::common::step("every installed system completed cycles in every workload");
    let installed = |binary, package| find_binary(binary, package).is_ok();
    let expected: Vec<String> = SystemKind::ALL
        .iter()
        .filter(|k| match k {
            SystemKind::Leasehold { .. } => true,
            SystemKind::Redis | SystemKind::RedisAof | SystemKind::Redlock => installed("redis-server", "redis-server"),
            SystemKind::Etcd | SystemKind::EtcdSession => installed("etcd", "etcd-server"),
        })
        .map(|k| k.to_string())
        .collect();
    for system in SystemKind::ALL.iter().map(|k| k.to_string()) {
        let measured = report.rows.iter().any(|r| r.system == system);
        let skipped = report.skipped.iter().any(|(s, _)| *s == system);
        assert!(measured != skipped, "{system}: measured {measured}, skipped {skipped}");
        assert_eq!(measured, expected.contains(&system), "{system} measured only if its server is installed");
    }
    let every_point = [
        ("cycle-distinct", 1),
        ("cycle-distinct", 4),
        ("hot-handoff", 4),
        ("herd-handoff", 8),
        ("cycle-distinct-flooded", 4),
        ("cycle-pair", 1),
        ("cycle-pair", 4),
    ];
    for (workload, clients) in every_point {
        for system in &expected {
            let row = report
                .rows
                .iter()
                .find(|r| &r.system == system && r.workload == workload && r.clients == clients)
                .unwrap_or_else(|| panic!("no row for {system} {workload} {clients}"));
            assert!(row.cycles > 0, "{system} {workload} {clients}: no cycle completed: {row:?}");
            if workload == "cycle-distinct-flooded" {
                assert!(row.idle_connections.is_some(), "{system}: the flood was opened: {row:?}");
            }
            if workload == "herd-handoff" || workload == "cycle-distinct-flooded" {
                // Systems with a term report it, so a herd's leader changes are counted.
                let has_term = system.starts_with("leasehold") || system.starts_with("etcd");
                assert_eq!(row.leader_changes.is_some(), has_term, "{system}: {row:?}");
                assert!(row.server_rss_mib.is_some_and(|mib| mib > 0.0), "{system}: {row:?}");
            }
        }
    }

    crate::common::step("the report files are written, and the server data is gone");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("latest.json")).expect("latest.json")).expect("JSON");
    let rows = json["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), report.rows.len());
    for field in ["system", "workload", "clients", "ops_per_sec", "p50_us", "p99_us", "p999_us", "run"] {
        assert!(rows.iter().all(|r| !r[field].is_null()), "every row has {field}");
    }
    let readme = std::fs::read_to_string(out.path().join("README.md")).expect("README.md");
    for system in &expected {
        assert!(readme.contains(&format!("| {system} |")), "README.md lists {system}");
    }
    for plot in ["throughput-cycle-distinct.svg", "cdf-cycle-distinct-4.svg", "cdf-hot-handoff-4.svg"] {
        let svg = std::fs::read_to_string(out.path().join(plot)).unwrap_or_else(|e| panic!("{plot}: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains("polyline"), "{plot} has lines");
    }
    assert!(!out.path().join("servers").exists(), "server data removed");
}
