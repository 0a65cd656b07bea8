//! Users, roles and the authorization of every route, in process.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use serde_json::{json, Value};
use tokio_stream::StreamExt;

use super::OneNode;
use crate::api::auth::Part;
use crate::api::{openapi, ApiConfig};
use crate::node::DEFAULT_QUOTAS;
use crate::security::Secrets;
use leasehold_proto::Secret;

const ADMIN: &str = "admin-token-0123456789";
const CLIENT: &str = "client-token-0123456789";

/// A one-node cluster with a client and an admin token, where role
/// `team-a` grants read, lock and fence on `a-`, user `alice` has it, and
/// user `nobody` has no role; with their tokens.
async fn tenants() -> (OneNode, String, String) {
    let secrets = Secrets {
        client_token: Some(Secret::new(CLIENT, "test").unwrap()),
        admin_token: Some(Secret::new(ADMIN, "test").unwrap()),
        cluster_secret: None,
    };
    let api = OneNode::start_with(DEFAULT_QUOTAS, ApiConfig { secrets, ..Default::default() }).await;
    let (status, role) = api.as_(ADMIN, "POST", "/v1/auth/roles", Some(json!({"name": "team-a"}))).await;
    assert_eq!(status, StatusCode::OK, "{role}");
    for permission in ["read", "lock", "fence"] {
        let grant = json!({"permission": permission, "prefix": "a-"});
        let (status, role) = api.as_(ADMIN, "POST", "/v1/auth/roles/team-a/grants", Some(grant)).await;
        assert_eq!(status, StatusCode::OK, "{role}");
    }
    let mut tokens = Vec::new();
    for user in ["alice", "nobody"] {
        let (status, created) = api.as_(ADMIN, "POST", "/v1/auth/users", Some(json!({"name": user}))).await;
        assert_eq!(status, StatusCode::OK, "{created}");
        tokens.push(created["token"].as_str().expect("a token").to_owned());
    }
    let (status, alice) = api.as_(ADMIN, "POST", "/v1/auth/users/alice/roles", Some(json!({"role": "team-a"}))).await;
    assert_eq!((status, &alice["roles"]), (StatusCode::OK, &json!(["team-a"])), "{alice}");
    let nobody = tokens.pop().unwrap();
    (api, tokens.pop().unwrap(), nobody)
}

impl OneNode {
    /// One request with `token` as its bearer token.
    async fn as_(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request =
            Request::builder().method(method).uri(path).header(header::AUTHORIZATION, format!("Bearer {token}"));
        let body = match body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(json.to_string())
            }
            None => Body::empty(),
        };
        self.send(request.body(body).expect("request builds")).await
    }
}

/// A body each request schema takes, every name in it under `b-`.
fn example(schema: &str) -> Value {
    match schema {
        "AcquireRequest" | "CreateSessionRequest" => json!({"owner": "o", "ttl_ms": 5000}),
        "RenewRequest" | "ReleaseRequest" => json!({"token": 1}),
        "MultiAcquireRequest" => json!({"names": ["a-x", "b-x"], "owner": "o", "ttl_ms": 5000}),
        "MultiReleaseRequest" => json!({"names": ["a-x", "b-x"], "token": 1}),
        "KeepAliveRequest" | "InitRequest" => json!({}),
        "CampaignRequest" => json!({"candidate": "c", "value": 1, "ttl_ms": 5000}),
        "ProclaimRequest" => json!({"candidate": "c", "token": 1, "value": 1}),
        "ResignRequest" => json!({"candidate": "c", "token": 1}),
        "CheckRequest" | "GateRequest" => json!({"lock": "b-x", "token": 1}),
        "PutRecordRequest" => json!({"lock": "b-x", "token": 1, "value": 1}),
        "SemaphoreAcquireRequest" => json!({"owner": "o", "limit": 2, "ttl_ms": 5000}),
        "SemaphoreRenewRequest" | "SemaphoreReleaseRequest" => json!({"owner": "o", "token": 1}),
        "SemaphoreLimitRequest" => json!({"limit": 3}),
        "NewMember" => json!({"id": 2, "addr": "127.0.0.1:9"}),
        "MembershipRequest" => json!({"voters": [1]}),
        "CreateUserRequest" | "CreateRoleRequest" => json!({"name": "zed"}),
        "AssignRoleRequest" => json!({"role": "team-a"}),
        "GrantView" => json!({"permission": "read", "prefix": "b-"}),
        other => panic!("no example body for {other}: add one"),
    }
}

/// `path` with its parameters filled: names under `b-`, `session` for a
/// session id.
fn fill(path: &str, session: u64) -> String {
    let filled = path
        .replace("{name}", if path.starts_with("/v1/auth/") { "alice" } else { "b-x" })
        .replace("{key}", "b-k")
        .replace("{resource}", "b-r")
        .replace("{role}", "team-a")
        .replace("{id}", &if path.starts_with("/v1/sessions") { session.to_string() } else { "1".into() });
    match filled.as_str() {
        "/v1/locks" | "/v1/semaphores" | "/v1/elections" | "/v1/events" => format!("{filled}?prefix=b-"),
        _ => filled,
    }
}

// Ensures no route can be forgotten: every route of the client and admin
// parts (the router and the OpenAPI document list the same routes, checked
// by tests/cluster/openapi.rs) answers 403 `permission_denied` to a user
// whose roles grant nothing, and to a user whose grants are on `a-` when
// the request touches a name under `b-`, naming the permission, and leaves
// the table as it was. The exceptions, each asserted: opening a session
// and the all-locks event stream touch no name, so a grant anywhere
// opens them (the stream then delivers only readable events), and
// `whoami` answers everyone about themselves.
#[tokio::test]
async fn every_route_refuses_a_user_without_permission() {
    let (api, alice, nobody) = tenants().await;
    // A session holding b-x, for the routes that name a session.
    let (_, session) = api.as_(CLIENT, "POST", "/v1/sessions", Some(json!({"owner": "s", "ttl_ms": 60000}))).await;
    let session = session["session"].as_u64().expect("a session");
    let (status, held) =
        api.as_(CLIENT, "POST", "/v1/locks/b-x/acquire", Some(json!({"owner": "s", "session": session}))).await;
    assert_eq!(status, StatusCode::OK, "{held}");
    let before = api.node.locks().read(|t| serde_json::to_value(leasehold_core::TableImage::from(t)).unwrap());

    let mut walked = 0;
    for (method, path, part, body) in openapi::operations() {
        if !matches!(part, Some(Part::Client | Part::Admin)) {
            continue;
        }
        let uri = fill(path, session);
        let body = body.map(example);
        for (who, token) in [("nobody", &nobody), ("alice", &alice)] {
            let open_to_alice = who == "alice" && ((method, path) == ("POST", "/v1/sessions") || path == "/v1/events");
            if path == "/v1/auth/whoami" || open_to_alice {
                continue;
            }
            let (status, answer) = api.as_(token, method, &uri, body.clone()).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{who}: {method} {uri}: {answer}");
            assert_eq!(answer["error"]["code"], "permission_denied", "{who}: {method} {uri}: {answer}");
            if part != Some(Part::Raft) {
                assert!(
                    answer["error"]["permission"].is_string(),
                    "{who}: {method} {uri} names the permission: {answer}"
                );
            }
            walked += 1;
        }
    }
    assert!(walked > 80, "every guarded route was walked ({walked})");
    let after = api.node.locks().read(|t| serde_json::to_value(leasehold_core::TableImage::from(t)).unwrap());
    assert_eq!(before["users"], after["users"]);
    assert_eq!(before["roles"], after["roles"]);
    assert_eq!(before["leases"], after["leases"], "nothing was granted or released");

    // The exceptions: alice may open a session, and whoami answers.
    let (status, _) = api.as_(&alice, "POST", "/v1/sessions", Some(json!({"owner": "a", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(&nobody, "POST", "/v1/sessions", Some(json!({"owner": "n", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, me) = api.as_(&alice, "GET", "/v1/auth/whoami", None).await;
    assert_eq!((status, &me["user"]), (StatusCode::OK, &json!("alice")), "{me}");
}

// Ensures a team's own work goes on beside another's: alice locks, reads,
// fences and releases under `a-`, is refused on `b-` with a body naming
// the permission and the name, and a multi-acquire with one name outside
// her grants is refused whole.
#[tokio::test]
async fn a_team_works_under_its_prefix_only() {
    let (api, alice, _) = tenants().await;
    let (status, grant) =
        api.as_(&alice, "POST", "/v1/locks/a-x/acquire", Some(json!({"owner": "alice", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let token = grant["token"].as_u64().unwrap();
    let (status, _) = api.as_(&alice, "GET", "/v1/locks/a-x", None).await;
    assert_eq!(status, StatusCode::OK);
    let record = json!({"lock": "a-x", "token": token, "value": {"n": 1}});
    let (status, written) = api.as_(&alice, "PUT", "/v1/records/a-rec", Some(record)).await;
    assert_eq!(status, StatusCode::OK, "{written}");
    let (status, list) = api.as_(&alice, "GET", "/v1/locks?prefix=a-", None).await;
    assert_eq!((status, list["locks"].as_array().map(Vec::len)), (StatusCode::OK, Some(1)));

    let (status, b) =
        api.as_(CLIENT, "POST", "/v1/locks/b-x/acquire", Some(json!({"owner": "bob", "ttl_ms": 5000}))).await;
    assert_eq!(status, StatusCode::OK, "{b}");
    let b_token = b["token"].as_u64().unwrap();
    let (status, refused) = api.as_(&alice, "POST", "/v1/locks/b-x/release", Some(json!({"token": b_token}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        (&refused["error"]["code"], &refused["error"]["permission"], &refused["error"]["name"]),
        (&json!("permission_denied"), &json!("lock"), &json!("b-x"))
    );
    let (status, refused) = api.as_(&alice, "GET", "/v1/locks/b-x", None).await;
    assert_eq!((status, &refused["error"]["permission"]), (StatusCode::FORBIDDEN, &json!("read")));
    assert!(refused["error"].get("token").is_none() && refused.to_string().find("bob").is_none(), "{refused}");
    let (status, _) = api.as_(&alice, "GET", "/v1/locks?prefix=", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a list wider than her grants is refused");
    let many = json!({"names": ["a-y", "b-y"], "owner": "alice", "ttl_ms": 5000});
    let (status, refused) = api.as_(&alice, "POST", "/v1/multi/acquire", Some(many)).await;
    assert_eq!((status, &refused["error"]["name"]), (StatusCode::FORBIDDEN, &json!("b-y")));
    let (status, _) = api.as_(CLIENT, "GET", "/v1/locks/a-y", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "refused whole: a-y was not granted");
    let (status, held) = api.as_(CLIENT, "GET", "/v1/locks/b-x", None).await;
    assert_eq!((status, held["token"].as_u64()), (StatusCode::OK, Some(b_token)), "b-x is still bob's");

    let (status, released) = api.as_(&alice, "POST", "/v1/locks/a-x/release", Some(json!({"token": token}))).await;
    assert_eq!(status, StatusCode::OK, "{released}");
}

// Ensures a revoked token, and a removed user's, is refused from the
// entry that revokes it, and a second token of the same user keeps working.
#[tokio::test]
async fn a_revoked_token_is_refused_at_once() {
    let (api, alice, _) = tenants().await;
    let (status, second) = api.as_(ADMIN, "POST", "/v1/auth/users/alice/tokens", None).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let second_token = second["token"].as_str().unwrap().to_owned();
    let (status, users) = api.as_(ADMIN, "GET", "/v1/auth/users", None).await;
    assert_eq!(status, StatusCode::OK);
    let alice_view = users["users"].as_array().unwrap().iter().find(|u| u["name"] == "alice").unwrap().clone();
    assert_eq!(alice_view["token_ids"].as_array().map(Vec::len), Some(2));
    assert!(!users.to_string().contains(&second_token), "a list never shows a token");
    let first_id = alice_view["token_ids"][0].as_u64().unwrap();

    let (status, _) = api.as_(&alice, "GET", "/v1/locks/a-x/shared", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, revoked) = api.as_(ADMIN, "DELETE", &format!("/v1/auth/users/alice/tokens/{first_id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    let (status, refused) = api.as_(&alice, "GET", "/v1/locks/a-x/shared", None).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::FORBIDDEN, &json!("permission_denied")));
    let (status, _) = api.as_(&second_token, "GET", "/v1/locks/a-x/shared", None).await;
    assert_eq!(status, StatusCode::OK, "the other token still works");
    let (status, gone) = api.as_(ADMIN, "DELETE", &format!("/v1/auth/users/alice/tokens/{first_id}"), None).await;
    assert_eq!((status, &gone["error"]["code"]), (StatusCode::NOT_FOUND, &json!("no_token")));

    let (status, _) = api.as_(ADMIN, "DELETE", "/v1/auth/users/alice", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(&second_token, "GET", "/v1/locks/a-x/shared", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

// Ensures administration refuses bad input with a clear error and
// changes nothing, and that a user given admin on every name administers.
#[tokio::test]
async fn administration_refuses_bad_input_and_admits_user_admins() {
    let (api, alice, _) = tenants().await;
    let cases = [
        ("POST", "/v1/auth/users", json!({"name": "has space"}), StatusCode::BAD_REQUEST, "invalid_argument"),
        ("POST", "/v1/auth/users", json!({"name": "alice"}), StatusCode::CONFLICT, "already_exists"),
        ("POST", "/v1/auth/users", json!({"nam": "x"}), StatusCode::BAD_REQUEST, "invalid_argument"),
        ("POST", "/v1/auth/roles/nope/grants", json!({"permission": "read"}), StatusCode::NOT_FOUND, "no_role"),
        (
            "POST",
            "/v1/auth/roles/team-a/grants",
            json!({"permission": "write"}),
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        ("POST", "/v1/auth/users/nope/roles", json!({"role": "team-a"}), StatusCode::NOT_FOUND, "no_user"),
        ("POST", "/v1/auth/users/alice/roles", json!({"role": "nope"}), StatusCode::NOT_FOUND, "no_role"),
    ];
    let (_, before) = api.as_(ADMIN, "GET", "/v1/auth/users", None).await;
    for (method, path, body, status, code) in cases {
        let (got, answer) = api.as_(ADMIN, method, path, Some(body.clone())).await;
        assert_eq!((got, &answer["error"]["code"]), (status, &json!(code)), "{method} {path} {body}: {answer}");
    }
    let (_, after) = api.as_(ADMIN, "GET", "/v1/auth/users", None).await;
    assert_eq!(before, after);
    let (status, _) = api.as_(CLIENT, "GET", "/v1/auth/users", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the client token never administers");

    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/roles", Some(json!({"name": "ops"}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) =
        api.as_(ADMIN, "POST", "/v1/auth/roles/ops/grants", Some(json!({"permission": "admin", "prefix": "a-"}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/users/alice/roles", Some(json!({"role": "ops"}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(&alice, "GET", "/v1/auth/users", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "admin on a prefix opens no administration");
    let (status, _) =
        api.as_(ADMIN, "POST", "/v1/auth/roles/ops/grants", Some(json!({"permission": "admin", "prefix": ""}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(&alice, "GET", "/v1/auth/users", None).await;
    assert_eq!(status, StatusCode::OK, "admin on every name administers");
    let (status, _) = api.as_(&alice, "GET", "/v1/locks/b-anything", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "and reads every name");
}

// Ensures the all-locks event stream delivers a user only the events of
// names it may read.
#[tokio::test]
async fn event_streams_deliver_only_readable_events() {
    let (api, alice, _) = tenants().await;
    let request = Request::get("/v1/events").header(header::AUTHORIZATION, format!("Bearer {alice}"));
    let response = api.router.clone().oneshot_request(request.body(Body::empty()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut frames = response.into_body().into_data_stream();
    for name in ["b-1", "a-1", "b-2", "a-2"] {
        let (status, _) = api
            .as_(CLIENT, "POST", &format!("/v1/locks/{name}/acquire"), Some(json!({"owner": "o", "ttl_ms": 5000})))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let mut seen = String::new();
    while !seen.contains("\"a-2\"") {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), frames.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on")
            .expect("a frame");
        seen.push_str(&String::from_utf8_lossy(&frame));
    }
    assert!(seen.contains("\"a-1\""), "{seen}");
    assert!(!seen.contains("\"b-"), "no event of b-: {seen}");
}

/// The frames of an event stream opened with `token` on `path`.
async fn follow(api: &OneNode, token: &str, path: &str) -> impl tokio_stream::Stream<Item = String> {
    let request = Request::get(path).header(header::AUTHORIZATION, format!("Bearer {token}"));
    let response = api.router.clone().oneshot_request(request.body(Body::empty()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.into_body().into_data_stream().map(|frame| String::from_utf8_lossy(&frame.expect("a frame")).into_owned())
}

/// What `frames` sent up to and including the event of lock `name` of
/// type `kind`, within 20 s.
async fn until_event(
    frames: &mut (impl tokio_stream::Stream<Item = String> + Unpin),
    kind: &str,
    name: &str,
) -> String {
    let mut seen = String::new();
    let wanted = format!("\"name\":\"{name}\",\"type\":\"{kind}\"");
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !seen.contains(&wanted) {
        let frame = tokio::time::timeout_at(give_up, frames.next())
            .await
            .unwrap_or_else(|_| panic!("no {kind} of {name} within 20 s: {seen}"))
            .expect("the stream goes on");
        seen.push_str(&frame);
    }
    seen
}

// Ensures every event says who caused it: an acquire by a user is `by`
// that user, one with the client token `client`, a release by the admin
// token (and the hand-over it makes to a waiter) `admin`; and `?by=` keeps
// only that actor's events (text that names no actor is 400). (Expiry by
// `cluster` needs ticks, which a one-node cluster in process stops once no
// write refreshes its quorum ack: tests/cluster/tenants.rs and the core's
// tests show it.)
#[tokio::test]
async fn events_say_who_caused_them() {
    let (api, alice, _) = tenants().await;
    let mut alices = Box::pin(follow(&api, ADMIN, "/v1/events?by=user:alice").await);
    let mut clients = Box::pin(follow(&api, ADMIN, "/v1/events?prefix=a-&by=client").await);
    let mut everyone = Box::pin(follow(&api, ADMIN, "/v1/locks/a-1/events").await);
    let acquire = json!({"owner": "o", "ttl_ms": 5000});
    let (status, _) = api.as_(CLIENT, "POST", "/v1/locks/a-0/acquire", Some(acquire.clone())).await;
    assert_eq!(status, StatusCode::OK);
    let (status, grant) = api.as_(&alice, "POST", "/v1/locks/a-1/acquire", Some(acquire)).await;
    assert_eq!(status, StatusCode::OK);
    let wait = json!({"owner": "w", "ttl_ms": 5000, "wait_ms": 60000});
    // The waiter's request waits for its turn: released below, meanwhile.
    let (queued, released) = tokio::join!(api.as_(CLIENT, "POST", "/v1/locks/a-1/acquire", Some(wait)), async {
        until_event(&mut everyone, "queued", "a-1").await;
        api.as_(ADMIN, "POST", "/v1/locks/a-1/release", Some(json!({"token": grant["token"]}))).await
    });
    assert_eq!((queued.0, released.0), (StatusCode::OK, StatusCode::OK));

    let seen = until_event(&mut alices, "acquired", "a-1").await;
    assert!(seen.contains(r#""owner":"o","token":"#) && seen.contains(r#""by":"user:alice""#), "{seen}");
    assert!(!seen.contains("a-0"), "the client's acquire is not alice's: {seen}");
    let seen = until_event(&mut everyone, "handed_over", "a-1").await;
    assert!(seen.contains(r#""type":"released","owner":"o""#), "{seen}");
    assert!(seen.contains(r#""type":"handed_over","owner":"w""#) && seen.ends_with("\"by\":\"admin\"}\n\n"), "{seen}");
    let seen = until_event(&mut clients, "queued", "a-1").await;
    assert!(seen.contains(r#""name":"a-0","type":"acquired""#) && !seen.contains("user:alice"), "{seen}");

    for bad in ["bob", "user:", "Cluster"] {
        let (status, body) = api.as_(ADMIN, "GET", &format!("/v1/events?by={bad}"), None).await;
        assert_eq!((status, &body["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{bad}");
    }
}

// Ensures changes of users and roles are events of their own, by the admin
// who made them, on the admin's stream only: the client token (which reads
// every lock) sees its own acquire after them but none of them.
#[tokio::test]
async fn changes_of_users_and_roles_are_events_only_admins_read() {
    let (api, _, _) = tenants().await;
    let mut admins = Box::pin(follow(&api, ADMIN, "/v1/events").await);
    let mut clients = Box::pin(follow(&api, CLIENT, "/v1/events").await);
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/roles", Some(json!({"name": "team-c"}))).await;
    assert_eq!(status, StatusCode::OK);
    let grant = json!({"permission": "lock", "prefix": "c-"});
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/roles/team-c/grants", Some(grant)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/users", Some(json!({"name": "carol"}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/users/carol/roles", Some(json!({"role": "team-c"}))).await;
    assert_eq!(status, StatusCode::OK);
    let acquire = json!({"owner": "o", "ttl_ms": 5000});
    let (status, _) = api.as_(CLIENT, "POST", "/v1/locks/c-1/acquire", Some(acquire)).await;
    assert_eq!(status, StatusCode::OK);

    let seen = until_event(&mut admins, "acquired", "c-1").await;
    for change in [
        r#""type":"access_changed","change":"role_added","subject":"team-c","by":"admin""#,
        r#""type":"access_changed","change":"granted","subject":"team-c","detail":"lock on \"c-\"","by":"admin""#,
        r#""type":"access_changed","change":"user_added","subject":"carol","detail":"token "#,
        r#""type":"access_changed","change":"role_assigned","subject":"carol","detail":"team-c","by":"admin""#,
    ] {
        assert!(seen.contains(change), "{change} in {seen}");
    }
    assert!(!seen.contains("lh_"), "no token is in an event: {seen}");
    let seen = until_event(&mut clients, "acquired", "c-1").await;
    assert!(!seen.contains("access_changed"), "{seen}");
}

/// `oneshot` without the tower import clash in this module.
trait Oneshot {
    async fn oneshot_request(self, request: Request<Body>) -> axum::response::Response;
}

impl Oneshot for axum::Router {
    async fn oneshot_request(self, request: Request<Body>) -> axum::response::Response {
        tower::ServiceExt::oneshot(self, request).await.expect("router answers")
    }
}

// Ensures a session is its opener's: alice keeps alive and deletes her own
// session, another team's user may not touch it (even holding nothing) nor
// a session the client token opened, and the client token may touch both.
#[tokio::test]
async fn a_session_belongs_to_the_user_that_opened_it() {
    let (api, alice, _) = tenants().await;
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/roles", Some(json!({"name": "team-b"}))).await;
    assert_eq!(status, StatusCode::OK);
    let grant = json!({"permission": "lock", "prefix": "b-"});
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/roles/team-b/grants", Some(grant)).await;
    assert_eq!(status, StatusCode::OK);
    let (_, bob) = api.as_(ADMIN, "POST", "/v1/auth/users", Some(json!({"name": "bob"}))).await;
    let bob = bob["token"].as_str().unwrap().to_owned();
    let (status, _) = api.as_(ADMIN, "POST", "/v1/auth/users/bob/roles", Some(json!({"role": "team-b"}))).await;
    assert_eq!(status, StatusCode::OK);

    let open = json!({"owner": "alice", "ttl_ms": 60000});
    let (status, session) = api.as_(&alice, "POST", "/v1/sessions", Some(open)).await;
    assert_eq!(status, StatusCode::OK, "{session}");
    let id = session["session"].as_u64().unwrap();
    let keepalive = format!("/v1/sessions/{id}/keepalive");
    let (status, _) = api.as_(&alice, "POST", &keepalive, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "her own session");
    let (status, refused) = api.as_(&bob, "POST", &keepalive, Some(json!({}))).await;
    assert_eq!((status, &refused["error"]["name"]), (StatusCode::FORBIDDEN, &json!("")), "{refused}");
    let (status, _) = api.as_(&bob, "DELETE", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = api.as_(CLIENT, "POST", &keepalive, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "the client token may lock every name");

    let (_, theirs) = api.as_(CLIENT, "POST", "/v1/sessions", Some(json!({"owner": "svc", "ttl_ms": 60000}))).await;
    let theirs = theirs["session"].as_u64().unwrap();
    let (status, _) = api.as_(&alice, "DELETE", &format!("/v1/sessions/{theirs}"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a session the client token opened is not hers");
    let (status, _) = api.as_(&alice, "DELETE", &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
}
