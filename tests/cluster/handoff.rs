//! Hand-offs (issue 42): a follower runs the client API's handlers itself
//! and hands the leader only their commands (and asks it for read
//! indexes) over the peer transport, instead of relaying whole requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::metrics::Scrape;
use leasehold_client::{AcquireOptions, Client, ErrorCode};

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

// Ensures a waiting acquire sent to a follower is handed to the leader
// whole and answered when the leader hands it the lock: a waiter queued
// through a follower is granted, when the holder releases through the
// leader, under the hand-over's token (above the holder's) with the
// leader's whole grant (its ttl), and a read through that follower then
// sees it hold; and a second waiter through the follower whose wait runs
// out meanwhile is answered `wait_timeout`, and leaves the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_through_a_follower_is_granted_on_release_elsewhere() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let via_leader = Client::new(&[cluster.endpoint(leader)]).unwrap();
        let holder = via_leader.acquire("queued", "holder", LONG_TTL_MS).await.unwrap();

        step(&format!("two waiters queue through follower {follower}, the second for 1 s only"));
        let via_follower = Arc::new(Client::new(&[cluster.endpoint(follower)]).unwrap());
        let queue = |owner: &'static str, wait: Duration| {
            let client = via_follower.clone();
            tokio::spawn(async move {
                let options = AcquireOptions { wait: Some(wait), ..AcquireOptions::default() };
                client.acquire_with("queued", owner, LONG_TTL_MS, &options).await
            })
        };
        let waiter = queue("waiter", Duration::from_secs(30));
        let until_queued = |owner: &'static str, queued: bool| wait_until_queued(&via_leader, "queued", owner, queued);
        until_queued("waiter", true).await;
        let impatient = queue("impatient", Duration::from_secs(1));
        until_queued("impatient", true).await;

        step("the second waiter's wait runs out: wait_timeout, and it left the queue");
        let timed_out = tokio::time::timeout(Duration::from_secs(20), impatient)
            .await
            .expect("the impatient waiter is answered")
            .unwrap()
            .expect_err("nothing was released for it");
        assert_eq!(timed_out.code(), Some(ErrorCode::WaitTimeout), "{timed_out:?}");
        until_queued("impatient", false).await;

        step(&format!("the holder releases through the leader {leader}; the first waiter is granted"));
        via_leader.release("queued", holder.token()).await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter is answered")
            .unwrap()
            .unwrap_or_else(|e| panic!("the waiter was refused: {e}\n{}", cluster.logs()));
        assert!(granted.token() > holder.token(), "{:?} after {:?}", granted.token(), holder.token());
        assert_eq!(granted.grant.ttl_ms, LONG_TTL_MS, "the leader's grant, whole");
        assert!(granted.grant.expires_in_ms > 0);
        let view = via_follower.get("queued").await.unwrap().expect("held by the waiter");
        assert_eq!((view.owner.as_str(), view.token), ("waiter", granted.token()));
        assert!(forwarded(&cluster.endpoint(follower), "handed").await >= 3.0);
    })
    .await;
}

// Ensures a waiting acquire handed whole to a leader that is killed (-9)
// mid-wait is not lost or granted twice: its caller is answered (503
// `unavailable`, or, if the client retried by itself, the grant), a retry
// with its request id after the holder released through the new leader is
// granted under a token above the holder's, the table names it holder under
// that token, and a second retry is answered the same grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_through_a_follower_survives_the_leader_dying_mid_wait() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let via_leader = Client::new(&[cluster.endpoint(leader)]).unwrap();
        let holder = via_leader.acquire("mid-wait", "holder", LONG_TTL_MS).await.unwrap();

        step(&format!("a waiter queues through follower {follower}, handed whole to leader {leader}"));
        let via_follower = Arc::new(Client::new(&[cluster.endpoint(follower)]).unwrap());
        let options = AcquireOptions {
            wait: Some(Duration::from_secs(30)),
            request_id: Some("mid-wait-1".into()),
            ..AcquireOptions::default()
        };
        let waiter = {
            let (client, options) = (via_follower.clone(), options.clone());
            tokio::spawn(async move { client.acquire_with("mid-wait", "waiter", LONG_TTL_MS, &options).await })
        };
        wait_until_queued(&via_follower, "mid-wait", "waiter", true).await;

        step(&format!("kill -9 the leader (node {leader}) mid-wait; the holder releases through the new one"));
        cluster.kill(leader);
        let new = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        assert_ne!(new, leader);
        cluster.client().release("mid-wait", holder.token()).await.unwrap();

        step("the waiter is answered; a retry with its request id is granted once");
        let first = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the waiter is answered after its leader died")
            .unwrap();
        let granted = match first {
            Ok(granted) => granted,
            Err(e) => {
                assert_eq!(e.code(), Some(ErrorCode::Unavailable), "{e:?}\n{}", cluster.logs());
                via_follower.acquire_with("mid-wait", "waiter", LONG_TTL_MS, &options).await.unwrap()
            }
        };
        assert!(granted.token() > holder.token(), "{:?} after {:?}", granted.token(), holder.token());
        let view = cluster.client().get("mid-wait").await.unwrap().expect("held by the waiter");
        assert_eq!((view.owner.as_str(), view.token), ("waiter", granted.token()));
        let again = via_follower.acquire_with("mid-wait", "waiter", LONG_TTL_MS, &options).await.unwrap();
        assert_eq!(again.token(), granted.token(), "the retry is answered the same grant");
    })
    .await;
}

// Ensures a waiting acquire handed whole to a leader that is then paused
// (SIGSTOP: its connections stay open, as in a partition without RST) is
// not held until the hand-off's bound (its `wait_ms` + 15 s, here 75 s):
// once the follower hears of the next leader it answers 503, and the retry
// the 503 asks for (by the client itself, or here), with the same request
// id, waits at the new leader in the place the first attempt took and is
// granted there on release, all while the old leader is still paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_at_a_paused_leader_moves_on_with_the_next_leader() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let other = cluster.ids().into_iter().find(|id| *id != leader && *id != follower).unwrap();
        let via_other = Client::new(&[cluster.endpoint(other)]).unwrap();
        let holder = via_other.acquire("paused-leader", "holder", LONG_TTL_MS).await.unwrap();

        step(&format!("a waiter queues through follower {follower}, handed whole to leader {leader}"));
        let via_follower = Arc::new(Client::new(&[cluster.endpoint(follower)]).unwrap());
        let options = AcquireOptions {
            wait: Some(Duration::from_secs(60)),
            request_id: Some("paused-leader-1".into()),
            ..AcquireOptions::default()
        };
        let waiter = {
            let (client, options) = (via_follower.clone(), options.clone());
            tokio::spawn(async move { client.acquire_with("paused-leader", "waiter", LONG_TTL_MS, &options).await })
        };
        wait_until_queued(&via_other, "paused-leader", "waiter", true).await;

        step(&format!("SIGSTOP the leader (node {leader}); the holder releases through the next one"));
        cluster.signal(leader, nix::sys::signal::Signal::SIGSTOP);
        let answered = async {
            let give_up = Instant::now() + ELECTION_BOUND;
            // Answers lost with the old leader may have taken effect: a
            // later attempt is then refused, and the table says so.
            while let Err(e) = via_other.release("paused-leader", holder.token()).await {
                let held = via_other.get("paused-leader").await.ok().flatten().map(|v| v.owner);
                if e.code().is_some_and(|c| c != ErrorCode::Unavailable) && held.is_some_and(|o| o != "holder") {
                    break;
                }
                assert!(Instant::now() < give_up, "no release through a new leader: {e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let first = waiter.await.unwrap();
            match first {
                Ok(granted) => granted,
                Err(e) => {
                    assert_eq!(e.code(), Some(ErrorCode::Unavailable), "{e:?}");
                    via_follower.acquire_with("paused-leader", "waiter", LONG_TTL_MS, &options).await.unwrap()
                }
            }
        };
        // Well inside the 75 s the follower would hold the first attempt.
        let granted = tokio::time::timeout(Duration::from_secs(45), answered).await;
        let granted = granted.unwrap_or_else(|_| panic!("still unanswered with its leader paused\n{}", cluster.logs()));
        assert!(granted.token() > holder.token(), "{:?} after {:?}", granted.token(), holder.token());
        let view = via_other.get("paused-leader").await.unwrap().expect("held by the waiter");
        assert_eq!((view.owner.as_str(), view.token), ("waiter", granted.token()));
        cluster.signal(leader, nix::sys::signal::Signal::SIGCONT);
    })
    .await;
}
