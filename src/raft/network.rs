//! Outbound Raft RPC. AppendEntries and Vote go over the peer transport
//! ([`super::peer`]): one persistent connection per peer, binary frames.
//! Snapshot chunks go over HTTP, a POST under `/raft/` with one pooled
//! reqwest client: a 2xx answer carries the response as JSON, any other
//! status the target's `RaftError` as JSON, and the chunk travels as raw
//! bytes after a small JSON head (see [`SnapshotChunkHead`]) because JSON
//! would spell every byte as a number.

use std::error::Error;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{SnapshotMeta, Vote};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::peer::{self, Dialer, PeerRequest, PeerResponse, PeerStream};
use super::{Node, NodeId, TypeConfig};
use leasehold_client::Secret;

pub const APPEND_PATH: &str = "/raft/append";
pub const VOTE_PATH: &str = "/raft/vote";
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";

/// An install-snapshot request without its data: the data follows it raw.
#[derive(Debug, Serialize, Deserialize)]
pub struct SnapshotChunkHead {
    pub vote: Vote<NodeId>,
    pub meta: SnapshotMeta<NodeId, Node>,
    pub offset: u64,
    pub done: bool,
}

impl SnapshotChunkHead {
    /// Body layout: head length (u32, big-endian), head as JSON, then data.
    pub fn encode(rpc: InstallSnapshotRequest<TypeConfig>) -> Vec<u8> {
        let head = SnapshotChunkHead { vote: rpc.vote, meta: rpc.meta, offset: rpc.offset, done: rpc.done };
        let head = serde_json::to_vec(&head).expect("snapshot head serializes");
        let mut body = Vec::with_capacity(4 + head.len() + rpc.data.len());
        body.extend_from_slice(&(head.len() as u32).to_be_bytes());
        body.extend_from_slice(&head);
        body.extend_from_slice(&rpc.data);
        body
    }

    /// Inverse of [`encode`](Self::encode); `None` when the body is malformed.
    pub fn decode(body: &[u8]) -> Option<InstallSnapshotRequest<TypeConfig>> {
        let len = u32::from_be_bytes(body.get(..4)?.try_into().ok()?) as usize;
        let head: SnapshotChunkHead = serde_json::from_slice(body.get(4..4 + len)?).ok()?;
        Some(InstallSnapshotRequest {
            vote: head.vote,
            meta: head.meta,
            offset: head.offset,
            data: body[4 + len..].to_vec(),
            done: head.done,
        })
    }
}

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
}

impl Network {
    pub fn new(
        http: reqwest::Client,
        scheme: &'static str,
        cluster_secret: Option<Secret>,
        dialer: Option<Dialer>,
    ) -> Self {
        Network { http, scheme, cluster_secret, dialer }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Connection {
        Connection {
            http: self.http.clone(),
            target,
            addr: node.addr.clone(),
            base: format!("{}://{}", self.scheme, node.addr),
            cluster_secret: self.cluster_secret.clone(),
            dialer: self.dialer.clone(),
            stream: None,
        }
    }
}

/// The RPC channel to one peer.
pub struct Connection {
    http: reqwest::Client,
    target: NodeId,
    addr: String,
    base: String,
    cluster_secret: Option<Secret>,
    dialer: Option<Dialer>,
    /// The open peer connection, dialed on first use and after a failure.
    stream: Option<Box<dyn PeerStream>>,
}

impl Connection {
    /// One request and its answer over the peer connection, within
    /// `timeout` (dialing included). A failed exchange drops the connection:
    /// the next RPC dials a new one, so a half-read answer is never mistaken
    /// for the next.
    async fn exchange<E: Error>(
        &mut self,
        dialer: &Dialer,
        request: &PeerRequest,
        timeout: Duration,
    ) -> Result<PeerResponse, RPCError<NodeId, Node, RaftError<NodeId, E>>> {
        let exchange = async {
            let mut stream = match self.stream.take() {
                Some(stream) => stream,
                None => dialer
                    .dial(&self.addr, peer::Channel::Raft)
                    .await
                    .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?,
            };
            let network = |e: peer::FrameError| RPCError::Network(NetworkError::new(&e));
            peer::write_frame(&mut stream, request).await.map_err(network)?;
            match peer::read_frame(&mut stream).await.map_err(network)? {
                Some(response) => Ok((stream, response)),
                None => {
                    let closed = std::io::Error::other("the peer closed the connection (wrong cluster secret?)");
                    Err(RPCError::Network(NetworkError::new(&closed)))
                }
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok((stream, response))) => {
                self.stream = Some(stream);
                Ok(response)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                let late = std::io::Error::new(std::io::ErrorKind::TimedOut, "peer RPC timed out");
                Err(RPCError::Network(NetworkError::new(&late)))
            }
        }
    }

    fn remote<T, E: Error>(
        &self,
        answer: Result<T, RaftError<NodeId, E>>,
    ) -> Result<T, RPCError<NodeId, Node, RaftError<NodeId, E>>> {
        answer.map_err(|remote| RPCError::RemoteError(RemoteError::new(self.target, remote)))
    }

    fn mismatched<E: Error>(&self) -> RPCError<NodeId, Node, RaftError<NodeId, E>> {
        let e = std::io::Error::other(format!("node {} answered another kind of request", self.target));
        RPCError::Network(NetworkError::new(&e))
    }

    async fn post<Resp, E>(
        &self,
        body: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        let response = body.timeout(timeout).send().await.map_err(|e| {
            if e.is_connect() {
                RPCError::Unreachable(Unreachable::new(&e))
            } else {
                RPCError::Network(NetworkError::new(&e))
            }
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)));
        }
        match serde_json::from_slice::<RaftError<NodeId, E>>(&bytes) {
            Ok(remote) => Err(RPCError::RemoteError(RemoteError::new(self.target, remote))),
            Err(_) => {
                let msg = format!("{status}: {}", String::from_utf8_lossy(&bytes));
                Err(RPCError::Network(NetworkError::new(&std::io::Error::other(msg))))
            }
        }
    }

    fn request(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.post(format!("{}{path}", self.base));
        match &self.cluster_secret {
            Some(secret) => request.bearer_auth(secret.expose()),
            None => request,
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let Some(dialer) = self.dialer.clone() else {
            return self.post(self.request(APPEND_PATH).json(&rpc), option.hard_ttl()).await;
        };
        match self.exchange(&dialer, &PeerRequest::Append(rpc), option.hard_ttl()).await? {
            PeerResponse::Append(answer) => self.remote(answer),
            PeerResponse::Vote(_) => Err(self.mismatched()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>> {
        let body = self
            .request(SNAPSHOT_PATH)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(SnapshotChunkHead::encode(rpc));
        self.post(body, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let Some(dialer) = self.dialer.clone() else {
            return self.post(self.request(VOTE_PATH).json(&rpc), option.hard_ttl()).await;
        };
        match self.exchange(&dialer, &PeerRequest::Vote(rpc), option.hard_ttl()).await? {
            PeerResponse::Vote(answer) => self.remote(answer),
            PeerResponse::Append(_) => Err(self.mismatched()),
        }
    }
}
