//! Quotas on real 3-node clusters: a flood of multi-acquires past
//! `--max-leases`, and event streams past `--max-subscribers-per-client`.
//! Assertions are on outcomes — what each request was answered, what the
//! nodes report, whether the leader changed — never on speed.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::common::{bounded, start_cluster_with, step, TestCluster};
use leasehold_client::proto::cluster::{ClusterStatus, QuotaUse};

const MAX_LEASES: u64 = 200;
/// Names per multi-acquire, as in the flood: 3 fit under 200.
const NAMES: usize = 64;
/// Multi-acquires in the flood (25 600 leases asked for), and how many are
/// sent at once.
const FLOOD: usize = 400;
const AT_ONCE: usize = 32;
const TTL_MS: u64 = 3_600_000;

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("client")
}

/// Sends `body` to `path` on `endpoint`; the status and the JSON answer.
async fn post(http: &reqwest::Client, endpoint: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let reply = http.post(format!("http://{endpoint}{path}")).json(&body).send().await.expect("request answered");
    let status = reply.status();
    (status, reply.json().await.unwrap_or(Value::Null))
}

/// Node `id`'s own status.
async fn status_of(cluster: &TestCluster, id: u64) -> ClusterStatus {
    cluster.statuses().await.remove(&id).unwrap_or_else(|| panic!("node {id} answers its status"))
}

/// The leader's id and term, as the leader itself reports them.
async fn leader_and_term(cluster: &TestCluster) -> (u64, u64) {
    let leader = cluster.client().status().await.expect("status").leader.expect("a leader");
    let status = status_of(cluster, leader).await;
    assert_eq!(status.role, "leader", "{status:?}");
    (leader, status.term)
}

/// True when `answer` is the 507 `full` refusal naming `quota` and `limit`.
fn refused_full(answer: &(StatusCode, Value), quota: &str, limit: u64) -> bool {
    let error = &answer.1["error"];
    answer.0 == StatusCode::INSUFFICIENT_STORAGE
        && error["code"] == "full"
        && error["what"] == quota
        && error["limit"] == limit
}

/// A multi-acquire body of the `i`-th set of `NAMES` distinct names.
fn multi(i: usize, owner: &str) -> Value {
    let names: Vec<String> = (0..NAMES).map(|n| format!("flood-{i:04}-{n:02}")).collect();
    json!({"names": names, "owner": owner, "ttl_ms": TTL_MS})
}

// Ensures a flood of multi-acquires past --max-leases is answered 507 `full`
// naming the quota, never more leases than the quota are granted, the leader
// keeps its leadership, holders still renew, re-acquire and release, and
// room made by a release is granted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_max_leases_is_refused_and_the_cluster_recovers() {
    bounded(async {
        let cluster = start_cluster_with(3, &["--max-leases", &MAX_LEASES.to_string()]).await;
        let http = http();
        let (leader, term) = leader_and_term(&cluster).await;
        let endpoints = cluster.endpoints();

        step("a flood of multi-acquires over every node");
        let mut answers = Vec::new();
        for wave in (0..FLOOD).collect::<Vec<_>>().chunks(AT_ONCE) {
            let mut sent = JoinSet::new();
            for &i in wave {
                let (http, endpoint) = (http.clone(), endpoints[i % endpoints.len()].clone());
                sent.spawn(async move {
                    (i, post(&http, &endpoint, "/v1/multi/acquire", multi(i, &format!("flooder-{i}"))).await)
                });
            }
            answers.extend(sent.join_all().await);
        }
        let granted: Vec<(usize, u64)> = answers
            .iter()
            .filter(|(_, (status, _))| *status == StatusCode::OK)
            .map(|(i, (_, grant))| (*i, grant["token"].as_u64().expect("a token")))
            .collect();
        for (i, answer) in &answers {
            let ok = answer.0 == StatusCode::OK || refused_full(answer, "leases", MAX_LEASES);
            assert!(ok, "set {i}: {answer:?}\n{}", cluster.logs());
        }
        let room = MAX_LEASES as usize / NAMES;
        assert_eq!(granted.len(), room, "exactly the sets that fit are granted");

        step("single acquires fill the rest, then are refused too");
        let rest = MAX_LEASES as usize - room * NAMES;
        for n in 0..rest {
            let body = json!({"owner": "single", "ttl_ms": TTL_MS});
            let answer =
                post(&http, &endpoints[n % endpoints.len()], &format!("/v1/locks/single-{n}/acquire"), body).await;
            assert_eq!(answer.0, StatusCode::OK, "{answer:?}");
        }
        let body = json!({"owner": "single", "ttl_ms": TTL_MS});
        let answer = post(&http, &endpoints[0], "/v1/locks/one-too-many/acquire", body).await;
        assert!(refused_full(&answer, "leases", MAX_LEASES), "{answer:?}");
        for id in cluster.ids() {
            let status = status_of(&cluster, id).await;
            assert_eq!(status.quotas["leases"], QuotaUse { used: MAX_LEASES, limit: MAX_LEASES }, "node {id}");
        }
        assert_eq!(leader_and_term(&cluster).await, (leader, term), "{}", cluster.logs());

        step("a full cluster still renews, re-acquires and releases");
        let (set, token) = granted[0];
        let name = format!("flood-{set:04}-00");
        let answer = post(&http, &endpoints[1], &format!("/v1/locks/{name}/renew"), json!({"token": token})).await;
        assert_eq!((answer.0, &answer.1["token"]), (StatusCode::OK, &json!(token)), "{answer:?}");
        let again = post(&http, &endpoints[2], "/v1/multi/acquire", multi(set, &format!("flooder-{set}"))).await;
        assert_eq!((again.0, &again.1["reacquired"]), (StatusCode::OK, &json!(true)), "{again:?}");
        let names = multi(set, "")["names"].clone();
        let released = post(&http, &endpoints[0], "/v1/multi/release", json!({"names": names, "token": token})).await;
        assert_eq!(released.0, StatusCode::OK, "{released:?}");

        step("the room a release made is granted again");
        let late = post(&http, &endpoints[1], "/v1/multi/acquire", multi(FLOOD, "late")).await;
        assert_eq!(late.0, StatusCode::OK, "{late:?}");
        let answer = post(&http, &endpoints[2], "/v1/multi/acquire", multi(FLOOD + 1, "later")).await;
        assert!(refused_full(&answer, "leases", MAX_LEASES), "full again: {answer:?}");

        // Counted by the node that answered (a follower answers the client
        // API itself, its commands handed to the leader).
        let mut refused = 0.0;
        for id in cluster.ids() {
            let scrape = crate::metrics::Scrape::of(&cluster.endpoint(id)).await;
            refused += scrape.get("leasehold_quota_refused_total{quota=\"leases\"}").unwrap_or(0.0);
        }
        assert_eq!(refused, (FLOOD - room + 2) as f64, "the nodes counted each refusal once");
        assert_eq!(leader_and_term(&cluster).await, (leader, term), "{}", cluster.logs());
    })
    .await;
}

/// Opens `GET /v1/events` on `endpoint` over a connection of its own; the
/// stream when it is accepted, else the refusal.
async fn open_stream(endpoint: &str) -> Result<reqwest::Response, (StatusCode, Option<String>, Value)> {
    let reply = http().get(format!("http://{endpoint}/v1/events")).send().await.expect("answered");
    if reply.status() == StatusCode::OK {
        return Ok(reply);
    }
    let retry_after = reply.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    Err((reply.status(), retry_after, reply.json().await.unwrap_or(Value::Null)))
}

// Ensures one client address gets at most --max-subscribers-per-client event
// streams on a node, the next answered 503 `overloaded` with Retry-After,
// while other nodes still serve it, locks keep working and the leader keeps
// its leadership; a stream its client closes gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_past_the_per_client_bound_are_refused_until_one_closes() {
    const PER_CLIENT: usize = 2;
    bounded(async {
        let cluster = start_cluster_with(3, &["--max-subscribers-per-client", &PER_CLIENT.to_string()]).await;
        let (leader, term) = leader_and_term(&cluster).await;
        let node = cluster.endpoint(leader);

        step("this address opens its share of the leader's streams");
        let mut streams = Vec::new();
        for _ in 0..PER_CLIENT {
            streams.push(open_stream(&node).await.expect("a stream within the share"));
        }
        let (status, retry_after, body) = open_stream(&node).await.expect_err("one stream too many");
        assert_eq!((status, retry_after.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("1")), "{body}");
        assert_eq!(body["error"]["code"], "overloaded", "{body}");
        let quotas = status_of(&cluster, leader).await.quotas["subscribers"];
        assert_eq!(quotas.used, PER_CLIENT as u64, "{quotas:?}");

        step("another node still serves it, and locks keep working");
        let other = open_stream(&cluster.endpoint(cluster.follower_of(leader))).await.expect("another node's share");
        let lock = cluster.client().acquire("streamed", "w", 10_000).await.expect("acquire");
        cluster.client().release("streamed", lock.token()).await.expect("release");
        assert_eq!(leader_and_term(&cluster).await, (leader, term), "{}", cluster.logs());

        step("a closed stream gives its place back");
        drop(streams.pop());
        // The node notices a stream's client went away when it next writes
        // to it: each round gives every stream two events to write.
        let give_up = Instant::now() + Duration::from_secs(30);
        let reopened = loop {
            let lock = cluster.client().acquire("streamed", "w", 10_000).await.expect("acquire");
            cluster.client().release("streamed", lock.token()).await.expect("release");
            match open_stream(&node).await {
                Ok(stream) => break stream,
                Err(refused) => assert!(Instant::now() < give_up, "the place never came back: {refused:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        drop((streams, other, reopened));
    })
    .await;
}
