//! Real 3- and 5-node clusters of `leasehold serve` processes on loopback:
//! the lock API end to end, leader failure, full restart, quorum loss.

use leasehold_client::ErrorCode;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::{bounded, start_cluster, step, wait_until_free, ELECTION_BOUND};
use leasehold_client::{Client, ClientError, FencingToken};

const TTL_MS: u64 = 3_000;
const LONG_TTL_MS: u64 = 120_000;

// Ensures the lock API works end to end on 3 nodes: acquire through a follower,
// a second owner gets 409, linearizable get from another node, renew, release,
// and expiry after the ttl (never before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_lock_lifecycle() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let via_follower = Client::new(&[cluster.endpoint(follower)]).unwrap();
        let third = cluster.ids().into_iter().find(|id| *id != leader && *id != follower).unwrap();
        let via_third = Client::new(&[cluster.endpoint(third)]).unwrap();

        step("acquire through a follower");
        let lease = via_follower.acquire("orders/42", "alice", TTL_MS).await.unwrap();
        assert_eq!(lease.grant.owner, "alice");
        assert!(lease.token().get() > 0);

        step("a second owner gets 409 held, naming the holder");
        let err = via_third.acquire("orders/42", "bob", TTL_MS).await.unwrap_err();
        match &err {
            ClientError::Api { status: 409, error } => {
                assert_eq!(error.code, ErrorCode::Held);
                assert_eq!(error.holder(), Some("alice"));
                assert_eq!(error.number("token"), Some(lease.token().get()));
            }
            other => panic!("expected 409 held, got {other:?}"),
        }

        step("the same owner re-acquires: same token");
        let again = via_third.acquire("orders/42", "alice", TTL_MS).await.unwrap();
        assert_eq!(again.token(), lease.token());

        step("linearizable get from another node");
        let view = via_third.get("orders/42").await.unwrap().expect("held");
        assert_eq!((view.owner.as_str(), view.token), ("alice", lease.token()));

        step("renew keeps the token; a stale token gets 409");
        let renewed = via_follower.renew("orders/42", lease.token(), Some(TTL_MS)).await.unwrap();
        assert_eq!(renewed.token(), lease.token());
        let stale =
            via_follower.renew("orders/42", FencingToken::granted_at(lease.token().get() - 1), None).await.unwrap_err();
        assert_eq!(stale.code(), Some(ErrorCode::StaleToken));

        step("release; then renew and release say not_held");
        via_third.release("orders/42", lease.token()).await.unwrap();
        assert!(via_follower.get("orders/42").await.unwrap().is_none());
        assert_eq!(
            via_follower.release("orders/42", lease.token()).await.unwrap_err().code(),
            Some(ErrorCode::NotHeld)
        );
        assert_eq!(
            via_follower.renew("orders/42", lease.token(), None).await.unwrap_err().code(),
            Some(ErrorCode::NotHeld)
        );

        step("a lease expires after its ttl, not before");
        let client = cluster.client();
        let sent = Instant::now();
        let lease = client.acquire("expiring", "carol", TTL_MS).await.unwrap();
        loop {
            let held = client.get("expiring").await.unwrap();
            let answered = Instant::now();
            match held {
                // A read answered before sent + ttl must see the lease.
                None => {
                    assert!(answered >= sent + Duration::from_millis(TTL_MS), "lease expired early");
                    break;
                }
                Some(v) => assert_eq!(v.token, lease.token()),
            }
            assert!(answered < sent + Duration::from_secs(30), "lease never expired");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let next = client.acquire("expiring", "dave", TTL_MS).await.unwrap();
        assert!(next.token() > lease.token());

        step("list by prefix");
        client.acquire("jobs/a", "x", LONG_TTL_MS).await.unwrap();
        client.acquire("jobs/b", "x", LONG_TTL_MS).await.unwrap();
        let names: Vec<String> = client.list("jobs/", 10).await.unwrap().into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["jobs/a", "jobs/b"]);
    })
    .await;
}

// Ensures a kill -9 of the leader keeps held locks held and the next grant's
// token above every earlier token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_keeps_locks_and_token_order() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let client = cluster.client();
        step("acquire three locks");
        let mut held = BTreeMap::new();
        for name in ["a", "b", "c"] {
            held.insert(name, client.acquire(name, "holder", LONG_TTL_MS).await.unwrap().token());
        }
        let max_before = *held.values().max().unwrap();

        let old = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        step(&format!("kill -9 the leader (node {old})"));
        cluster.kill(old);
        let new = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        assert_ne!(new, old);

        step("held locks are still held with their tokens");
        for (name, token) in &held {
            let view = client.get(name).await.unwrap().expect("still held");
            assert_eq!(view.token, *token);
        }
        step("the next grants' tokens are higher than every earlier one");
        let next = client.acquire("d", "holder", LONG_TTL_MS).await.unwrap().token();
        assert!(next > max_before);
        client.release("a", held["a"]).await.unwrap();
        let regrant = client.acquire("a", "other", LONG_TTL_MS).await.unwrap().token();
        assert!(regrant > next);
    })
    .await;
}

// Ensures a survivor holds a request sent right after the leader's kill -9
// until the next leader is elected, and answers it then: a client that tries
// once (no retry budget) is granted, not told `unavailable`. And a client
// whose first node is the dead one goes to the next at once, without a
// pause its zero budget could not afford.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_hold_requests_through_a_failover() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let old = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let survivors: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
        let once: Vec<Client> = survivors
            .iter()
            .map(|id| Client::new(&[cluster.endpoint(*id)]).unwrap().with_retry_budget(Duration::ZERO))
            .collect();
        step("warm each survivor's channel to the leader");
        for (client, id) in once.iter().zip(&survivors) {
            client.acquire(&format!("before/{id}"), "w", LONG_TTL_MS).await.unwrap();
        }
        step(&format!("kill -9 the leader (node {old}), then one try through each survivor"));
        cluster.kill(old);
        let tries = once
            .iter()
            .zip(&survivors)
            .map(|(client, id)| async move { (id, client.acquire(&format!("after/{id}"), "w", LONG_TTL_MS).await) });
        for (id, granted) in futures_util::future::join_all(tries).await {
            let lease =
                granted.unwrap_or_else(|e| panic!("node {id} refused during the failover: {e}\n{}", cluster.logs()));
            assert!(lease.token().get() > 0);
        }
        let new = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        assert_ne!(new, old);
        step("a client that lists the dead node first moves on at once, within a zero retry budget");
        let endpoints: Vec<String> =
            std::iter::once(old).chain(survivors.iter().copied()).map(|id| cluster.endpoint(id)).collect();
        let dead_first = Client::new(&endpoints).unwrap().with_retry_budget(Duration::ZERO);
        let lease = dead_first
            .acquire("after/dead-first", "w", LONG_TTL_MS)
            .await
            .unwrap_or_else(|e| panic!("a refused connection was not followed by the next node at once: {e}"));
        assert!(lease.token().get() > 0);
    })
    .await;
}

// Ensures a follower paused (SIGSTOP) well past the silence after which
// followers campaign, then continued, does not unseat the leader: its
// election timer fires as it wakes, but its Pre-Vote finds no voter that
// would elect it (they still hear from the leader), so it never raises the
// term. Without Pre-Vote its higher term would make the leader step down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_back_from_a_pause_does_not_unseat_the_leader() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        client.acquire("before-pause", "w", LONG_TTL_MS).await.unwrap();
        let term = |statuses: &BTreeMap<u64, leasehold_client::proto::cluster::ClusterStatus>| {
            statuses.get(&leader).map(|s| (s.term, s.leader))
        };
        let before = term(&cluster.statuses().await).expect("the leader answers");
        let paused = cluster.follower_of(leader);
        step(&format!("SIGSTOP follower {paused} for 3 s, then SIGCONT"));
        cluster.signal(paused, nix::sys::signal::Signal::SIGSTOP);
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.signal(paused, nix::sys::signal::Signal::SIGCONT);
        step("the follower catches up under the same leader and term");
        let caught_up = async {
            loop {
                let statuses = cluster.statuses().await;
                let applied: Vec<_> = statuses.values().map(|s| s.applied_index).collect();
                if applied.len() == 3 && applied.windows(2).all(|w| w[0] == w[1]) {
                    return statuses;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let statuses = tokio::time::timeout(Duration::from_secs(20), caught_up).await.expect("the follower catches up");
        assert_eq!(
            term(&statuses),
            Some(before),
            "the leader lost its term to the paused follower\n{}",
            cluster.logs()
        );
        client.acquire("after-pause", "w", LONG_TTL_MS).await.unwrap();
    })
    .await;
}

// Ensures stopping all three nodes (kill -9) and starting them again on the
// same data keeps locks and token order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_restart_keeps_locks_and_token_order() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let client = cluster.client();
        step("acquire, release and re-acquire to move tokens");
        let first = client.acquire("ledger", "w1", LONG_TTL_MS).await.unwrap().token();
        client.release("ledger", first).await.unwrap();
        let second = client.acquire("ledger", "w2", LONG_TTL_MS).await.unwrap().token();
        let other = client.acquire("payouts", "w3", LONG_TTL_MS).await.unwrap().token();

        step("kill -9 every node, then start them all again");
        for id in cluster.ids() {
            cluster.kill(id);
        }
        cluster.start_all().unwrap();
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));

        step("locks survived with their tokens");
        let ledger = client.get("ledger").await.unwrap().expect("ledger held");
        assert_eq!((ledger.owner.as_str(), ledger.token), ("w2", second));
        assert_eq!(client.get("payouts").await.unwrap().expect("payouts held").token, other);
        step("token order survived");
        client.release("ledger", second).await.unwrap();
        let third = client.acquire("ledger", "w4", LONG_TTL_MS).await.unwrap().token();
        assert!(third > second && third > other);
    })
    .await;
}

// Ensures 5 nodes grant with two nodes down, and with three down answer 503,
// grant nothing and expire nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_need_a_quorum() {
    bounded(async {
        let mut cluster = start_cluster(5).await;
        let client = cluster.client().with_retry_budget(Duration::from_secs(4));
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let expiring = client.acquire("short", "x", TTL_MS).await.unwrap();

        step("kill -9 two nodes, the leader among them");
        let mut down = vec![leader, cluster.follower_of(leader)];
        for id in &down {
            cluster.kill(*id);
        }
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let granted = client.acquire("with-two-down", "x", LONG_TTL_MS).await.unwrap();
        assert!(granted.token() > expiring.token());
        wait_until_free(&client, "short", Duration::from_secs(30)).await;
        let short = client.acquire("short", "y", TTL_MS).await.unwrap();
        // A follower learns the commit of the last grant with the next
        // heartbeat: wait for that, so the survivors' view below is current.
        let caught_up = async {
            loop {
                let applied: Vec<Option<u64>> = cluster.statuses().await.values().map(|s| s.applied_index).collect();
                if applied.len() == 3 && applied.windows(2).all(|w| w[0] == w[1]) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), caught_up).await.expect("the three live nodes catch up");

        step("kill -9 a third node: no quorum");
        let third = cluster.ids().into_iter().find(|id| !down.contains(id)).unwrap();
        cluster.kill(third);
        down.push(third);
        let err = client.acquire("with-three-down", "x", LONG_TTL_MS).await.unwrap_err();
        match &err {
            ClientError::Unavailable(_) | ClientError::Api { status: 503, .. } => {}
            other => panic!("expected 503, got {other:?}"),
        }
        step("survivors granted nothing and expired nothing");
        let before = cluster.statuses().await;
        tokio::time::sleep(Duration::from_millis(TTL_MS + 1_000)).await;
        let after = cluster.statuses().await;
        assert_eq!(after.len(), 2, "two survivors answer status");
        for (id, s) in &after {
            assert_eq!(s.locks_held, before[id].locks_held, "node {id} changed its lock table without quorum");
            assert_eq!(s.tick, before[id].tick, "node {id} ticked without quorum");
            assert_eq!(s.applied_index, before[id].applied_index, "node {id} applied without quorum");
        }
        assert_eq!(before.values().next().unwrap().locks_held, 2, "with-two-down and short are held");

        step("quorum back: grants resume above every earlier token");
        cluster.start(down[0]).unwrap();
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let resumed = cluster.client().acquire("after-quorum", "x", LONG_TTL_MS).await.unwrap();
        assert!(resumed.token() > short.token());
    })
    .await;
}
