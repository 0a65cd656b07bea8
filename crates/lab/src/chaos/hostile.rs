//! Hostile clients, as one user without credentials could run them (issue
//! 37): connections that open the peer transport and never say hello,
//! event streams that are never read, and multi-acquires of long leases as
//! fast as the cluster grants them. The fault suite runs all three at once
//! while it kills the leader (`FaultKind::HostileClients`); the cluster
//! tests run the preface flood alone.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use std::sync::Arc;

use leasehold_client::{AcquireOptions, Client, ErrorCode, FencingToken};

/// The first bytes of a plain-TCP peer connection (`leasehold::peer::PREFACE`;
/// the lab drives servers from outside and does not link them).
pub const PEER_PREFACE: &[u8; 8] = b"LHPEER02";
/// Connections a preface flood holds to each node: more than the 64 peer
/// slots a node has.
pub const FLOOD_CONNECTIONS: usize = 70;
/// Event streams a subscriber flood opens to each node and never reads.
pub const FLOOD_SUBSCRIBERS: usize = 200;
/// Locks per multi-acquire of a lease flood (the API's most).
const FLOOD_NAMES: usize = 64;
/// The lease quota (`--max-leases`) the fault suite's nodes run with: a
/// lease flood reaches it within a hold (a debug build on a loaded 2-core
/// machine granted 256 leases a second to one flooding client).
pub const LEASE_QUOTA: usize = 1_000;
/// A lease flood's leases: an hour, as in the report that found it.
const FLOOD_TTL_MS: u64 = 3_600_000;
/// The most leases a lease flood takes, should no quota stop it first (a
/// node without `--max-leases` would otherwise be flooded out of memory,
/// which is the finding, not a fault to inject).
const FLOOD_MAX_LEASES: usize = 50_000;

/// Holds `FLOOD_CONNECTIONS` connections to `addr` that send only the peer
/// preface, opening a new one whenever the node closes one, until the task
/// is aborted. `ready`, if given, is sent once the flood first holds all
/// `FLOOD_CONNECTIONS` (a test waits for it before it acts under the flood).
pub async fn preface_flood(addr: String, mut ready: Option<tokio::sync::oneshot::Sender<()>>) {
    let mut open: Vec<TcpStream> = Vec::new();
    loop {
        while open.len() < FLOOD_CONNECTIONS {
            let Ok(mut conn) = TcpStream::connect(&addr).await else { break };
            if conn.write_all(PEER_PREFACE).await.is_ok() {
                open.push(conn);
            }
        }
        if open.len() >= FLOOD_CONNECTIONS {
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        open.retain(still_open);
    }
}

/// Holds `FLOOD_SUBSCRIBERS` event streams (`GET /v1/events`) to `addr`
/// that never read what the node sends, reopening those the node closes,
/// until the task is aborted.
pub async fn subscriber_flood(addr: String) {
    let request = format!("GET /v1/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n");
    let mut open: Vec<TcpStream> = Vec::new();
    loop {
        while open.len() < FLOOD_SUBSCRIBERS {
            let Ok(mut conn) = TcpStream::connect(&addr).await else { break };
            if conn.write_all(request.as_bytes()).await.is_ok() {
                open.push(conn);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        open.retain(still_open);
    }
}

/// Whether the node has not closed `conn` (what it sent stays unread: a
/// subscriber that never reads is the point).
fn still_open(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match conn.try_read(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

/// What a lease flood got.
#[derive(Debug, Default)]
pub struct LeaseFlood {
    /// Leases granted, held until [`LeaseFlood::release`].
    pub granted: Vec<(Vec<String>, FencingToken)>,
    /// Multi-acquires refused with `507 full` (a quota held).
    pub full: usize,
    /// Other errors (no leader, overload): the flood retries.
    pub errors: usize,
}

impl LeaseFlood {
    /// Multi-acquires of `FLOOD_NAMES` fresh names with hour-long leases,
    /// as fast as `client` gets answers, for `hold` or until a quota
    /// refuses one (or `FLOOD_MAX_LEASES` are held).
    pub async fn run(client: &Client, owner: &str, hold: Duration) -> LeaseFlood {
        let mut flood = LeaseFlood::default();
        let until = tokio::time::Instant::now() + hold;
        let mut batch = 0usize;
        while tokio::time::Instant::now() < until && flood.leases() < FLOOD_MAX_LEASES {
            let names: Vec<String> = (0..FLOOD_NAMES).map(|i| format!("flood/{owner}/{batch}/{i}")).collect();
            batch += 1;
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            match client.acquire_many(&refs, owner, FLOOD_TTL_MS, &AcquireOptions::default()).await {
                Ok(leases) => flood.granted.push((names, leases.token)),
                Err(e) if e.code() == Some(ErrorCode::Full) => {
                    flood.full += 1;
                    break;
                }
                Err(_) => {
                    flood.errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        flood
    }

    /// Leases the flood holds.
    pub fn leases(&self) -> usize {
        self.granted.len() * FLOOD_NAMES
    }

    /// Releases what the flood holds, a few sets at once; those that cannot
    /// be released now expire with their ttl.
    pub async fn release(self, client: &Arc<Client>) {
        let mut releases = JoinSet::new();
        for (names, token) in self.granted {
            let client = client.clone();
            releases.spawn(async move {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let _ = client.release_many(&refs, token).await;
            });
            if releases.len() >= 16 {
                releases.join_next().await;
            }
        }
        while releases.join_next().await.is_some() {}
    }
}
