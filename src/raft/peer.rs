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
//! Wire format, on the node's one listening port:
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
//!   forwarding, the rest of the connection is HTTP/2 (prior knowledge),
//!   on which a follower relays client requests to the leader — many at
//!   once, each waiting acquire one stream, none of them taking a client
//!   connection on the leader.
//!
//! Snapshots still travel over HTTP (`/raft/snapshot`): they are rare and
//! big, and streaming them is the storage work's. The preface and the ALPN
//! protocol carry the frame format's version (`02`, `/2`: fields by position
//! and commands in their binary form; `01` had field names and serde's form
//! of each command): a node of another version cannot take part, and its
//! peer connections fail at once instead of at the first entry.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use openraft::errors::{Fatal, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult, VoteRequest, VoteResponse};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use super::{NodeId, Raft, TypeConfig};

type Answer<T> = Result<T, RaftError<TypeConfig>>;
use leasehold_proto::Secret;

/// First bytes of a plain-TCP peer connection.
pub const PREFACE: &[u8; 8] = b"LHPEER02";
/// The ALPN protocol of a peer connection under TLS.
pub const ALPN: &[u8] = b"leasehold-peer/2";
/// Largest frame: an AppendEntries of 256 entries of large batches fits.
pub const MAX_FRAME: usize = 32 << 20;

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
}

/// How long a request that only carries the commit index waits for the
/// next request of its stream, to travel with it.
///
/// openraft sends the follower an entry-less AppendEntries whenever the
/// commit index moves and no new entry is there to carry it: with one
/// client, one per entry. Sent at once, each costs the follower a wake-up,
/// a read, a Raft round and an answer, and the leader a send and a read:
/// about a fifth of a lone entry's CPU on three nodes. Nothing waits for
/// it (the leader has committed; a follower applies a little later, and
/// reads go through the leader), so it waits this long for the next entry
/// and both go in one write; its answer on the follower waits the same way
/// for the next answer. Heartbeats carry the commit index too.
pub const COMMIT_ONLY_LINGER: Duration = Duration::from_millis(2);

/// How many requests of a replication stream a follower reads ahead of the
/// answers it has written.
const STREAM_WINDOW: usize = 64;

/// A follower's answer to one request of a [`Channel::RaftStream`].
#[derive(Debug, Serialize, Deserialize)]
pub struct StreamAnswer(pub Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>);

/// What a peer asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
}

/// What a peer answers: the target's own Raft answer or error.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Append(Answer<AppendEntriesResponse<TypeConfig>>),
    Vote(Answer<VoteResponse<TypeConfig>>),
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("peer connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes is larger than {MAX_FRAME}")]
    TooLarge(usize),
    #[error("undecodable frame: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("unencodable frame: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

/// `value` as one frame: its length, then its MessagePack.
pub fn encode_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(&[0; 4]);
    value.serialize(&mut rmp_serde::Serializer::new(&mut frame))?;
    let len = frame.len() - 4;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

/// Writes `value` as one frame, and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(io: &mut W, value: &T) -> Result<(), FrameError> {
    io.write_all(&encode_frame(value)?).await?;
    io.flush().await?;
    Ok(())
}

/// The writing half of a replication stream, on either side: frames go
/// into a buffer, and the buffer is flushed only when no next frame is
/// ready, so frames produced together leave in one write. After a frame
/// that only carried the commit index, it first waits up to
/// [`COMMIT_ONLY_LINGER`] for the next one (see there).
pub struct StreamWriter<W: AsyncWrite + Unpin> {
    out: tokio::io::BufWriter<W>,
    commit_only: bool,
}

impl<W: AsyncWrite + Unpin> StreamWriter<W> {
    pub fn new(writer: W) -> Self {
        Self { out: tokio::io::BufWriter::new(writer), commit_only: false }
    }

    /// Buffers `value` as one frame; `commit_only` says it only carries
    /// the commit index (or answers a request that only did).
    pub async fn write<T: Serialize>(&mut self, value: &T, commit_only: bool) -> Result<(), FrameError> {
        self.commit_only = commit_only;
        self.out.write_all(&encode_frame(value)?).await?;
        Ok(())
    }

    /// The next item of `items`, once what is buffered went out if the
    /// item was not ready; at the end of `items`, the buffer is flushed.
    pub async fn next<S: Stream + Unpin>(&mut self, items: &mut S) -> Result<Option<S::Item>, FrameError> {
        if let Some(ready) = items.next().now_or_never() {
            return self.ended(ready).await;
        }
        if std::mem::take(&mut self.commit_only) {
            if let Ok(ready) = tokio::time::timeout(COMMIT_ONLY_LINGER, items.next()).await {
                return self.ended(ready).await;
            }
        }
        self.out.flush().await?;
        Ok(items.next().await)
    }

    /// Flushes whatever is buffered.
    pub async fn flush(&mut self) -> Result<(), FrameError> {
        Ok(self.out.flush().await?)
    }

    async fn ended<T>(&mut self, item: Option<T>) -> Result<Option<T>, FrameError> {
        if item.is_none() {
            self.out.flush().await?;
        }
        Ok(item)
    }
}

/// Reads one frame; `Ok(None)` when the other side closed between frames.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(io: &mut R) -> Result<Option<T>, FrameError> {
    let mut head = [0u8; 4];
    match io.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0; len];
    io.read_exact(&mut body).await?;
    Ok(Some(rmp_serde::from_slice(&body)?))
}

/// The receiving side: answers one peer connection's requests with this
/// node's Raft, once the peer proved it holds the cluster secret.
#[derive(Clone)]
pub struct Inbound {
    raft: Raft,
    cluster_secret: Option<Secret>,
    /// How long a connection may take to say hello.
    hello_timeout: Duration,
}

impl Inbound {
    pub fn new(raft: Raft, cluster_secret: Option<Secret>, hello_timeout: Duration) -> Inbound {
        Inbound { raft, cluster_secret, hello_timeout }
    }

    /// Reads the hello of `io` (after the preface or the ALPN choice):
    /// the channel the peer asks for, or `None` (and the connection is to be
    /// closed) when it is late, malformed or lacks the cluster secret.
    pub async fn hello<I: AsyncRead + Unpin>(&self, io: &mut I) -> Option<Channel> {
        match tokio::time::timeout(self.hello_timeout, read_frame::<_, Hello>(io)).await {
            Ok(Ok(Some(hello))) if self.admits(&hello) => Some(hello.channel),
            Ok(Ok(Some(hello))) => {
                tracing::warn!(from = hello.from, "peer connection without the cluster secret; closed");
                None
            }
            _ => None,
        }
    }

    /// Serves Raft RPC on `io` (after its hello) until the peer closes it or
    /// breaks the protocol.
    pub async fn serve_raft<I: AsyncRead + AsyncWrite + Unpin>(&self, io: I) {
        // Buffered: a frame is one read, and an answer one write (at its flush).
        let mut io = tokio::io::BufStream::new(io);
        loop {
            let request = match read_frame::<_, PeerRequest>(&mut io).await {
                Ok(Some(request)) => request,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "peer connection ended");
                    return;
                }
            };
            let response = match request {
                PeerRequest::Append(rpc) => PeerResponse::Append(self.raft.append_entries(rpc).await),
                PeerRequest::Vote(rpc) => PeerResponse::Vote(self.raft.vote(rpc).await),
            };
            if let Err(e) = write_frame(&mut io, &response).await {
                tracing::debug!(error = %e, "peer connection ended");
                return;
            }
        }
    }

    /// Serves a leader's replication stream on `io` (after its hello): the
    /// requests go to this node's Raft as they arrive (openraft pipelines
    /// them: the next one is taken while the previous one is flushed), the
    /// answers come back in order, until the leader closes the connection
    /// or an answer is not a success.
    pub async fn serve_raft_stream<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, io: I) {
        let (reader, writer) = tokio::io::split(io);
        // Buffered: a frame is one read (not one for its length and one for
        // its body), and requests that arrive together are one read.
        let mut reader = tokio::io::BufReader::new(reader);
        let (requests, queued) = tokio::sync::mpsc::channel(STREAM_WINDOW);
        // Whether each request read carries entries, in order: its answer
        // is written when its turn comes.
        let (kinds, mut kind_of_next) = tokio::sync::mpsc::unbounded_channel();
        let read = tokio::spawn(async move {
            loop {
                match read_frame::<_, AppendEntriesRequest<TypeConfig>>(&mut reader).await {
                    Ok(Some(rpc)) => {
                        let _ = kinds.send(rpc.entries.is_empty());
                        if requests.send(rpc).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        tracing::debug!(error = %e, "replication stream ended");
                        return;
                    }
                }
            }
        });
        let answers = self.raft.stream_append(ReceiverStream::new(queued));
        tokio::pin!(answers);
        // The answer to a request that only carried the commit index waits
        // for the next answer, as the request waited on the leader
        // (`network::send_appends`): nobody waits for it, and alone it
        // costs the leader a wake-up and a read.
        let mut out = StreamWriter::new(writer);
        loop {
            let answer = match out.next(&mut answers).await {
                Ok(Some(answer)) => answer,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "replication stream ended");
                    break;
                }
            };
            let commit_only = kind_of_next.try_recv().unwrap_or(false);
            let go_on = matches!(answer, Ok(Ok(_)));
            if let Err(e) = out.write(&StreamAnswer(answer), commit_only).await {
                tracing::debug!(error = %e, "replication stream ended");
                break;
            }
            if !go_on {
                let _ = out.flush().await;
                break;
            }
        }
        read.abort();
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
    use leasehold_core::{Batch, Command};
    use openraft::{Entry, EntryPayload, LogId};

    use super::super::{CommittedLeaderId, Vote};
    use super::*;

    // Ensures every command survives the frame encoding, with its optional
    // fields both present and absent (structs are maps, so skipped fields
    // cannot shift the others).
    #[tokio::test]
    async fn append_requests_round_trip_through_frames() {
        let commands = [
            Command::Acquire {
                name: "a".into(),
                owner: "o".into(),
                ttl_ms: Some(5000),
                session: None,
                wait_ms: None,
                request_id: None,
                lock_delay_ms: None,
                seq: None,
            },
            Command::Acquire {
                name: "b".into(),
                owner: "p".into(),
                ttl_ms: Some(5000),
                session: None,
                wait_ms: Some(10),
                request_id: Some("r".into()),
                lock_delay_ms: None,
                seq: None,
            },
            Command::Renew { name: "a".into(), token: 7, ttl_ms: Some(3000), request_id: None },
            Command::Release { name: "a".into(), token: 7, request_id: Some("x".into()), session: None, seq: None },
            Command::Cancel { name: "b".into(), owner: "p".into() },
            Command::PutRecord {
                key: "k".into(),
                lock: "a".into(),
                token: 7,
                value: "{\"n\":1}".into(),
                request_id: None,
            },
            Command::Gate { resource: "g".into(), lock: "a".into(), token: 7, request_id: None },
        ];
        let mut batch = Batch::single(commands[0].clone());
        for c in &commands[1..] {
            batch.try_push(c.clone()).expect("distinct enough to share an entry");
        }
        let log_id = |index| LogId::new(CommittedLeaderId { term: 3, node_id: 1 }, index);
        let membership = openraft::Membership::new_with_defaults(vec![std::collections::BTreeSet::from([1, 2, 3])], []);
        let entries = vec![
            Entry { log_id: log_id(10), payload: EntryPayload::Blank },
            Entry { log_id: log_id(11), payload: EntryPayload::Normal(batch) },
            Entry {
                log_id: log_id(12),
                payload: EntryPayload::Normal(Batch::single(Command::Tick { period_ms: 100 })),
            },
            Entry { log_id: log_id(13), payload: EntryPayload::Membership(membership) },
        ];
        let request = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(9)),
            entries,
            leader_commit: Some(log_id(9)),
        };
        let mut wire = Vec::new();
        write_frame(&mut wire, &PeerRequest::Append(request.clone())).await.unwrap();
        let read: PeerRequest = read_frame(&mut wire.as_slice()).await.unwrap().unwrap();
        match read {
            PeerRequest::Append(got) => assert_eq!(format!("{got:?}"), format!("{request:?}")),
            other => panic!("decoded as {other:?}"),
        }
    }

    // Ensures a frame larger than the bound is refused before it is read.
    #[tokio::test]
    async fn oversized_frames_are_refused() {
        let mut wire = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(&[0; 16]);
        let read = read_frame::<_, Hello>(&mut wire.as_slice()).await;
        assert!(matches!(read, Err(FrameError::TooLarge(_))), "{read:?}");
    }
}
