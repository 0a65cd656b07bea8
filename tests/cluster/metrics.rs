//! `GET /metrics` on a real 3-node cluster: every documented series is
//! exposed, and the lock, tick, Raft and log series move when locks are used.

use leasehold_client::ErrorCode;
use std::time::{Duration, Instant};

use crate::common::{bounded, leasehold_run, start_cluster, step, wait_until_free};
use leasehold_client::{AcquireOptions, FencingToken};

const LONG_TTL_MS: u64 = 60_000;

/// One scrape of a node's `/metrics` (through a client that ignores
/// `HTTP_PROXY`); `peer_port` and `handoff` read the forwarded counts with it.
pub(crate) struct Scrape(String);

impl Scrape {
    pub(crate) async fn of(endpoint: &str) -> Scrape {
        let http = reqwest::Client::builder().no_proxy().build().expect("client");
        let reply = http.get(format!("http://{endpoint}/metrics")).send().await.expect("scrape");
        assert!(reply.status().is_success(), "scrape: {}", reply.status());
        let content_type = reply.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(content_type.starts_with("application/openmetrics-text"), "content type {content_type}");
        let text = reply.text().await.expect("scrape body");
        assert!(text.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
        Scrape(text)
    }

    /// The value of `series` (name with its labels, as exposed), if exposed.
    pub(crate) fn get(&self, series: &str) -> Option<f64> {
        self.0.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn value(&self, series: &str) -> f64 {
        self.get(series).unwrap_or_else(|| panic!("{series} not exposed in:\n{}", self.0))
    }
}

/// Scrapes `endpoint` until `series` reaches `at_least` (bounded): some
/// series follow applies on followers or the ticker, a moment later.
async fn wait_for(endpoint: &str, series: &str, at_least: f64) -> Scrape {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let scrape = Scrape::of(endpoint).await;
        if scrape.get(series).is_some_and(|v| v >= at_least) {
            return scrape;
        }
        assert!(Instant::now() < give_up, "{series} never reached {at_least} on {endpoint}:\n{}", scrape.0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// Ensures /metrics exposes the lock, queue, tick, Raft and log series and that
// they move when locks are acquired, refused, renewed, released, waited for,
// handed over and let expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_when_locks_are_used() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(crate::common::ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let (at_leader, at_follower) = (cluster.endpoint(leader), cluster.endpoint(follower));
        let client = cluster.client();
        let before = Scrape::of(&at_leader).await;
        for series in [
            "leasehold_live_leases",
            "leasehold_queue_depth",
            "leasehold_tick",
            "leasehold_tick_lag_seconds",
            "leasehold_raft_term",
            "leasehold_raft_is_leader",
            "leasehold_raft_leader_changes_total",
            "leasehold_raft_commit_index",
            "leasehold_raft_applied_index",
            "leasehold_raft_last_log_index",
            "leasehold_acquire_wait_seconds_count",
            "leasehold_hold_seconds_count",
            "leasehold_log_append_seconds_count",
            "leasehold_log_flush_seconds_count",
        ] {
            before.value(series);
        }
        assert_eq!(before.value("leasehold_raft_is_leader"), 1.0);
        assert!(before.value("leasehold_raft_term") >= 1.0);
        assert!(before.value("leasehold_raft_leader_changes_total") >= 1.0, "the first election is a change");
        assert!(before.value("leasehold_log_flush_seconds_count") >= 1.0);
        assert!(before.value(&format!("leasehold_raft_replication_lag_entries{{follower=\"{follower}\"}}")) >= 0.0);
        let (version, commit) = (env!("CARGO_PKG_VERSION"), env!("LEASEHOLD_COMMIT"));
        let build_info = format!("leasehold_build_info{{version=\"{version}\",commit=\"{commit}\"}}");
        assert_eq!(before.value(&build_info), 1.0);

        step("acquire, a refused acquire, renew, a stale renew, release");
        let lease = client.acquire("m-held", "alice", LONG_TTL_MS).await.unwrap();
        assert_eq!(client.acquire("m-held", "bob", LONG_TTL_MS).await.unwrap_err().code(), Some(ErrorCode::Held));
        client.renew("m-held", lease.token(), None).await.unwrap();
        assert!(client.renew("m-held", FencingToken::granted_at(lease.token().get() + 1), None).await.is_err());
        let live = Scrape::of(&at_leader).await;
        assert_eq!(live.value("leasehold_live_leases"), 1.0);
        client.release("m-held", lease.token()).await.unwrap();

        step("a waiter queues behind a holder and gets the lock on release");
        let holder = client.acquire("m-queue", "first", LONG_TTL_MS).await.unwrap();
        let waiter_client = cluster.client();
        let waiter = tokio::spawn(async move {
            let wait = AcquireOptions { wait: Some(Duration::from_secs(60)), request_id: None, lock_delay: None };
            waiter_client.acquire_with("m-queue", "second", LONG_TTL_MS, &wait).await
        });
        wait_for(&at_leader, "leasehold_queue_depth", 1.0).await;
        // Let the waiter spend a few ticks in the queue.
        tokio::time::sleep(Duration::from_millis(500)).await;
        client.release("m-queue", holder.token()).await.unwrap();
        let second = waiter.await.unwrap().unwrap();
        client.release("m-queue", second.token()).await.unwrap();

        step("a short lease expires; an acquire with a ttl under the minimum is refused");
        let refused = client.acquire("m-short", "carol", 300).await.unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::InvalidArgument));
        client.acquire("m-short", "carol", 3_000).await.unwrap();
        wait_until_free(&client, "m-short", Duration::from_secs(20)).await;

        step("a request sent to a follower is answered there, its command handed to the leader");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let reply = http
            .post(format!("http://{at_follower}/v1/locks/m-forwarded/acquire"))
            .json(&serde_json::json!({ "owner": "dave", "ttl_ms": LONG_TTL_MS }))
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_success(), "forwarded acquire: {}", reply.status());

        step("the series moved");
        let after = wait_for(&at_leader, "leasehold_expiries_total{result=\"freed\"}", 1.0).await;
        assert_eq!(
            after.value("leasehold_acquires_total{result=\"granted\"}"),
            4.0,
            "alice, first, second, carol (dave's is counted on the follower that answered it)"
        );
        assert_eq!(after.value("leasehold_acquires_total{result=\"held\"}"), 1.0);
        assert_eq!(after.value("leasehold_acquires_total{result=\"invalid_argument\"}"), 1.0);
        assert_eq!(after.value("leasehold_renews_total{result=\"renewed\"}"), 1.0);
        assert_eq!(after.value("leasehold_renews_total{result=\"stale_token\"}"), 1.0);
        assert_eq!(after.value("leasehold_releases_total{result=\"released\"}"), 3.0);
        assert!(after.value("leasehold_acquire_wait_seconds_count") >= 1.0, "the waiter's wait was observed");
        assert!(after.value("leasehold_acquire_wait_seconds_sum") > 0.0, "it waited at least a tick");
        assert!(after.value("leasehold_hold_seconds_count") >= 4.0, "alice, first, second, carol");
        assert_eq!(after.value("leasehold_live_leases"), 1.0, "dave's lease");
        assert_eq!(after.value("leasehold_queue_depth"), 0.0);
        assert!(after.value("leasehold_tick") > before.value("leasehold_tick"));
        assert!(after.value("leasehold_tick_lag_seconds") >= 0.0);
        assert!(after.value("leasehold_raft_commit_index") > before.value("leasehold_raft_commit_index"));
        assert!(after.value("leasehold_raft_applied_index") > before.value("leasehold_raft_applied_index"));
        assert!(after.value("leasehold_log_append_seconds_count") > before.value("leasehold_log_append_seconds_count"));

        // Expiries and hold times are applied on every replica; requests are
        // counted where they are answered.
        let on_follower = wait_for(&at_follower, "leasehold_expiries_total{result=\"freed\"}", 1.0).await;
        assert_eq!(on_follower.value("leasehold_raft_is_leader"), 0.0);
        assert!(on_follower.value("leasehold_forwarded_requests_total{result=\"handed\"}") >= 1.0);
        assert!(
            on_follower.get("leasehold_forwarded_requests_total{result=\"relayed\"}").is_none(),
            "handed, not relayed"
        );
        assert_eq!(on_follower.value("leasehold_acquires_total{result=\"granted\"}"), 1.0, "dave's, answered here");
        assert!(on_follower.value("leasehold_hold_seconds_count") >= 4.0);
    })
    .await;
}

// Ensures the build's version and commit show in `leasehold --version` and in
// every node's /v1/cluster/status, as the build script recorded them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_and_commit_everywhere() {
    bounded(async {
        let (version, commit) = (env!("CARGO_PKG_VERSION"), env!("LEASEHOLD_COMMIT"));
        assert!(!commit.is_empty());
        let out = leasehold_run(&["--version"]).await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("leasehold {version} (commit {commit})\n"));
        let cluster = start_cluster(3).await;
        let statuses = cluster.statuses().await;
        assert_eq!(statuses.len(), 3);
        for status in statuses.values() {
            assert_eq!((status.version.as_str(), status.commit.as_str()), (version, commit));
        }
    })
    .await;
}
