//! The API in process: `router().oneshot(..)` against a real one-node
//! cluster (its own Raft log and state machine in a temp folder), no socket.
//! The multi-process tests under `tests/` cover the same API across nodes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, ApiConfig, RequestLimits};
use crate::node::{InitialClusterState, Node, NodeConfig, PeerTransport, DEFAULT_QUOTAS};
use leasehold_core::{Principal, Quotas};

mod access;
mod shared;

/// One-node cluster, its router, and the folder it lives in.
struct OneNode {
    node: Arc<Node>,
    router: Router,
    _dir: tempfile::TempDir,
}

impl OneNode {
    /// A one-node cluster, once its node leads.
    async fn start() -> OneNode {
        OneNode::start_with(DEFAULT_QUOTAS, ApiConfig::default()).await
    }

    /// A one-node cluster under these quotas and API limits, once its node leads.
    async fn start_with(quotas: Quotas, api: ApiConfig) -> OneNode {
        let api = OneNode::open_with(InitialClusterState::New, quotas, api).await;
        tokio::time::timeout(Duration::from_secs(20), async {
            while api.node.status().role != "leader" {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the only node becomes leader");
        api
    }

    /// The node listed alone in its initial members, started with `state`.
    async fn open(state: InitialClusterState) -> OneNode {
        OneNode::open_with(state, DEFAULT_QUOTAS, ApiConfig::default()).await
    }

    async fn open_with(state: InitialClusterState, quotas: Quotas, api: ApiConfig) -> OneNode {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = NodeConfig {
            id: 1,
            // Nothing dials it: a one-node cluster has no peers.
            advertise: "127.0.0.1:9".into(),
            peer_advertise: None,
            data_dir: dir.path().to_owned(),
            tick_ms: 100,
            initial_members: BTreeMap::from([(1, crate::raft::Member { addr: "127.0.0.1:9".into(), peer_addr: None })]),
            initial_cluster_state: state,
            snapshot_every: 10_000,
            quotas,
            event_history: crate::store::DEFAULT_EVENT_HISTORY,
            peers: PeerTransport::default(),
        };
        let node = Node::start(&config).await.expect("node starts");
        let router = router(node.clone(), &api);
        OneNode { node, router, _dir: dir }
    }

    /// Sends one request; returns the status and the JSON body (`null` when empty).
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(path);
        let body = match body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(json.to_string())
            }
            None => Body::empty(),
        };
        self.send(request.body(body).expect("request builds")).await
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, Value) {
        let response = self.router.clone().oneshot(request).await.expect("router answers");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

impl Drop for OneNode {
    fn drop(&mut self) {
        let node = self.node.clone();
        tokio::spawn(async move { node.shutdown().await });
    }
}

// Ensures the lock lifecycle through the router: grant with a token, 409
// naming the holder, renew under the token, release, then 404 when free.
#[tokio::test]
async fn lifecycle_through_the_router() {
    let api = OneNode::start().await;
    let (status, grant) =
        api.call("POST", "/v1/locks/orders/acquire", Some(json!({"owner": "alice", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let token = grant["token"].as_u64().expect("a token");
    assert_eq!(grant["reacquired"], false);

    let (status, held) =
        api.call("POST", "/v1/locks/orders/acquire", Some(json!({"owner": "bob", "ttl_ms": 5000}))).await;
    assert_eq!(
        (status, &held["error"]["code"], &held["error"]["holder"]),
        (StatusCode::CONFLICT, &json!("held"), &json!("alice"))
    );

    let (status, renewed) = api.call("POST", "/v1/locks/orders/renew", Some(json!({"token": token}))).await;
    assert_eq!((status, renewed["token"].as_u64()), (StatusCode::OK, Some(token)));
    let (status, stale) = api.call("POST", "/v1/locks/orders/renew", Some(json!({"token": token + 1}))).await;
    assert_eq!((status, &stale["error"]["code"]), (StatusCode::CONFLICT, &json!("stale_token")));

    let (status, _) = api.call("POST", "/v1/locks/orders/release", Some(json!({"token": token}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, free) = api.call("GET", "/v1/locks/orders", None).await;
    assert_eq!((status, &free["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_held")));
}

// Ensures /healthz answers for a live process while /readyz answers 503
// `no_leader` until the node leads and has applied what it committed, then 200.
#[tokio::test]
async fn readyz_needs_a_leader_and_healthz_does_not() {
    let waiting = OneNode::open(InitialClusterState::Existing).await;
    let (status, health) = waiting.call("GET", "/healthz", None).await;
    assert_eq!((status, &health["leader"]), (StatusCode::OK, &Value::Null));
    let (status, body) = waiting.call("GET", "/readyz", None).await;
    assert_eq!(
        (status, &body["error"]["code"], &body["error"]["reason"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("unavailable"), &json!("no_leader")),
        "{body}"
    );

    let api = OneNode::start().await;
    let (status, _) =
        api.call("POST", "/v1/locks/ready/acquire", Some(json!({"owner": "alice", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, ready) = api.call("GET", "/readyz", None).await;
    assert_eq!((status, &ready["status"], &ready["leader"]), (StatusCode::OK, &json!("ready"), &json!(1)), "{ready}");
    assert!(ready["applied_index"].as_u64() >= ready["committed_index"].as_u64(), "{ready}");
    assert!(ready["millis_since_heard"].as_u64().is_some_and(|ms| ms <= 600), "{ready}");
}

// Ensures /healthz answers 503 `unavailable` (reason `stopped`) once the
// node's Raft has stopped, so that an orchestrator restarts a node whose
// Raft core quit (a storage error stops it the same way), and 200 before.
#[tokio::test]
async fn healthz_fails_once_raft_has_stopped() {
    let api = OneNode::start().await;
    let (status, health) = api.call("GET", "/healthz", None).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &json!("ok")), "{health}");
    api.node.shutdown().await;
    let (status, stopped) = api.call("GET", "/healthz", None).await;
    assert_eq!(
        (status, &stopped["error"]["code"], &stopped["error"]["reason"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("unavailable"), &json!("stopped")),
        "{stopped}"
    );
}

// Ensures a waiting acquire is handed the lock by the release, with the
// release entry's (higher) index as its token, and that a waiter whose
// request is dropped leaves the queue.
#[tokio::test]
async fn waiting_acquire_is_handed_the_lock_and_a_dropped_waiter_leaves() {
    let api = Arc::new(OneNode::start().await);
    let (_, first) = api.call("POST", "/v1/locks/job/acquire", Some(json!({"owner": "a", "ttl_ms": 5000}))).await;
    let token = first["token"].as_u64().expect("a token");

    let waiter = {
        let api = api.clone();
        tokio::spawn(async move {
            api.call("POST", "/v1/locks/job/acquire", Some(json!({"owner": "b", "ttl_ms": 5000, "wait_ms": 20000})))
                .await
        })
    };
    let abandoned = {
        let api = api.clone();
        tokio::spawn(async move {
            api.call("POST", "/v1/locks/job/acquire", Some(json!({"owner": "c", "ttl_ms": 5000, "wait_ms": 20000})))
                .await
        })
    };
    let queued = |view: &Value| view["waiters"].as_array().map_or(0, Vec::len);
    let wait_for_waiters = |n: usize| {
        let api = api.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                while queued(&api.call("GET", "/v1/locks/job", None).await.1) != n {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{n} waiters in the queue"));
        }
    };
    wait_for_waiters(2).await;
    abandoned.abort();
    wait_for_waiters(1).await;

    let (status, _) = api.call("POST", "/v1/locks/job/release", Some(json!({"token": token}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, handed) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("answered").unwrap();
    assert_eq!((status, &handed["owner"]), (StatusCode::OK, &json!("b")), "{handed}");
    assert!(handed["token"].as_u64().expect("a token") > token, "hand-over tokens grow: {handed}");
}

// Ensures bad input gets its JSON error and changes nothing.
#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let api = OneNode::start().await;
    let cases = [
        (json!({"owner": "a", "ttl_ms": 10}), StatusCode::BAD_REQUEST, "invalid_argument"),
        (json!({"owner": "", "ttl_ms": 5000}), StatusCode::BAD_REQUEST, "invalid_argument"),
        (json!({"owner": "a", "ttl_ms": 5000, "color": "red"}), StatusCode::BAD_REQUEST, "invalid_argument"),
        (json!({"owner": "a"}), StatusCode::BAD_REQUEST, "invalid_argument"),
    ];
    for (body, status, code) in cases {
        let (got, error) = api.call("POST", "/v1/locks/x/acquire", Some(body.clone())).await;
        assert_eq!((got, &error["error"]["code"]), (status, &json!(code)), "{body}");
    }
    let no_type = Request::post("/v1/locks/x/acquire").body(Body::from(r#"{"owner":"a","ttl_ms":5000}"#)).unwrap();
    let (status, error) = api.send(no_type).await;
    assert_eq!(
        (status, &error["error"]["code"]),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, &json!("unsupported_media_type"))
    );
    let (status, listed) = api.call("GET", "/v1/locks", None).await;
    assert_eq!((status, listed["locks"].as_array().map(Vec::len)), (StatusCode::OK, Some(0)));
}

// Ensures the status carries a state digest only when asked, that the
// digest moves with the table, and that a bad `digest` value is a JSON 400.
#[tokio::test]
async fn status_digest_on_request() {
    let api = OneNode::start().await;
    let (status, plain) = api.call("GET", "/v1/cluster/status", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(plain.get("state_digest").is_none(), "{plain}");
    let digest = || async {
        let (status, body) = api.call("GET", "/v1/cluster/status?digest=true", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let digest = body["state_digest"]["digest"].as_str().unwrap_or_else(|| panic!("a digest: {body}")).to_owned();
        assert_eq!(digest.len(), 16, "{digest}");
        digest
    };
    // After an acknowledged write the node has applied something.
    let (status, grant) = api.call("POST", "/v1/locks/d/acquire", Some(json!({"owner": "o", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK);
    let before = digest().await;
    let (status, _) = api.call("POST", "/v1/locks/d/release", Some(json!({"token": grant["token"]}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(digest().await, before);
    let (status, bad) = api.call("GET", "/v1/cluster/status?digest=maybe", None).await;
    assert_eq!((status, &bad["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{bad}");
}

/// Where the committed OpenAPI document is.
const OPENAPI_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");

// Ensures the document the router serves at /openapi.json is the one
// committed as docs/openapi.json, so a change to the API shows in review.
// After a deliberate change, regenerate the file with
//   LEASEHOLD_WRITE_OPENAPI=1 cargo test --lib openapi_document_is_committed
// and commit it.
#[tokio::test]
async fn openapi_document_is_committed() {
    let api = OneNode::start().await;
    let (status, served) = api.call("GET", "/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let text = super::openapi::document_text();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), served, "document_text() is the served document");
    if std::env::var_os("LEASEHOLD_WRITE_OPENAPI").is_some_and(|v| v == "1") {
        std::fs::write(OPENAPI_FILE, &text).expect("docs/openapi.json written");
    }
    let committed = std::fs::read_to_string(OPENAPI_FILE).unwrap_or_default();
    assert!(
        committed == text,
        "docs/openapi.json differs from the served document; regenerate it with \
         LEASEHOLD_WRITE_OPENAPI=1 cargo test --lib openapi_document_is_committed"
    );
}

// Ensures what the fuzzer (.ci/schemathesis, ASCII strings only) leaves
// out: bounds are UTF-8 bytes, C1 control characters are refused, and
// integers are read in every JSON spelling; refusals change nothing.
#[tokio::test]
async fn multi_byte_bounds_and_number_spellings() {
    let api = OneNode::start().await;
    let acquire = |name: &str| format!("/v1/locks/{}/acquire", encode(name));
    let at_bound = "é".repeat(128); // 256 bytes
    let (status, grant) =
        api.call("POST", &acquire(&at_bound), Some(json!({"owner": "ö".repeat(64), "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let over = "é".repeat(129); // 258 bytes, 129 characters
    let (status, error) = api.call("POST", &acquire(&over), Some(json!({"owner": "a", "ttl_ms": 5000}))).await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("name")), "{error}");
    let (status, error) = api.call("POST", &acquire("n"), Some(json!({"owner": "ö".repeat(65), "ttl_ms": 5000}))).await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("owner")), "{error}");
    let (status, error) = api.call("POST", &acquire("n"), Some(json!({"owner": "a\u{85}b", "ttl_ms": 5000}))).await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("owner")), "{error}");

    let (status, grant) = api.call("POST", &acquire("f"), Some(json!({"owner": "a", "ttl_ms": 5000.0}))).await;
    assert_eq!((status, &grant["ttl_ms"]), (StatusCode::OK, &json!(5000)), "{grant}");
    let token = grant["token"].as_u64().expect("a token");
    let (status, renewed) =
        api.call("POST", "/v1/locks/f/renew", Some(json!({"token": token as f64, "ttl_ms": 6e3}))).await;
    assert_eq!((status, &renewed["ttl_ms"]), (StatusCode::OK, &json!(6000)), "{renewed}");
    for token in [json!(token as f64 + 0.5), json!(-1), json!(1e20)] {
        let (status, error) = api.call("POST", "/v1/locks/f/release", Some(json!({"token": token}))).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{token}");
    }
    let (status, listed) = api.call("GET", "/v1/locks", None).await;
    assert_eq!((status, listed["locks"].as_array().map(Vec::len)), (StatusCode::OK, Some(2)), "{listed}");
}

/// `s` percent-encoded for a path segment.
fn encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

// Ensures snapshots asked for back to back, and at once, while entries are
// applied, are each answered promptly. openraft ignores a trigger while it
// builds a snapshot; a request whose trigger fell into another build used
// to wait for the next automatic snapshot (the fuzzer met it as a hang of
// more than 20 s; a 503 after two minutes). The race is narrow on a table
// this small, so this guards the re-trigger rather than reliably
// reproducing the hang.
#[tokio::test]
async fn snapshots_asked_back_to_back_are_answered() {
    let api = Arc::new(OneNode::start().await);
    for round in 0..3 {
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let api = api.clone();
                tokio::spawn(async move { api.call("POST", "/v1/cluster/snapshot", None).await })
            })
            .collect();
        for call in calls {
            let (status, taken) =
                tokio::time::timeout(Duration::from_secs(15), call).await.expect("answered in time").unwrap();
            assert_eq!(status, StatusCode::OK, "round {round}: {taken}");
        }
        api.call("POST", "/v1/locks/s/acquire", Some(json!({"owner": format!("o{round}"), "ttl_ms": 3000}))).await;
    }
}

// Ensures lock_delay_ms is bounded like the other durations, a refused one
// changes nothing, and an accepted one is a plain grant.
#[tokio::test]
async fn lock_delay_is_bounded() {
    let api = OneNode::start().await;
    let max = leasehold_core::Limits::DEFAULT.max_lock_delay_ms;
    for delay in [json!(max + 1), json!(-1), json!("5s"), json!(0.5)] {
        let body = json!({"owner": "a", "ttl_ms": 5000, "lock_delay_ms": delay});
        let (status, error) = api.call("POST", "/v1/locks/d/acquire", Some(body)).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{error}");
    }
    let (status, free) = api.call("GET", "/v1/locks/d", None).await;
    assert_eq!((status, free["error"].get("delayed_until_tick")), (StatusCode::NOT_FOUND, None), "{free}");
    let body = json!({"owner": "a", "ttl_ms": 5000, "lock_delay_ms": max});
    let (status, grant) = api.call("POST", "/v1/locks/d/acquire", Some(body)).await;
    assert_eq!((status, grant.get("lock_delay_ms")), (StatusCode::OK, None), "{grant}");
}

// Ensures a multi-acquire's bad input gets a 400 naming the field, and
// changes nothing: no list, an empty or over-long one, a name twice, a bad
// name, an unknown field; and a multi-release without its token.
#[tokio::test]
async fn multi_acquire_bad_input_is_refused_and_changes_nothing() {
    let api = OneNode::start().await;
    let too_many: Vec<String> = (0..=leasehold_core::Limits::DEFAULT.max_names).map(|i| format!("n{i}")).collect();
    let bodies = [
        (json!({"owner": "o", "ttl_ms": 5000}), None),
        (json!({"names": [], "owner": "o", "ttl_ms": 5000}), Some("names")),
        (json!({"names": too_many, "owner": "o", "ttl_ms": 5000}), Some("names")),
        (json!({"names": ["a", "b", "a"], "owner": "o", "ttl_ms": 5000}), Some("names")),
        (json!({"names": ["a", "x".repeat(257)], "owner": "o", "ttl_ms": 5000}), Some("names")),
        (json!({"names": ["a", "b\u{7}"], "owner": "o", "ttl_ms": 5000}), Some("names")),
        (json!({"names": "a", "owner": "o", "ttl_ms": 5000}), None),
        (json!({"names": ["a"], "owner": "o", "ttl_ms": 5000, "name": "a"}), None),
        (json!({"names": ["a"], "owner": "o", "ttl_ms": 1}), Some("ttl_ms")),
        (json!({"names": ["a"], "owner": "", "ttl_ms": 5000}), Some("owner")),
    ];
    for (body, field) in bodies {
        let (status, error) = api.call("POST", "/v1/multi/acquire", Some(body.clone())).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{body}");
        if let Some(field) = field {
            assert_eq!(error["error"]["field"], field, "{body}: {error}");
        }
    }
    let (status, error) = api.call("POST", "/v1/multi/release", Some(json!({"names": ["a"]}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    let (_, listed) = api.call("GET", "/v1/locks", None).await;
    assert_eq!(listed["locks"], json!([]), "a refused request changed the table");
}

// Ensures a multi-acquire grants every lock under one token, answers a retry
// with the same request id with the same grants, refuses a set with a held
// lock with 409 held listing every conflict (granting none), and a
// multi-release frees them together.
#[tokio::test]
async fn multi_acquire_all_or_none_through_the_router() {
    let api = OneNode::start().await;
    let body = json!({"names": ["x", "y"], "owner": "alice", "ttl_ms": 5000, "request_id": "multi-1"});
    let (status, granted) = api.call("POST", "/v1/multi/acquire", Some(body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    let token = granted["token"].as_u64().expect("a token");
    let grants = granted["grants"].as_array().expect("grants");
    let named: Vec<_> = grants.iter().map(|g| (g["name"].as_str().unwrap(), g["token"].as_u64().unwrap())).collect();
    assert_eq!(named, [("x", token), ("y", token)]);
    assert_eq!(granted["reacquired"], false);
    let (status, retried) = api.call("POST", "/v1/multi/acquire", Some(body)).await;
    assert_eq!((status, &retried), (StatusCode::OK, &granted), "a retry gets the first answer");

    let (_, single) = api.call("POST", "/v1/locks/z/acquire", Some(json!({"owner": "bob", "ttl_ms": 5000}))).await;
    let z = single["token"].as_u64().expect("a token");
    let conflicting = json!({"names": ["free", "x", "z"], "owner": "carol", "ttl_ms": 5000});
    let (status, refused) = api.call("POST", "/v1/multi/acquire", Some(conflicting)).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("held")), "{refused}");
    assert_eq!(
        refused["error"]["conflicts"],
        json!([
            {"name": "x", "reason": "held", "holder": "alice", "token": token, "expires_in_ms": refused["error"]["conflicts"][0]["expires_in_ms"]},
            {"name": "z", "reason": "held", "holder": "bob", "token": z, "expires_in_ms": refused["error"]["conflicts"][1]["expires_in_ms"]},
        ])
    );
    let (status, _) = api.call("GET", "/v1/locks/free", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a refused multi-acquire granted part of its set");

    let (status, stale) =
        api.call("POST", "/v1/multi/release", Some(json!({"names": ["x", "z"], "token": token}))).await;
    assert_eq!((status, &stale["error"]["code"]), (StatusCode::CONFLICT, &json!("stale_token")), "{stale}");
    let (status, released) =
        api.call("POST", "/v1/multi/release", Some(json!({"names": ["x", "y"], "token": token}))).await;
    assert_eq!((status, &released), (StatusCode::OK, &json!({"names": ["x", "y"], "token": token, "released": true})));
    let (_, listed) = api.call("GET", "/v1/locks", None).await;
    assert_eq!(listed["locks"].as_array().map(Vec::len), Some(1), "only z is still held: {listed}");
}

// Ensures a waiting multi-acquire holds none of its locks before all: a free
// lock it waits for is refused to a try-acquire (409 reserved), and the
// release of its last lock answers it with every lock under that entry's token.
#[tokio::test]
async fn waiting_multi_acquire_is_granted_all_at_once() {
    let api = Arc::new(OneNode::start().await);
    let (_, held) = api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "x", "ttl_ms": 5000}))).await;
    let a = held["token"].as_u64().expect("a token");
    let waiter = {
        let api = api.clone();
        let body = json!({"names": ["a", "b"], "owner": "m", "ttl_ms": 5000, "wait_ms": 20000});
        tokio::spawn(async move { api.call("POST", "/v1/multi/acquire", Some(body)).await })
    };
    let reserved = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (status, answer) =
                api.call("POST", "/v1/locks/b/acquire", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
            if status == StatusCode::CONFLICT {
                return answer;
            }
            // Not queued yet: b was granted to s; give it back and look again.
            let token = answer["token"].as_u64().expect("a grant");
            api.call("POST", "/v1/locks/b/release", Some(json!({"token": token}))).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the multi-acquire queued");
    assert_eq!((&reserved["error"]["code"], &reserved["error"]["first_waiter"]), (&json!("reserved"), &json!("m")));

    let (status, _) = api.call("POST", "/v1/locks/a/release", Some(json!({"token": a}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, granted) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("answered").unwrap();
    assert_eq!(status, StatusCode::OK, "{granted}");
    let token = granted["token"].as_u64().expect("a token");
    assert!(token > a);
    let tokens: Vec<_> = granted["grants"].as_array().unwrap().iter().map(|g| g["token"].as_u64()).collect();
    assert_eq!(tokens, [Some(token), Some(token)]);
}

// Ensures a waiting multi-acquire whose request is dropped leaves every
// queue: the free lock it reserved is free for anyone again.
#[tokio::test]
async fn dropped_multi_waiter_leaves_every_queue() {
    let api = Arc::new(OneNode::start().await);
    api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "x", "ttl_ms": 5000}))).await;
    let abandoned = {
        let api = api.clone();
        let body = json!({"names": ["a", "b"], "owner": "m", "ttl_ms": 5000, "wait_ms": 20000});
        tokio::spawn(async move { api.call("POST", "/v1/multi/acquire", Some(body)).await })
    };
    let waiters = |api: Arc<OneNode>| async move {
        let (_, view) = api.call("GET", "/v1/locks/a", None).await;
        view["waiters"].as_array().map_or(0, Vec::len)
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while waiters(api.clone()).await != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the multi-acquire queued");
    let (status, reserved) = api.call("POST", "/v1/locks/b/acquire", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
    assert_eq!((status, &reserved["error"]["code"]), (StatusCode::CONFLICT, &json!("reserved")), "{reserved}");

    abandoned.abort();
    tokio::time::timeout(Duration::from_secs(10), async {
        while waiters(api.clone()).await != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the abandoned multi-acquire left the queue of a");
    let (status, granted) = api.call("POST", "/v1/locks/b/acquire", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK, "b is still reserved: {granted}");
}

// Ensures a retry of a waiting multi-acquire is answered by its own wait,
// never by the end of an earlier one: when the Cancel of its abandoned first
// attempt (what that attempt's `QueuePlace` proposes as its caller goes
// away) is applied after the retry registered for its turn and before the
// retry's own entry, the Cancel forgets the request id, so the retry queues
// anew. Its turn must not take the first wait's `Cancelled` event for its
// own end: that answered `wait_timeout` and then granted the locks to an
// owner who had been told it failed (chaos run on bfbd741).
#[tokio::test]
async fn a_retried_wait_is_not_ended_by_the_cancel_of_its_first_attempt() {
    use leasehold_core::{Command, FencingToken, LockError, Outcome};
    let api = OneNode::start().await;
    let node = api.node.clone();
    let (_, held) = api.call("POST", "/v1/locks/b/acquire", Some(json!({"owner": "x", "ttl_ms": 5000}))).await;
    let b = FencingToken::granted_at(held["token"].as_u64().expect("a token"));
    let acquire = Command::AcquireMany {
        names: vec!["a".into(), "b".into()],
        owner: "m".into(),
        ttl_ms: Some(5000),
        session: None,
        wait_ms: Some(20_000),
        request_id: Some("retried".into()),
        lock_delay_ms: None,
        seq: None,
    };
    // The first attempt: applied, queued in both queues.
    let first = node.propose(acquire.clone(), Principal::Admin).await.expect("committed");
    assert!(matches!(first, Ok(Outcome::QueuedMany { .. })), "{first:?}");

    // The abandoned attempt's Cancel reaches the proposer first, the retry
    // (registered for its turn before it proposes) right after it.
    let cancel = node.propose(Command::Cancel { name: "a".into(), owner: "m".into() }, Principal::Admin);
    let retry = node.acquire(acquire, Principal::Admin);
    tokio::pin!(retry);
    let cancelled = tokio::select! {
        biased;
        cancelled = cancel => cancelled,
        answer = &mut retry => panic!("the retry was answered before the Cancel applied: {answer:?}"),
    };
    assert!(matches!(cancelled, Ok(Ok(Outcome::Cancelled { removed: true, .. }))), "{cancelled:?}");

    // The retry waits in its new place: no answer while b is held.
    let early = tokio::time::timeout(Duration::from_secs(1), &mut retry).await;
    let waiting = node.locks().read(|t| t.is_waiting("a", "m") && t.is_waiting("b", "m"));
    assert!(early.is_err(), "answered {early:?} while m still waits for a and b: {waiting}");

    // Released, b goes to the retry, with a, and the retry says so.
    let released = node
        .propose(
            Command::Release { name: "b".into(), token: b, request_id: None, session: None, seq: None },
            Principal::Admin,
        )
        .await;
    assert!(matches!(released, Ok(Ok(Outcome::Released { .. }))), "{released:?}");
    let answer = tokio::time::timeout(Duration::from_secs(10), retry).await.expect("answered");
    match answer {
        Ok(Ok(Outcome::GrantedMany { grants, .. })) => {
            assert!(grants.iter().all(|g| g.owner == "m" && g.token > b), "{grants:?}")
        }
        Ok(Err(LockError::WaitTimeout { .. })) => {
            panic!("wait_timeout, yet m holds a: {:?}", node.locks().read(|t| t.holder("a")))
        }
        other => panic!("{other:?}"),
    }
}

// Ensures the session lifecycle through the router: create (id = entry
// index), locks under it (single and multi) listed by GET, renew refused,
// keepalive, list, delete releasing every lock, then 404 everywhere.
#[tokio::test]
async fn session_lifecycle_through_the_router() {
    let api = OneNode::start().await;
    let (status, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["session"].as_u64().expect("a session id");
    assert_eq!((&created["owner"], &created["ttl_ms"], &created["lock_count"]), (&json!("s"), &json!(5000), &json!(0)));

    let (status, grant) = api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "s", "session": id}))).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert!(grant["token"].as_u64().expect("a token") > id);
    let body = json!({"names": ["b", "c"], "owner": "s", "session": id});
    let (status, many) = api.call("POST", "/v1/multi/acquire", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{many}");
    let (_, view) = api.call("GET", "/v1/locks/b", None).await;
    assert_eq!(view["session"], json!(id), "{view}");

    let (status, renew) = api.call("POST", "/v1/locks/a/renew", Some(json!({"token": grant["token"]}))).await;
    assert_eq!((status, &renew["error"]["code"]), (StatusCode::CONFLICT, &json!("held_under_session")), "{renew}");
    let keepalive = format!("/v1/sessions/{id}/keepalive");
    let (status, kept) = api.call("POST", &keepalive, Some(json!({}))).await;
    assert_eq!((status, &kept["lock_count"]), (StatusCode::OK, &json!(3)), "{kept}");

    let (status, got) = api.call("GET", &format!("/v1/sessions/{id}"), None).await;
    let names: Vec<_> = got["locks"].as_array().expect("locks").iter().map(|l| l["name"].clone()).collect();
    assert_eq!((status, names), (StatusCode::OK, vec![json!("a"), json!("b"), json!("c")]), "{got}");
    let (status, listed) = api.call("GET", &format!("/v1/sessions?after={}&limit=10", id - 1), None).await;
    let sessions = listed["sessions"].as_array().expect("sessions");
    assert_eq!((status, sessions.len(), &sessions[0]["session"]), (StatusCode::OK, 1, &json!(id)), "{listed}");
    assert_eq!(sessions[0].get("locks"), None, "lists leave the locks out");
    let (_, after) = api.call("GET", &format!("/v1/sessions?after={id}"), None).await;
    assert_eq!(after["sessions"], json!([]));

    let (status, deleted) = api.call("DELETE", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!((status, &deleted["released"]), (StatusCode::OK, &json!(["a", "b", "c"])), "{deleted}");
    let (status, free) = api.call("GET", "/v1/locks/a", None).await;
    assert_eq!((status, &free["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_held")));
    for (method, path, body) in [
        ("GET", format!("/v1/sessions/{id}"), None),
        ("DELETE", format!("/v1/sessions/{id}"), None),
        ("POST", keepalive, Some(json!({}))),
        ("POST", "/v1/locks/d/acquire".to_string(), Some(json!({"owner": "s", "session": id}))),
    ] {
        let (status, gone) = api.call(method, &path, body).await;
        assert_eq!(
            (status, &gone["error"]["code"], &gone["error"]["session"]),
            (StatusCode::NOT_FOUND, &json!("session_not_found"), &json!(id)),
            "{method} {path}: {gone}"
        );
    }
}

// Ensures a delete retried under its request id gets its first answer:
// a delete whose answer was lost is not then reported `session_not_found`
// (what the chaos suite's linearizability check found).
#[tokio::test]
async fn a_retried_session_delete_gets_its_first_answer() {
    let api = OneNode::start().await;
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let (status, _) = api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "s", "session": id}))).await;
    assert_eq!(status, StatusCode::OK);
    for _ in 0..2 {
        let (status, deleted) = api.call("DELETE", &format!("/v1/sessions/{id}?request_id=r-1"), None).await;
        assert_eq!((status, &deleted["released"]), (StatusCode::OK, &json!(["a"])), "{deleted}");
    }
    let (status, gone) = api.call("DELETE", &format!("/v1/sessions/{id}?request_id=r-2"), None).await;
    assert_eq!((status, &gone["error"]["code"]), (StatusCode::NOT_FOUND, &json!("session_not_found")), "{gone}");
}

// Ensures a session seq reused for another request is answered 409
// `seq_reused` by every handler (not the other request's answer, nor a 500),
// and takes nothing.
#[tokio::test]
async fn a_reused_seq_is_refused_through_the_router() {
    let api = OneNode::start().await;
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let (status, grant) =
        api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "s", "session": id, "seq": 1}))).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    for (path, body) in [
        ("/v1/locks/b/acquire".to_string(), json!({"owner": "s", "session": id, "seq": 1})),
        ("/v1/multi/acquire".to_string(), json!({"names": ["c", "d"], "owner": "s", "session": id, "seq": 1})),
        ("/v1/locks/a/release".to_string(), json!({"token": grant["token"], "session": id, "seq": 1})),
        (format!("/v1/sessions/{id}/keepalive"), json!({"seq": 1})),
    ] {
        let (status, reused) = api.call("POST", &path, Some(body)).await;
        assert_eq!(
            (status, &reused["error"]["code"], &reused["error"]["session"], &reused["error"]["seq"]),
            (StatusCode::CONFLICT, &json!("seq_reused"), &json!(id), &json!(1)),
            "{path}: {reused}"
        );
    }
    let (_, got) = api.call("GET", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(got["locks"], json!([{"name": "a", "token": grant["token"]}]), "{got}");
}

// Ensures bad session input gets its JSON 400 (or 404 for an unknown id)
// and changes nothing: no session created, no lock taken.
#[tokio::test]
async fn bad_session_input_is_refused_and_changes_nothing() {
    let api = OneNode::start().await;
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 5000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let creates = [
        json!({"owner": "s", "ttl_ms": 10}),
        json!({"owner": "", "ttl_ms": 5000}),
        json!({"owner": "s"}),
        json!({"owner": "s", "ttl_ms": 5000, "session": 1}),
    ];
    for body in creates {
        let (status, error) = api.call("POST", "/v1/sessions", Some(body.clone())).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{body}");
    }
    let acquires = [
        (json!({"owner": "s", "session": id, "ttl_ms": 5000}), "session"),
        (json!({"owner": "s"}), "ttl_ms"),
        (json!({"owner": "mallory", "session": id}), "owner"),
    ];
    for (body, field) in acquires {
        let (status, error) = api.call("POST", "/v1/locks/x/acquire", Some(body.clone())).await;
        assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!(field)), "{body}: {error}");
    }
    let (status, error) = api
        .call("POST", "/v1/multi/acquire", Some(json!({"names": ["x"], "owner": "s", "session": id, "ttl_ms": 5000})))
        .await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("session")), "{error}");
    let paths = [
        "/v1/sessions/abc",
        "/v1/sessions/-1",
        "/v1/sessions?limit=0",
        "/v1/sessions?after=x",
        "/v1/sessions?after=9007199254740992",
    ];
    for path in paths {
        let (status, error) = api.call("GET", path, None).await;
        assert_eq!((status, &error["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{path}");
    }
    let (status, error) = api.call("POST", "/v1/sessions/1/keepalive", Some(json!({"ttl_ms": 1}))).await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("ttl_ms")), "{error}");
    let (status, error) = api.call("POST", &format!("/v1/sessions/{}/keepalive", id + 1000), Some(json!({}))).await;
    assert_eq!((status, &error["error"]["code"]), (StatusCode::NOT_FOUND, &json!("session_not_found")), "{error}");

    let (_, listed) = api.call("GET", "/v1/sessions", None).await;
    assert_eq!(listed["sessions"].as_array().map(Vec::len), Some(1), "{listed}");
    let (_, locks) = api.call("GET", "/v1/locks", None).await;
    assert_eq!(locks["locks"], json!([]));
}

// Ensures a session request's seq de-duplicates it through the router: a
// retried acquire gets its first grant even after the lock was released,
// a seq needs a session, and a release may name its session and seq.
#[tokio::test]
async fn session_seq_replays_through_the_router() {
    let api = OneNode::start().await;
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 60000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let acquire = json!({"owner": "s", "session": id, "seq": 1});
    let (status, first) = api.call("POST", "/v1/locks/a/acquire", Some(acquire.clone())).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let release = json!({"token": first["token"], "session": id, "seq": 2});
    let (status, released) = api.call("POST", "/v1/locks/a/release", Some(release)).await;
    assert_eq!(status, StatusCode::OK, "{released}");
    let (status, again) = api.call("POST", "/v1/locks/a/acquire", Some(acquire)).await;
    assert_eq!((status, &again["token"]), (StatusCode::OK, &first["token"]), "{again}");
    let (status, free) = api.call("GET", "/v1/locks/a", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the retry was not applied again: {free}");
    let (status, error) =
        api.call("POST", "/v1/locks/b/acquire", Some(json!({"owner": "s", "ttl_ms": 5000, "seq": 3}))).await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("seq")), "{error}");
}

// Ensures a waiting acquire under a session that is deleted while it waits
// leaves the queue and is answered 404 session_not_found, not wait_timeout.
#[tokio::test]
async fn waiter_of_a_deleted_session_is_told_so() {
    let api = Arc::new(OneNode::start().await);
    api.call("POST", "/v1/locks/q/acquire", Some(json!({"owner": "x", "ttl_ms": 60000}))).await;
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 60000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let waiter = {
        let api = api.clone();
        let body = json!({"owner": "s", "session": id, "wait_ms": 30000});
        tokio::spawn(async move { api.call("POST", "/v1/locks/q/acquire", Some(body)).await })
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while api.call("GET", &format!("/v1/sessions/{id}"), None).await.1["waiting_count"] != json!(1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the session's waiter queued");
    let (status, _) = api.call("DELETE", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("answered").unwrap();
    assert_eq!((status, &answer["error"]["code"]), (StatusCode::NOT_FOUND, &json!("session_not_found")), "{answer}");
    let (_, view) = api.call("GET", "/v1/locks/q", None).await;
    assert_eq!(view["waiters"], json!([]), "{view}");
}

// Ensures a full cluster answers a new grant or wait 507 `full` naming the
// quota and its limit, keeps renewing, releasing and re-acquiring, grants
// again once there is room, and shows the use in status and metrics.
#[tokio::test]
async fn quotas_refuse_new_grants_and_waits_only() {
    let api = Arc::new(OneNode::start_with(Quotas { max_leases: 2, max_waiters: 1 }, ApiConfig::default()).await);
    let (_, a) = api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "x", "ttl_ms": 60000}))).await;
    let token = a["token"].as_u64().expect("a token");
    let (status, full) =
        api.call("POST", "/v1/multi/acquire", Some(json!({"names": ["b", "c"], "owner": "y", "ttl_ms": 60000}))).await;
    assert_eq!(status.as_u16(), 507, "{full}");
    assert_eq!(
        (&full["error"]["code"], &full["error"]["what"], &full["error"]["limit"]),
        (&json!("full"), &json!("leases"), &json!(2))
    );
    let (status, b) = api.call("POST", "/v1/locks/b/acquire", Some(json!({"owner": "y", "ttl_ms": 60000}))).await;
    assert_eq!(status, StatusCode::OK, "one more fits");
    let (status, full) = api.call("POST", "/v1/locks/c/acquire", Some(json!({"owner": "y", "ttl_ms": 60000}))).await;
    assert_eq!((status.as_u16(), &full["error"]["what"]), (507, &json!("leases")), "{full}");

    let (status, _) = api.call("POST", "/v1/locks/a/renew", Some(json!({"token": token}))).await;
    assert_eq!(status, StatusCode::OK, "renewing works when full");
    let (status, again) = api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "x", "ttl_ms": 60000}))).await;
    assert_eq!((status, &again["reacquired"]), (StatusCode::OK, &json!(true)), "{again}");

    let waiter = {
        let api = api.clone();
        let body = json!({"owner": "w1", "ttl_ms": 60000, "wait_ms": 30000});
        tokio::spawn(async move { api.call("POST", "/v1/locks/a/acquire", Some(body)).await })
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while api.call("GET", "/v1/locks/a", None).await.1["waiters"].as_array().map_or(0, Vec::len) != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("w1 queued");
    let (status, full) =
        api.call("POST", "/v1/locks/a/acquire", Some(json!({"owner": "w2", "ttl_ms": 60000, "wait_ms": 30000}))).await;
    assert_eq!((status.as_u16(), &full["error"]["what"], &full["error"]["limit"]), (507, &json!("waiters"), &json!(1)));

    let (_, status_view) = api.call("GET", "/v1/cluster/status", None).await;
    let quotas = &status_view["quotas"];
    assert_eq!(
        (&quotas["leases"], &quotas["waiters"]),
        (&json!({"used": 2, "limit": 2}), &json!({"used": 1, "limit": 1}))
    );
    let response = api.router.clone().oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    let text = String::from_utf8(axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap();
    for series in [
        "leasehold_quota_used{quota=\"leases\"} 2",
        "leasehold_quota_limit{quota=\"leases\"} 2",
        "leasehold_quota_refused_total{quota=\"leases\"} 2",
        "leasehold_quota_refused_total{quota=\"waiters\"} 1",
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }

    let (status, _) = api.call("POST", "/v1/locks/a/release", Some(json!({"token": token}))).await;
    assert_eq!(status, StatusCode::OK, "releasing works when full");
    let (status, handed) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("answered").unwrap();
    assert_eq!((status, &handed["owner"]), (StatusCode::OK, &json!("w1")), "the admitted waiter is granted: {handed}");
    let (status, _) = api.call("POST", "/v1/locks/b/release", Some(json!({"token": b["token"]}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, c) = api.call("POST", "/v1/locks/c/acquire", Some(json!({"owner": "y", "ttl_ms": 60000}))).await;
    assert_eq!(status, StatusCode::OK, "room again: {c}");
}

/// The next `n` SSE frames of an event stream's body (keep-alives skipped).
async fn frames(body: &mut axum::body::BodyDataStream, n: usize) -> Vec<String> {
    use tokio_stream::StreamExt;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while text.matches("\n\n").count() < n {
            let chunk = body.next().await.expect("stream open").expect("stream reads");
            text.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    })
    .await
    .expect("frames in time");
    text.split_terminator("\n\n").map(str::to_owned).collect()
}

// Ensures event streams are bounded per client address (all in-process
// requests share one) with 503 overloaded and Retry-After, a closed stream
// gives its place back, status and metrics show the use, and every stream
// gets the same frames, in the SSE form they always had.
#[tokio::test]
async fn event_streams_are_bounded_per_client() {
    let limits = RequestLimits { max_subscribers: 4, max_subscribers_per_client: 2, ..RequestLimits::default() };
    let api = OneNode::start_with(DEFAULT_QUOTAS, ApiConfig { request_limits: limits, ..ApiConfig::default() }).await;
    let open = |path: &str| api.router.clone().oneshot(Request::get(path).body(Body::empty()).unwrap());
    let first = open("/v1/events").await.unwrap();
    let second = open("/v1/locks/s/events").await.unwrap();
    assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));
    let refused = open("/v1/events").await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    let body: Value =
        serde_json::from_slice(&axum::body::to_bytes(refused.into_body(), 1 << 16).await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    let (_, status) = api.call("GET", "/v1/cluster/status", None).await;
    assert_eq!(status["quotas"]["subscribers"], json!({"used": 2, "limit": 4}));

    let (_, grant) = api.call("POST", "/v1/locks/s/acquire", Some(json!({"owner": "o", "ttl_ms": 5000}))).await;
    let index = grant["token"].as_u64().expect("a token");
    let (mut all, mut one) = (first.into_body().into_data_stream(), second.into_body().into_data_stream());
    let expected = format!(
        "event: acquired\nid: {index}\ndata: {{\"index\":{index},\"name\":\"s\",\"type\":\"acquired\",\"owner\":\"o\",\"token\":{index},\"by\":\"admin\"}}"
    );
    assert_eq!(frames(&mut all, 1).await, std::slice::from_ref(&expected));
    assert_eq!(frames(&mut one, 1).await, [expected]);

    drop(one);
    let third = open("/v1/locks/s/events").await.unwrap();
    assert_eq!(third.status(), StatusCode::OK, "a closed stream gave its place back");
    let response = api.router.clone().oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    let text = String::from_utf8(axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap();
    assert!(text.contains("leasehold_quota_refused_total{quota=\"subscribers\"} 1"), "{text}");
    assert!(text.contains("leasehold_quota_used{quota=\"subscribers\"} 2"), "{text}");
}

/// Polls `path` until `ready` holds of its body (10 s at most).
async fn until(api: &OneNode, path: &str, ready: impl Fn(&Value) -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !ready(&api.call("GET", path, None).await.1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{path} never got there"));
}

// Ensures an election through the router: campaign elects with a token and
// the value, a second candidate is refused naming the leader or waits and
// is elected on resign, proclaim needs the current token, and the leader
// read names the index it reflects.
#[tokio::test]
async fn election_through_the_router() {
    let api = Arc::new(OneNode::start().await);
    let campaign = |candidate: &str, wait_ms: u64| json!({"candidate": candidate, "value": {"addr": format!("{candidate}:80")}, "ttl_ms": 5000, "wait_ms": wait_ms});
    let (status, leader) = api.call("POST", "/v1/elections/primary/campaign", Some(campaign("a", 0))).await;
    assert_eq!(status, StatusCode::OK, "{leader}");
    let first = leader["token"].as_u64().expect("a token");
    assert_eq!((&leader["value"], &leader["reacquired"]), (&json!({"addr": "a:80"}), &json!(false)));
    let (status, held) = api.call("POST", "/v1/elections/primary/campaign", Some(campaign("b", 0))).await;
    assert_eq!(
        (status, &held["error"]["code"], &held["error"]["holder"]),
        (StatusCode::CONFLICT, &json!("held"), &json!("a"))
    );

    let (status, read) = api.call("GET", "/v1/elections/primary", None).await;
    assert_eq!((status, &read["candidate"], &read["token"]), (StatusCode::OK, &json!("a"), &json!(first)));
    assert!(read["index"].as_u64().unwrap() >= first && read["since_tick"].is_u64(), "{read}");

    let waiting = {
        let api = api.clone();
        tokio::spawn(
            async move { api.call("POST", "/v1/elections/primary/campaign", Some(campaign("b", 30_000))).await },
        )
    };
    // b waits in the election's queue (an election is the lock of its name).
    until(&api, "/v1/locks/primary", |lock| {
        lock["waiters"].as_array().is_some_and(|waiters| waiters.iter().any(|w| w["owner"] == "b"))
    })
    .await;
    let (status, stale) = api
        .call("POST", "/v1/elections/primary/proclaim", Some(json!({"candidate": "a", "token": first + 1, "value": 1})))
        .await;
    assert_eq!((status, &stale["error"]["code"]), (StatusCode::CONFLICT, &json!("stale_token")));
    let (status, proclaimed) = api
        .call("POST", "/v1/elections/primary/proclaim", Some(json!({"candidate": "a", "token": first, "value": [2]})))
        .await;
    assert_eq!((status, &proclaimed["value"]), (StatusCode::OK, &json!([2])), "{proclaimed}");
    let (status, _) =
        api.call("POST", "/v1/elections/primary/resign", Some(json!({"candidate": "a", "token": first}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, elected) = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("answered").unwrap();
    assert_eq!((status, &elected["candidate"]), (StatusCode::OK, &json!("b")), "{elected}");
    assert!(elected["token"].as_u64().unwrap() > first);
    let (_, list) = api.call("GET", "/v1/elections", None).await;
    assert_eq!(list["elections"][0]["candidate"], "b", "{list}");
    let (status, big) = api
        .call(
            "POST",
            "/v1/elections/big/campaign",
            Some(json!({"candidate": "c", "value": "x".repeat(4100), "ttl_ms": 5000})),
        )
        .await;
    assert_eq!((status, &big["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("value")));
    let (status, none) = api.call("GET", "/v1/elections/big", None).await;
    assert_eq!((status, &none["error"]["code"]), (StatusCode::NOT_FOUND, &json!("no_leader")));
}

// Ensures a stream resumes right after the id it got last, by `after` or
// by `Last-Event-ID`, inside an entry or after it, with no gap and no
// duplicate; `prefix` filters by name; an observer starts with the leader.
#[tokio::test]
async fn event_streams_resume_after_an_id() {
    let api = OneNode::start().await;
    let open = |request: Request<Body>| api.router.clone().oneshot(request);
    let live = open(Request::get("/v1/events?prefix=r").body(Body::empty()).unwrap()).await.unwrap();
    let (_, a) = api.call("POST", "/v1/locks/ra/acquire", Some(json!({"owner": "o", "ttl_ms": 5000}))).await;
    api.call("POST", "/v1/locks/other/acquire", Some(json!({"owner": "o", "ttl_ms": 5000}))).await;
    let (_, b) =
        api.call("POST", "/v1/locks/rb/acquire", Some(json!({"owner": "o", "ttl_ms": 5000, "wait_ms": 0}))).await;
    api.call("POST", "/v1/locks/ra/release", Some(json!({"token": a["token"]}))).await;
    let mut live = live.into_body().into_data_stream();
    let seen = frames(&mut live, 3).await;
    let ids: Vec<&str> = seen.iter().map(|f| f.lines().nth(1).unwrap().trim_start_matches("id: ")).collect();
    assert_eq!(ids[1], b["token"].to_string(), "{seen:?}");
    assert!(seen.iter().all(|f| !f.contains("\"other\"")), "prefix filters: {seen:?}");
    for (i, id) in ids.iter().enumerate() {
        for request in [
            Request::get(format!("/v1/events?prefix=r&after={id}")).body(Body::empty()).unwrap(),
            Request::get("/v1/events?prefix=r").header("last-event-id", *id).body(Body::empty()).unwrap(),
        ] {
            let resumed = open(request).await.unwrap();
            assert_eq!(resumed.status(), StatusCode::OK);
            if i + 1 < seen.len() {
                let mut body = resumed.into_body().into_data_stream();
                assert_eq!(frames(&mut body, seen.len() - i - 1).await, seen[i + 1..], "after {id}");
            }
        }
    }
    let bad = open(Request::get("/v1/events?after=x").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    let (_, leader) = api
        .call("POST", "/v1/elections/e/campaign", Some(json!({"candidate": "c", "value": "v", "ttl_ms": 5000})))
        .await;
    let observer = open(Request::get("/v1/elections/e/observe").body(Body::empty()).unwrap()).await.unwrap();
    let mut observer = observer.into_body().into_data_stream();
    let first = frames(&mut observer, 1).await;
    assert!(first[0].starts_with("event: proclaimed\n"), "{first:?}");
    assert!(first[0].contains(&format!("\"token\":{}", leader["token"])) && first[0].contains("\"value\":\"v\""));

    // A history of one entry: a resume from before it is refused, naming where it starts.
    api.node.locks().history().set_capacity(1);
    let (status, gone) = api.call("GET", "/v1/locks/ra/events?after=1", None).await;
    assert_eq!((status, &gone["error"]["code"]), (StatusCode::GONE, &json!("compacted")), "{gone}");
    assert!(gone["error"]["compacted_before"].as_u64().unwrap() > 1, "{gone}");
}
