//! `GET /readyz` on a real 3-node cluster: every node is ready while a
//! quorum runs; a leader cut from its quorum answers 503 `no_quorum` while
//! `/healthz` still answers 200.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{bounded, start_cluster, step};

/// `(status, JSON body)` of `GET {path}` on `endpoint`.
async fn get(endpoint: &str, path: &str) -> (u16, Value) {
    let http = reqwest::Client::builder().no_proxy().build().expect("client");
    let reply = http.get(format!("http://{endpoint}{path}")).send().await.expect("node answers");
    let status = reply.status().as_u16();
    (status, reply.json().await.expect("a JSON body"))
}

/// Polls `endpoint`'s /readyz until it answers `status` (bounded); returns the body.
async fn wait_readyz(endpoint: &str, status: u16) -> Value {
    let give_up = Instant::now() + Duration::from_secs(20);
    loop {
        let (got, body) = get(endpoint, "/readyz").await;
        if got == status {
            return body;
        }
        assert!(Instant::now() < give_up, "{endpoint} /readyz still {got}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// Ensures /readyz is 200 on every node of a healthy cluster and 503
// `no_quorum` on the leader once both followers are killed (kill -9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_quorum() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(crate::common::ELECTION_BOUND).await.unwrap();
        step("every node is ready and names the leader");
        for id in cluster.ids() {
            let ready = wait_readyz(&cluster.endpoint(id), 200).await;
            assert_eq!((&ready["id"], &ready["leader"]), (&Value::from(id), &Value::from(leader)), "{ready}");
        }

        step("kill -9 both followers: the leader is cut from its quorum");
        for id in cluster.ids().into_iter().filter(|id| *id != leader) {
            cluster.kill(id);
        }
        let endpoint = cluster.endpoint(leader);
        let body = wait_readyz(&endpoint, 503).await;
        assert_eq!(
            (&body["error"]["code"], &body["error"]["reason"]),
            (&Value::from("unavailable"), &Value::from("no_quorum")),
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("has not heard from a quorum for "), "{message}");
        let (status, health) = get(&endpoint, "/healthz").await;
        assert_eq!(status, 200, "{health}");
    })
    .await;
}
