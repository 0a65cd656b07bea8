//! Auth, TLS and slow clients against real 3-node clusters: tokens gate the
//! client, admin and Raft APIs without changing anything when refused; the
//! client library and the CLI work over https with a test CA generated here;
//! a half-sent header is closed while other clients are served.

use leasehold_client::ErrorCode;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    bounded, start_cluster_with, start_secured_cluster, step, EventStream, Material, ADMIN_TOKEN, CLIENT_TOKEN,
    CLUSTER_SECRET, ELECTION_BOUND, WRONG_TOKEN,
};
use leasehold::peer;
use leasehold_client::Secret;
use leasehold_client::{AcquireOptions, Client, ClientError, Credentials, FencingToken};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn secret(s: &str) -> Option<Secret> {
    Some(Secret::new(s, "test").unwrap())
}

/// Raw HTTP to one node, to see statuses and headers the client library hides.
pub struct Raw {
    http: reqwest::Client,
    base: String,
}

impl Raw {
    pub fn new(base: String, ca: Option<&Path>) -> Raw {
        let mut builder = reqwest::Client::builder().no_proxy();
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).unwrap();
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
        }
        Raw { http: builder.build().unwrap(), base }
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("node answers")
    }
}

/// Asserts a refusal: `status`, the JSON error `code`, and for 401 the
/// `WWW-Authenticate` challenge.
pub async fn assert_refused(case: &str, reply: reqwest::Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(reply.status(), status, "{case}");
    if status == StatusCode::UNAUTHORIZED {
        let challenge = reply.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(challenge.as_deref(), Some("Bearer realm=\"leasehold\""), "{case}");
    }
    let body: Value = reply.json().await.unwrap_or(Value::Null);
    assert_eq!(body["error"]["code"], code, "{case}: {body}");
    body
}

// Ensures the client API and the admin API refuse a missing token with 401
// and a wrong one with 403, on the leader and on a follower, changing
// nothing; that the right tokens work (also forwarded by a follower); that
// only health, readiness, metrics and the page stay open, the status taking
// any secret and its digest only the admin token; and that a process
// without the cluster secret cannot vote or append entries, over HTTP or
// over the peer transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_gate_client_admin_and_raft_apis() {
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(3, material.secrets(), &[]).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);

        step("the client token works, also through a follower that forwards it");
        let held = cluster.client().acquire("held", "alice", 60_000).await.expect("acquire with the client token");
        let via_follower = Client::with_credentials(
            &[cluster.endpoint(follower)],
            &Credentials { token: secret(CLIENT_TOKEN), ca: None, identity: None },
        )
        .unwrap();
        let lease = via_follower.acquire("forwarded", "bob", 60_000).await.expect("forwarded acquire");
        via_follower.release("forwarded", lease.token()).await.expect("forwarded release");
        let admin = cluster.client_as(secret(ADMIN_TOKEN));
        assert!(admin.get("held").await.unwrap().is_some(), "the admin token opens the client API");

        for id in [leader, follower] {
            step(&format!("client API without or with a wrong token, through node {id}"));
            let raw = Raw::new(format!("http://{}", cluster.endpoint(id)), None);
            let acquire = json!({ "owner": "mallory", "ttl_ms": 60_000 });
            let release = json!({ "token": held.token() });
            let record = json!({ "lock": "held", "token": held.token(), "value": "forged" });
            let gate = json!({ "lock": "held", "token": held.token() });
            let cases: [(Method, &str, Option<Value>); 7] = [
                (Method::POST, "/v1/locks/free/acquire", Some(acquire)),
                (Method::POST, "/v1/locks/held/release", Some(release)),
                (Method::PUT, "/v1/records/forged", Some(record)),
                (Method::POST, "/v1/fence/gate/printer", Some(gate)),
                (Method::GET, "/v1/locks/held", None),
                (Method::GET, "/v1/locks", None),
                (Method::GET, "/v1/locks/held/events", None),
            ];
            for (method, path, body) in cases {
                let case = format!("{method} {path} via node {id}");
                let missing = raw.send(method.clone(), path, None, body.clone()).await;
                assert_refused(&format!("{case}, no token"), missing, StatusCode::UNAUTHORIZED, "unauthenticated")
                    .await;
                let wrong = raw.send(method.clone(), path, Some(WRONG_TOKEN), body.clone()).await;
                assert_refused(&format!("{case}, wrong token"), wrong, StatusCode::FORBIDDEN, "permission_denied")
                    .await;
                let peer = raw.send(method, path, Some(CLUSTER_SECRET), body).await;
                assert_refused(&format!("{case}, cluster secret"), peer, StatusCode::FORBIDDEN, "permission_denied")
                    .await;
            }

            step(&format!("admin API without, with a wrong or with the client token, through node {id}"));
            let learner = json!({ "id": 9, "addr": "127.0.0.1:1" });
            let cases: [(Method, &str, Option<Value>); 6] = [
                (Method::POST, "/v1/cluster/learners", Some(learner)),
                (Method::POST, "/v1/cluster/snapshot", None),
                (Method::GET, "/v1/cluster/snapshot", None),
                (Method::POST, "/v1/cluster/membership", Some(json!({ "voters": [leader] }))),
                (Method::DELETE, &format!("/v1/cluster/members/{follower}"), None),
                (Method::POST, "/v1/cluster/init", Some(json!({}))),
            ];
            for (method, path, body) in cases {
                let case = format!("{method} {path} via node {id}");
                let missing = raw.send(method.clone(), path, None, body.clone()).await;
                assert_refused(&format!("{case}, no token"), missing, StatusCode::UNAUTHORIZED, "unauthenticated")
                    .await;
                for (name, token) in [("wrong", WRONG_TOKEN), ("client", CLIENT_TOKEN)] {
                    let reply = raw.send(method.clone(), path, Some(token), body.clone()).await;
                    let case = format!("{case}, {name} token");
                    assert_refused(&case, reply, StatusCode::FORBIDDEN, "permission_denied").await;
                }
            }

            step(&format!("health, readiness, metrics and the page stay open on node {id}; the rest asks"));
            for path in ["/healthz", "/readyz", "/metrics", "/", "/ui"] {
                assert_eq!(raw.send(Method::GET, path, None, None).await.status(), StatusCode::OK, "{path}");
            }
            for path in ["/v1/cluster/status", "/v1/cluster/nodes", "/openapi.json"] {
                let missing = raw.send(Method::GET, path, None, None).await;
                assert_refused(&format!("{path}, no token"), missing, StatusCode::UNAUTHORIZED, "unauthenticated")
                    .await;
                let wrong = raw.send(Method::GET, path, Some(WRONG_TOKEN), None).await;
                assert_refused(&format!("{path}, wrong token"), wrong, StatusCode::FORBIDDEN, "permission_denied")
                    .await;
                for token in [CLIENT_TOKEN, ADMIN_TOKEN, CLUSTER_SECRET] {
                    let reply = raw.send(Method::GET, path, Some(token), None).await;
                    assert_eq!(reply.status(), StatusCode::OK, "{path} with any of the secrets");
                }
            }
            let nodes: Value =
                raw.send(Method::GET, "/v1/cluster/nodes", Some(CLIENT_TOKEN), None).await.json().await.unwrap();
            let statuses =
                nodes["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["status"].is_object()).count());
            assert_eq!(statuses, 3, "the node asked every member with its own secret: {nodes}");
            let digest = "/v1/cluster/status?digest=true";
            for (token, status) in [(CLIENT_TOKEN, StatusCode::FORBIDDEN), (CLUSTER_SECRET, StatusCode::FORBIDDEN)] {
                assert_eq!(raw.send(Method::GET, digest, Some(token), None).await.status(), status, "digest");
            }
            let reply = raw.send(Method::GET, digest, Some(ADMIN_TOKEN), None).await;
            let body: Value = reply.json().await.unwrap();
            assert!(body["state_digest"]["digest"].is_string(), "the admin token opens the digest: {body}");
        }

        step("a non-member's Raft RPC is refused and moves no term");
        let before = cluster.client().status_of(0).await.unwrap();
        let target = Raw::new(format!("http://{}", cluster.endpoint(1)), None);
        let vote = openraft::raft::VoteRequest::<leasehold::raft::types::TypeConfig>::new(
            openraft::impls::Vote::new(before.term + 100, 9),
            None,
        );
        let vote = serde_json::to_value(&vote).unwrap();
        let append = json!({
            "vote": { "leader_id": { "term": before.term + 100, "node_id": 9 }, "committed": true },
            "prev_log_id": null, "entries": [], "leader_commit": null
        });
        for (path, body) in [("/raft/vote", vote), ("/raft/append", append)] {
            let missing = target.send(Method::POST, path, None, Some(body.clone())).await;
            assert_refused(&format!("{path}, no secret"), missing, StatusCode::UNAUTHORIZED, "unauthenticated").await;
            for (name, token) in [("wrong", WRONG_TOKEN), ("admin", ADMIN_TOKEN)] {
                let reply = target.send(Method::POST, path, Some(token), Some(body.clone())).await;
                assert_refused(&format!("{path}, {name} token"), reply, StatusCode::FORBIDDEN, "permission_denied")
                    .await;
            }
        }

        step("the same vote over the peer transport, without the secret or with a wrong one: closed unanswered");
        for secret in [None, Some(WRONG_TOKEN.to_string())] {
            let mut peer = tokio::net::TcpStream::connect(cluster.endpoint(1)).await.expect("connects");
            peer.write_all(peer::PREFACE).await.unwrap();
            peer::write_frame(&mut peer, &peer::Hello { from: 9, secret, channel: peer::Channel::Raft }).await.unwrap();
            let vote = openraft::raft::VoteRequest::<leasehold::raft::types::TypeConfig>::new(
                openraft::impls::Vote::new(before.term + 100, 9),
                None,
            );
            // The node may close before or after this write lands; either way it never answers.
            let _ = peer::write_frame(&mut peer, &leasehold::raft::PeerRequest::Vote(vote)).await;
            let answer =
                tokio::time::timeout(ELECTION_BOUND, peer::read_frame::<_, leasehold::raft::PeerResponse>(&mut peer))
                    .await;
            assert!(matches!(answer, Ok(Ok(None)) | Ok(Err(_))), "a peer without the secret was answered: {answer:?}");
        }

        step("nothing changed");
        assert_eq!(cluster.wait_for_leader(ELECTION_BOUND).await.unwrap(), leader, "leadership moved");
        let after = cluster.client().status_of(0).await.unwrap();
        assert_eq!(after.term, before.term, "a refused vote moved the term");
        assert_eq!(after.members, before.members, "membership changed");
        assert_eq!(after.members.iter().filter(|m| m.voter).count(), 3);
        let client = cluster.client();
        let still = client.get("held").await.unwrap().expect("held is still held");
        assert_eq!((still.owner.as_str(), still.token), ("alice", held.token()));
        assert!(client.get("free").await.unwrap().is_none(), "a refused acquire granted a lock");
        assert!(client.get_record("forged").await.unwrap().is_none(), "a refused write stored a record");

        step("the same vote with the cluster secret is taken (the refusals were the secret's doing)");
        let vote = openraft::raft::VoteRequest::<leasehold::raft::types::TypeConfig>::new(
            openraft::impls::Vote::new(after.term + 100, 9),
            None,
        );
        let reply = target.send(Method::POST, "/raft/vote", Some(CLUSTER_SECRET), Some(json!(vote))).await;
        assert_eq!(reply.status(), StatusCode::OK, "{:?}", reply.text().await);
        let mut peer = tokio::net::TcpStream::connect(cluster.endpoint(1)).await.expect("connects");
        peer.write_all(peer::PREFACE).await.unwrap();
        peer::write_frame(
            &mut peer,
            &peer::Hello { from: 9, secret: Some(CLUSTER_SECRET.to_string()), channel: peer::Channel::Raft },
        )
        .await
        .unwrap();
        let vote = openraft::raft::VoteRequest::<leasehold::raft::types::TypeConfig>::new(
            openraft::impls::Vote::new(after.term + 200, 9),
            None,
        );
        peer::write_frame(&mut peer, &leasehold::raft::PeerRequest::Vote(vote)).await.unwrap();
        let answer =
            tokio::time::timeout(ELECTION_BOUND, peer::read_frame::<_, leasehold::raft::PeerResponse>(&mut peer)).await;
        assert!(
            matches!(answer, Ok(Ok(Some(leasehold::raft::PeerResponse::Vote(_))))),
            "over the peer transport: {answer:?}"
        );

        step("the admin token opens membership (refused only for its content)");
        let err = admin.remove_member(99).await.expect_err("node 99 is no member");
        assert_eq!(err.code(), Some(ErrorCode::NotMember), "{err}");
    })
    .await;
}

// Ensures the client library and the CLI work over https with a CA made for
// the test (leader forwarding and Raft RPC too), and that plain http and an
// untrusted client are refused without changing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_test_ca() {
    bounded(async {
        let material = Material::new();
        let files = material.tls(material.secrets());
        let cluster = start_secured_cluster(3, files, &[]).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let ca = material.path("ca.pem");

        step("client library over https, through the leader and a follower");
        let client = cluster.client();
        let lease = client.acquire("tls-lock", "alice", 60_000).await.expect("acquire over https");
        let via_follower = Client::with_credentials(
            &[format!("https://{}", cluster.endpoint(follower))],
            &Credentials {
                token: secret(CLIENT_TOKEN),
                ca: Some(leasehold_client::load_ca(&ca).unwrap()),
                identity: None,
            },
        )
        .unwrap();
        let view = via_follower.get("tls-lock").await.unwrap().expect("held");
        assert_eq!(view.token, lease.token());

        step("a waiting acquire through a follower over https (HTTP/2), and h2 by ALPN");
        let waiting = AcquireOptions { wait: Some(Duration::from_secs(20)), request_id: None, lock_delay: None };
        let held = client.acquire("tls-wait", "alice", 60_000).await.expect("acquire over https");
        let (handed, ()) = tokio::join!(via_follower.acquire_with("tls-wait", "bob", 60_000, &waiting), async {
            // Released once bob is in the queue, so his answer is a hand-over.
            while !client.get("tls-wait").await.unwrap().is_some_and(|v| v.waiters.iter().any(|w| w.owner == "bob")) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            client.release("tls-wait", held.token()).await.expect("release over https");
        });
        assert!(handed.expect("bob is handed the lock").token() > held.token());
        let negotiating = reqwest::Client::builder()
            .no_proxy()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(leasehold_client::load_ca(&ca).unwrap().pem()).unwrap(),
            )
            .build()
            .unwrap();
        let reply = negotiating.get(format!("https://{}/healthz", cluster.endpoint(leader))).send().await.unwrap();
        assert_eq!(reply.version(), reqwest::Version::HTTP_2, "the node offers h2 by ALPN");

        step("the CLI over https with --ca-file and --token-file");
        let cli = |args: &[&str]| {
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
            command.args(args).args(["--endpoints", &cluster.endpoints().join(",")]);
            for ambient in
                ["LEASEHOLD_AUTH_TOKEN", "LEASEHOLD_AUTH_TOKEN_FILE", "LEASEHOLD_TOKEN_FILE", "LEASEHOLD_CA_FILE"]
            {
                command.env_remove(ambient);
            }
            command.output().expect("leasehold runs")
        };
        let (ca_arg, token_arg) = (ca.to_str().unwrap(), material.path("client-token"));
        let token_arg = token_arg.to_str().unwrap();
        let out = cli(&["acquire", "cli-lock", "--owner", "cli", "--ca-file", ca_arg, "--token-file", token_arg]);
        assert!(out.status.success(), "CLI acquire: {}", String::from_utf8_lossy(&out.stderr));
        let grant: Value = serde_json::from_slice(&out.stdout).expect("CLI prints the grant");
        let cli_token = grant["token"].as_u64().expect("a token");
        let out = cli(&["get", "cli-lock", "--ca-file", ca_arg, "--token-file", token_arg]);
        assert!(out.status.success(), "CLI get: {}", String::from_utf8_lossy(&out.stderr));
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(shown["token"].as_u64(), Some(cli_token));

        step("the CLI without the CA, or without the token, is refused");
        let out = cli(&["acquire", "cli-untrusted", "--owner", "cli", "--token-file", token_arg]);
        assert!(!out.status.success(), "an untrusted https server was accepted");
        let out = cli(&["acquire", "cli-no-token", "--owner", "cli", "--ca-file", ca_arg]);
        assert!(!out.status.success(), "acquire without a token succeeded");
        assert!(String::from_utf8_lossy(&out.stderr).contains("unauthenticated"), "{:?}", out);

        step("plain http to a TLS node is refused");
        for id in [leader, follower] {
            let raw = Raw::new(format!("http://{}", cluster.endpoint(id)), None);
            let body = json!({ "owner": "plain", "ttl_ms": 60_000 });
            let reply = raw.send(Method::POST, "/v1/locks/plain-lock/acquire", Some(CLIENT_TOKEN), Some(body)).await;
            assert_refused("plain http", reply, StatusCode::BAD_REQUEST, "tls_required").await;
        }
        let plain = Client::with_credentials(
            &cluster.endpoints(),
            &Credentials { token: secret(CLIENT_TOKEN), ca: None, identity: None },
        )
        .unwrap()
        .with_retry_budget(Duration::from_secs(1));
        let err = plain.acquire("plain-lock", "plain", 60_000).await.expect_err("plain http refused");
        assert_eq!(err.code(), Some(ErrorCode::TlsRequired), "{err}");

        step("an untrusted certificate is refused at once, not retried");
        // With an hour's retry budget, a retry would run into the bound.
        let untrusting = Arc::new(
            Client::with_credentials(
                &cluster.endpoints().iter().map(|e| format!("https://{e}")).collect::<Vec<_>>(),
                &Credentials { token: secret(CLIENT_TOKEN), ca: None, identity: None },
            )
            .unwrap()
            .with_retry_budget(Duration::from_secs(3600)),
        );
        let err = untrusting.acquire("cli-untrusted", "impostor", 60_000).await.expect_err("untrusted accepted");
        assert!(matches!(err, ClientError::Unavailable(_)) && err.to_string().contains("certificate"), "{err}");
        let err = untrusting.watch(None, None).next().await.expect_err("a watch of an untrusted node");
        assert!(err.to_string().contains("certificate"), "{err}");

        step("nothing changed");
        assert!(client.get("plain-lock").await.unwrap().is_none(), "plain http granted a lock");
        assert!(client.get("cli-untrusted").await.unwrap().is_none());
        assert!(client.get("cli-no-token").await.unwrap().is_none());
        client.release("tls-lock", lease.token()).await.expect("release over https");
        client.release("cli-lock", FencingToken::granted_at(cli_token)).await.expect("release the CLI's lock");
    })
    .await;
}

/// Reads from `stream` until the node closes it; returns what it sent.
async fn read_until_closed(stream: &mut tokio::net::TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// The next event of one of these types, skipping others.
async fn next_event(events: &mut EventStream, types: &[&str]) -> Value {
    loop {
        let event = events.next().await;
        if types.iter().any(|t| event["type"] == *t) {
            return event;
        }
    }
}

/// Bound on how long the node may take to close a slow connection: the
/// configured timeouts (1 s, 1.5 s) with generous room for a loaded machine,
/// yet below hyper's own 30 s default, so only the configured timeout passes.
const CLOSE_BOUND: Duration = Duration::from_secs(20);

// Ensures a connection that sends half a header, a flood of idle connections
// (more than the connection limit) and a half-sent body are closed by their
// timeouts while other clients are served, and that a waiting acquire and an
// events stream outlive the request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_others_served() {
    bounded(async {
        let args = ["--header-read-timeout-ms", "1000", "--request-timeout-ms", "1500", "--max-connections", "24"];
        let cluster = start_cluster_with(3, &args).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let endpoint = cluster.endpoint(leader);

        step("open a half header, a half body, and more idle connections than the limit");
        let mut half_header = tokio::net::TcpStream::connect(&endpoint).await.unwrap();
        half_header.write_all(b"POST /v1/locks/slow/acquire HTTP/1.1\r\nhost: leasehold\r\ncontent-").await.unwrap();
        let mut half_body = tokio::net::TcpStream::connect(&endpoint).await.unwrap();
        let head = "POST /v1/locks/slow-body/acquire HTTP/1.1\r\nhost: leasehold\r\n\
                    content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"owner\":";
        half_body.write_all(head.as_bytes()).await.unwrap();
        let mut idle = Vec::new();
        for _ in 0..40 {
            idle.push(tokio::net::TcpStream::connect(&endpoint).await.unwrap());
        }

        step("other clients are served meanwhile");
        let client = cluster.client();
        for i in 0..5 {
            let name = format!("busy-{i}");
            let lease = client.acquire(&name, "worker", 10_000).await.expect("served while slow clients hang");
            client.release(&name, lease.token()).await.expect("release");
        }

        step("the half header and the idle connections (past the limit: at once) are closed");
        tokio::time::timeout(CLOSE_BOUND, read_until_closed(&mut half_header)).await.expect("half header closed");
        for stream in &mut idle {
            tokio::time::timeout(CLOSE_BOUND, read_until_closed(stream)).await.expect("idle connection closed");
        }

        step("the half body is answered 408 and closed");
        let answer =
            tokio::time::timeout(CLOSE_BOUND, read_until_closed(&mut half_body)).await.expect("half body closed");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");

        step("a waiting acquire through a follower outlives the request timeout");
        let holder = client.acquire("queue", "first", 60_000).await.unwrap();
        let via_follower = Client::new(&[cluster.endpoint(follower)]).unwrap();
        let mut events = EventStream::open(&cluster.endpoint(follower), "queue").await;
        let waiter = tokio::spawn(async move {
            let options = AcquireOptions { wait: Some(Duration::from_secs(60)), request_id: None, lock_delay: None };
            via_follower.acquire_with("queue", "second", 60_000, &options).await
        });
        // The follower may apply the holder's grant after the stream opened.
        let queued = next_event(&mut events, &["queued"]).await;
        assert_eq!(queued["owner"], "second", "{queued}");
        tokio::time::sleep(Duration::from_millis(3000)).await;
        client.release("queue", holder.token()).await.unwrap();
        let granted = waiter.await.unwrap().expect("the waiter is granted, not timed out");
        assert_eq!(granted.grant.owner, "second");

        step("the events stream, open past the request timeout, still delivers");
        let handed = next_event(&mut events, &["handed_over"]).await;
        assert_eq!(handed["owner"], "second", "{handed}");
        step("a wait longer than any deadline can hold is refused 400, the connection not dropped");
        let raw = Raw::new(format!("http://{endpoint}"), None);
        let forever = json!({ "owner": "o", "ttl_ms": 10_000, "wait_ms": u64::MAX });
        let reply = raw.send(Method::POST, "/v1/locks/forever/acquire", None, Some(forever)).await;
        assert_refused("wait_ms u64::MAX", reply, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(client.get("slow").await.unwrap().is_none(), "the half request changed state");
        assert!(client.get("slow-body").await.unwrap().is_none(), "the half request changed state");
    })
    .await;
}
