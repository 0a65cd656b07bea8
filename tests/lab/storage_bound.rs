//! Bounded storage on a real 3-node cluster: the short version of the
//! storage soak (`leasehold-lab bench --soak`, committed results under
//! `benches/results/soak/`). 1 000 live locks churned (release, acquire,
//! fenced record, request ids) while 8 000 entries commit with a
//! checkpoint every 1 000: eight checkpoint-and-purge cycles. Every sample
//! of every node's data folder must stay under the bound `cluster/README.md`
//! derives from the layout ("Snapshots and disk"), and every log under two
//! checkpoint intervals.

use std::time::Duration;

use leasehold_lab::soak::{self, SoakOptions};

const ENTRIES: u64 = 8_000;
const SNAPSHOT_EVERY: u64 = 1_000;
/// One checkpoint interval, the fiftieth kept behind a checkpoint, and what
/// commits while one is written: less than one more interval.
const LOG_BOUND: u64 = 2 * SNAPSHOT_EVERY;
/// This test commits far more than the others; it gets its own bound.
const BOUND: Duration = Duration::from_secs(600);

// Ensures checkpoints and purging keep each node's log length and data
// folder under the documented bounds at every sample of an 8k-entry churn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_and_disk_stay_bounded_over_8k_entries() {
    let _alone = crate::exclusive().await;
    let out = tempfile::tempdir().expect("temp dir");
    let options = SoakOptions {
        binary: env!("CARGO_BIN_EXE_leasehold").into(),
        nodes: 3,
        entries: ENTRIES,
        live_locks: 1_000,
        clients: 8,
        snapshot_every: SNAPSHOT_EVERY,
        out: out.path().to_owned(),
        command: "tests/lab/storage_bound.rs".into(),
    };
    let report = tokio::time::timeout(BOUND, soak::run(&options)).await.expect("8k entries within the bound");
    let report = report.expect("the soak ran");
    assert!(report.entries >= ENTRIES && report.cycles > 0, "{report:?}");
    assert!(report.over_bound().is_empty(), "samples over {} bytes: {:?}", report.bound_bytes, report.over_bound());
    for sample in &report.samples {
        assert!(sample.log_entries <= LOG_BOUND, "node {} log has {} entries", sample.node, sample.log_entries);
    }
    assert!(report.samples.iter().any(|s| s.state_bytes > 0), "the state is in sled");
}

// Ensures `bench --soak` without --soak-snapshot-every runs the nodes at
// their own default interval, which the lab keeps a copy of.
#[test]
fn the_soak_default_interval_is_the_nodes() {
    assert_eq!(soak::NODE_DEFAULT_SNAPSHOT_EVERY, leasehold::node::DEFAULT_SNAPSHOT_EVERY);
}
