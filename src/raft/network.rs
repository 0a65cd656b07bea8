//! Outbound Raft RPC. AppendEntries, Vote and snapshots go over the peer
//! transport ([`crate::peer`]): one persistent connection per peer, binary
//! frames; a snapshot on a connection of its own, the file streamed from
//! disk to disk. Over HTTP (a POST under `/raft/` with one pooled reqwest
//! client: a 2xx answer carries the response as JSON, any other status the
//! target's error) go every RPC when the peer transport cannot be dialed
//! (TLS without a CA file), and a snapshot to a node of the version before
//! the snapshot channel: the body is a small JSON head (see
//! [`SnapshotHead`]), then the snapshot file. The messages themselves are
//! `messages.rs`'s.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{stream_append_sequential, RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::{Stream, StreamExt};

use super::messages::{
    PeerRequest, PeerResponse, SnapshotAnswer, SnapshotHead, StreamAnswer, APPEND_PATH, SNAPSHOT_PATH,
    SNAPSHOT_TIMEOUT, VOTE_PATH,
};
use super::types::{LogId, Member, NodeId, TypeConfig, Vote};
use crate::peer::handoff::HandingFollowers;
use crate::peer::{self, Dialer, PeerStream};
use crate::store::{Snapshot, SnapshotData};
use leasehold_proto::Secret;

/// Makes connections to peers; snapshot chunks share one HTTP connection pool.
#[derive(Clone)]
pub struct Network {
    http: reqwest::Client,
    /// `http` or `https`: the scheme every node serves.
    scheme: &'static str,
    /// Sent as a bearer token on every RPC: members prove membership with it.
    cluster_secret: Option<Secret>,
    /// Dials peer connections; `None` when they cannot be made (TLS without
    /// a CA file to check the peers' certificates against): then every RPC
    /// goes over HTTP, as reqwest trusts the built-in roots.
    dialer: Option<Dialer>,
    /// The followers that hand this node commands, and which of them want
    /// the commit index at once ([`peer::handoff::HandingFollowers`]).
    handing: Arc<HandingFollowers>,
}

impl Network {
    pub fn new(
        http: reqwest::Client,
        scheme: &'static str,
        cluster_secret: Option<Secret>,
        dialer: Option<Dialer>,
        handing: Arc<HandingFollowers>,
    ) -> Self {
        Network { http, scheme, cluster_secret, dialer, handing }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Connection {
        Connection {
            http: self.http.clone(),
            target,
            peer_addr: node.peer_dial_addr().to_owned(),
            base: format!("{}://{}", self.scheme, node.addr),
            cluster_secret: self.cluster_secret.clone(),
            dialer: self.dialer.clone(),
            handing: self.handing.clone(),
            stream: None,
            no_stream: Arc::default(),
            snapshot_over_http: false,
            redial: Redial::default(),
        }
    }
}

/// The RPC channel to one peer.
pub struct Connection {
    http: reqwest::Client,
    target: NodeId,
    /// Where its peer transport listens (its own port, or the client one).
    peer_addr: String,
    /// Its HTTP API, for snapshots and the RPC of nodes without the peer
    /// transport.
    base: String,
    cluster_secret: Option<Secret>,
    dialer: Option<Dialer>,
    handing: Arc<HandingFollowers>,
    /// The open peer connection, dialed on first use and after a failure.
    stream: Option<Box<dyn PeerStream>>,
    /// Set once the peer closed a replication stream before its first
    /// answer: a node of the version before [`peer::Channel::RaftStream`]
    /// refuses that channel, and is then replicated to one request at a time.
    no_stream: Arc<AtomicBool>,
    /// Whether the next snapshot goes over HTTP. A node of the version
    /// before [`peer::Channel::Snapshot`] closes that channel unanswered,
    /// and a node with a peer port of its own serves no HTTP Raft RPC: so
    /// after a snapshot that got no answer, the next one tries the other
    /// way (openraft sends it again), and one of the two reaches any node.
    snapshot_over_http: bool,
    /// When replication may dial the peer again after a failed dial.
    redial: Redial,
}

/// The first and the longest wait before a replication stream dials a peer
/// that refused or timed out its last dial.
const REDIAL_FIRST: Duration = Duration::from_millis(20);
const REDIAL_MAX: Duration = Duration::from_millis(200);

/// Backoff between the dials of a replication stream. openraft backs off
/// from an unreachable peer inside the request stream, before it hands out
/// a request, and a refused dial fails before the first is asked for: so
/// without this a leader redials a stopped follower at once, again and
/// again (measured: a whole core, and about 26 000 warnings a second in
/// its log, while the follower restarted next to it). The longest wait is
/// openraft's own default backoff, so a follower that is back is
/// replicated to within it.
#[derive(Debug, Default)]
struct Redial {
    not_before: Option<tokio::time::Instant>,
    delay: Duration,
}

impl Redial {
    async fn wait(&self) {
        if let Some(at) = self.not_before {
            tokio::time::sleep_until(at).await;
        }
    }

    fn failed(&mut self) {
        self.delay = (self.delay * 2).clamp(REDIAL_FIRST, REDIAL_MAX);
        self.not_before = Some(tokio::time::Instant::now() + self.delay);
    }

    fn succeeded(&mut self) {
        *self = Redial::default();
    }
}

/// What an RPC to a peer failed with, in openraft's terms.
type RpcError = RPCError<TypeConfig>;

fn network_error(e: &(impl std::error::Error + 'static)) -> RpcError {
    RPCError::Network(NetworkError::new(e))
}

impl Connection {
    /// One request and its answer over the peer connection, within
    /// `timeout` (dialing included), on the kept connection, or once more on
    /// a new one if the kept one fails. A failed exchange drops the connection:
    /// the next RPC dials a new one, so a half-read answer is never mistaken
    /// for the next.
    async fn exchange(
        &mut self,
        dialer: &Dialer,
        request: &PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, RpcError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let reused = self.stream.take();
        let was_reused = reused.is_some();
        let mut result = tokio::time::timeout_at(deadline, self.attempt(dialer, request, reused)).await;
        // A kept connection the peer closed while it was idle (the receiving
        // side closes idle ones, `inbound::PEER_IDLE`) fails only here, at
        // its first use: dial once more. Raft RPC may be sent twice (a vote
        // or an append repeated is answered alike).
        if was_reused && matches!(result, Ok(Err(_))) {
            result = tokio::time::timeout_at(deadline, self.attempt(dialer, request, None)).await;
        }
        match result {
            Ok(Ok((stream, response))) => {
                self.stream = Some(stream);
                Ok(response)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(network_error(&timed_out())),
        }
    }

    /// One exchange on `stream`, or on a connection dialed now.
    async fn attempt(
        &self,
        dialer: &Dialer,
        request: &PeerRequest,
        stream: Option<Box<dyn PeerStream>>,
    ) -> Result<(Box<dyn PeerStream>, PeerResponse), RpcError> {
        let mut stream = match stream {
            Some(stream) => stream,
            None => dialer
                .dial(&self.peer_addr, peer::Channel::Raft)
                .await
                .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?,
        };
        let network = |e: peer::FrameError| network_error(&e);
        peer::write_frame(&mut stream, request).await.map_err(network)?;
        match peer::read_frame(&mut stream).await.map_err(network)? {
            Some(response) => Ok((stream, response)),
            None => {
                let closed = std::io::Error::other("the peer closed the connection (wrong cluster secret?)");
                Err(network_error(&closed))
            }
        }
    }

    /// The target's own answer. A Raft error there can only be fatal (its
    /// Raft stopped or panicked): to this node that peer is unreachable, and
    /// openraft backs off from it.
    fn remote<T>(&self, answer: Result<T, RaftError<TypeConfig>>) -> Result<T, RpcError> {
        answer.map_err(|remote| {
            let e = std::io::Error::other(format!("node {}: {remote}", self.target));
            RPCError::Unreachable(Unreachable::new(&e))
        })
    }

    fn mismatched(&self) -> RpcError {
        let e = std::io::Error::other(format!("node {} answered another kind of request", self.target));
        network_error(&e)
    }

    /// POSTs `body`: a 2xx answer is the response as JSON, any other status
    /// the target's error (as text: error bodies are diagnostics).
    async fn post<Resp>(&self, body: reqwest::RequestBuilder, timeout: Duration) -> Result<Resp, RpcError>
    where
        Resp: DeserializeOwned,
    {
        let response = body.timeout(timeout).send().await.map_err(|e| {
            if e.is_connect() {
                RPCError::Unreachable(Unreachable::new(&e))
            } else {
                network_error(&e)
            }
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| network_error(&e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| network_error(&e));
        }
        let msg = format!("node {}: {status}: {}", self.target, String::from_utf8_lossy(&bytes));
        Err(RPCError::Unreachable(Unreachable::new(&std::io::Error::other(msg))))
    }

    fn request(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.post(format!("{}{path}", self.base));
        match &self.cluster_secret {
            Some(secret) => request.bearer_auth(secret.expose()),
            None => request,
        }
    }
}

impl RaftNetworkV2<TypeConfig> for Connection {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RpcError> {
        let Some(dialer) = self.dialer.clone() else {
            return self.post(self.request(APPEND_PATH).json(&rpc), option.hard_ttl()).await;
        };
        match self.exchange(&dialer, &PeerRequest::Append(rpc), option.hard_ttl()).await? {
            PeerResponse::Append(answer) => self.remote(answer),
            PeerResponse::Vote(_) => Err(self.mismatched()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcError> {
        let Some(dialer) = self.dialer.clone() else {
            return self.post(self.request(VOTE_PATH).json(&rpc), option.hard_ttl()).await;
        };
        match self.exchange(&dialer, &PeerRequest::Vote(rpc), option.hard_ttl()).await? {
            PeerResponse::Vote(answer) => self.remote(answer),
            PeerResponse::Append(_) => Err(self.mismatched()),
        }
    }

    /// Pre-Vote: a follower whose election timer fired asks first whether
    /// a quorum would elect it, and campaigns (raising its term) only if
    /// so. A follower that merely fell behind on a loaded machine, or was
    /// cut off and comes back, then cannot unseat a leader the others
    /// still hear from. Over the peer transport only: without it (TLS
    /// without a CA file) openraft's default grants, and elections run as
    /// they would without Pre-Vote.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcError> {
        let Some(dialer) = self.dialer.clone() else {
            return Ok(VoteResponse::new(rpc.vote, None, true));
        };
        match self.exchange(&dialer, &PeerRequest::PreVote(rpc), option.hard_ttl()).await? {
            PeerResponse::Vote(answer) => self.remote(answer),
            PeerResponse::Append(_) => Err(self.mismatched()),
        }
    }

    /// Replication to this peer, pipelined over a connection of its own
    /// ([`peer::Channel::RaftStream`]): each request is sent as openraft
    /// produces it, without waiting for the previous one's answer, so
    /// several appends are on their way to the follower at once. Without
    /// the peer transport (TLS without a CA file), one request at a time
    /// over HTTP.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RpcError>>, RpcError>>
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        let dialer = match self.dialer.clone() {
            Some(dialer) if !self.no_stream.load(Ordering::Relaxed) => dialer,
            _ => return stream_append_sequential(self, input, option),
        };
        Box::pin(async move {
            let ttl = option.hard_ttl();
            self.redial.wait().await;
            let stream = match tokio::time::timeout(ttl, dialer.dial(&self.peer_addr, peer::Channel::RaftStream)).await
            {
                Ok(Ok(stream)) => {
                    self.redial.succeeded();
                    stream
                }
                Ok(Err(e)) => {
                    self.redial.failed();
                    return Err(RPCError::Unreachable(Unreachable::new(&e)));
                }
                Err(_) => {
                    self.redial.failed();
                    return Err(network_error(&timed_out()));
                }
            };
            let (target, no_stream) = (self.target, self.no_stream.clone());
            let (reader, writer) = tokio::io::split(stream);
            let (sent, to_answer) = mpsc::unbounded_channel();
            let (answers, answered) = mpsc::channel(STREAM_ANSWERS);
            let handing = self.handing.clone();
            let send = tokio::spawn(send_appends(input, writer, sent, move || handing.waiting(target)));
            // Buffered: a frame is one read, and answers that arrive
            // together are one read for all of them.
            let reader = tokio::io::BufReader::new(reader);
            let read = tokio::spawn(read_answers(reader, to_answer, answers, ttl, target, no_stream));
            let stream: BoxStream<'s, _> =
                Box::pin(Answers { answered, _tasks: [AbortOnDrop(send), AbortOnDrop(read)] });
            Ok(stream)
        })
    }

    /// The whole snapshot on a peer connection of its own (or over HTTP, see
    /// `snapshot_over_http`): snapshots are rare, and openraft 0.10 hands
    /// them over whole.
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let head = SnapshotHead { vote, meta: snapshot.meta.clone() };
        let meta = snapshot.meta;
        let file = snapshot.snapshot.into_file_off_runtime(meta).await;
        let (path, _) = file.map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let timeout = option.hard_ttl().max(SNAPSHOT_TIMEOUT);
        let sent = async {
            match self.dialer.clone() {
                Some(dialer) if !self.snapshot_over_http => {
                    let sent = self.send_snapshot(&dialer, &head, &path).await;
                    self.snapshot_over_http = matches!(sent, Err(NotSent::Unanswered(_)));
                    sent.map_err(NotSent::into_rpc)
                }
                _ => {
                    let sent = self.post_snapshot(&head, &path, timeout).await;
                    self.snapshot_over_http = self.dialer.is_none() || sent.is_ok();
                    sent
                }
            }
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = tokio::time::timeout(timeout, sent) => match sent {
                Err(_) => Err(StreamingError::Network(NetworkError::new(&timed_out()))),
                Ok(sent) => sent.map_err(|e| match e {
                    RPCError::Unreachable(e) => StreamingError::Unreachable(e),
                    RPCError::Timeout(e) => StreamingError::Timeout(e),
                    RPCError::Network(e) => StreamingError::Network(e),
                    RPCError::RemoteError(e) => match e.source {},
                }),
            },
        }
    }
}

/// Why a snapshot sent on the peer transport was not installed.
enum NotSent {
    /// The follower answered that it did not take it.
    Refused(RpcError),
    /// No answer: the peer closed the connection, or it broke (see
    /// `snapshot_over_http`).
    Unanswered(RpcError),
}

impl NotSent {
    fn into_rpc(self) -> RpcError {
        match self {
            NotSent::Refused(e) | NotSent::Unanswered(e) => e,
        }
    }
}

impl Connection {
    /// `head`, then the file at `path`, on a [`peer::Channel::Snapshot`]
    /// connection; the follower's answer.
    async fn send_snapshot(
        &self,
        dialer: &Dialer,
        head: &SnapshotHead,
        path: &std::path::Path,
    ) -> Result<SnapshotResponse<TypeConfig>, NotSent> {
        let unanswered = |e: std::io::Error| NotSent::Unanswered(network_error(&e));
        let mut stream = dialer
            .dial(&self.peer_addr, peer::Channel::Snapshot)
            .await
            .map_err(|e| NotSent::Unanswered(RPCError::Unreachable(Unreachable::new(&e))))?;
        let mut file = tokio::fs::File::open(path).await.map_err(unanswered)?;
        let len = file.metadata().await.map_err(unanswered)?.len();
        peer::write_frame(&mut stream, head).await.map_err(|e| NotSent::Unanswered(network_error(&e)))?;
        stream.write_all(&len.to_be_bytes()).await.map_err(unanswered)?;
        tokio::io::copy(&mut file, &mut stream).await.map_err(unanswered)?;
        stream.flush().await.map_err(unanswered)?;
        match peer::read_frame::<_, SnapshotAnswer>(&mut stream).await {
            Ok(Some(SnapshotAnswer(Ok(response)))) => Ok(response),
            Ok(Some(SnapshotAnswer(Err(refused)))) => {
                let e = std::io::Error::other(format!("node {}: {refused}", self.target));
                Err(NotSent::Refused(RPCError::Unreachable(Unreachable::new(&e))))
            }
            Ok(None) => Err(unanswered(std::io::Error::other("the peer closed the snapshot connection unanswered"))),
            Err(e) => Err(NotSent::Unanswered(network_error(&e))),
        }
    }

    /// The snapshot over HTTP, to `/raft/snapshot` on the target's client port.
    async fn post_snapshot(
        &self,
        head: &SnapshotHead,
        path: &std::path::Path,
        timeout: Duration,
    ) -> Result<SnapshotResponse<TypeConfig>, RpcError> {
        let file = tokio::fs::File::open(path).await.map_err(|e| network_error(&e))?;
        let prefix = tokio_stream::once(Ok(bytes::Bytes::from(head.prefix())));
        let body = reqwest::Body::wrap_stream(prefix.chain(tokio_util::io::ReaderStream::new(file)));
        let body =
            self.request(SNAPSHOT_PATH).header(reqwest::header::CONTENT_TYPE, "application/octet-stream").body(body);
        self.post(body, timeout).await
    }
}

/// Answers read ahead of openraft taking them.
const STREAM_ANSWERS: usize = 64;

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "peer RPC timed out")
}

/// Writes each request of a replication stream as openraft produces it,
/// telling the reader which answer is due first.
///
/// A request that only carries the commit index ([`peer::COMMIT_ONLY_LINGER`]
/// says why it is worth waiting for) is held back up to that long for the
/// next request. If the next one carries it (same vote, same previous entry,
/// a commit index as high), the held one is not sent at all: the next one
/// tells the follower everything it did, and its answer answers both (the
/// held one's success says the follower matches the leader up to its
/// previous entry, which the leader already knew). On a hot lock this saves
/// each follower a whole Raft round per entry. Otherwise the held one goes
/// first. Not held when `hands_off` says requests on the follower wait for
/// its apply of entries (waiting acquires it serves itself, their commands
/// handed here): the commit index goes to it at once.
async fn send_appends<S, W>(mut input: S, writer: W, sent: mpsc::UnboundedSender<Due>, hands_off: impl Fn() -> bool)
where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut out = peer::StreamWriter::new(writer);
    // A request taken from `input` while holding another, not carried by it.
    let mut next: Option<AppendEntriesRequest<TypeConfig>> = None;
    let mut input_ended = false;
    loop {
        let taken = match next.take() {
            Some(rpc) => Ok(Some(rpc)),
            None if input_ended => Ok(None),
            None => out.next(&mut input).await,
        };
        let mut rpc = match taken {
            Ok(Some(rpc)) => rpc,
            Ok(None) => {
                // The session ended: what is buffered goes out.
                if let Err(e) = out.flush().await {
                    tracing::debug!(error = %e, "replication stream write failed");
                }
                return;
            }
            Err(e) => {
                // The reader finds the connection broken, or the answer late.
                tracing::debug!(error = %e, "replication stream write failed");
                return;
            }
        };
        let mut due = Due { carried: Vec::new() };
        while rpc.entries.is_empty() && !input_ended && !hands_off() {
            if let Err(e) = out.flush().await {
                tracing::debug!(error = %e, "replication stream write failed");
                return;
            }
            match tokio::time::timeout(peer::COMMIT_ONLY_LINGER, input.next()).await {
                Ok(Some(later)) if carries(&later, &rpc) => {
                    due.carried.push(rpc.prev_log_id);
                    rpc = later;
                }
                Ok(Some(later)) => {
                    next = Some(later);
                    break;
                }
                Ok(None) => input_ended = true,
                Err(_) => break,
            }
        }
        if sent.send(due).is_err() {
            return;
        }
        if let Err(e) = out.write(&rpc, false).await {
            tracing::debug!(error = %e, "replication stream write failed");
            return;
        }
    }
}

/// Whether `later` tells a follower all that `held`, a request with no
/// entries, does: the same leader, the same entry before them (so its
/// success says the follower matches up to `held`'s), and a commit index
/// at least as high.
fn carries(later: &AppendEntriesRequest<TypeConfig>, held: &AppendEntriesRequest<TypeConfig>) -> bool {
    later.vote == held.vote && later.prev_log_id == held.prev_log_id && later.leader_commit >= held.leader_commit
}

/// The answer due for one request sent, and for the requests with no
/// entries it carried (their previous entry each), which are answered
/// first, as if sent just before it.
#[derive(Debug)]
struct Due {
    carried: Vec<Option<LogId>>,
}

/// Reads one answer per request sent, each within `ttl`, until the writer
/// is done and every answer is read, or an answer is not a success, or the
/// connection fails (reported as the stream's last item).
async fn read_answers<R>(
    mut reader: R,
    mut to_answer: mpsc::UnboundedReceiver<Due>,
    answers: mpsc::Sender<Result<StreamAppendResult<TypeConfig>, RpcError>>,
    ttl: Duration,
    target: NodeId,
    no_stream: Arc<AtomicBool>,
) where
    R: tokio::io::AsyncRead + Unpin,
{
    let mut first = true;
    while let Some(due) = to_answer.recv().await {
        let answer = match tokio::time::timeout(ttl, peer::read_frame::<_, StreamAnswer>(&mut reader)).await {
            Ok(Ok(Some(StreamAnswer(Ok(result))))) => Ok(result),
            Ok(Ok(Some(StreamAnswer(Err(fatal))))) => {
                let e = std::io::Error::other(format!("node {target}: {fatal}"));
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Ok(Ok(None)) => {
                if first {
                    tracing::warn!(
                        target,
                        "peer closed a replication stream unanswered: replicating to it without one"
                    );
                    no_stream.store(true, Ordering::Relaxed);
                }
                Err(network_error(&std::io::Error::other("the peer closed the replication stream")))
            }
            Ok(Err(e)) => Err(network_error(&e)),
            Err(_) => Err(network_error(&timed_out())),
        };
        first = false;
        let go_on = matches!(answer, Ok(Ok(_)));
        // The requests it carried succeeded with it; had it failed, the
        // first of them gets its failure, which ends the session.
        let carried = due.carried.into_iter().map(|prev| Ok(Ok(prev))).take_while(|_| go_on);
        for answer in carried.chain(std::iter::once(answer)) {
            if answers.send(answer).await.is_err() {
                return;
            }
        }
        if !go_on {
            return;
        }
    }
}

/// A replication stream's answers, as openraft takes them. Dropping it (the
/// session ended) stops its writer and reader: the writer holds openraft's
/// request stream, which the next session needs.
struct Answers {
    answered: mpsc::Receiver<Result<StreamAppendResult<TypeConfig>, RpcError>>,
    _tasks: [AbortOnDrop; 2],
}

impl Stream for Answers {
    type Item = Result<StreamAppendResult<TypeConfig>, RpcError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.answered.poll_recv(cx)
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_id(index: u64) -> LogId {
        LogId::new(super::super::types::CommittedLeaderId { term: 3, node_id: 1 }, index)
    }

    fn append(prev: u64, entries: u64, commit: u64) -> AppendEntriesRequest<TypeConfig> {
        let entries = (prev + 1..=prev + entries)
            .map(|i| openraft::Entry { log_id: log_id(i), payload: openraft::EntryPayload::Blank })
            .collect();
        AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(prev)),
            leader_commit: Some(log_id(commit)),
            entries,
        }
    }

    // Ensures a request that only carries the commit index is not sent when
    // the next request carries it, that its answer is the next one's
    // success, and that one the next request does not carry (or none
    // follows) is sent as it is.
    #[tokio::test]
    async fn a_commit_only_request_is_carried_by_the_next() {
        let (requests, input) = mpsc::unbounded_channel();
        let (leader, follower) = tokio::io::duplex(1 << 16);
        let (leader_reads, leader_writes) = tokio::io::split(leader);
        let (sent, to_answer) = mpsc::unbounded_channel();
        let writer = tokio::spawn(send_appends(
            tokio_stream::wrappers::UnboundedReceiverStream::new(input),
            leader_writes,
            sent,
            || false,
        ));
        let (answers, mut answered) = mpsc::channel(STREAM_ANSWERS);
        let reader = tokio::io::BufReader::new(leader_reads);
        let no_stream = Arc::default();
        let reads = tokio::spawn(read_answers(reader, to_answer, answers, Duration::from_secs(5), 2, no_stream));
        // Commit 5 with nothing new, then entry 6: only entry 6 goes out.
        requests.send(append(5, 0, 5)).unwrap();
        requests.send(append(5, 1, 5)).unwrap();
        let mut follower = tokio::io::BufReader::new(follower);
        let first: AppendEntriesRequest<TypeConfig> = peer::read_frame(&mut follower).await.unwrap().unwrap();
        assert_eq!((first.prev_log_id, first.entries.len()), (Some(log_id(5)), 1), "carried by entry 6's request");
        peer::write_frame(&mut follower, &StreamAnswer(Ok(Ok(Some(log_id(6)))))).await.unwrap();
        assert_eq!(answered.recv().await.unwrap().unwrap(), Ok(Some(log_id(5))), "the carried one's answer");
        assert_eq!(answered.recv().await.unwrap().unwrap(), Ok(Some(log_id(6))));
        // Commit 6 with nothing after it: it goes out on its own, once held.
        requests.send(append(6, 0, 6)).unwrap();
        let alone: AppendEntriesRequest<TypeConfig> = peer::read_frame(&mut follower).await.unwrap().unwrap();
        assert_eq!((alone.entries.len(), alone.leader_commit), (0, Some(log_id(6))));
        peer::write_frame(&mut follower, &StreamAnswer(Ok(Ok(Some(log_id(6)))))).await.unwrap();
        assert_eq!(answered.recv().await.unwrap().unwrap(), Ok(Some(log_id(6))));
        // Commit 7 then a request from another previous entry: both go out.
        requests.send(append(7, 0, 7)).unwrap();
        requests.send(append(8, 1, 7)).unwrap();
        for prev in [7, 8] {
            let request: AppendEntriesRequest<TypeConfig> = peer::read_frame(&mut follower).await.unwrap().unwrap();
            assert_eq!(request.prev_log_id, Some(log_id(prev)));
            peer::write_frame(&mut follower, &StreamAnswer(Ok(Ok(Some(log_id(prev)))))).await.unwrap();
            assert_eq!(answered.recv().await.unwrap().unwrap(), Ok(Some(log_id(prev))));
        }
        drop(requests);
        writer.await.unwrap();
        reads.await.unwrap();
    }

    // Ensures each failed dial doubles the wait before the next, from
    // REDIAL_FIRST up to REDIAL_MAX, and a successful one ends the wait.
    #[tokio::test]
    async fn failed_dials_back_off_and_a_success_resets() {
        let mut redial = Redial::default();
        assert!(redial.not_before.is_none(), "the first dial does not wait");
        let mut waits = Vec::new();
        for _ in 0..6 {
            redial.failed();
            waits.push(redial.delay.as_millis());
            let at = redial.not_before.expect("a failed dial sets a wait");
            assert!(at > tokio::time::Instant::now() && at <= tokio::time::Instant::now() + redial.delay);
        }
        assert_eq!(waits, [20, 40, 80, 160, 200, 200]);
        redial.succeeded();
        assert!(redial.not_before.is_none(), "a success ends the wait");
        redial.failed();
        assert_eq!(redial.delay, REDIAL_FIRST, "and starts the backoff over");
    }

    // Ensures an RPC on a kept connection that the peer closed meanwhile
    // (as it closes idle ones) is sent again on a new connection within
    // the same call, instead of failing: a vote lost that way could cost
    // an election.
    #[tokio::test]
    async fn a_kept_connection_the_peer_closed_is_redialed_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = tokio::spawn(async move {
            // The first connection is closed after its hello, unanswered;
            // the second answers one vote.
            for answer in [false, true] {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut preface = [0u8; 8];
                tokio::io::AsyncReadExt::read_exact(&mut conn, &mut preface).await.unwrap();
                let _: Option<peer::Hello> = peer::read_frame(&mut conn).await.unwrap();
                if answer {
                    let request: Option<PeerRequest> = peer::read_frame(&mut conn).await.unwrap();
                    let PeerRequest::Vote(vote) = request.expect("a request") else { panic!("a vote") };
                    let granted = openraft::raft::VoteResponse::new(vote.vote, vote.last_log_id, true);
                    peer::write_frame(&mut conn, &PeerResponse::Vote(Ok(granted))).await.unwrap();
                }
            }
        });
        let dialer = Dialer { from: 2, tls: None, cluster_secret: None };
        let mut connection = Connection {
            http: reqwest::Client::new(),
            target: 1,
            peer_addr: addr.clone(),
            base: format!("http://{addr}"),
            cluster_secret: None,
            dialer: Some(dialer.clone()),
            handing: Arc::default(),
            stream: Some(dialer.dial(&addr, peer::Channel::Raft).await.unwrap()),
            no_stream: Arc::default(),
            snapshot_over_http: false,
            redial: Redial::default(),
        };
        // Let the peer close the kept connection first.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let vote = VoteRequest::new(Vote::new(3, 2), None);
        let answer = connection.exchange(&dialer, &PeerRequest::Vote(vote), Duration::from_secs(5)).await;
        assert!(matches!(answer, Ok(PeerResponse::Vote(Ok(_)))), "{answer:?}");
        peer.await.unwrap();
    }
}
