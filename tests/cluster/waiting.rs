//! Waiting queues, request-id retries and the events stream, on real
//! 3-node clusters of `leasehold serve` processes.

use leasehold_client::ErrorCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{bounded, start_cluster, step, EventStream, ELECTION_BOUND};
use leasehold_client::{AcquireOptions, Client, FencingToken};
use serde_json::json;

const LONG_TTL_MS: u64 = 60_000;

fn waiting(wait: Duration) -> AcquireOptions {
    AcquireOptions { wait: Some(wait), ..AcquireOptions::default() }
}

/// Waits (bounded) until the queue of `name` has `n` waiters; returns their owners.
async fn wait_for_queue(client: &Client, name: &str, n: usize) -> Vec<String> {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let owners: Vec<String> = client
            .get(name)
            .await
            .unwrap()
            .map(|v| v.waiters.into_iter().map(|w| w.owner).collect())
            .unwrap_or_default();
        if owners.len() == n {
            return owners;
        }
        assert!(Instant::now() < give_up, "queue of {name} never reached {n}: {owners:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// Ensures 10 waiters on one lock are granted in arrival order, each hand-over
// token equal to the index of the entry that handed over and higher than the
// previous token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_waiters_are_granted_in_arrival_order() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = Arc::new(cluster.client());
        let mut events = EventStream::open(&cluster.endpoint(1), "hot").await;
        let first = client.acquire("hot", "w0", LONG_TTL_MS).await.unwrap();

        step("ten waiters join the queue one after another");
        let mut tasks = Vec::new();
        for i in 1..=10 {
            let waiter = client.clone();
            tasks.push(tokio::spawn(async move {
                let owner = format!("w{i}");
                let lease =
                    waiter.acquire_with("hot", &owner, LONG_TTL_MS, &waiting(Duration::from_secs(60))).await.unwrap();
                // Hold briefly, then pass the lock on.
                waiter.release("hot", lease.token()).await.unwrap();
                lease.token()
            }));
            let queue = wait_for_queue(&client, "hot", i).await;
            assert_eq!(queue.last().unwrap(), &format!("w{i}"));
        }

        step("the holder releases; the lock walks down the queue");
        client.release("hot", first.token()).await.unwrap();
        let mut tokens = Vec::new();
        for task in tasks {
            tokens.push(task.await.unwrap());
        }
        let mut handed = Vec::new();
        while handed.len() < 10 {
            let event = events.next().await;
            if event["type"] == "handed_over" {
                assert_eq!(event["token"], event["index"], "hand-over token is the handing entry's index");
                handed.push((event["owner"].as_str().unwrap().to_string(), event["token"].as_u64().unwrap()));
            }
        }
        let owners: Vec<&str> = handed.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(owners, (1..=10).map(|i| format!("w{i}")).collect::<Vec<_>>());
        let handed_tokens: Vec<FencingToken> = handed.iter().map(|(_, t)| FencingToken::granted_at(*t)).collect();
        assert_eq!(handed_tokens, tokens, "each waiter was answered with its hand-over token");
        assert!(first.token() < tokens[0] && tokens.windows(2).all(|w| w[0] < w[1]));
        assert!(client.get("hot").await.unwrap().is_none());
    })
    .await;
}

// Ensures a wait that runs out gets wait_timeout, and an abandoned waiter
// (its HTTP client went away) leaves the queue and never becomes holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_timeout_and_abandoned_waiter() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let holder = client.acquire("busy", "holder", LONG_TTL_MS).await.unwrap();

        step("a short wait runs out: 409 wait_timeout");
        let err =
            client.acquire_with("busy", "patient", 5_000, &waiting(Duration::from_millis(1_000))).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::WaitTimeout), "{err:?}");
        assert!(wait_for_queue(&client, "busy", 0).await.is_empty());

        step("a waiter whose client goes away leaves the queue");
        let endpoint = cluster.endpoint(cluster.follower_of(cluster.wait_for_leader(ELECTION_BOUND).await.unwrap()));
        let abandoned = tokio::spawn(async move {
            let http = reqwest::Client::builder().no_proxy().build().unwrap();
            http.post(format!("http://{endpoint}/v1/locks/busy/acquire"))
                .json(&json!({"owner": "abandoned", "ttl_ms": LONG_TTL_MS, "wait_ms": 60_000}))
                .send()
                .await
        });
        assert_eq!(wait_for_queue(&client, "busy", 1).await, ["abandoned"]);
        abandoned.abort();
        assert!(wait_for_queue(&client, "busy", 0).await.is_empty());

        step("released with nobody waiting: the abandoned owner never holds it");
        client.release("busy", holder.token()).await.unwrap();
        assert!(client.get("busy").await.unwrap().is_none());
    })
    .await;
}

// Ensures a request_id retried after a kill -9 of the leader returns the same token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_id_retry_after_leader_kill_returns_same_token() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let client = cluster.client();
        let options = AcquireOptions { wait: None, request_id: Some("payment-7f3a".into()), lock_delay: None };
        let original = client.acquire_with("ledger", "worker-1", LONG_TTL_MS, &options).await.unwrap();
        let other = client.acquire("other", "worker-1", LONG_TTL_MS).await.unwrap();

        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        step(&format!("kill -9 the leader (node {leader})"));
        cluster.kill(leader);
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));

        step("the retry gets the original grant");
        let retried = client.acquire_with("ledger", "worker-1", LONG_TTL_MS, &options).await.unwrap();
        assert_eq!(retried.token(), original.token());
        assert!(retried.token() < other.token(), "not a fresh grant");
        step("the same id for another lock is refused");
        let reused = client.acquire_with("elsewhere", "worker-1", LONG_TTL_MS, &options).await.unwrap_err();
        assert_eq!(reused.code(), Some(ErrorCode::RequestIdReused));
    })
    .await;
}

// Ensures the events stream delivers acquire → queued → release → hand-over in
// log order, from a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_tells_acquire_release_hand_over_in_order() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let mut events = EventStream::open(&cluster.endpoint(cluster.follower_of(leader)), "stream").await;
        let client = Arc::new(cluster.client());
        let a = client.acquire("stream", "a", LONG_TTL_MS).await.unwrap();
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move {
                client.acquire_with("stream", "b", LONG_TTL_MS, &waiting(Duration::from_secs(30))).await.unwrap()
            })
        };
        wait_for_queue(&client, "stream", 1).await;
        client.release("stream", a.token()).await.unwrap();
        let b = waiter.await.unwrap();

        let mut seen = Vec::new();
        for _ in 0..4 {
            let e = events.next().await;
            seen.push((
                e["type"].as_str().unwrap().to_string(),
                e["owner"].as_str().unwrap().to_string(),
                e["index"].as_u64().unwrap(),
            ));
        }
        let story: Vec<(&str, &str)> = seen.iter().map(|(t, o, _)| (t.as_str(), o.as_str())).collect();
        assert_eq!(story, [("acquired", "a"), ("queued", "b"), ("released", "a"), ("handed_over", "b")]);
        assert_eq!(seen[0].2, a.token().get());
        assert_eq!(seen[3].2, b.token().get());
        assert_eq!(seen[2].2, seen[3].2, "handed over in the releasing entry: {seen:?}");
        assert!(seen.windows(2).all(|w| w[0].2 <= w[1].2), "log order: {seen:?}");
    })
    .await;
}
