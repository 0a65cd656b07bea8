//! Hand-offs (issue 42): a follower runs the client API's handlers itself
//! and hands the leader only their commands (and asks it for read
//! indexes) over the peer transport, instead of relaying whole requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::metrics::Scrape;
use leasehold_client::{AcquireOptions, Client};

const LONG_TTL_MS: u64 = 120_000;

/// A follower's count of forwarded requests with `result`.
async fn forwarded(endpoint: &str, result: &str) -> f64 {
    let series = format!("leasehold_forwarded_requests_total{{result=\"{result}\"}}");
    Scrape::of(endpoint).await.get(&series).unwrap_or(0.0)
}

// Ensures acquire, renew, a linearizable read and release sent to a
// follower are answered there with their commands handed to the leader
// (counted `handed`, none `relayed`), that the answers name the leader,
// and that a read through the follower sees a write made through the other
// follower just before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_requests_are_handed_off_not_relayed() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let other = cluster.ids().into_iter().find(|id| *id != leader && *id != follower).unwrap();
        let at_follower = cluster.endpoint(follower);
        let (handed_before, relayed_before) =
            (forwarded(&at_follower, "handed").await, forwarded(&at_follower, "relayed").await);

        step(&format!("acquire, renew, read and release through follower {follower}"));
        let via_follower = Client::new(std::slice::from_ref(&at_follower)).unwrap();
        let lease = via_follower.acquire("handed", "alice", LONG_TTL_MS).await.unwrap();
        let renewed = via_follower.renew("handed", lease.token(), Some(LONG_TTL_MS)).await.unwrap();
        assert_eq!(renewed.token(), lease.token(), "a renew keeps the token");
        let seen = via_follower.get("handed").await.unwrap().expect("held");
        assert_eq!(seen.owner, "alice");
        via_follower.release("handed", lease.token()).await.unwrap();

        step("the answers name the leader");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let reply = http.get(format!("http://{at_follower}/v1/locks/handed")).send().await.unwrap();
        let named = reply.headers().get(leasehold_client::proto::LEADER_HEADER).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(named, Some(leader.to_string()));

        step(&format!("a write through node {other} is seen by the next read through node {follower}"));
        let via_other = Client::new(&[cluster.endpoint(other)]).unwrap();
        let bob = via_other.acquire("handed", "bob", LONG_TTL_MS).await.unwrap();
        let seen = via_follower.get("handed").await.unwrap().expect("held by bob");
        assert_eq!((seen.owner.as_str(), seen.token), ("bob", bob.token()));

        step("the follower counted hand-offs, no relays");
        let handed = forwarded(&at_follower, "handed").await - handed_before;
        assert!(handed >= 6.0, "handed {handed}");
        assert_eq!(forwarded(&at_follower, "relayed").await, relayed_before, "nothing relayed");
        assert_eq!(forwarded(&cluster.endpoint(leader), "handed").await, 0.0, "the leader hands nothing off");
    })
    .await;
}

// Ensures a waiting acquire sent to a follower waits there (in the
// follower's own registry of waiters, woken by its own applied entries)
// and is granted, under the hand-over's token, when the holder releases
// through another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_through_a_follower_is_granted_on_release_elsewhere() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let other = cluster.ids().into_iter().find(|id| *id != leader && *id != follower).unwrap();
        let via_other = Client::new(&[cluster.endpoint(other)]).unwrap();
        let holder = via_other.acquire("queued", "holder", LONG_TTL_MS).await.unwrap();

        step(&format!("a waiter queues through follower {follower}"));
        let via_follower = Arc::new(Client::new(&[cluster.endpoint(follower)]).unwrap());
        let waiter = {
            let client = via_follower.clone();
            tokio::spawn(async move {
                let options = AcquireOptions { wait: Some(Duration::from_secs(30)), ..AcquireOptions::default() };
                client.acquire_with("queued", "waiter", LONG_TTL_MS, &options).await
            })
        };
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            let view = via_other.get("queued").await.unwrap().expect("held");
            if view.waiters.iter().any(|w| w.owner == "waiter") {
                break;
            }
            assert!(Instant::now() < give_up, "the waiter never queued");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        step(&format!("the holder releases through node {other}; the waiter is granted"));
        via_other.release("queued", holder.token()).await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter is answered")
            .unwrap()
            .unwrap_or_else(|e| panic!("the waiter was refused: {e}\n{}", cluster.logs()));
        assert!(granted.token() > holder.token());
        let view = via_follower.get("queued").await.unwrap().expect("held by the waiter");
        assert_eq!((view.owner.as_str(), view.token), ("waiter", granted.token()));
        assert!(forwarded(&cluster.endpoint(follower), "handed").await >= 2.0);
    })
    .await;
}
