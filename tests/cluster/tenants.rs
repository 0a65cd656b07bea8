//! Tenants on real 3-node clusters: users and roles administered with the
//! CLI and the Rust client, enforced on every node over TLS, revoked at
//! once everywhere, and kept by a backup.

use std::time::Duration;

use leasehold_client::proto::auth::Permission;
use leasehold_client::{load_ca, Client, ClientError, Credentials, Denial, Secret};
use leasehold_local::{LocalCluster, NodeLogs};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{
    bounded, leasehold_cli, start_secured_cluster, step, Material, ADMIN_TOKEN, CLIENT_TOKEN, ELECTION_BOUND, TICK_MS,
};
use crate::security::{assert_refused, Raw};

fn secret(s: &str) -> Option<Secret> {
    Some(Secret::new(s, "test").unwrap())
}

/// The refusal a call got, which must be a 403 naming `permission` on `name`.
fn denied<T: std::fmt::Debug>(result: Result<T, ClientError>) -> Denial {
    let error = result.expect_err("refused");
    error.denied().unwrap_or_else(|| panic!("not a permission_denied: {error}"))
}

// Ensures team A's token cannot release, read the token of, or write a
// record under team B's prefix (403 naming the permission and the name,
// nothing changed) on any node, over TLS, while its own work goes on; that
// users and roles made with the CLI hold on every node; and that a revoked
// token is refused by every node from the answer to the revoke on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_are_kept_to_their_prefixes_and_a_revoke_reaches_every_node() {
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(3, material.tls(material.secrets()), &[]).await;
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let ca = material.path("ca.pem");
        let (ca_file, admin_file) = (ca.to_str().unwrap(), material.path("admin-token"));
        let endpoints = cluster.endpoints().join(",");
        let cli = |args: &[&str]| {
            let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            all.extend(["--endpoints", &endpoints, "--ca-file", ca_file].map(String::from));
            all.extend(["--auth-token-file".into(), admin_file.to_str().unwrap().into()]);
            async move { leasehold_cli(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
        };

        step("roles and users: team-a with the CLI, team-b with the Rust client");
        cli(&["role", "add", "team-a"]).await;
        for permission in ["read", "lock", "fence"] {
            cli(&["role", "grant", "team-a", permission, "a-"]).await;
        }
        let alice = cli(&["user", "add", "alice", "--role", "team-a"]).await;
        let alice_token = alice["token"].as_str().expect("the token, shown once").to_owned();
        let admin = cluster.client_as(secret(ADMIN_TOKEN));
        admin.create_role("team-b").await.unwrap();
        for permission in [Permission::Read, Permission::Lock, Permission::Fence] {
            admin.grant("team-b", permission, "b-").await.unwrap();
        }
        let bob = admin.create_user("bob").await.unwrap();
        let roles = admin.assign_role("bob", "team-b").await.unwrap();
        assert_eq!(roles.roles, ["team-b"]);
        let users = cli(&["user", "list"]).await;
        assert!(!users.to_string().contains(&alice_token), "a list never shows a token: {users}");
        let ca = Some(load_ca(&ca).unwrap());
        let as_user = |token: &str| {
            let credentials = Credentials { token: secret(token), ca: ca.clone(), identity: None };
            Client::with_credentials(&cluster.endpoints(), &credentials).unwrap()
        };
        let (alice, bob) = (as_user(&alice_token), as_user(&bob.token));

        step("a token made a moment ago opens every node at once (a follower waits to apply it)");
        let carol = admin.create_user("carol").await.unwrap();
        admin.assign_role("carol", "team-a").await.unwrap();
        for id in cluster.ids() {
            let raw = Raw::new(format!("https://{}", cluster.endpoint(id)), Some(&material.path("ca.pem")));
            let reply = raw.send(Method::GET, "/v1/locks/a-free", Some(&carol.token), None).await;
            assert_refused(&format!("carol via node {id}"), reply, StatusCode::NOT_FOUND, "not_held").await;
        }

        step("bob holds b-ledger and writes b-balance under it");
        let ledger = bob.acquire("b-ledger", "bob", 60_000).await.unwrap();
        bob.put_record("b-balance", "b-ledger", ledger.token(), &json!(7)).await.unwrap();

        step("alice cannot release, read or write under b-, through any node");
        let refused = denied(alice.release("b-ledger", ledger.token()).await);
        assert_eq!((refused.permission, refused.name.as_deref()), (Some(Permission::Lock), Some("b-ledger")));
        assert_eq!(denied(alice.get("b-ledger").await).permission, Some(Permission::Read));
        let forged = alice.put_record("b-balance", "b-ledger", ledger.token(), &json!(0)).await;
        assert_eq!(denied(forged).permission, Some(Permission::Fence));
        assert_eq!(
            denied(alice.acquire_many(&["a-1", "b-1"], "alice", 60_000, &Default::default()).await).name.as_deref(),
            Some("b-1")
        );
        for id in cluster.ids() {
            let raw = Raw::new(format!("https://{}", cluster.endpoint(id)), Some(&material.path("ca.pem")));
            let release = json!({ "token": ledger.token() });
            let reply = raw.send(Method::POST, "/v1/locks/b-ledger/release", Some(&alice_token), Some(release)).await;
            let body =
                assert_refused(&format!("release via node {id}"), reply, StatusCode::FORBIDDEN, "permission_denied")
                    .await;
            assert_eq!((&body["error"]["permission"], &body["error"]["name"]), (&json!("lock"), &json!("b-ledger")));
            let reply = raw.send(Method::GET, "/v1/locks/b-ledger", Some(&alice_token), None).await;
            let body =
                assert_refused(&format!("get via node {id}"), reply, StatusCode::FORBIDDEN, "permission_denied").await;
            assert!(body["error"].get("token").is_none() && !body.to_string().contains("\"bob\""), "{body}");
        }
        let view = admin.get("b-ledger").await.unwrap().expect("still held");
        assert_eq!((view.owner.as_str(), view.token), ("bob", ledger.token()), "nothing changed");
        let record = admin.get_record("b-balance").await.unwrap().expect("the record");
        assert_eq!(record.value, json!(7));
        assert!(admin.get("a-1").await.unwrap().is_none(), "the multi-acquire was refused whole");

        step("alice's own work goes on under a-, and the client token still opens everything");
        let job = alice.acquire("a-job", "alice", 60_000).await.unwrap();
        alice.put_record("a-out", "a-job", job.token(), &json!("done")).await.unwrap();
        assert!(alice.get("a-job").await.unwrap().is_some());
        alice.release("a-job", job.token()).await.unwrap();
        let client = cluster.client_as(secret(CLIENT_TOKEN));
        assert!(client.get("b-ledger").await.unwrap().is_some());
        let refused = denied(client.list_users().await);
        assert_eq!(refused.permission, None, "the client token does not open the admin API at all");

        step("revoke alice's token: every node refuses it from the revoke's answer on");
        let alice_id = admin.list_users().await.unwrap().into_iter().find(|u| u.name == "alice").unwrap().token_ids[0];
        let revoked = cli(&["user", "token", "revoke", "alice", &alice_id.to_string()]).await;
        assert_eq!(revoked["removed"], true, "{revoked}");
        for id in cluster.ids() {
            let raw = Raw::new(format!("https://{}", cluster.endpoint(id)), Some(&material.path("ca.pem")));
            let reply = raw.send(Method::GET, "/v1/locks/a-job", Some(&alice_token), None).await;
            assert_refused(&format!("revoked token via node {id}"), reply, StatusCode::FORBIDDEN, "permission_denied")
                .await;
        }
        let whoami = bob.whoami().await.unwrap();
        assert_eq!(whoami.user.as_deref(), Some("bob"), "bob's token still works");
    })
    .await;
}

// Ensures a backup keeps users and roles: a cluster restored from it (with
// the same node secrets) lets alice's token in with her grants and no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_from_backup_keeps_users_and_roles() {
    bounded(async {
        let material = Material::new();
        let mut old = start_secured_cluster(3, material.secrets(), &[]).await;
        old.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let admin = old.client_as(secret(ADMIN_TOKEN));
        admin.create_role("team-a").await.unwrap();
        admin.grant("team-a", Permission::Lock, "a-").await.unwrap();
        let alice = admin.create_user("alice").await.unwrap();
        admin.assign_role("alice", "team-a").await.unwrap();

        step("back up node 1 with the admin token");
        let file = old.dir.path().join("backup.snap");
        let admin_file = material.path("admin-token");
        let args = ["backup", "--endpoints", &old.endpoint(1), "--out", file.to_str().unwrap()];
        let mut args: Vec<&str> = args.to_vec();
        args.extend(["--auth-token-file", admin_file.to_str().unwrap()]);
        leasehold_cli(&args).await;
        old.stop_all(Duration::from_secs(5));

        step("restore it into a new cluster with the same secrets");
        let dir = tempfile::tempdir().unwrap();
        let addrs = LocalCluster::free_addrs(3).unwrap();
        let peers: Vec<String> = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_leasehold"));
        let mut new = LocalCluster::new(binary, dir.path(), &addrs, TICK_MS, NodeLogs::Files)
            .with_security(material.secrets())
            .unwrap();
        for id in new.ids() {
            let data = new.data_dir(id);
            let restore = ["restore", "--from", file.to_str().unwrap(), "--data", data.to_str().unwrap()];
            let mut restore: Vec<&str> = restore.to_vec();
            let peers = peers.join(",");
            restore.extend(["--peers", &peers]);
            leasehold_cli(&restore).await;
        }
        new.start_all().unwrap();
        new.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let users = new.client_as(secret(ADMIN_TOKEN)).list_users().await.unwrap();
        assert_eq!(
            users.iter().map(|u| (u.name.as_str(), u.roles.clone())).collect::<Vec<_>>(),
            [("alice", vec!["team-a".to_string()])]
        );
        let alice = new.client_as(secret(&alice.token));
        let lease = alice.acquire("a-x", "alice", 60_000).await.expect("alice's token and grant survived");
        alice.release("a-x", lease.token()).await.unwrap();
        assert_eq!(denied(alice.acquire("b-x", "alice", 60_000).await).name.as_deref(), Some("b-x"));
        new.stop_all(Duration::from_secs(5));
    })
    .await;
}

// Ensures every node tells who caused each event: a user's acquire sent to
// a follower (which hands the command to the leader with its principal)
// shows `by: user:alice` on another follower's stream, and the expiry of
// that lease `by: cluster`; that stream's `?by=user:alice` keeps alice's
// events only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_say_which_user_caused_them_on_every_node() {
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(3, material.secrets(), &[]).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let other = *cluster.ids().iter().find(|id| ![leader, follower].contains(id)).expect("a third node");
        let admin = cluster.client_as(secret(ADMIN_TOKEN));
        admin.create_role("team-a").await.unwrap();
        for permission in [Permission::Read, Permission::Lock] {
            admin.grant("team-a", permission, "a-").await.unwrap();
        }
        let alice = admin.create_user("alice").await.unwrap();
        admin.assign_role("alice", "team-a").await.unwrap();

        step("the client token acquires a-other; then alice a-audit, through a follower");
        let other_lease = cluster.client_as(secret(CLIENT_TOKEN)).acquire("a-other", "o", 60_000).await.unwrap();
        let raw = Raw::new(format!("http://{}", cluster.endpoint(follower)), None);
        let acquire = json!({"owner": "alice-job", "ttl_ms": 3000});
        let reply = raw.send(Method::POST, "/v1/locks/a-audit/acquire", Some(&alice.token), Some(acquire)).await;
        assert_eq!(reply.status(), StatusCode::OK);
        let token = reply.json::<serde_json::Value>().await.unwrap()["token"].as_u64().expect("a token");

        step("another node's stream says the acquire was alice's and the expiry the cluster's");
        let credentials = Credentials { token: secret(ADMIN_TOKEN), ..Credentials::default() };
        let watcher = std::sync::Arc::new(Client::with_credentials(&[cluster.endpoint(other)], &credentials).unwrap());
        let mut watch = watcher.watch_lock("a-audit", Some(token - 1));
        let mut story = Vec::new();
        while story.len() < 2 {
            let event = tokio::time::timeout(Duration::from_secs(30), watch.next()).await.expect("an event").unwrap();
            story.push((event.event.kind.name(), event.event.by.to_string()));
        }
        assert_eq!(story, [("acquired", "user:alice".to_string()), ("expired", "cluster".to_string())]);

        step("?by=user:alice on that node keeps alice's events only");
        let raw = Raw::new(format!("http://{}", cluster.endpoint(other)), None);
        let path = format!("/v1/events?prefix=a-&by=user:alice&after={}", other_lease.token().get() - 1);
        let mut stream = raw.send(Method::GET, &path, Some(ADMIN_TOKEN), None).await;
        assert_eq!(stream.status(), StatusCode::OK);
        let mut seen = String::new();
        while !seen.contains("\"type\":\"acquired\"") {
            let chunk = tokio::time::timeout(Duration::from_secs(30), stream.chunk()).await.expect("a frame");
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().expect("the stream goes on")));
        }
        assert!(seen.contains("\"name\":\"a-audit\"") && seen.contains("\"by\":\"user:alice\""), "{seen}");
        assert!(!seen.contains("a-other"), "the client token's acquire, before alice's, is not hers: {seen}");
    })
    .await;
}
