//! Bad input against a real 3-node cluster: every limit is answered with its
//! 4xx and a JSON error, and changes nothing.

use crate::common::{bounded, start_cluster, step, ELECTION_BOUND};
use reqwest::StatusCode;
use serde_json::{json, Value};

struct Raw {
    http: reqwest::Client,
    base: String,
}

impl Raw {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_owned());
        }
        let reply = req.send().await.expect("node answers");
        let status = reply.status();
        let body: Value = reply.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    async fn post(&self, path: &str, body: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
}

/// Asserts a JSON error with `status` and `code`.
fn assert_error(case: &str, (status, body): (StatusCode, Value), want: StatusCode, code: &str) {
    assert_eq!(status, want, "{case}: {body}");
    assert_eq!(body["error"]["code"], code, "{case}: {body}");
    assert!(body["error"]["message"].is_string(), "{case}: {body}");
}

// Ensures every documented limit answers its 4xx with a JSON error, through
// the leader and through a follower, and that nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_4xx_and_changes_nothing() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let client = cluster.client();
        let grant_id =
            leasehold_client::AcquireOptions { wait: None, request_id: Some("held-grant".into()), lock_delay: None };
        let held = client.acquire_with("held", "alice", 60_000, &grant_id).await.unwrap();
        for id in [leader, cluster.follower_of(leader)] {
            step(&format!("bad input through node {id}"));
            let raw = Raw {
                http: reqwest::Client::builder().no_proxy().build().unwrap(),
                base: format!("http://{}", cluster.endpoint(id)),
            };
            let acquire = |ttl: Value, owner: Value| json!({ "owner": owner, "ttl_ms": ttl }).to_string();
            let ok_body = acquire(json!(10_000), json!("bob"));
            let bad = StatusCode::BAD_REQUEST;

            let long_name = "n".repeat(257);
            assert_error(
                "name > 256 bytes",
                raw.post(&format!("/v1/locks/{long_name}/acquire"), &ok_body).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "control char in name",
                raw.post("/v1/locks/a%01b/acquire", &ok_body).await,
                bad,
                "invalid_argument",
            );
            assert_error("non-UTF-8 name", raw.post("/v1/locks/%FF/acquire", &ok_body).await, bad, "invalid_argument");
            assert_error(
                "owner > 128 bytes",
                raw.post("/v1/locks/x/acquire", &acquire(json!(10_000), json!("o".repeat(129)))).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "empty owner",
                raw.post("/v1/locks/x/acquire", &acquire(json!(10_000), json!(""))).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "ttl below minimum",
                raw.post("/v1/locks/x/acquire", &acquire(json!(10), json!("bob"))).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "ttl above maximum",
                raw.post("/v1/locks/x/acquire", &acquire(json!(3_600_001u64), json!("bob"))).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "negative ttl",
                raw.post("/v1/locks/x/acquire", &acquire(json!(-1), json!("bob"))).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "ttl as string",
                raw.post("/v1/locks/x/acquire", &acquire(json!("10s"), json!("bob"))).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "unknown field",
                raw.post("/v1/locks/x/acquire", r#"{"owner":"bob","ttl_ms":10000,"color":"red"}"#).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "missing owner",
                raw.post("/v1/locks/x/acquire", r#"{"ttl_ms":10000}"#).await,
                bad,
                "invalid_argument",
            );
            assert_error("invalid JSON", raw.post("/v1/locks/x/acquire", "{not json").await, bad, "invalid_argument");
            let huge = format!(r#"{{"owner":"bob","ttl_ms":10000,"request_id":"{}"}}"#, "r".repeat(70 * 1024));
            assert_error(
                "body > 64 KiB",
                raw.post("/v1/locks/x/acquire", &huge).await,
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
            );
            let no_type =
                raw.http.post(format!("{}/v1/locks/x/acquire", raw.base)).body(ok_body.clone()).send().await.unwrap();
            let status = no_type.status();
            assert_error(
                "no content-type",
                (status, no_type.json().await.unwrap()),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
            );
            assert_error(
                "renew ttl below minimum",
                raw.post("/v1/locks/held/renew", &json!({"token": held.token(), "ttl_ms": 1}).to_string()).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "renew of a free lock",
                raw.post("/v1/locks/free/renew", r#"{"token":1}"#).await,
                StatusCode::NOT_FOUND,
                "not_held",
            );
            assert_error(
                "release with a stale token",
                raw.post("/v1/locks/held/release", &json!({"token": held.token().get() + 1}).to_string()).await,
                StatusCode::CONFLICT,
                "stale_token",
            );
            assert_error(
                "held by another",
                raw.post("/v1/locks/held/acquire", &ok_body).await,
                StatusCode::CONFLICT,
                "held",
            );
            assert_error("get of a free lock", raw.get("/v1/locks/free").await, StatusCode::NOT_FOUND, "not_held");
            assert_error(
                "get with a long name",
                raw.get(&format!("/v1/locks/{long_name}")).await,
                bad,
                "invalid_argument",
            );
            assert_error("list limit 0", raw.get("/v1/locks?limit=0").await, bad, "invalid_argument");
            assert_error("list limit too big", raw.get("/v1/locks?limit=100000").await, bad, "invalid_argument");
            assert_error("list limit not a number", raw.get("/v1/locks?limit=abc").await, bad, "invalid_argument");
            assert_error("unknown endpoint", raw.get("/v1/nothing").await, StatusCode::NOT_FOUND, "not_found");
            assert_error(
                "wrong method",
                raw.get("/v1/locks/x/acquire").await,
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
            );
            assert_error(
                "init twice",
                raw.post("/v1/cluster/init", "{}").await,
                StatusCode::CONFLICT,
                "already_initialized",
            );
            assert_error(
                "bad learner address",
                raw.post("/v1/cluster/learners", r#"{"id":9,"addr":"no port"}"#).await,
                bad,
                "invalid_argument",
            );
            assert_error(
                "empty voter set",
                raw.post("/v1/cluster/membership", r#"{"voters":[]}"#).await,
                bad,
                "invalid_argument",
            );
        }

        step("nothing changed");
        assert!(client.get_record("r").await.unwrap().is_none());
        let locks = client.list("", 100).await.unwrap();
        assert_eq!(locks.len(), 1, "{locks:?}");
        assert_eq!((locks[0].name.as_str(), locks[0].owner.as_str(), locks[0].token), ("held", "alice", held.token()));
        let statuses = cluster.statuses().await;
        for s in statuses.values() {
            assert_eq!(s.members.len(), 3, "membership unchanged on node {}", s.id);
        }
    })
    .await;
}
