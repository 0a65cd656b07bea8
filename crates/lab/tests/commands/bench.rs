//! `leasehold-lab bench --endpoints` against an existing cluster with auth
//! on: the binary's flags, credentials and report end to end; and a smoke
//! run of the election workload.

use std::path::Path;
use std::time::Duration;

use leasehold_lab::compare::election::{self, ElectionOptions};
use leasehold_lab::compare::servers::find_binary;
use leasehold_lab::compare::{self, ClientAccess, CompareOptions, SystemKind, Workload};

use serde_json::Value;

use crate::common::{bounded, run_binary, start_secured_cluster, step, Material};

// Ensures `leasehold-lab bench --endpoints` measures a token-secured cluster when
// given --token-file: a one-second run completes cycles without an error
// (without the token every acquire would be refused 401).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_measures_a_token_secured_cluster() {
    let _alone = crate::exclusive().await;
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(3, material.secrets(), &[]).await;
        let out = tempfile::tempdir().expect("temp dir");
        let (endpoints, token_file) = (cluster.endpoints().join(","), material.path("client-token"));

        step("a one-second bench --endpoints with --token-file");
        let args = [
            "bench",
            "--endpoints",
            &endpoints,
            "--token-file",
            token_file.to_str().unwrap(),
            "--workloads",
            "distinct",
            "--clients",
            "2",
            "--runs",
            "1",
            "--warmup-ms",
            "200",
            "--duration-secs",
            "1",
            "--out",
            out.path().to_str().unwrap(),
        ];
        run_binary(Path::new(env!("CARGO_BIN_EXE_leasehold-lab")), &args).await;

        step("it completed cycles, with no error");
        let report: Value =
            serde_json::from_slice(&std::fs::read(out.path().join("latest.json")).expect("latest.json")).unwrap();
        let rows = report["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 1, "one measurement: {rows:?}");
        assert_eq!(rows[0]["system"], "leasehold");
        assert!(rows[0]["cycles"].as_u64().is_some_and(|n| n > 0), "no cycle completed: {}", rows[0]);
        assert_eq!(rows[0]["errors"], 0, "{}", rows[0]);
    })
    .await;
}

/// Upper bound on the authorization smoke run: one cluster with tokens, 20
/// users and 50 roles added, two one-second measurements.
const ACCESS_SMOKE_BOUND: Duration = Duration::from_secs(120);

// Ensures the systems that measure the cost of authorization cannot rot:
// `leasehold-3-tokens` (the client token) and `leasehold-3-users` (a user's
// token among 20 users and 50 roles) both complete cycles without an error
// (a user without `lock` on the bench's names would be refused every
// acquire with 403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_measures_tokens_and_users_on_one_cluster() {
    let _alone = crate::exclusive().await;
    let out = tempfile::tempdir().expect("temp dir");
    let systems: Vec<SystemKind> = [ClientAccess::Tokens, ClientAccess::Users]
        .map(|access| SystemKind::Leasehold { nodes: 3, spread: false, access })
        .into();
    let options = CompareOptions {
        systems: systems.clone(),
        endpoints: Vec::new(),
        credentials: Default::default(),
        binary: crate::common::leasehold_binary(),
        workloads: vec![Workload::Distinct],
        clients: vec![2],
        hot_clients: vec![],
        herd_clients: vec![],
        flood_clients: vec![],
        flood_connections: 0,
        runs: 1,
        warmup: Duration::from_millis(200),
        duration: Duration::from_secs(1),
        ttl: Duration::from_secs(5),
        out: out.path().to_path_buf(),
        command: "crates/lab/tests/commands/bench.rs access smoke".into(),
    };
    step("tokens and users, one second each");
    let report = tokio::time::timeout(ACCESS_SMOKE_BOUND, compare::run(&options))
        .await
        .expect("access smoke run exceeded its time bound")
        .expect("access smoke run");
    for system in systems.iter().map(SystemKind::to_string) {
        let row = report.rows.iter().find(|r| r.system == system).unwrap_or_else(|| panic!("no row for {system}"));
        assert!(row.cycles > 0 && row.errors == 0, "{system}: {row:?}");
    }
}

/// Upper bound on the election smoke run: two clusters started and one
/// round each (a 3 s lease to run out), on a loaded machine.
const ELECTION_SMOKE_BOUND: Duration = Duration::from_secs(120);

// Ensures the election workload cannot rot: one round per installed system
// (real nodes, real etcd, candidate processes of `leasehold-lab` of which
// the leader is killed -9 by PID) measures a failover, the next leader's
// token is higher, and the report files are written. The times are
// reported, not asserted, beyond being at most a few ttls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_workload_measures_a_failover_per_system() {
    let _alone = crate::exclusive().await;
    let out = tempfile::tempdir().expect("temp dir");
    let mut systems = vec![SystemKind::leasehold(3)];
    // etcd is measured where Debian's etcd-server is installed, as in the bench itself.
    if find_binary("etcd", "etcd-server").is_ok() {
        systems.push(SystemKind::Etcd);
    }
    let ttl = Duration::from_secs(3);
    let options = ElectionOptions {
        systems: systems.clone(),
        rounds: 1,
        ttl,
        binary: crate::common::leasehold_binary(),
        candidate_binary: env!("CARGO_BIN_EXE_leasehold-lab").into(),
        out: out.path().to_path_buf(),
        command: "crates/lab/tests/commands/bench.rs election smoke".into(),
    };
    step("election smoke run, one round");
    let report = tokio::time::timeout(ELECTION_SMOKE_BOUND, election::run(&options))
        .await
        .expect("election smoke run exceeded its time bound")
        .expect("election smoke run");

    step("a failover per system, to a higher token, within a few ttls");
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.rows.len(), systems.len(), "{:?}", report.rows);
    for row in &report.rows {
        assert!(row.new_token > row.old_token, "{row:?}");
        assert!(row.failover_ms > 0.0 && row.failover_ms < 4.0 * ttl.as_millis() as f64, "{row:?}");
    }
    for file in ["election.json", "election.svg", "README.md"] {
        assert!(out.path().join(file).is_file(), "{file} not written");
    }
}
