//! Crash points (`cargo test --features failpoints --test failpoints`): a
//! node of a real 3-node cluster is killed with SIGKILL at each named point
//! of the storage and Raft paths in turn (`crash_point!`, set through the
//! node's `FAILPOINTS`), under load, then started again. After each crash:
//! the node rejoins, every node at the same applied index holds the same
//! state digest, every lease acknowledged before the crash is still held
//! under its token, and a new grant's token is above every token granted.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::{replicas_agree, start_cluster_with, start_growable_cluster, step, TestCluster, ELECTION_BOUND};
use leasehold_client::{Client, FencingToken};

const LONG_TTL_MS: u64 = 120_000;
/// Snapshots every 100 entries (the least allowed): checkpoints come every
/// second or so under load, and a follower down for 150 cycles misses
/// purged log.
const SNAPSHOT_EVERY: &str = "100";
/// How long a node may run with its crash point set before it must have hit it.
const CRASH_BOUND: Duration = Duration::from_secs(30);

/// What makes a crash point run on the follower that has it set.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// Appends and checkpoints under ordinary load.
    Load,
    /// Catching up by a snapshot after missing purged log.
    SnapshotInstall,
    /// An election: the leader is killed.
    Election,
}

const POINTS: [(&str, Trigger); 7] = [
    ("log-before-fsync", Trigger::Load),
    ("log-after-fsync", Trigger::Load),
    ("checkpoint-before-flush", Trigger::Load),
    ("snapshot-install-midway", Trigger::SnapshotInstall),
    ("generation-before-rename", Trigger::SnapshotInstall),
    ("vote-before-write", Trigger::Election),
    ("vote-after-write", Trigger::Election),
];

// Ensures a kill -9 at each crash point loses no acknowledged lease, keeps
// tokens increasing and leaves every replica with the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_point_loses_nothing_acknowledged() {
    // Seven crashes and restarts: longer than one test's usual bound.
    let bound = Duration::from_secs(60) * POINTS.len() as u32;
    tokio::time::timeout(bound, async {
        let mut cluster = start_cluster_with(3, &["--snapshot-every", SNAPSHOT_EVERY]).await;
        let client = cluster.client();
        let mut kept: Vec<(String, FencingToken)> = Vec::new();
        let mut highest = FencingToken::default();
        for (point, trigger) in POINTS {
            step(&format!("crash at {point} ({trigger:?})"));
            let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
            let victim = cluster.follower_of(leader);
            let behind = cluster.statuses().await.get(&victim).and_then(|s| s.last_log_index).unwrap_or(0);
            cluster.kill(victim);
            if let Trigger::SnapshotInstall = trigger {
                // Until the leader has purged its log past the victim: only
                // then must the victim install a snapshot. 150 cycles pass
                // the snapshot threshold, but the leader's snapshot and purge
                // follow when they do; once, in CI, the victim restarted
                // while the leader still had every entry it missed, caught
                // up from the log and never reached its crash point.
                let give_up = Instant::now() + CRASH_BOUND;
                loop {
                    highest = highest.max(cycles(&client, "churn", 150).await);
                    let purged = cluster.statuses().await.get(&leader).and_then(|s| s.purged_index).unwrap_or(0);
                    if purged > behind {
                        break;
                    }
                    assert!(Instant::now() < give_up, "leader {leader} never purged past {behind} (purged {purged})");
                }
            }
            // Passed a few times first, so the crash comes in the middle of
            // work rather than at the node's first write.
            let action = match trigger {
                Trigger::Load => "3*off->return",
                Trigger::SnapshotInstall | Trigger::Election => "return",
            };
            // Acknowledged by the two others: it must outlive the crash.
            let lease = acquire_retrying(&client, &format!("kept-{point}")).await;
            kept.push((format!("kept-{point}"), lease));
            highest = highest.max(lease);
            cluster.set_env(victim, vec![("FAILPOINTS".into(), format!("{point}={action}"))]);
            cluster.start(victim).unwrap();
            if let Trigger::Election = trigger {
                cluster.kill(leader);
            }
            highest = highest.max(load_until_exit(&mut cluster, &client, victim).await);

            step(&format!("restart after {point}"));
            cluster.set_env(victim, Vec::new());
            for id in cluster.ids() {
                if cluster.exited(id).is_some() || cluster.pid(id).is_none() {
                    cluster.start(id).unwrap();
                }
            }
            cluster.wait_answering(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
            cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
            for (name, token) in &kept {
                let view = client.get(name).await.unwrap().unwrap_or_else(|| panic!("{name} lost after {point}"));
                assert_eq!(view.token, *token, "{name} after a crash at {point}");
            }
            let next = acquire_retrying(&client, "after-crash").await;
            assert!(next > highest, "token {next:?} after {point} is not above {highest:?}");
            client.release("after-crash", next).await.unwrap();
            highest = next;
            replicas_agree(&cluster.endpoints()).await;
        }
    })
    .await
    .expect("the crash-point test ran past its bound");
}

// Ensures a leader killed just before, or just after, a membership change
// (promoting a learner) leaves a cluster that elects a leader, agrees on its
// state and keeps every acknowledged lease: the change either happened
// whole or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_crash_around_a_membership_change_loses_nothing() {
    tokio::time::timeout(Duration::from_secs(180), async {
        let mut cluster = start_growable_cluster(4, 3).await;
        let client = cluster.client();
        cluster.start(4).unwrap();
        client.add_learner(4, &cluster.endpoint(4)).await.unwrap();
        let kept = acquire_retrying(&client, "kept").await;
        for point in ["membership-before-change", "membership-after-change"] {
            step(&format!("every voter set to crash at {point}; promote node 4"));
            restart_voters(&mut cluster, &format!("{point}=return")).await;
            let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}"));
            // Not awaited: its answer dies with the leader, and the client
            // would retry it against the next one.
            let promoting = tokio::spawn({
                let client = cluster.client();
                async move { client.promote(4).await }
            });
            let exit = cluster.wait_for_exit(leader, CRASH_BOUND).await;
            promoting.abort();
            assert_eq!(exit.signal(), Some(9), "leader {leader} exited other than at {point}");

            step(&format!("restart after {point}"));
            restart_voters(&mut cluster, "").await;
            let view = client.get("kept").await.unwrap().expect("kept lease lost");
            assert_eq!(view.token, kept);
            let next = acquire_retrying(&client, "after-crash").await;
            assert!(next > kept);
            client.release("after-crash", next).await.unwrap();
            replicas_agree(&cluster.endpoints()).await;
        }
    })
    .await
    .expect("the membership crash test ran past its bound");
}

/// Kills nodes 1 to 3 and starts them again with `failpoints` as their
/// `FAILPOINTS` (none when empty); waits for a leader.
async fn restart_voters(cluster: &mut TestCluster, failpoints: &str) {
    for id in 1..=3 {
        cluster.kill(id);
        let env = if failpoints.is_empty() { Vec::new() } else { vec![("FAILPOINTS".into(), failpoints.into())] };
        cluster.set_env(id, env);
        cluster.start(id).unwrap();
    }
    cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
}

/// Acquire/release cycles of `name` while node `victim` runs; returns the
/// highest token granted once `victim` has died by SIGKILL.
async fn load_until_exit(cluster: &mut TestCluster, client: &Client, victim: u64) -> FencingToken {
    let give_up = Instant::now() + CRASH_BOUND;
    let mut highest = FencingToken::default();
    loop {
        if let Some(exit) = cluster.exited(victim) {
            assert_eq!(
                exit.signal(),
                Some(9),
                "node {victim} exited other than by its crash point\n{}",
                cluster.logs()
            );
            return highest;
        }
        assert!(Instant::now() < give_up, "node {victim} never reached its crash point\n{}", cluster.logs());
        // Errors are expected while a leader is being elected.
        if let Ok(lease) = client.acquire("load", "loader", LONG_TTL_MS).await {
            highest = highest.max(lease.token());
            let _ = client.release("load", lease.token()).await;
        }
    }
}

/// `n` acquire/release cycles of `name`; the last token granted.
async fn cycles(client: &Client, name: &str, n: usize) -> FencingToken {
    let mut last = FencingToken::default();
    for _ in 0..n {
        let lease = client.acquire(name, "churner", LONG_TTL_MS).await.unwrap();
        last = lease.token();
        client.release(name, last).await.unwrap();
    }
    last
}

/// Acquires `name` for a long ttl, retrying through an election.
async fn acquire_retrying(client: &Client, name: &str) -> FencingToken {
    let give_up = Instant::now() + ELECTION_BOUND;
    loop {
        match client.acquire(name, "keeper", LONG_TTL_MS).await {
            Ok(lease) => return lease.token(),
            Err(e) if Instant::now() < give_up => {
                eprintln!("acquire {name}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("acquire {name}: {e}"),
        }
    }
}
