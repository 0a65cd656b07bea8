//! The `leasehold` command line as a user meets it: quiet logs on a clean
//! start and stop, the bearer secret's variables, exit codes, output
//! formats, shell completions and the man page.

use std::time::Duration;

use crate::common::{bounded, start_cluster, step};

/// Log lines that a clean start and stop must not print (each was printed
/// on every start or on many stops before it was fixed).
const CLEAN_RUN_NOISE: [&str; 3] =
    ["A message will be ignored because vote changed", "core_call fatal error", "tick not committed"];

// Ensures a 3-node cluster that starts, elects, ticks and stops cleanly logs
// neither openraft's stale-vote warning nor errors for the Tick in flight at
// shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_start_and_stop_log_no_false_alarms() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        step("the leader ticks for a while");
        tokio::time::sleep(Duration::from_secs(1)).await;
        step("SIGTERM to every node");
        cluster.stop_all(Duration::from_secs(10));
        for id in cluster.ids() {
            let log = std::fs::read_to_string(cluster.dir.path().join(format!("node{id}.log"))).expect("node log");
            assert!(log.contains("serving"), "node {id} never served:\n{log}");
            for noise in CLEAN_RUN_NOISE {
                assert!(!log.contains(noise), "node {id} logged {noise:?}:\n{log}");
            }
        }
    })
    .await;
}
