//! The inbound side of Raft RPC on the peer transport: how this node's
//! Raft answers the messages of `messages.rs` (a Raft channel's, a
//! replication stream's, a snapshot's) once [`crate::peer::Gate`] has
//! admitted the connection.

use std::path::PathBuf;

use openraft::raft::AppendEntriesRequest;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;

use super::messages::{
    AppendRpc, PeerRequest, PeerResponse, SnapshotAnswer, SnapshotHead, StreamAnswer, VoteRpc, MAX_SNAPSHOT_BYTES,
    SNAPSHOT_TIMEOUT,
};
use super::types::{TypeConfig, Vote};
use super::Raft;
use crate::peer::{read_frame, write_frame, FrameError, StreamWriter};
use crate::store::{Snapshot, SnapshotData};

/// How long a Raft channel may go without a request before this side
/// closes it: a member that went away (or someone holding a connection
/// it was admitted on) does not keep its peer slot. The sender redials a
/// kept connection that turns out closed, once, within the same RPC
/// (`network::Connection::exchange`), so an election is never lost to it.
pub const PEER_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// How many requests of a replication stream a follower reads ahead of the
/// answers it has written.
const STREAM_WINDOW: usize = 64;

/// Answers Raft RPC with this node's Raft.
#[derive(Clone)]
pub struct Inbound {
    raft: Raft,
}

/// A Raft RPC's answer over HTTP/JSON: openraft's response, or its error.
pub struct JsonAnswer {
    pub ok: bool,
    pub body: Vec<u8>,
}

impl JsonAnswer {
    fn of<T: Serialize, E: Serialize>(result: Result<T, E>) -> JsonAnswer {
        let (ok, body) = match &result {
            Ok(r) => (true, serde_json::to_vec(r)),
            Err(e) => (false, serde_json::to_vec(e)),
        };
        // openraft's messages always encode.
        JsonAnswer { ok, body: body.unwrap_or_default() }
    }
}

impl Inbound {
    pub(super) fn new(raft: Raft) -> Inbound {
        Inbound { raft }
    }

    /// An AppendEntries sent over HTTP (the transport under TLS without a
    /// CA file).
    pub async fn append_json(&self, rpc: AppendRpc) -> JsonAnswer {
        JsonAnswer::of(self.raft.append_entries(rpc).await)
    }

    /// A Vote sent over HTTP.
    pub async fn vote_json(&self, rpc: VoteRpc) -> JsonAnswer {
        JsonAnswer::of(self.raft.vote(rpc).await)
    }

    /// Installs a snapshot received whole (see [`super::SnapshotHead::receive`]).
    pub async fn install_snapshot(&self, vote: Vote, snapshot: Snapshot) -> JsonAnswer {
        JsonAnswer::of(self.raft.install_full_snapshot(vote, snapshot).await)
    }

    /// Serves Raft RPC on `io` (after its hello) until the peer closes it or
    /// breaks the protocol.
    pub async fn serve_raft<I: AsyncRead + AsyncWrite + Unpin>(&self, io: I) {
        // Buffered: a frame is one read, and an answer one write (at its flush).
        let mut io = tokio::io::BufStream::new(io);
        loop {
            let request = match tokio::time::timeout(PEER_IDLE, read_frame::<_, PeerRequest>(&mut io)).await {
                Ok(Ok(Some(request))) => request,
                Ok(Ok(None)) => return,
                Err(_) => {
                    tracing::debug!("idle peer connection closed");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "peer connection ended");
                    return;
                }
            };
            let response = match request {
                PeerRequest::Append(rpc) => PeerResponse::Append(self.raft.append_entries(rpc).await),
                PeerRequest::Vote(rpc) => PeerResponse::Vote(self.raft.vote(rpc).await),
                PeerRequest::PreVote(rpc) => PeerResponse::Vote(self.raft.pre_vote(rpc).await),
            };
            if let Err(e) = write_frame(&mut io, &response).await {
                tracing::debug!(error = %e, "peer connection ended");
                return;
            }
        }
    }

    /// Receives one snapshot on `io` (after its hello): the head, the file
    /// streamed to `path` (at most [`MAX_SNAPSHOT_BYTES`], all within
    /// [`SNAPSHOT_TIMEOUT`]), then installs it and answers.
    pub async fn serve_snapshot<I: AsyncRead + AsyncWrite + Unpin>(&self, mut io: I, path: PathBuf) {
        let received = tokio::time::timeout(SNAPSHOT_TIMEOUT, receive_snapshot(&mut io, path.clone())).await;
        let answer = match received {
            Ok(Ok((vote, snapshot))) => {
                self.raft.install_full_snapshot(vote, snapshot).await.map_err(|fatal| fatal.to_string())
            }
            Ok(Err(e)) => Err(format!("snapshot not received: {e}")),
            Err(_) => Err(format!("snapshot not received within {SNAPSHOT_TIMEOUT:?}")),
        };
        if let Err(e) = &answer {
            tracing::warn!(error = %e, "snapshot from the leader not installed");
            // Not installed: nothing else will remove the part.
            let _ = tokio::fs::remove_file(&path).await;
        }
        if let Err(e) = write_frame(&mut io, &SnapshotAnswer(answer)).await {
            tracing::debug!(error = %e, "snapshot connection ended before its answer");
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
}

/// Reads what [`Channel::Snapshot`] carries: the head frame, the file's
/// length, and the file, written to `path` as it arrives.
async fn receive_snapshot<I: AsyncRead + Unpin>(io: &mut I, path: PathBuf) -> Result<(Vote, Snapshot), FrameError> {
    let malformed = |what: &str| FrameError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()));
    let head: SnapshotHead = read_frame(io).await?.ok_or_else(|| malformed("closed before the snapshot head"))?;
    let len = io.read_u64().await?;
    if len > MAX_SNAPSHOT_BYTES {
        return Err(malformed("snapshot larger than a follower accepts"));
    }
    let mut file = tokio::io::BufWriter::new(tokio::fs::File::create(&path).await?);
    let copied = tokio::io::copy(&mut io.take(len), &mut file).await?;
    if copied < len {
        return Err(malformed("snapshot cut short"));
    }
    file.flush().await?;
    Ok((head.vote, Snapshot { meta: head.meta, snapshot: SnapshotData::File(path) }))
}

#[cfg(test)]
mod tests {
    use leasehold_core::{Batch, Command, FencingToken, Quotas};
    use openraft::{Entry, EntryPayload, LogId};

    use super::*;
    use crate::raft::types::CommittedLeaderId;

    // Ensures every command survives the frame encoding, with its optional
    // fields both present and absent (structs are maps, so skipped fields
    // cannot shift the others), and so do the quotas of the entry.
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
            Command::Renew {
                name: "a".into(),
                token: FencingToken::granted_at(7),
                ttl_ms: Some(3000),
                request_id: None,
            },
            Command::Release {
                name: "a".into(),
                token: FencingToken::granted_at(7),
                request_id: Some("x".into()),
                session: None,
                seq: None,
            },
            Command::Cancel { name: "b".into(), owner: "p".into() },
            Command::PutRecord {
                key: "k".into(),
                lock: "a".into(),
                token: FencingToken::granted_at(7),
                value: "{\"n\":1}".into(),
                request_id: None,
            },
            Command::Gate {
                resource: "g".into(),
                lock: "a".into(),
                token: FencingToken::granted_at(7),
                request_id: None,
            },
        ];
        let user = Some(leasehold_core::Principal::User("alice".into()));
        let mut batch = Batch::within(Quotas { max_leases: 200, max_waiters: 7 }, commands[0].clone(), user);
        for c in &commands[1..] {
            batch
                .try_push(c.clone(), Some(leasehold_core::Principal::Client))
                .expect("distinct enough to share an entry");
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
}
