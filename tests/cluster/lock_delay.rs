//! Lock delay on a real 3-node cluster: a lease acquired with
//! `lock_delay_ms` that expires keeps its lock from everyone for that long,
//! and the first waiter is granted by the Tick that ends the delay.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{bounded, start_cluster, step, wait_until_free, EventStream, TICK_MS};
use leasehold_client::{AcquireOptions, ErrorCode};

const TTL_MS: u64 = 3_000;
const DELAY_MS: u64 = 3_000;

// Ensures an expired lease with a lock delay answers 409 lock_delayed (with
// delayed_until_tick) to a try-acquire, reports the delay on GET, and hands
// the lock to a waiter exactly on the delay's end tick, with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_delays_the_next_grant() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = Arc::new(cluster.client());
        let mut events = EventStream::open(&cluster.endpoint(2), "delayed").await;
        let delayed = AcquireOptions { lock_delay: Some(Duration::from_millis(DELAY_MS)), ..AcquireOptions::default() };
        let first = client.acquire_with("delayed", "crashed", TTL_MS, &delayed).await.unwrap();

        step("the holder never renews; its lease expires into a lock delay");
        wait_until_free(&client, "delayed", Duration::from_secs(20)).await;
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let free: serde_json::Value = http
            .get(format!("http://{}/v1/locks/delayed", cluster.endpoint(1)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(free["error"]["code"], "not_held", "{free}");
        let until = free["error"]["delayed_until_tick"].as_u64().unwrap_or_else(|| panic!("no delay reported: {free}"));

        step("a try-acquire during the delay is refused: 409 lock_delayed");
        let refused = client.acquire("delayed", "eager", TTL_MS).await.unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::LockDelayed), "{refused:?}");
        assert_eq!(refused.detail().and_then(|d| d.number("delayed_until_tick")), Some(until));

        step("a waiting acquire is granted when the delay ends");
        let waiting = AcquireOptions { wait: Some(Duration::from_secs(30)), ..AcquireOptions::default() };
        let next = client.acquire_with("delayed", "patient", TTL_MS, &waiting).await.unwrap();
        assert!(next.token() > first.token());
        // Granted by the Tick `until`: its deadline is ceil(ttl / tick) + 1 ticks after it.
        assert_eq!(next.grant.deadline_tick, until + TTL_MS.div_ceil(TICK_MS) + 1, "{:?}", next.grant);

        let mut story = Vec::new();
        while story.len() < 5 {
            let e = events.next().await;
            story.push((e["type"].as_str().unwrap().to_string(), e["owner"].as_str().unwrap().to_string(), e));
        }
        let kinds: Vec<(&str, &str)> = story.iter().map(|(t, o, _)| (t.as_str(), o.as_str())).collect();
        assert_eq!(
            kinds,
            [
                ("acquired", "crashed"),
                ("expired", "crashed"),
                ("queued", "patient"),
                ("delay_ended", "crashed"),
                ("acquired", "patient")
            ]
        );
        assert_eq!(story[1].2["delayed_until_tick"].as_u64(), Some(until));
        assert_eq!(story[4].2["token"].as_u64(), Some(next.token().get()));
        assert_eq!(story[3].2["index"], story[4].2["index"], "granted in the entry that ends the delay");
    })
    .await;
}
