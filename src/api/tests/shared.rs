//! Semaphores, shared locks and deadlock refusal through the router.

use super::*;

// Ensures a semaphore through the router: permits up to the limit, each
// with its own token; 409 `semaphore_full` with the holders and 409
// `limit_mismatch`; a waiter granted when a permit returns; renew and
// release by owner and token; the operator's limit change; 404 once gone.
#[tokio::test]
async fn semaphore_lifecycle_through_the_router() {
    let api = Arc::new(OneNode::start().await);
    let acquire = |owner: &str, extra: Value| {
        let mut body = json!({"owner": owner, "limit": 2, "ttl_ms": 5000});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let (status, a) = api.call("POST", "/v1/semaphores/pool/acquire", Some(acquire("a", json!({})))).await;
    assert_eq!((status, a["permits"].as_u64(), a["limit"].as_u64()), (StatusCode::OK, Some(1), Some(2)), "{a}");
    let (_, b) = api.call("POST", "/v1/semaphores/pool/acquire", Some(acquire("b", json!({})))).await;
    assert!(b["token"].as_u64() > a["token"].as_u64(), "{b}");
    let (status, full) = api.call("POST", "/v1/semaphores/pool/acquire", Some(acquire("c", json!({})))).await;
    assert_eq!((status, &full["error"]["code"]), (StatusCode::CONFLICT, &json!("semaphore_full")), "{full}");
    assert_eq!(full["error"]["holders"].as_array().map(Vec::len), Some(2), "{full}");
    let other_limit = json!({"owner": "c", "limit": 3, "ttl_ms": 5000});
    let (status, mismatch) = api.call("POST", "/v1/semaphores/pool/acquire", Some(other_limit)).await;
    assert_eq!((status, &mismatch["error"]["code"]), (StatusCode::CONFLICT, &json!("limit_mismatch")));

    let waiter = {
        let api = api.clone();
        let body = acquire("c", json!({"wait_ms": 20000}));
        tokio::spawn(async move { api.call("POST", "/v1/semaphores/pool/acquire", Some(body)).await })
    };
    until(&api, "/v1/semaphores/pool", |v| v["waiters"].as_array().is_some_and(|w| w.len() == 1)).await;
    let release = json!({"owner": "a", "token": a["token"]});
    let (status, _) = api.call("POST", "/v1/semaphores/pool/release", Some(release.clone())).await;
    assert_eq!(status, StatusCode::OK);
    let (status, c) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("answered").unwrap();
    assert_eq!((status, &c["owner"]), (StatusCode::OK, &json!("c")), "{c}");
    let (status, again) = api.call("POST", "/v1/semaphores/pool/release", Some(release)).await;
    assert_eq!((status, &again["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_held")));

    let renew = json!({"owner": "b", "token": b["token"], "ttl_ms": 8000});
    let (status, renewed) = api.call("POST", "/v1/semaphores/pool/renew", Some(renew)).await;
    assert_eq!((status, &renewed["token"], renewed["ttl_ms"].as_u64()), (StatusCode::OK, &b["token"], Some(8000)));
    let (status, set) = api.call("POST", "/v1/semaphores/pool/limit", Some(json!({"limit": 5}))).await;
    assert_eq!((status, set["limit"].as_u64(), set["in_use"].as_u64()), (StatusCode::OK, Some(5), Some(2)));

    for (owner, token) in [("b", &b["token"]), ("c", &c["token"])] {
        let body = json!({"owner": owner, "token": token});
        assert_eq!(api.call("POST", "/v1/semaphores/pool/release", Some(body)).await.0, StatusCode::OK);
    }
    let (status, gone) = api.call("GET", "/v1/semaphores/pool", None).await;
    assert_eq!((status, &gone["error"]["code"]), (StatusCode::NOT_FOUND, &json!("no_semaphore")));
    let (status, bad) =
        api.call("POST", "/v1/semaphores/pool/acquire", Some(acquire("d", json!({"permits": 3})))).await;
    assert_eq!((status, &bad["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("permits")));
}

// Ensures shared mode through the router: readers coexist, a writer is
// refused naming them, then waits and is handed the lock when the last
// reader leaves; a shared release must name its owner.
#[tokio::test]
async fn shared_mode_through_the_router() {
    let api = Arc::new(OneNode::start().await);
    let read = |owner: &str| json!({"owner": owner, "ttl_ms": 5000, "mode": "shared"});
    let (status, r1) = api.call("POST", "/v1/locks/doc/acquire", Some(read("r1"))).await;
    assert_eq!(status, StatusCode::OK, "{r1}");
    let (_, r2) = api.call("POST", "/v1/locks/doc/acquire", Some(read("r2"))).await;
    assert!(r2["token"].as_u64() > r1["token"].as_u64());
    let write = json!({"owner": "w", "ttl_ms": 5000});
    let (status, held) = api.call("POST", "/v1/locks/doc/acquire", Some(write)).await;
    assert_eq!(
        (status, &held["error"]["code"], &held["error"]["shared_holders"]),
        (StatusCode::CONFLICT, &json!("held"), &json!(2))
    );
    let (_, holders) = api.call("GET", "/v1/locks/doc/shared", None).await;
    assert_eq!(holders["shared"].as_array().map(Vec::len), Some(2), "{holders}");
    let (_, listed) = api.call("GET", "/v1/locks?prefix=do", None).await;
    assert_eq!((&listed["locks"], &listed["shared"][0]["name"]), (&json!([]), &json!("doc")), "{listed}");
    assert_eq!(listed["shared"][0]["holders"].as_array().map(Vec::len), Some(2), "{listed}");

    let writer = {
        let api = api.clone();
        let body = json!({"owner": "w", "ttl_ms": 5000, "wait_ms": 20000});
        tokio::spawn(async move { api.call("POST", "/v1/locks/doc/acquire", Some(body)).await })
    };
    until(&api, "/v1/locks/doc/shared", |_| api.node.locks().read(|t| t.is_waiting("doc", "w"))).await;
    let (status, ownerless) =
        api.call("POST", "/v1/locks/doc/release", Some(json!({"token": r1["token"], "mode": "shared"}))).await;
    assert_eq!((status, &ownerless["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("owner")));
    for (owner, grant) in [("r1", &r1), ("r2", &r2)] {
        let body = json!({"token": grant["token"], "mode": "shared", "owner": owner});
        assert_eq!(api.call("POST", "/v1/locks/doc/release", Some(body)).await.0, StatusCode::OK);
    }
    let (status, w) = tokio::time::timeout(Duration::from_secs(10), writer).await.expect("answered").unwrap();
    assert_eq!((status, &w["owner"]), (StatusCode::OK, &json!("w")), "{w}");
    assert!(w["token"].as_u64() > r2["token"].as_u64(), "{w}");
}

// Ensures two owners crossing on two locks: the second wait is answered at
// once with 409 `deadlock` and the cycle.
#[tokio::test]
async fn crossing_waits_are_refused_as_a_deadlock() {
    let api = Arc::new(OneNode::start().await);
    api.call("POST", "/v1/locks/x/acquire", Some(json!({"owner": "a", "ttl_ms": 5000}))).await;
    api.call("POST", "/v1/locks/y/acquire", Some(json!({"owner": "b", "ttl_ms": 5000}))).await;
    let first = {
        let api = api.clone();
        let body = json!({"owner": "a", "ttl_ms": 5000, "wait_ms": 20000});
        tokio::spawn(async move { api.call("POST", "/v1/locks/y/acquire", Some(body)).await })
    };
    until(&api, "/v1/locks/y", |v| v["waiters"].as_array().is_some_and(|w| w.len() == 1)).await;
    let body = json!({"owner": "b", "ttl_ms": 5000, "wait_ms": 20000});
    let (status, refused) = api.call("POST", "/v1/locks/x/acquire", Some(body)).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("deadlock")), "{refused}");
    assert_eq!(refused["error"]["cycle"], json!(["b", "a"]));
    first.abort();
}
