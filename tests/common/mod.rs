//! Shared harness for the multi-process tests: real `leasehold serve`
//! processes from the built binary, on free loopback ports, with data in a
//! temporary folder. Every process is killed by PID when the test ends
//! (`LocalCluster` kills its children on drop), and every test body runs
//! under a time bound. The root crate's tests and the lab's
//! (`crates/lab/tests`) both include this file.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_local::{LocalCluster, NodeLogs, NodeSecurity};
use leasehold_proto::NodeId;

pub const TICK_MS: u64 = 100;
/// Upper bound on any one test.
pub const TEST_BOUND: Duration = Duration::from_secs(120);
/// Upper bound on an election.
pub const ELECTION_BOUND: Duration = Duration::from_secs(20);

pub struct TestCluster {
    pub cluster: LocalCluster,
    // Dropped after `cluster` (fields drop in order): processes die first.
    pub dir: tempfile::TempDir,
}

impl std::ops::Deref for TestCluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.cluster
    }
}

impl std::ops::DerefMut for TestCluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.cluster
    }
}

pub const CLIENT_TOKEN: &str = "client-token-5f1d9c2e7a";
pub const ADMIN_TOKEN: &str = "admin-token-0b8e4a61d3";
pub const CLUSTER_SECRET: &str = "cluster-secret-93c7e25f08";
pub const WRONG_TOKEN: &str = "not-the-token-4d2a7e9b1c";

/// Secret and certificate files of a test cluster, in their own folder.
pub struct Material {
    dir: tempfile::TempDir,
}

impl Material {
    pub fn new() -> Material {
        Material { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("write test material");
        path
    }

    /// The three secrets, each in a file (with a trailing newline, as
    /// `echo` writes them).
    pub fn secrets(&self) -> NodeSecurity {
        NodeSecurity {
            client_token_file: Some(self.write("client-token", &format!("{CLIENT_TOKEN}\n"))),
            admin_token_file: Some(self.write("admin-token", &format!("{ADMIN_TOKEN}\n"))),
            cluster_secret_file: Some(self.write("cluster-secret", &format!("{CLUSTER_SECRET}\n"))),
            ..NodeSecurity::default()
        }
    }

    /// A fresh CA and one certificate for 127.0.0.1 and localhost signed by
    /// it, shared by all nodes. Private keys exist only in the temp folder.
    pub fn tls(&self, files: NodeSecurity) -> NodeSecurity {
        self.tls_for(files, &["127.0.0.1".to_string(), "localhost".to_string()])
    }

    /// Like [`Material::tls`], with a certificate whose SANs are `names`
    /// (IP addresses become IP SANs).
    pub fn tls_for(&self, mut files: NodeSecurity, names: &[String]) -> NodeSecurity {
        let [ca, cert, key] = self.signed("", names);
        (files.ca_file, files.tls_cert_file, files.tls_key_file) = (Some(ca), Some(cert), Some(key));
        files
    }

    /// Mutual TLS between members: a CA of their own and one peer
    /// certificate for 127.0.0.1 signed by it, shared by all nodes.
    pub fn peer_certificates(&self, mut files: NodeSecurity) -> NodeSecurity {
        let [ca, cert, key] = self.signed("peer-", &["127.0.0.1".to_string()]);
        (files.peer_trusted_ca, files.peer_cert, files.peer_key) = (Some(ca), Some(cert), Some(key));
        files
    }

    /// Client certificates (`--client-trusted-ca`): a client CA of its own,
    /// written as `client-ca.pem`, and for each of `users` a certificate
    /// whose subject is `CN=<user>`, as `client-<user>.pem` and
    /// `client-<user>-key.pem`.
    pub fn client_certificates(&self, mut files: NodeSecurity, users: &[&str]) -> NodeSecurity {
        let leaves: Vec<(String, Option<&str>)> = users.iter().map(|u| (format!("client-{u}"), Some(*u))).collect();
        files.client_trusted_ca = self.issue("client-", &[], &leaves).into_iter().next();
        files
    }

    /// A certificate for `CN=<user>` from a CA no node trusts (written with
    /// the prefix `foreign-`): its certificate and key files.
    pub fn foreign_client_certificate(&self, user: &str) -> [PathBuf; 2] {
        let [_ca, cert, key] =
            self.issue("foreign-", &[], &[(format!("foreign-{user}"), Some(user))]).try_into().unwrap();
        [cert, key]
    }

    /// A fresh CA and a certificate whose SANs are `names` (IP addresses
    /// become IP SANs) signed by it, written as `{prefix}ca.pem`,
    /// `{prefix}node.pem` and `{prefix}node-key.pem`. Private keys exist
    /// only in the temp folder.
    fn signed(&self, prefix: &str, names: &[String]) -> [PathBuf; 3] {
        self.issue(prefix, names, &[(format!("{prefix}node"), None)]).try_into().expect("a CA and one certificate")
    }

    /// A fresh CA, written as `{prefix}ca.pem`, and a certificate it signs
    /// for each `(file, common name)` of `leaves`, with the SANs `names`
    /// and (when given) a subject of that Common Name alone, for client
    /// authentication: written as `{file}.pem` and `{file}-key.pem`. The
    /// paths, the CA's first.
    fn issue(&self, prefix: &str, names: &[String], leaves: &[(String, Option<&str>)]) -> Vec<PathBuf> {
        use rcgen::{
            BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "leasehold test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let mut paths = vec![self.write(&format!("{prefix}ca.pem"), &ca_cert.pem())];
        for (file, common_name) in leaves {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(names.to_vec()).expect("params");
            if let Some(common_name) = common_name {
                params.distinguished_name = DistinguishedName::new();
                params.distinguished_name.push(DnType::CommonName, *common_name);
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            }
            let cert = params.signed_by(&key, &ca_cert, &ca_key).expect("leaf certificate");
            paths.push(self.write(&format!("{file}.pem"), &cert.pem()));
            paths.push(self.write(&format!("{file}-key.pem"), &key.serialize_pem()));
        }
        paths
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Starts an `n`-node cluster and waits for its leader.
pub async fn start_cluster(n: usize) -> TestCluster {
    start_cluster_with(n, &[]).await
}

/// Starts an `n`-node cluster whose nodes get `serve_args` too.
pub async fn start_cluster_with(n: usize, serve_args: &[&str]) -> TestCluster {
    start_nodes(n, n, serve_args, NodeSecurity::default(), false).await
}

/// Starts an `n`-node cluster with these token and TLS files; its
/// `client()` trusts the CA and sends the client token.
pub async fn start_secured_cluster(n: usize, security: NodeSecurity, serve_args: &[&str]) -> TestCluster {
    start_nodes(n, n, serve_args, security, false).await
}

/// Like [`start_growable_cluster`], every node with a peer port of its own
/// (`serve --peer-addr`).
pub async fn start_cluster_with_peer_ports(total: usize, initial: usize) -> TestCluster {
    start_nodes(total, initial, &[], NodeSecurity::default(), true).await
}

/// Like [`start_cluster_with_peer_ports`], every node with `security` and
/// `serve_args`.
pub async fn start_secured_cluster_with_peer_ports(
    n: usize,
    security: NodeSecurity,
    serve_args: &[&str],
) -> TestCluster {
    start_nodes(n, n, serve_args, security, true).await
}

/// A cluster of nodes 1..=`initial`, with room for nodes up to `total` that
/// are not started: they join later through the admin API.
pub async fn start_growable_cluster(total: usize, initial: usize) -> TestCluster {
    start_nodes(total, initial, &[], NodeSecurity::default(), false).await
}

async fn start_nodes(
    total: usize,
    initial: usize,
    serve_args: &[&str],
    security: NodeSecurity,
    peer_ports: bool,
) -> TestCluster {
    let dir = tempfile::tempdir().expect("temp dir");
    let addrs = LocalCluster::free_addrs(if peer_ports { 2 * total } else { total }).expect("free ports");
    let (addrs, peer_addrs) = addrs.split_at(total);
    let mut cluster = LocalCluster::new(&leasehold_binary(), dir.path(), addrs, TICK_MS, NodeLogs::Files)
        .with_peer_addrs(peer_addrs)
        .with_serve_args(serve_args)
        .with_security(security)
        .expect("security files load")
        .with_initial_members(initial);
    for id in 1..=initial as u64 {
        cluster.start(id).expect("node starts");
    }
    let test = TestCluster { cluster, dir };
    test.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", test.logs()));
    test
}

impl TestCluster {
    /// Node `id`'s whole log, across its restarts.
    pub fn log(&self, id: NodeId) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node{id}.log"))).unwrap_or_default()
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for id in self.ids() {
            let log = self.log(id);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            out.push_str(&format!("--- node {id} (last lines) ---\n"));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Waits (bounded) until node `id` exits, and returns how; panics with
    /// the cluster's logs if it still runs after `bound`.
    pub async fn wait_for_exit(&mut self, id: u64, bound: Duration) -> std::process::ExitStatus {
        let give_up = std::time::Instant::now() + bound;
        loop {
            if let Some(exit) = self.exited(id) {
                return exit;
            }
            assert!(std::time::Instant::now() < give_up, "node {id} still runs after {bound:?}\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A follower's id, given the current leader.
    pub fn follower_of(&self, leader: u64) -> u64 {
        *self.ids().iter().find(|id| **id != leader).expect("a follower")
    }
}

/// Runs a test body under [`TEST_BOUND`].
pub async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_BOUND, body).await.expect("test exceeded its time bound");
}

/// Floods every node's client port with connections that send only the peer
/// preface (`leasehold_lab::chaos::hostile::preface_flood`), waits (bounded)
/// until every flood holds its connections, kills `leader`, and asserts that
/// another node is elected and serves an acquire and a release of `lock`
/// while the floods go on. The floods are aborted when this returns or fails.
pub async fn kill_leader_under_preface_flood(cluster: &mut TestCluster, leader: u64, lock: &str) {
    let mut floods = tokio::task::JoinSet::new();
    let mut ready = Vec::new();
    for id in cluster.ids() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        floods.spawn(leasehold_lab::chaos::hostile::preface_flood(cluster.endpoint(id), Some(tx)));
        ready.push((id, rx));
    }
    let give_up = tokio::time::Instant::now() + ELECTION_BOUND;
    for (id, rx) in ready {
        match tokio::time::timeout_at(give_up, rx).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("the flood on node {id} ended before it held its connections"),
            Err(_) => panic!("the flood on node {id} did not hold its connections within {ELECTION_BOUND:?}"),
        }
    }
    step(&format!("kill -9 the leader (node {leader}) while the flood goes on"));
    cluster.kill(leader);
    let new = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    assert_ne!(new, leader);
    step("a well-behaved client is served during the flood");
    let client = cluster.client();
    let grant = client.acquire(lock, "holder", 10_000).await.unwrap();
    client.release(lock, grant.token()).await.unwrap();
    drop(floods);
}

/// Waits (bounded) until `name` is free, polling linearizable reads.
pub async fn wait_until_free(client: &leasehold_client::Client, name: &str, bound: Duration) {
    let give_up = std::time::Instant::now() + bound;
    while client.get(name).await.expect("get").is_some() {
        assert!(std::time::Instant::now() < give_up, "{name} still held after {bound:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (bounded) until `owner` waits in the queue of `name`, or, with
/// `queued` false, no longer does.
pub async fn wait_until_queued(client: &leasehold_client::Client, name: &str, owner: &str, queued: bool) {
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let view = client.get(name).await.expect("get");
        if view.is_some_and(|v| v.waiters.iter().any(|w| w.owner == owner)) == queued {
            return;
        }
        let what = if queued { "queued" } else { "left the queue" };
        assert!(std::time::Instant::now() < give_up, "{owner} never {what} on {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints a step banner, so a failing test's output shows where it was.
pub fn step(s: &str) {
    eprintln!("=== {s}");
}

/// A reader of one lock's Server-Sent Events stream.
pub struct EventStream {
    reply: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// Subscribes to `GET /v1/locks/{name}/events` on `endpoint`.
    pub async fn open(endpoint: &str, name: &str) -> EventStream {
        let http = reqwest::Client::builder().no_proxy().build().expect("client");
        let reply = http.get(format!("http://{endpoint}/v1/locks/{name}/events")).send().await.expect("events stream");
        assert!(reply.status().is_success(), "events: {}", reply.status());
        EventStream { reply, buffer: String::new() }
    }

    /// The next event's data as JSON (keep-alive comments skipped).
    pub async fn next(&mut self) -> serde_json::Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let data: String =
                    frame.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect::<Vec<_>>().join("\n");
                if !data.is_empty() {
                    return serde_json::from_str(&data).expect("event data is JSON");
                }
                continue;
            }
            let chunk = self.reply.chunk().await.expect("stream reads").expect("stream open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// Runs the `leasehold` CLI with `args` (killed if it outlives 60 s), asserts
/// it succeeded and returns its JSON output.
pub async fn leasehold_cli(args: &[&str]) -> serde_json::Value {
    let out = leasehold_run(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("leasehold {args:?} printed no JSON ({e}): {stderr}"))
}

/// Runs the `leasehold` CLI with `args` (killed if it outlives 60 s), asserts
/// it succeeded and returns what it printed.
pub async fn leasehold_run(args: &[&str]) -> std::process::Output {
    run_binary(&leasehold_binary(), args).await
}

/// Runs `binary` with `args` (killed if it outlives 60 s), asserts it
/// succeeded and returns what it printed.
pub async fn run_binary(binary: &Path, args: &[&str]) -> std::process::Output {
    let run = tokio::process::Command::new(binary).args(args).kill_on_drop(true).output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("CLI within 60 s").expect("CLI runs");
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    assert!(out.status.success(), "{name} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The `leasehold` binary. The root crate's tests have cargo's path to it;
/// the lab's have cargo's path to `leasehold-lab` only, and take the
/// `leasehold` beside it, which `cargo test` in the workspace root builds in
/// the same run (the lab alone, `-p leasehold-lab`, does not build it).
pub fn leasehold_binary() -> PathBuf {
    match (option_env!("CARGO_BIN_EXE_leasehold"), option_env!("CARGO_BIN_EXE_leasehold-lab")) {
        (Some(leasehold), _) => leasehold.into(),
        (None, Some(lab)) => {
            let beside = Path::new(lab).with_file_name("leasehold");
            assert!(
                beside.is_file(),
                "{} does not exist: run the lab's tests from the workspace root (`cargo test`), or `cargo build \
                 --bin leasehold` first",
                beside.display()
            );
            beside
        }
        (None, None) => unreachable!("only the leasehold and leasehold-lab packages' tests include this file"),
    }
}

/// `state_digest` of the node at `endpoint`: (applied index, digest).
pub async fn state_digest(endpoint: &str) -> (u64, String) {
    let url = format!("http://{endpoint}/v1/cluster/status?digest=true");
    let status: serde_json::Value = reqwest::get(url).await.expect("status answers").json().await.expect("JSON");
    let digest = &status["state_digest"];
    (digest["applied_index"].as_u64().expect("applied_index"), digest["digest"].as_str().expect("digest").into())
}

/// Asks every node for its `state_digest` until each has been seen at the
/// same applied index as another node, and asserts that nodes at the same
/// index report the same digest. Ticks move the index every 100 ms, and
/// followers apply within milliseconds of the leader, so a few rounds do.
pub async fn replicas_agree(endpoints: &[String]) {
    let mut compared = std::collections::BTreeSet::new();
    for _ in 0..300 {
        let mut seen: std::collections::BTreeMap<u64, Vec<(&str, String)>> = Default::default();
        for endpoint in endpoints {
            let (index, digest) = state_digest(endpoint).await;
            seen.entry(index).or_default().push((endpoint, digest));
        }
        for (index, nodes) in seen {
            if nodes.len() > 1 {
                assert!(nodes.iter().all(|(_, d)| *d == nodes[0].1), "replicas differ at index {index}: {nodes:?}");
                compared.extend(nodes.iter().map(|(e, _)| e.to_string()));
            }
        }
        if compared.len() == endpoints.len() {
            return;
        }
    }
    panic!("never saw every node at the same index as another (compared: {compared:?})");
}
