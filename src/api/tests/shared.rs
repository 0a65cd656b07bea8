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

// Ensures permits and a shared lock taken under a session through the
// router live by the session (its ttl; renew answers 409
// `held_under_session`, as for a plain lock), and that deleting the session
// hands both to their waiters, each under a token above the session's.
#[tokio::test]
async fn permits_and_shared_locks_under_a_session_through_the_router() {
    let api = Arc::new(OneNode::start().await);
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 6000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let permit = json!({"owner": "s", "limit": 1, "session": id, "seq": 1});
    let (status, held) = api.call("POST", "/v1/semaphores/pool/acquire", Some(permit)).await;
    assert_eq!((status, held["ttl_ms"].as_u64()), (StatusCode::OK, Some(6000)), "{held}");
    let read = json!({"owner": "s", "session": id, "mode": "shared", "seq": 2});
    let (status, shared) = api.call("POST", "/v1/locks/doc/acquire", Some(read)).await;
    assert_eq!((status, shared["ttl_ms"].as_u64()), (StatusCode::OK, Some(6000)), "{shared}");

    let renews = [
        ("/v1/semaphores/pool/renew", json!({"owner": "s", "token": held["token"]})),
        ("/v1/locks/doc/renew", json!({"owner": "s", "token": shared["token"], "mode": "shared"})),
    ];
    for (path, body) in renews {
        let (status, refused) = api.call("POST", path, Some(body)).await;
        assert_eq!(
            (status, &refused["error"]["code"], &refused["error"]["session"]),
            (StatusCode::CONFLICT, &json!("held_under_session"), &json!(id)),
            "{refused}"
        );
    }

    let waiting = |path: &'static str, body: Value| {
        let api = api.clone();
        tokio::spawn(async move { api.call("POST", path, Some(body)).await })
    };
    let permit_waiter =
        waiting("/v1/semaphores/pool/acquire", json!({"owner": "w", "limit": 1, "ttl_ms": 5000, "wait_ms": 20000}));
    let writer = waiting("/v1/locks/doc/acquire", json!({"owner": "x", "ttl_ms": 5000, "wait_ms": 20000}));
    until(&api, "/v1/semaphores/pool", |v| v["waiters"].as_array().is_some_and(|w| w.len() == 1)).await;
    until(&api, "/v1/locks/doc/shared", |v| v["shared"].as_array().is_some_and(|s| s.len() == 1)).await;
    let (status, deleted) = api.call("DELETE", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");

    for (waiter, owner, session_token) in [(permit_waiter, "w", &held["token"]), (writer, "x", &shared["token"])] {
        let (status, granted) = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("answered").unwrap();
        assert_eq!((status, &granted["owner"]), (StatusCode::OK, &json!(owner)), "{granted}");
        assert!(granted["token"].as_u64() > session_token.as_u64(), "{granted}");
    }
}

// Ensures bad lifetimes on a semaphore or shared acquire get their JSON
// error, with the status and code of a plain lock's, and change nothing.
#[tokio::test]
async fn bad_session_input_on_permits_and_shared_locks_changes_nothing() {
    let api = OneNode::start().await;
    let (_, created) = api.call("POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 6000}))).await;
    let id = created["session"].as_u64().expect("a session id");
    let unknown = id + 1000;
    let cases = [
        (json!({"ttl_ms": 5000, "session": id}), StatusCode::BAD_REQUEST, "invalid_argument", "session"),
        (json!({}), StatusCode::BAD_REQUEST, "invalid_argument", "ttl_ms"),
        (json!({"ttl_ms": 5000, "seq": 1}), StatusCode::BAD_REQUEST, "invalid_argument", "seq"),
        (json!({"session": id, "owner": "mallory"}), StatusCode::BAD_REQUEST, "invalid_argument", "owner"),
        (json!({"session": "x"}), StatusCode::BAD_REQUEST, "invalid_argument", ""),
        (json!({"session": unknown}), StatusCode::NOT_FOUND, "session_not_found", ""),
    ];
    for (extra, status, code, field) in cases {
        for (path, mut body) in [
            ("/v1/semaphores/pool/acquire", json!({"owner": "s", "limit": 2})),
            ("/v1/locks/doc/acquire", json!({"owner": "s", "mode": "shared"})),
        ] {
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let (got, error) = api.call("POST", path, Some(body.clone())).await;
            assert_eq!((got, &error["error"]["code"]), (status, &json!(code)), "{path} {body}: {error}");
            if !field.is_empty() {
                assert_eq!(error["error"]["field"], json!(field), "{path} {body}: {error}");
            }
        }
    }
    let delayed = json!({"owner": "s", "session": id, "mode": "shared", "lock_delay_ms": 1000});
    let (status, error) = api.call("POST", "/v1/locks/doc/acquire", Some(delayed)).await;
    assert_eq!((status, &error["error"]["field"]), (StatusCode::BAD_REQUEST, &json!("lock_delay_ms")), "{error}");

    let (status, _) = api.call("GET", "/v1/semaphores/pool", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, holders) = api.call("GET", "/v1/locks/doc/shared", None).await;
    assert_eq!(holders["shared"], json!([]), "{holders}");
    let (_, session) = api.call("GET", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(session["lock_count"], json!(0), "{session}");
}
