//! Membership changes on real clusters: 3 → 5 → 3 voters while clients keep
//! acquiring, and the leader refusing a change that would lose quorum.

use leasehold_client::{ErrorCode, FencingToken};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{bounded, start_cluster, start_growable_cluster, step, TestCluster, ELECTION_BOUND};

const LONG_TTL_MS: u64 = 600_000;

/// Voter ids as the leader sees them.
async fn voters(cluster: &TestCluster) -> Vec<u64> {
    let statuses = cluster.statuses().await;
    let leader = statuses.values().find(|s| s.role == "leader").expect("a leader answers");
    leader.members.iter().filter(|m| m.voter).map(|m| m.id).collect()
}

// Ensures growing 3 → 5 voters and shrinking back to 3 under concurrent
// acquires loses no acknowledged grant and keeps tokens increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_to_five_and_shrink_to_three_under_load() {
    bounded(async {
        let mut cluster = start_growable_cluster(5, 3).await;
        let client = Arc::new(cluster.client());
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for w in 0..2 {
            let (client, stop) = (client.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                let mut grants = Vec::new();
                while !stop.load(Ordering::Relaxed) && grants.len() < 400 {
                    let name = format!("member-test/{w}/{:04}", grants.len());
                    let lease = client.acquire(&name, &format!("worker-{w}"), LONG_TTL_MS).await.unwrap();
                    grants.push((name, lease.token()));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                grants
            }));
        }

        step("start nodes 4 and 5, add them as learners, promote them");
        for id in [4, 5] {
            cluster.start(id).unwrap();
            client.add_learner(id, &cluster.endpoint(id)).await.unwrap();
        }
        for id in [4, 5] {
            client.promote(id).await.unwrap();
        }
        assert_eq!(voters(&cluster).await, [1, 2, 3, 4, 5]);

        step("remove nodes 4 and 5 again");
        for id in [5, 4] {
            client.remove_member(id).await.unwrap();
        }
        assert_eq!(voters(&cluster).await, [1, 2, 3]);
        for id in [4, 5] {
            cluster.kill(id);
        }

        step("every acknowledged grant is still held, tokens increased");
        stop.store(true, Ordering::Relaxed);
        for (w, worker) in workers.into_iter().enumerate() {
            let grants = worker.await.unwrap();
            assert!(!grants.is_empty(), "worker {w} acquired during the changes");
            assert!(grants.windows(2).all(|p| p[0].1 < p[1].1), "tokens increase for worker {w}");
            let held = client.list(&format!("member-test/{w}/"), 1000).await.unwrap();
            let held: Vec<(String, FencingToken)> = held.into_iter().map(|l| (l.name, l.token)).collect();
            assert_eq!(held, grants, "worker {w}'s acknowledged grants");
        }
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
    })
    .await;
}

// Ensures the leader refuses a membership change whose new voters could not
// form a quorum now (409 would_lose_quorum), and accepts one that can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_that_would_lose_quorum_is_refused() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let client = cluster.client();
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let dead = cluster.follower_of(leader);
        let alive = cluster.ids().into_iter().find(|id| *id != leader && *id != dead).unwrap();
        step(&format!("node {dead} dies"));
        cluster.kill(dead);

        step(&format!("removing live node {alive} would leave {{{leader}, {dead}}}: refused"));
        let err = client.remove_member(alive).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::WouldLoseQuorum), "{err:?}");
        assert_eq!(voters(&cluster).await.len(), 3, "nothing changed");
        assert_eq!(client.remove_member(99).await.unwrap_err().code(), Some(ErrorCode::NotMember));

        step(&format!("removing dead node {dead} leaves two live voters: accepted"));
        client.remove_member(dead).await.unwrap();
        let mut expected = vec![leader, alive];
        expected.sort_unstable();
        assert_eq!(voters(&cluster).await, expected);
        client.acquire("still-works", "x", LONG_TTL_MS).await.unwrap();
    })
    .await;
}
