//! Snapshots on real 3-node clusters, with snapshots every 100 entries so a
//! short test crosses several: a follower that missed purged log catches up
//! by snapshot install, every node restarts from snapshot + log, and a backup
//! (`leasehold backup`) seeds a new cluster (`leasehold restore`).

use std::time::{Duration, Instant};

use crate::common::{
    bounded, leasehold_cli, replicas_agree, start_cluster, start_cluster_with, state_digest, step, ELECTION_BOUND,
    TICK_MS,
};
use leasehold_client::FencingToken;
use leasehold_local::{LocalCluster, NodeLogs};
use serde_json::json;

const LONG_TTL_MS: u64 = 120_000;

// Ensures a follower behind the purge point is brought up to date by a
// snapshot, and a kill -9 of every node followed by a restart from snapshot +
// log keeps locks, queues' effects, records and token order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_follower_installs_snapshot_and_all_restart_from_it() {
    bounded(async {
        let mut cluster = start_cluster_with(3, &["--snapshot-every", "100"]).await;
        let client = cluster.client();
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let kept = client.acquire("kept", "holder", LONG_TTL_MS).await.unwrap();
        let record = client.acquire("ledger", "writer", LONG_TTL_MS).await.unwrap();
        client.put_record("balance", "ledger", record.token(), &json!(42)).await.unwrap();
        let (_, churned) = lag_one_follower_past_a_snapshot(&mut cluster, leader, "churn").await;
        let last = *churned.last().expect("150 grants");

        step("kill -9 every node, start them all again");
        for id in cluster.ids() {
            cluster.kill(id);
        }
        cluster.start_all().unwrap();
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let view = client.get("kept").await.unwrap().expect("kept still held");
        assert_eq!(view.token, kept.token());
        assert!(client.get("churn").await.unwrap().is_none());
        let stored = client.get_record("balance").await.unwrap().expect("record");
        assert_eq!((stored.value, stored.token), (json!(42), record.token()));
        let next = client.acquire("churn", "after-restart", LONG_TTL_MS).await.unwrap();
        assert!(next.token() > last && next.token() > record.token());

        step("every node, one rebuilt from a snapshot, holds the same table at the same applied index");
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let (_, before) = state_digest(&cluster.endpoint(leader)).await;
        client.release("churn", next.token()).await.unwrap();
        let (_, after) = state_digest(&cluster.endpoint(leader)).await;
        assert_ne!(after, before, "the table changed, and so did its digest");
        replicas_agree(&cluster.endpoints()).await;
    })
    .await;
}

/// Takes a follower of `leader` down, runs 150 acquire/release cycles of
/// `name` past it (the cluster snapshots every 100 entries, and purges its
/// log behind), starts it again and waits until it has caught up by
/// installing a snapshot. Returns the follower's id and the tokens of the
/// 150 grants, in order.
pub async fn lag_one_follower_past_a_snapshot(
    cluster: &mut crate::common::TestCluster,
    leader: u64,
    name: &str,
) -> (u64, Vec<FencingToken>) {
    let client = cluster.client();
    let lagging = cluster.follower_of(leader);
    let behind = cluster.statuses().await[&lagging].last_log_index.unwrap_or(0);
    step(&format!("node {lagging} goes down; 150 acquire/release cycles pass it by"));
    cluster.kill(lagging);
    let mut tokens: Vec<FencingToken> = Vec::with_capacity(150);
    for i in 0..150 {
        let lease = client.acquire(name, &format!("w{i}"), LONG_TTL_MS).await.unwrap();
        assert!(tokens.last().is_none_or(|last| lease.token() > *last));
        tokens.push(lease.token());
        client.release(name, lease.token()).await.unwrap();
    }
    // The leader purges behind a checkpoint it builds in the background:
    // right after the last cycle it may not have yet (ticks go on meanwhile).
    let give_up = Instant::now() + ELECTION_BOUND;
    let purged = loop {
        let purged = cluster.statuses().await[&leader].purged_index.unwrap_or(0);
        if purged > behind || Instant::now() > give_up {
            break purged;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(purged > behind, "the leader purged its log past node {lagging} (purged {purged}, it has {behind})");

    step(&format!("node {lagging} restarts and catches up by snapshot"));
    cluster.start(lagging).unwrap();
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let statuses = cluster.statuses().await;
        let (target, caught) = (&statuses[&leader], statuses.get(&lagging));
        if let Some(s) = caught {
            // A snapshot past the purge point: the leader's, installed (the
            // log it missed is gone).
            if s.snapshot_index >= Some(purged)
                && s.applied_index >= target.applied_index
                && s.locks_held == target.locks_held
            {
                return (lagging, tokens);
            }
        }
        assert!(Instant::now() < give_up, "node {lagging} never caught up: {caught:?}\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// Ensures the documented recovery from losing a majority: with two of three
// nodes killed, a backup of the survivor (no leader, no quorum) seeds a new
// cluster (new addresses, new data folders) that keeps the held lock, the
// fenced record and the token order, lets the old holder release under its
// token, and issues tokens above --min-index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivor_backup_seeds_a_new_cluster() {
    bounded(async {
        let mut old = start_cluster(3).await;
        let client = old.client();
        let kept = client.acquire("kept", "holder", LONG_TTL_MS).await.unwrap();
        let record = client.acquire("ledger", "writer", LONG_TTL_MS).await.unwrap();
        client.put_record("balance", "ledger", record.token(), &json!(7)).await.unwrap();

        let survivor = 1;
        let written = client.get_record("balance").await.unwrap().expect("record").index;
        while client.status_of((survivor - 1) as usize).await.unwrap().applied_index < Some(written) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        step("kill -9 nodes 2 and 3: the survivor has no quorum; back it up");
        old.kill(2);
        old.kill(3);
        let file = old.dir.path().join("backup.snap");
        let file = file.to_str().unwrap();
        let backup = leasehold_cli(&["backup", "--endpoints", &old.endpoint(survivor), "--out", file]).await;
        assert!(backup["snapshot"]["snapshot_index"].as_u64().unwrap() >= written, "{backup}");
        old.stop_all(Duration::from_secs(5));

        step("restore the backup into three empty folders and start a new cluster");
        let dir = tempfile::tempdir().unwrap();
        let addrs = LocalCluster::free_addrs(3).unwrap();
        let peers: Vec<String> = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        let min_index = record.token().get() + 10_000;
        let mut new = LocalCluster::new(
            std::path::Path::new(env!("CARGO_BIN_EXE_leasehold")),
            dir.path(),
            &addrs,
            TICK_MS,
            NodeLogs::Files,
        );
        for id in new.ids() {
            let data = new.data_dir(id);
            let restored = leasehold_cli(&[
                "restore",
                "--from",
                file,
                "--data",
                data.to_str().unwrap(),
                "--peers",
                &peers.join(","),
                "--min-index",
                &min_index.to_string(),
            ])
            .await;
            assert_eq!(restored["continues_after_index"], json!(min_index));
        }
        new.start_all().unwrap();
        new.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let client = new.client();
        let view = client.get("kept").await.unwrap().expect("kept still held");
        assert_eq!((view.token, view.owner.as_str()), (kept.token(), "holder"));
        let stored = client.get_record("balance").await.unwrap().expect("record");
        assert_eq!((stored.value, stored.token), (json!(7), record.token()));
        let fresh = client.acquire("fresh", "new-holder", LONG_TTL_MS).await.unwrap();
        assert!(fresh.token().get() > min_index, "token {} continues above --min-index {min_index}", fresh.token());
        client.release("kept", kept.token()).await.unwrap();
        assert!(client.get("kept").await.unwrap().is_none());
        new.stop_all(Duration::from_secs(5));
    })
    .await;
}

// Ensures kill -9 at random points of checkpoints (snapshots forced on the
// node) and of snapshot installs (a node restarted far behind its leader)
// loses nothing: every restart comes back, and in the end every node holds
// the same table as the others at the same applied index, while clients
// kept taking locks and writing records all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_checkpoints_and_installs_keeps_the_state() {
    bounded(async {
        let mut cluster = start_cluster_with(3, &["--snapshot-every", "100"]).await;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = tokio::spawn({
            let (client, stop) = (cluster.client(), stop.clone());
            async move {
                let (mut cycles, mut granted, mut last) = (0u64, 0u64, FencingToken::default());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    cycles += 1;
                    let name = format!("job-{}", cycles % 5);
                    // A call cut off by a kill may have left its lock held
                    // (until its 3 s ttl): move on to the next name. What
                    // matters is what the replicas end with.
                    let Ok(lease) = client.acquire(&name, "worker", 3_000).await else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    assert!(lease.token() > last, "tokens increase");
                    last = lease.token();
                    granted += 1;
                    let _ = client.put_record(&format!("rec-{}", cycles % 5), &name, last, &json!(cycles)).await;
                    let _ = client.release(&name, last).await;
                }
                granted
            }
        });
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let victim = cluster.follower_of(leader);
        for round in 0..6 {
            step(&format!("round {round}: kill -9 node {victim} during a checkpoint it was asked for"));
            let snapshot = format!("http://{}/v1/cluster/snapshot", cluster.endpoint(victim));
            let forced = tokio::spawn(async move { reqwest::Client::new().post(snapshot).send().await });
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..30))).await;
            cluster.kill(victim);
            let _ = forced.await;
            cluster.start(victim).unwrap();
            wait_caught_up(&cluster, leader, victim).await;

            step(&format!("round {round}: node {victim} falls behind the purge point, then is killed mid-install"));
            cluster.kill(victim);
            let behind = cluster.statuses().await[&leader].applied_index.unwrap_or(0);
            while cluster.statuses().await[&leader].purged_index.unwrap_or(0) <= behind + 100 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            cluster.start(victim).unwrap();
            tokio::time::sleep(Duration::from_millis(fastrand::u64(50..600))).await;
            cluster.kill(victim);
            cluster.start(victim).unwrap();
            wait_caught_up(&cluster, leader, victim).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let granted = load.await.expect("load ran");
        assert!(granted > 0, "clients got locks throughout");
        // Its log, not its status: a start that finished the install
        // before its kill leaves the next start nothing to install.
        let log = cluster.log(victim);
        assert!(log.contains("snapshot from the leader installed"), "node {victim} caught up by installing snapshots");
        step("every node holds the same table as the others at the same applied index");
        replicas_agree(&cluster.endpoints()).await;
    })
    .await;
}

/// Waits until `node` serves and has applied what `leader` had applied.
async fn wait_caught_up(cluster: &crate::common::TestCluster, leader: u64, node: u64) {
    let give_up = Instant::now() + Duration::from_secs(30);
    let target = cluster.statuses().await.get(&leader).and_then(|s| s.applied_index).unwrap_or(0);
    loop {
        if cluster.statuses().await.get(&node).is_some_and(|s| s.applied_index >= Some(target)) {
            return;
        }
        assert!(Instant::now() < give_up, "node {node} never caught up to {target}\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
