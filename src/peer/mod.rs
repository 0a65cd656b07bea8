//! The peer transport: Raft's AppendEntries and Vote between nodes over
//! persistent connections with length-delimited MessagePack frames, instead
//! of one HTTP/JSON request each.
//!
//! Why: every commit costs several RPCs (append to each follower, then the
//! commit index with the next append), and through reqwest, hyper, axum,
//! the admission and auth middlewares and JSON each cost the sender and the
//! receiver more CPU than the entry's own work. A peer connection carries
//! one request and its answer at a time and stays open; a leader's
//! replication to a follower has a connection of its own
//! ([`Channel::RaftStream`]) on which requests are pipelined.
//!
//! Wire format, on the node's peer port (`serve --peer-addr`), or without
//! one on its client port:
//! - plain TCP: the connection starts with [`PREFACE`]; the listener peeks
//!   for it and hands the connection here instead of to HTTP. Under TLS the
//!   client asks for the ALPN protocol [`ALPN`] instead.
//! - then frames: a big-endian `u32` length and that many bytes of
//!   MessagePack, structs as arrays of their fields (no field names: every
//!   field is written, and an entry's commands travel in their compact
//!   binary form, `leasehold_core::Batch::encoded`). The first frame is a
//!   [`Hello`] with the cluster secret;
//!   a node that expects another secret closes the connection unanswered.
//!   The hello names the connection's [`Channel`]: for Raft, a
//!   [`PeerRequest`] and its [`PeerResponse`] follow, in turn; for a
//!   replication stream, AppendEntries requests back to back and a
//!   [`StreamAnswer`] for each, in order; for
//!   hand-offs ([`Channel::Propose`], [`handoff`]), the leader's welcome,
//!   then a follower's commands and read-index asks, tagged with ids, and
//!   the leader's answers in any order; for
//!   forwarding, the rest of the connection is HTTP/2 (prior knowledge),
//!   on which a follower relays whole requests to the leader (the admin
//!   API, or any request to a leader of an earlier version) — many at
//!   once, each waiting acquire one stream, none of them taking a client
//!   connection on the leader.
//!
//! Snapshots travel on a connection of their own ([`Channel::Snapshot`]),
//! the file streamed from disk to disk; to a node of the version before
//! that channel (it closes the connection unanswered), over HTTP
//! (`/raft/snapshot` on its client port). The preface and the ALPN
//! protocol carry the frame format's version (`02`, `/2`: fields by position
//! and commands in their binary form; `01` had field names and serde's form
//! of each command): a node of another version cannot take part, and its
//! peer connections fail at once instead of at the first entry.

mod frame;
pub mod handoff;
pub mod relay;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

pub use frame::{encode_frame, read_frame, write_frame, FrameError, StreamWriter, COMMIT_ONLY_LINGER, MAX_FRAME};
use leasehold_proto::NodeId;
use leasehold_proto::Secret;

/// First bytes of a plain-TCP peer connection.
pub const PREFACE: &[u8; 8] = b"LHPEER02";
/// The ALPN protocol of a peer connection under TLS.
pub const ALPN: &[u8] = b"leasehold-peer/2";

/// The first frame of a connection: who calls, with which cluster secret,
/// for what.
#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    pub from: NodeId,
    pub secret: Option<String>,
    pub channel: Channel,
}

/// What a peer connection carries after its hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// AppendEntries and Vote frames.
    Raft,
    /// Client requests a follower relays to the leader, over HTTP/2.
    Forward,
    /// A leader's replication stream to one follower, pipelined: its
    /// AppendEntries requests back to back, without waiting for answers,
    /// and the follower's [`StreamAnswer`]s in the same order. The follower
    /// closes the connection after the first answer that is not a success
    /// (its Raft drops the rest of the stream then).
    RaftStream,
    /// One whole snapshot to a follower far behind: a frame with its
    /// `SnapshotHead`, the file's length (big-endian `u64`) and the file
    /// raw, then the follower's `SnapshotAnswer` frame.
    Snapshot,
    /// Commands a follower hands the leader, and read indexes it asks for,
    /// many at once: [`handoff::Ask`] frames, each answered by an
    /// [`handoff::Answer`] with its id, in any order, after the leader's
    /// [`handoff::Welcome`]. (Last, so the earlier variants keep their
    /// encoding; a node of an earlier version closes the connection at the
    /// hello, and the follower relays to it instead.)
    Propose,
}

/// The door of the peer transport: admits a connection once its hello
/// proves it holds the cluster secret.
#[derive(Clone)]
pub struct Gate {
    cluster_secret: Option<Secret>,
    /// How long a connection may take to say hello.
    hello_timeout: Duration,
}

impl Gate {
    pub fn new(cluster_secret: Option<Secret>, hello_timeout: Duration) -> Gate {
        Gate { cluster_secret, hello_timeout }
    }

    /// Reads the hello of `io` (after the preface or the ALPN choice):
    /// the channel the peer asks for and the member it says it is, or
    /// `None` (and the connection is to be closed) when it is late,
    /// malformed or lacks the cluster secret.
    pub async fn hello<I: AsyncRead + Unpin>(&self, io: &mut I) -> Option<(Channel, NodeId)> {
        match tokio::time::timeout(self.hello_timeout, read_frame::<_, Hello>(io)).await {
            Ok(Ok(Some(hello))) if self.admits(&hello) => Some((hello.channel, hello.from)),
            Ok(Ok(Some(hello))) => {
                tracing::warn!(from = hello.from, "peer connection without the cluster secret; closed");
                None
            }
            _ => None,
        }
    }

    fn admits(&self, hello: &Hello) -> bool {
        match (&self.cluster_secret, &hello.secret) {
            (None, _) => true,
            (Some(expected), Some(given)) => expected.matches(given.as_bytes()),
            (Some(_), None) => false,
        }
    }
}

/// A connected peer stream, plain or TLS.
pub trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerStream for T {}

/// How a node dials its peers.
#[derive(Clone)]
pub struct Dialer {
    pub from: NodeId,
    /// TLS client settings (with [`ALPN`]) when the nodes serve https.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub cluster_secret: Option<Secret>,
}

impl Dialer {
    /// Opens a peer connection to `addr` (`host:port`) and says hello,
    /// asking for `channel`.
    pub async fn dial(&self, addr: &str, channel: Channel) -> std::io::Result<Box<dyn PeerStream>> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let mut stream: Box<dyn PeerStream> = match &self.tls {
            None => {
                let mut tcp = tcp;
                tcp.write_all(PREFACE).await?;
                Box::new(tcp)
            }
            Some(config) => {
                let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host).trim_matches(['[', ']']);
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                Box::new(tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp).await?)
            }
        };
        let hello =
            Hello { from: self.from, secret: self.cluster_secret.as_ref().map(|s| s.expose().to_owned()), channel };
        write_frame(&mut stream, &hello).await.map_err(std::io::Error::other)?;
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures a frame larger than the bound is refused before it is read.
    #[tokio::test]
    async fn oversized_frames_are_refused() {
        let mut wire = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(&[0; 16]);
        let read = read_frame::<_, Hello>(&mut wire.as_slice()).await;
        assert!(matches!(read, Err(FrameError::TooLarge(_))), "{read:?}");
    }
}
