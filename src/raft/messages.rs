//! The Raft messages between nodes, defined once for both sides:
//! `network.rs` sends them, `inbound.rs` answers them. On the peer
//! transport they are MessagePack frames ([`PeerRequest`] and
//! [`PeerResponse`] on a Raft channel, [`StreamAnswer`] on a replication
//! stream, a [`SnapshotHead`] and the file then a [`SnapshotAnswer`] on a
//! snapshot channel); over the HTTP fallback, JSON bodies on the paths
//! below.

use std::path::PathBuf;
use std::time::Duration;

use openraft::errors::{Fatal, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio_stream::{Stream, StreamExt};

use super::types::{SnapshotMeta, TypeConfig, Vote};
use crate::store::{Snapshot, SnapshotData};

type Answer<T> = Result<T, RaftError<TypeConfig>>;

pub const APPEND_PATH: &str = "/raft/append";
pub const VOTE_PATH: &str = "/raft/vote";
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";

/// How long a whole snapshot may take to reach a follower and be installed
/// there. openraft 0.10 sends a snapshot in one piece (no chunks), so this
/// bounds the whole transfer, not one chunk.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest snapshot a follower accepts. It is streamed to a file, never
/// held in memory: the bound is on disk use.
pub const MAX_SNAPSHOT_BYTES: u64 = 16 << 30;

/// A snapshot as sent to a follower, without its data: the snapshot file
/// follows it raw.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotHead {
    pub vote: Vote,
    pub meta: SnapshotMeta,
}

impl SnapshotHead {
    /// The body's first bytes: the head's length (u32, big-endian), then the
    /// head as JSON. The snapshot file follows.
    pub(super) fn prefix(&self) -> Vec<u8> {
        let head = serde_json::to_vec(self).expect("snapshot head serializes");
        let mut prefix = Vec::with_capacity(4 + head.len());
        prefix.extend_from_slice(&(head.len() as u32).to_be_bytes());
        prefix.extend_from_slice(&head);
        prefix
    }

    /// Reads a body `network::Connection::full_snapshot` sent: the head, then the
    /// snapshot file, written to `path` as it arrives (at most `limit`
    /// bytes), never whole in memory.
    pub async fn receive<S, B, E>(mut chunks: S, path: PathBuf, limit: u64) -> std::io::Result<(Vote, Snapshot)>
    where
        S: Stream<Item = Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let malformed = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
        let (mut pending, mut head) = (Vec::new(), None);
        let mut file = tokio::io::BufWriter::new(tokio::fs::File::create(&path).await?);
        let mut written = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(std::io::Error::other)?;
            let mut data = chunk.as_ref();
            if head.is_none() {
                pending.extend_from_slice(data);
                let Some(len) = pending.get(..4).map(|l| u32::from_be_bytes(l.try_into().expect("4 bytes")) as usize)
                else {
                    continue;
                };
                if len > 1 << 20 {
                    return Err(malformed("snapshot head too large"));
                }
                let Some(json) = pending.get(4..4 + len) else { continue };
                let parsed: SnapshotHead =
                    serde_json::from_slice(json).map_err(|_| malformed("malformed snapshot head"))?;
                head = Some(parsed);
                pending.drain(..4 + len);
                data = &pending;
            }
            written += data.len() as u64;
            if written > limit {
                return Err(malformed("snapshot larger than a follower accepts"));
            }
            file.write_all(data).await?;
            pending.clear();
        }
        file.flush().await?;
        let head = head.ok_or_else(|| malformed("snapshot body without a head"))?;
        Ok((head.vote, Snapshot { meta: head.meta, snapshot: SnapshotData::File(path) }))
    }
}

/// An AppendEntries request, as the HTTP transport carries it.
pub type AppendRpc = AppendEntriesRequest<TypeConfig>;
/// A Vote request, as the HTTP transport carries it.
pub type VoteRpc = VoteRequest<TypeConfig>;

/// A follower's answer to one request of a [`Channel::RaftStream`].
#[derive(Debug, Serialize, Deserialize)]
pub struct StreamAnswer(pub Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>);

/// A follower's answer to a snapshot sent on a [`Channel::Snapshot`]:
/// its Raft's, or why it did not take the snapshot.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotAnswer(pub Result<SnapshotResponse<TypeConfig>, String>);

/// What a peer asks.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
    /// Would the target vote for this candidate? Answered as a `Vote`,
    /// changing nothing on the target (last, so earlier variants keep their
    /// encoding; a node of an earlier version closes the connection on it,
    /// which the candidate counts as no grant).
    PreVote(VoteRequest<TypeConfig>),
}

/// What a peer answers: the target's own Raft answer or error.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Append(Answer<AppendEntriesResponse<TypeConfig>>),
    Vote(Answer<VoteResponse<TypeConfig>>),
}
