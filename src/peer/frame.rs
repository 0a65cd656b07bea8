//! The frames of the peer transport: a big-endian `u32` length and that
//! many bytes of MessagePack; and the buffered writer of a replication
//! stream, which sends frames produced together in one write.

use std::time::Duration;

use futures_util::FutureExt as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_stream::{Stream, StreamExt};

/// Largest frame: an AppendEntries of 256 entries of large batches fits.
pub const MAX_FRAME: usize = 32 << 20;

/// How long a request that only carries the commit index waits for the
/// next request of its stream, which then carries the commit index instead.
///
/// openraft sends the follower an entry-less AppendEntries whenever the
/// commit index moves and no new entry is there to carry it: with one
/// client, or on a hot lock, one per entry. Sent at once, each costs the
/// follower a wake-up, a read, a Raft round and an answer, and the leader
/// a send and a read: about a fifth of a lone entry's CPU on three nodes.
/// Nothing waits for it (the leader has committed; a follower applies a
/// little later, and reads go through the leader), so the leader holds it
/// this long, and if the next request comes meanwhile, sends only that one
/// (`send_appends` in `raft/network.rs`). A follower's answer to one that
/// was sent waits the same way for the next answer, to share a write.
/// Heartbeats carry the commit index too. Not to a follower that hands the
/// leader commands, though: it answers its own clients only once it has
/// applied their entries, so the commit index goes to it at once
/// (`raft/network.rs`, `peer/handoff.rs`).
pub const COMMIT_ONLY_LINGER: Duration = Duration::from_millis(2);

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
