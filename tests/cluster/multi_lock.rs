//! Atomic multi-lock on a real 3-node cluster: several locks granted in one
//! log entry under one token, through a follower, de-duplicated by request
//! id (also across a kill -9 of the leader), and a waiting multi-acquire
//! granted all at once.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{bounded, start_cluster, step, EventStream, ELECTION_BOUND};
use leasehold_client::proto::locks::Blocker;
use leasehold_client::{AcquireOptions, Client, ErrorCode};

const TTL_MS: u64 = 60_000;

// Ensures a multi-acquire sent to a follower grants every lock under one
// token, a retry with the same request id (to another node) answers the same
// grants, a conflicting set is refused naming the holder and grants nothing,
// and a waiting multi-acquire is granted every lock in the entry of the
// release that freed the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_acquire_through_a_follower_with_retry_and_wait() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let via_follower = Client::new(&[cluster.endpoint(follower)]).unwrap();
        let other = cluster.ids().into_iter().find(|id| *id != leader && *id != follower).expect("a third node");
        let via_other = Client::new(&[cluster.endpoint(other)]).unwrap();

        step("a multi-acquire through a follower, then its retry through another node");
        let options = AcquireOptions { request_id: Some("transfer-81".into()), ..AcquireOptions::default() };
        let names = ["account-1", "account-2", "account-3"];
        let first = via_follower.acquire_many(&names, "transfer", TTL_MS, &options).await.unwrap();
        assert_eq!(first.names(), names);
        assert!(first.grants.iter().all(|g| g.token == first.token && g.owner == "transfer"));
        let retried = via_other.acquire_many(&names, "transfer", TTL_MS, &options).await.unwrap();
        assert_eq!((retried.token, &retried.grants), (first.token, &first.grants), "the retry got a new grant");
        for name in names {
            assert_eq!(via_other.get(name).await.unwrap().map(|v| v.token), Some(first.token));
        }

        step("a set with a held lock is refused, naming it, and grants nothing");
        let refused =
            via_other.acquire_many(&["account-3", "account-4"], "audit", TTL_MS, &AcquireOptions::default()).await;
        let refused = refused.unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::Held), "{refused:?}");
        let conflicts = refused.detail().unwrap().conflicts();
        assert_eq!(conflicts.len(), 1, "{conflicts:?}");
        assert_eq!(conflicts[0].name, "account-3");
        assert!(matches!(&conflicts[0].blocker, Blocker::Held { holder, .. } if holder == "transfer"));
        assert!(via_other.get("account-4").await.unwrap().is_none());

        step("a waiting multi-acquire gets all of its locks when the last is released");
        let mut events = EventStream::open(&cluster.endpoint(other), "account-4").await;
        let waiter = Arc::new(via_follower);
        let retrier = Arc::new(Client::new(&[cluster.endpoint(other)]).unwrap());
        let waiting = |client: Arc<Client>| {
            tokio::spawn(async move {
                let options = AcquireOptions {
                    wait: Some(Duration::from_secs(30)),
                    request_id: Some("audit-5".into()),
                    ..AcquireOptions::default()
                };
                client.acquire_many(&["account-4", "account-1"], "audit", TTL_MS, &options).await.unwrap()
            })
        };
        let first_attempt = waiting(waiter.clone());
        // account-4 is free: it is reserved for the waiter, and refused to a try-acquire.
        let reserved = loop {
            match via_other.acquire("account-4", "sneaky", TTL_MS).await {
                Err(e) => break e,
                Ok(lease) => via_other.release("account-4", lease.token()).await.unwrap(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(reserved.code(), Some(ErrorCode::Reserved), "{reserved:?}");
        // The caller retries with the same request id while its first attempt still waits.
        let retry = waiting(retrier);
        // Time for the retry to reach the leader and wait as well (if it comes
        // later, it is answered from the record of the grant: the same grants).
        tokio::time::sleep(Duration::from_millis(300)).await;
        via_other.release_many(&names, first.token).await.unwrap();
        let granted = first_attempt.await.unwrap();
        let retried = retry.await.unwrap();
        assert_eq!((retried.token, &retried.grants), (granted.token, &granted.grants), "one wait, one grant");
        assert!(granted.token > first.token);
        assert!(granted.grants.iter().all(|g| g.token == granted.token));
        loop {
            let e = events.next().await;
            if e["type"] == "acquired" && e["owner"] == "audit" {
                assert_eq!(e["token"].as_u64(), Some(granted.token.get()));
                break;
            }
        }
        assert!(via_other.get("account-2").await.unwrap().is_none(), "released with the set");
    })
    .await;
}

// Ensures a multi-acquire answered through a follower survives a kill -9 of
// the leader that granted it: the caller's retry with the same request id,
// through the same follower and answered by the new leader, gets the same
// grants under the same token, and the locks are still held under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_acquire_retried_after_leader_kill_keeps_its_token() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let via_follower = Client::new(&[cluster.endpoint(follower)]).unwrap();
        let options = AcquireOptions { request_id: Some("transfer-after-crash".into()), ..AcquireOptions::default() };
        let names = ["crash-from", "crash-to"];
        let first = via_follower.acquire_many(&names, "transfer", TTL_MS, &options).await.unwrap();

        step(&format!("kill -9 the leader (node {leader})"));
        cluster.kill(leader);
        let new_leader =
            cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        assert_ne!(new_leader, leader);

        step("the retry through the follower gets the original grants");
        let retried = via_follower.acquire_many(&names, "transfer", TTL_MS, &options).await.unwrap();
        assert_eq!((retried.token, &retried.grants), (first.token, &first.grants), "the retry got a new grant");
        for name in names {
            assert_eq!(via_follower.get(name).await.unwrap().map(|v| v.token), Some(first.token), "{name}");
        }
        step("a new grant after the crash has a higher token");
        let later = via_follower.acquire("crash-later", "transfer", TTL_MS).await.unwrap();
        assert!(later.token() > first.token, "{} after {}", later.token(), first.token);
    })
    .await;
}
