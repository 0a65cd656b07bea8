//! The bootstrap guard: only `--initial-cluster-state new` initializes a
//! cluster, never on a node that has state, and never when another listed
//! node already belongs to a cluster (a node that lost its folder).

use std::time::{Duration, Instant};

use leasehold_local::{LocalCluster, NodeLogs};

use crate::common::{bounded, start_cluster, step, ELECTION_BOUND, TICK_MS};

const LONG_TTL_MS: u64 = 120_000;
/// Longer than several election timeouts (at most 1.2 s each): a node that
/// would initialize itself has led and ticked well before this.
const WOULD_HAVE_LED: Duration = Duration::from_secs(4);

// Ensures a node listed alone in --peers, on an empty folder, with
// `--initial-cluster-state existing` or without the flag, never initializes
// a one-node cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_or_no_flag_never_initializes_an_empty_node() {
    bounded(async {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_leasehold"));
        let mut nodes = Vec::new();
        for state in [Some("existing"), None] {
            let dir = tempfile::tempdir().unwrap();
            let addrs = LocalCluster::free_addrs(1).unwrap();
            let mut node = LocalCluster::new(binary, dir.path(), &addrs, TICK_MS, NodeLogs::Files);
            node.set_initial_cluster_state(state);
            node.start(1).unwrap();
            nodes.push((state, node, dir));
        }
        step("watch both nodes for several election timeouts, and until each answered a few times");
        let watched = Instant::now() + WOULD_HAVE_LED;
        let mut seen = 0;
        // On a loaded machine a status request may take a while: watch
        // until enough answers came (the test's bound ends a node that never answers).
        while Instant::now() < watched || seen <= 10 {
            for (state, node, _) in &nodes {
                if let Some(status) = node.statuses().await.get(&1) {
                    seen += 1;
                    assert!(
                        status.members.is_empty() && status.leader.is_none() && status.term == 0,
                        "{state:?} initialized: {status:?}"
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (state, _, dir) in &nodes {
            let log = std::fs::read_to_string(dir.path().join("node1.log")).unwrap();
            assert!(log.contains("does not initialize a cluster"), "{state:?} does not say why: {log}");
        }
    })
    .await;
}

// Ensures `new` initializes once: a full restart without the flag keeps the
// cluster, and a node 1 that lost its folder and starts again with `new`
// refuses to form a second cluster while nodes 2 and 3 keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_initializes_once_and_never_a_second_cluster() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let client = cluster.client();
        let held = client.acquire("ledger", "w1", LONG_TTL_MS).await.unwrap().token();
        let term = cluster.statuses().await[&1].term;

        step("stop every node; start them again without --initial-cluster-state");
        cluster.stop_all(Duration::from_secs(5));
        cluster.set_initial_cluster_state(None);
        cluster.start_all().unwrap();
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let view = client.get("ledger").await.unwrap().expect("ledger still held");
        assert_eq!(view.token, held);
        let status = cluster.statuses().await[&1].clone();
        assert!(status.term > term, "a restart elects in a later term ({} after {term})", status.term);
        assert_eq!(status.members.len(), 3);

        step("node 1 loses its folder and starts again with `new`: it refuses and exits");
        cluster.kill(1);
        std::fs::remove_dir_all(cluster.data_dir(1)).unwrap();
        cluster.set_initial_cluster_state(Some("new"));
        cluster.start(1).unwrap();
        let exit = cluster.wait_for_exit(1, ELECTION_BOUND).await;
        assert_eq!(exit.code(), Some(1), "{}", cluster.logs());
        let log = std::fs::read_to_string(cluster.dir.path().join("node1.log")).unwrap();
        assert!(log.contains("refusing to initialize"), "{log}");

        step("nodes 2 and 3 still form the one cluster, with the lock");
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let view = client.get("ledger").await.unwrap().expect("ledger still held");
        assert_eq!(view.token, held);
        for status in cluster.statuses().await.values() {
            assert_eq!(status.members.len(), 3, "{status:?}");
        }
    })
    .await;
}
