//! Client certificates naming users (`serve --client-trusted-ca`, as etcd's
//! `--client-cert-auth`): on a real 3-node TLS cluster, through every node.

use std::path::Path;
use std::time::Duration;

use leasehold_client::proto::auth::Permission;
use leasehold_client::{load_ca, load_identity, Client, ClientError, Credentials, ErrorCode, Secret};

use crate::common::{bounded, leasehold_cli, start_secured_cluster, step, Material, ADMIN_TOKEN, CLIENT_TOKEN};

/// A client of the one node at `endpoint` that trusts the cluster's CA and
/// presents the certificate `cert` (with `key`), and `token` if any; it
/// does not retry, so a refusal is seen as it is.
fn client(endpoint: &str, material: &Material, cert: &Path, key: &Path, token: Option<&str>) -> Client {
    let credentials = Credentials {
        token: token.map(|t| Secret::new(t, "test").unwrap()),
        ca: Some(load_ca(&material.path("ca.pem")).unwrap()),
        identity: Some(load_identity(cert, key).unwrap()),
    };
    Client::with_credentials(&[endpoint], &credentials).unwrap().with_retry_budget(Duration::ZERO)
}

/// `leasehold` with `args`, its JSON output.
async fn cli(args: Vec<String>) -> serde_json::Value {
    leasehold_cli(&args.iter().map(String::as_str).collect::<Vec<_>>()).await
}

/// The error code of a refused call.
fn code<T: std::fmt::Debug>(result: Result<T, ClientError>) -> Option<ErrorCode> {
    result.expect_err("refused").code()
}

// Ensures a certificate with CN=alice acts as the user alice on every node
// (her grant opens team-a/, not team-b/), that an unknown CN is 401, a
// certificate of another CA is refused in the handshake, a token wins over
// a certificate, the CLI presents one with --cert/--key, and that after
// `user remove alice` her certificate is refused by every node at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_users_on_every_node() {
    bounded(async {
        let material = Material::new();
        let security = material.client_certificates(material.tls(material.secrets()), &["alice", "mallory"]);
        let cluster = start_secured_cluster(3, security, &[]).await;
        let path = |name: &str| material.path(name);
        let (alice_cert, alice_key) = (path("client-alice.pem"), path("client-alice-key.pem"));

        step("alice may lock team-a/; mallory is no user");
        let admin = cluster.client_as(Some(Secret::new(ADMIN_TOKEN, "test").unwrap()));
        admin.create_role("team-a").await.unwrap();
        admin.grant("team-a", Permission::Lock, "team-a/").await.unwrap();
        admin.create_user("alice").await.unwrap();
        admin.assign_role("alice", "team-a").await.unwrap();

        for id in cluster.ids() {
            step(&format!("node {id}: alice's certificate, no token"));
            let alice = client(&cluster.endpoint(id), &material, &alice_cert, &alice_key, None);
            let me = alice.whoami().await.unwrap();
            assert_eq!((me.user.as_deref(), me.credential.as_deref()), (Some("alice"), Some("certificate")));
            let lease = alice.acquire("team-a/x", "alice", 60_000).await.unwrap();
            alice.release("team-a/x", lease.token()).await.unwrap();
            let refused = alice.acquire("team-b/x", "alice", 60_000).await.expect_err("no grant on team-b/");
            let denial = refused.denied().unwrap_or_else(|| panic!("not a permission_denied: {refused}"));
            assert_eq!((denial.permission, denial.name.as_deref()), (Some(Permission::Lock), Some("team-b/x")));

            let mallory = client(
                &cluster.endpoint(id),
                &material,
                &path("client-mallory.pem"),
                &path("client-mallory-key.pem"),
                None,
            );
            assert_eq!(code(mallory.whoami().await), Some(ErrorCode::Unauthenticated), "an unknown user is 401");

            let [foreign_cert, foreign_key] = material.foreign_client_certificate("alice");
            let foreign = client(&cluster.endpoint(id), &material, &foreign_cert, &foreign_key, None);
            match foreign.whoami().await {
                // The server's fatal alert (DecryptError here: the foreign CA
                // has the trusted one's name, so its signature is what fails).
                Err(ClientError::Unavailable(message)) => assert!(message.contains("alert"), "{message}"),
                other => panic!("another CA's certificate was not refused in the handshake: {other:?}"),
            }

            let with_token = client(&cluster.endpoint(id), &material, &alice_cert, &alice_key, Some(CLIENT_TOKEN));
            let me = with_token.whoami().await.unwrap();
            assert_eq!((me.kind.as_str(), me.credential.as_deref()), ("client", Some("token")), "the token wins");
        }

        step("the CLI presents alice's certificate with --cert/--key");
        let endpoints = cluster.endpoints().join(",");
        let ca = path("ca.pem");
        let tls_args = |extra: &[&str]| {
            let mut args: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
            args.extend(["--endpoints", &endpoints, "--ca-file", ca.to_str().unwrap()].map(String::from));
            args
        };
        let cert_args = |command: &[&str]| {
            let mut args = tls_args(command);
            args.extend(
                ["--cert", alice_cert.to_str().unwrap(), "--key", alice_key.to_str().unwrap()].map(String::from),
            );
            args
        };
        let taken = cli(cert_args(&["acquire", "team-a/cli", "--owner", "alice"])).await;
        assert!(taken["token"].as_u64().is_some(), "{taken}");

        step("user remove alice: her certificate opens nothing, on every node, at once");
        let mut remove = tls_args(&["user", "remove", "alice"]);
        remove.extend(["--auth-token-file".into(), path("admin-token").to_str().unwrap().into()]);
        cli(remove).await;
        for id in cluster.ids() {
            let alice = client(&cluster.endpoint(id), &material, &alice_cert, &alice_key, None);
            let refused = alice.acquire("team-a/y", "alice", 60_000).await;
            assert_eq!(code(refused), Some(ErrorCode::Unauthenticated), "node {id}");
        }
    })
    .await;
}
