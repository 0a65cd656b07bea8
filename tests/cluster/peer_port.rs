//! Members on peer ports of their own (`serve --peer-addr`, issue 37): Raft
//! and forwarding go there, and the client port takes no peer connection.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;
use crate::metrics::Scrape;
use leasehold::peer::{encode_frame, Channel, Hello, PREFACE};
use leasehold_client::Client;

/// Opens a connection to `addr` the way a member opens a Raft channel (the
/// preface and a hello, in one write), and returns what the node answers
/// within `wait`: `None` if it answers nothing and keeps the connection
/// open (it took the connection as a peer's), else the bytes it sent
/// before closing.
async fn say_hello(addr: &str, wait: Duration) -> Option<Vec<u8>> {
    let mut conn = TcpStream::connect(addr).await.expect("connects");
    let mut opening = PREFACE.to_vec();
    opening.extend(encode_frame(&Hello { from: 99, secret: None, channel: Channel::Raft }).expect("encodes"));
    conn.write_all(&opening).await.expect("writes");
    let mut answer = Vec::new();
    tokio::time::timeout(wait, conn.read_to_end(&mut answer)).await.ok().map(|_| answer)
}

/// The follower's count of requests whose commands it handed to the leader.
async fn handed(endpoint: &str) -> f64 {
    Scrape::of(endpoint).await.get("leasehold_forwarded_requests_total{result=\"handed\"}").unwrap_or(0.0)
}

// Ensures that with peer ports: the client port answers the peer preface
// like any non-HTTP client while the peer port takes it; members are listed
// with both addresses; requests sent to a follower hand their commands
// to the leader over the peer ports; a learner joins with its peer address; and a preface flood on
// every client port neither stops an election after the leader is killed
// nor keeps a well-behaved client from being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_use_their_own_ports_and_client_floods_cannot_reach_raft() {
    bounded(async {
        let mut cluster = start_cluster_with_peer_ports(4, 3).await;
        let client = cluster.client();
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();

        step("a member's opening on the client port is refused; on the peer port it is taken");
        for id in 1..=3 {
            let answer = say_hello(&cluster.endpoint(id), Duration::from_secs(5)).await;
            let answer = answer.unwrap_or_else(|| panic!("node {id}'s client port kept a peer connection open"));
            let text = String::from_utf8_lossy(&answer);
            assert!(answer.is_empty() || text.starts_with("HTTP/1.1 400"), "node {id} answered {text:?}");
            let peer_port = cluster.peer_endpoint(id).expect("a peer port");
            assert_eq!(say_hello(&peer_port, Duration::from_millis(500)).await, None, "node {id}'s peer port");
        }

        step("members are listed with their peer addresses");
        let members = client.status().await.unwrap().members;
        assert_eq!(members.len(), 3);
        for m in &members {
            assert_eq!(m.peer_addr, cluster.peer_endpoint(m.id), "{m:?}");
        }

        step("a request to a follower hands its command to the leader over the peer ports");
        let follower = cluster.follower_of(leader);
        let before = handed(&cluster.endpoint(follower)).await;
        let via_follower = Client::new(&[cluster.endpoint(follower)]).unwrap();
        let grant = via_follower.acquire("peer-port", "holder", 10_000).await.unwrap();
        via_follower.release("peer-port", grant.token()).await.unwrap();
        assert!(handed(&cluster.endpoint(follower)).await >= before + 2.0, "handed off by node {follower}");

        step("node 4 joins as a learner with its peer address and catches up");
        cluster.start(4).unwrap();
        cluster.wait_answering(ELECTION_BOUND).await.unwrap();
        client.add_member(&cluster.new_member(4)).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let on_leader = cluster.statuses().await.remove(&leader).expect("the leader answers");
        let joined = on_leader.members.into_iter().find(|m| m.id == 4).expect("node 4 is a member");
        assert_eq!(joined.peer_addr, cluster.peer_endpoint(4));

        step("flood every client port with the peer preface");
        kill_leader_under_preface_flood(&mut cluster, leader, "peer-port-flood").await;
    })
    .await;
}

/// Opens a TLS connection to the peer port at `addr` the way a member
/// would, trusting the members' CA but presenting no certificate, says
/// hello and asks for a vote: true if the node answered anything.
async fn answered_without_a_certificate(addr: &str, members_ca: &std::path::Path) -> bool {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(members_ca).expect("CA file") {
        roots.add(cert.expect("CA certificate")).expect("CA added");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![leasehold::peer::ALPN.to_vec()];
    let tcp = TcpStream::connect(addr).await.expect("connects");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("a name");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    // TLS 1.3: the client's side of the handshake may complete before the
    // node has checked (and refused) the missing certificate.
    let Ok(mut conn) = connector.connect(name, tcp).await else { return false };
    let mut opening = encode_frame(&Hello { from: 99, secret: None, channel: Channel::Raft }).expect("encodes");
    let vote = leasehold::raft::PeerRequest::Vote(openraft::raft::VoteRequest::new(
        leasehold::raft::types::Vote::new(99, 99),
        None,
    ));
    opening.extend(encode_frame(&vote).expect("encodes"));
    if conn.write_all(&opening).await.is_err() {
        return false;
    }
    let mut answer = [0u8; 64];
    matches!(tokio::time::timeout(Duration::from_secs(5), conn.read(&mut answer)).await, Ok(Ok(n)) if n > 0)
}

// Ensures mutual TLS between members (`--peer-cert`, `--peer-key`,
// `--peer-trusted-ca`): with tokens but no cluster secret, the members
// elect a leader and replicate over their own port, and a follower far
// behind catches up by a snapshot sent there; a connection without a
// member's certificate gets no answer on the peer port; and the client
// port serves no Raft RPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_peer_certificates_need_no_cluster_secret() {
    bounded(async {
        let material = Material::new();
        let security = leasehold_local::NodeSecurity { cluster_secret_file: None, ..material.secrets() };
        let security = material.peer_certificates(security);
        let mut cluster = start_secured_cluster_with_peer_ports(3, security, &["--snapshot-every", "100"]).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();

        step("without a member's certificate the peer port answers nothing");
        for id in 1..=3 {
            let peer_port = cluster.peer_endpoint(id).expect("a peer port");
            assert!(!answered_without_a_certificate(&peer_port, &material.path("peer-ca.pem")).await, "node {id}");
            let plain = say_hello(&peer_port, Duration::from_secs(5)).await;
            let plain = plain.unwrap_or_else(|| panic!("node {id}'s peer port kept a plain connection open"));
            assert!(!plain.starts_with(b"\0"), "node {id} answered a plain hello with a frame");
        }

        step("the client port serves no Raft RPC");
        let vote = reqwest::Client::new()
            .post(format!("http://{}/raft/vote", cluster.endpoint(leader)))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("the client port answers");
        assert_eq!(vote.status(), reqwest::StatusCode::NOT_FOUND);

        step("a follower far behind catches up by a snapshot over mutual TLS");
        crate::snapshots::lag_one_follower_past_a_snapshot(&mut cluster, leader, "peer-certificates").await;
    })
    .await;
}
