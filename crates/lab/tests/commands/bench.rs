//! `leasehold-lab bench --endpoints` against an existing cluster with auth
//! on: the binary's flags, credentials and report end to end.

use std::path::Path;

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
