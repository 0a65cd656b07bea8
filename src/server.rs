//! The listener: accepts TCP connections (TLS only, when configured),
//! bounds how many are open at once and how long a client may take to send a
//! request head, and serves each connection with hyper (HTTP/1.1) and the
//! axum router — or, when a connection opens with the peer transport's
//! preface (or asks for its ALPN protocol under TLS), hands it to Raft
//! ([`crate::raft::peer`]), outside the client connection limit.
//!
//! `axum::serve` exposes neither a header-read timeout nor a connection
//! limit, hence this loop. The header-read timeout also closes a kept-alive
//! connection that sends nothing more: hyper starts it whenever it waits for
//! a request head. So a client that opens connections and sends half a
//! header (slowloris) holds each for at most that long, and never more than
//! `max_connections` at once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::api::ApiConfig;
use crate::node::{Node, NodeConfig, NodeError};
use crate::raft::peer::{self, Inbound};

/// Default time a client has to send a whole request head.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// How long open connections may finish their requests after shutdown begins
/// (an events stream never finishes on its own).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors), so the loop
/// does not spin while the condition lasts.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// How long a refused plain-HTTP client may take to close its side.
const PLAIN_HTTP_DRAIN: Duration = Duration::from_secs(1);
/// First byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;
/// Peer connections open at once: a few per member (replication, votes),
/// for clusters of up to 7 nodes, with room for reconnects.
const MAX_PEER_CONNECTIONS: usize = 64;

/// Connection-level limits of the listener.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits { header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT, max_connections: DEFAULT_MAX_CONNECTIONS }
    }
}

/// Where and how a node serves: the listener's address, TLS and limits, and
/// what the API checks on each request. (What the node is, its Raft and
/// storage settings, is [`NodeConfig`].)
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind the listener to.
    pub listen: SocketAddr,
    /// Serve https only, with this configuration.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub connection_limits: ConnectionLimits,
    pub api: ApiConfig,
}

/// Runs a node until `shutdown` resolves: binds the listener, starts the
/// node, serves the API, then stops Raft.
pub async fn run(
    node: NodeConfig,
    serve_config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    let listener = TcpListener::bind(serve_config.listen)
        .await
        .map_err(|e| NodeError::Internal(format!("bind {}: {e}", serve_config.listen)))?;
    let started = Node::start(&node).await?;
    tracing::info!(id = node.id, addr = %serve_config.listen, tls = serve_config.tls.is_some(), "serving");
    let router = crate::api::router(started.clone(), &serve_config.api);
    let header_read_timeout = serve_config.connection_limits.header_read_timeout;
    let peers =
        Inbound::new(started.raft().clone(), serve_config.api.secrets.cluster_secret.clone(), header_read_timeout);
    serve(listener, router, peers, serve_config.tls, serve_config.connection_limits, shutdown).await;
    started.shutdown().await;
    Ok(())
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets open
/// connections finish for a few seconds. With `tls`, only TLS connections are
/// served; a plain HTTP request is answered 400 `tls_required` and closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    peers: Inbound,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let tls = tls.map(TlsAcceptor::from);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let peer_slots = Arc::new(Semaphore::new(MAX_PEER_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        // Over the limit a connection is closed at once rather than left in
        // the backlog: the client learns now, and retries another node.
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!("connection limit reached; closing a new connection");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            http: http.clone(),
            router: router.clone(),
            peers: peers.clone(),
            peer_slots: peer_slots.clone(),
            permit: Some(permit),
            watcher: graceful.watcher(),
            header_read_timeout: limits.header_read_timeout,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => connection.serve_tls(acceptor, stream).await,
                None => connection.serve_plain(stream).await,
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::info!("connections still open after the shutdown grace; closing them");
    }
}

/// One accepted connection.
struct Connection {
    http: http1::Builder,
    router: Router,
    peers: Inbound,
    peer_slots: Arc<Semaphore>,
    /// Its place among the client connections, given back if it turns out
    /// to be a peer's.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    watcher: hyper_util::server::graceful::Watcher,
    header_read_timeout: Duration,
}

impl Connection {
    /// A plain connection: the peer transport if it opens with its preface
    /// (consumed here), else HTTP.
    async fn serve_plain(self, mut stream: TcpStream) {
        match tokio::time::timeout(self.header_read_timeout, opens_with_preface(&stream)).await {
            Ok(Ok(true)) => {
                let mut preface = [0u8; peer::PREFACE.len()];
                if stream.read_exact(&mut preface).await.is_ok() {
                    self.serve_peer(stream).await;
                }
            }
            Ok(Ok(false)) => self.serve(stream).await,
            Ok(Err(_)) | Err(_) => {}
        }
    }

    /// A peer connection: it leaves the client connection budget for the
    /// peers' own, so client load cannot crowd Raft out.
    async fn serve_peer<I: AsyncRead + AsyncWrite + Unpin>(mut self, io: I) {
        let Ok(_slot) = self.peer_slots.clone().try_acquire_owned() else {
            tracing::warn!("peer connection limit reached; closing a new peer connection");
            return;
        };
        self.permit = None;
        self.peers.serve(io).await;
    }

    async fn serve<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(self, io: I) {
        let service = TowerToHyperService::new(self.router);
        let connection = self.http.serve_connection(TokioIo::new(io), service);
        if let Err(e) = self.watcher.watch(connection).await {
            tracing::debug!(error = %e, "connection ended");
        }
    }

    /// The TLS handshake counts against the header-read timeout: a client
    /// that starts one and stalls is closed like a slow plain one.
    async fn serve_tls(self, acceptor: TlsAcceptor, mut stream: TcpStream) {
        let handshake = async {
            let mut first = [0u8; 1];
            if stream.peek(&mut first).await? == 1 && first[0] != TLS_HANDSHAKE {
                refuse_plain_http(&mut stream).await;
                return Ok(None);
            }
            acceptor.accept(stream).await.map(Some)
        };
        match tokio::time::timeout(self.header_read_timeout, handshake).await {
            Ok(Ok(Some(tls))) if tls.get_ref().1.alpn_protocol() == Some(peer::ALPN) => self.serve_peer(tls).await,
            Ok(Ok(Some(tls))) => self.serve(tls).await,
            Ok(Ok(None)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    }
}

/// Whether the first bytes on `stream` are the peer preface (peeked, not
/// consumed). Waits only while what arrived so far is a prefix of it.
async fn opens_with_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut head = [0u8; peer::PREFACE.len()];
    loop {
        let n = stream.peek(&mut head).await?;
        if n == 0 || !peer::PREFACE.starts_with(&head[..n]) {
            return Ok(false);
        }
        if n == head.len() {
            return Ok(true);
        }
        // A prefix of the preface, split across segments: wait for the rest.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Answers a plain HTTP request on a TLS-only listener with a JSON 400 in the
/// API's error shape, then closes the connection (nothing was read or done).
async fn refuse_plain_http(stream: &mut TcpStream) {
    let body = serde_json::json!({
        "error": { "code": "tls_required", "message": "this node serves https only" }
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
    // Read what the client sent until it closes: closing a socket with
    // unread data resets it, and the reset could destroy the answer.
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(PLAIN_HTTP_DRAIN, drain).await;
}
