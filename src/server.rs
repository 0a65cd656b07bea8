//! The listener: accepts TCP connections (TLS only, when configured),
//! bounds how many are open at once — in total and per client address
//! ([`crate::admission`]) — and how long a client may take to send a
//! request head, and serves each connection with hyper (HTTP/1.1, and
//! HTTP/2: h2c with prior knowledge, `h2` by ALPN under TLS) and the axum
//! router. A connection that opens with the peer transport's preface (or
//! asks for its ALPN protocol under TLS) belongs to another member
//! ([`crate::peer`]): Raft RPC, or the HTTP/2 channel on which a
//! follower relays client requests to the leader. Members' connections have
//! their own budget, so client load cannot crowd Raft out and depose the
//! leader.
//!
//! With a peer listener of its own (`serve --peer-addr`), members connect
//! only there and the client listener takes no peer connection: the peer
//! preface is then bytes like any other that are not HTTP. The peer
//! listener takes nothing but peer connections; until its hello, each holds
//! one of [`MAX_UNPROVEN`] places ([`MAX_UNPROVEN_PER_ADDRESS`] per
//! address) for at most [`PEER_HELLO_TIMEOUT`] to show the preface and as
//! long again for the hello. So nothing a client does on the client port
//! touches Raft, and a firewall that opens the peer port to the members
//! only keeps everyone else from even that.
//!
//! Over a budget, a connection is answered `503 overloaded` with
//! `Retry-After` and the JSON error body (written without routing), then
//! closed — never a bare close, which clients would answer by reconnecting
//! at once. Only while [`MAX_REFUSING`] refusals are already being written
//! is a connection closed unanswered.
//!
//! `axum::serve` exposes neither a header-read timeout nor a connection
//! limit, hence this loop. The header-read timeout also closes a kept-alive
//! HTTP/1.1 connection that sends nothing more: hyper starts it whenever it
//! waits for a request head. So a client that opens connections and sends
//! half a header (slowloris) holds each for at most that long, and never
//! more than its share of the connections at once.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use crate::admission::{Budget, Caller, Permit, Refusal};
use crate::api::{ApiConfig, ApiError};
use crate::node::{Node, NodeConfig, NodeError};
use crate::peer::{self, Channel, Gate};
use crate::raft::Inbound;
use crate::security::{ClientCertificate, CLIENT_ALPN};
use crate::store::StateStore;
use leasehold_proto::ErrorCode;

/// Default time a client has to send a whole request head.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections may finish their requests after shutdown begins
/// (an events stream never finishes on its own).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. out of file descriptors), so the loop
/// does not spin while the condition lasts.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// How long a refused client may take to send its request and read the
/// answer (also bounds a refused plain-HTTP client on a TLS listener).
const REFUSAL_TIME: Duration = Duration::from_secs(1);
/// Refusals being written at once; beyond, connections close unanswered.
pub const MAX_REFUSING: usize = 256;
/// First byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;
/// Peer connections open at once: a few per member (replication, votes,
/// the forwarding channel), for clusters of up to 7 nodes, with room for
/// reconnects.
const MAX_PEER_CONNECTIONS: usize = 64;
/// How long a connection that opened with the peer preface (or ALPN) has
/// to send its hello. Members send it in the same write as the preface;
/// anyone slower is not a member, and must not hold a place for long.
const PEER_HELLO_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections on a peer listener of its own that have not said hello yet,
/// in total and from one address. A member's connection leaves these
/// places within a round trip (it sends the preface and its hello at once);
/// the bound keeps strangers that reach the port from holding many sockets.
pub const MAX_UNPROVEN: usize = 256;
pub const MAX_UNPROVEN_PER_ADDRESS: usize = 16;
/// Accept queue asked for; Linux caps it at `net.core.somaxconn` (4 096 by
/// default since 5.4), which the operator may raise.
const LISTEN_BACKLOG: u32 = 65_535;
/// Requests at once on one client HTTP/2 connection (waits, event streams).
const MAX_STREAMS_PER_CONNECTION: u32 = 1024;
/// Requests at once on one member's forwarding channel: every waiting
/// request a follower relays is one stream.
const MAX_FORWARDED_STREAMS: u32 = 1 << 20;
/// HTTP/2 pings, so a connection whose client vanished is noticed.
const HTTP2_KEEPALIVE: Duration = Duration::from_secs(20);

/// Connection-level limits of the listener.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// Connections one client address may hold at once.
    pub max_connections_per_client: usize,
}

/// Where and how a node serves: the listener's address, TLS and limits, and
/// what the API checks on each request. (What the node is, its Raft and
/// storage settings, is [`NodeConfig`].)
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind the listener to.
    pub listen: SocketAddr,
    /// Address to bind the members' own listener to (`--peer-addr`); without
    /// it, members connect to `listen` as clients do.
    pub peer_listen: Option<SocketAddr>,
    /// Serve https only, with this configuration.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The peer listener's own TLS: mutual TLS between members
    /// (`--peer-cert`), which asks every connection for a member's
    /// certificate. Without it the peer listener serves `tls`, if any.
    pub peer_tls: Option<Arc<rustls::ServerConfig>>,
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
    let bind = |addr: SocketAddr| bind(addr).map_err(|e| NodeError::Internal(format!("bind {addr}: {e}")));
    let listener = bind(serve_config.listen)?;
    let peer_listener = serve_config.peer_listen.map(bind).transpose()?;
    let started = Node::start(&node).await?;
    let limits = &serve_config.connection_limits;
    tracing::info!(
        id = node.id,
        addr = %serve_config.listen,
        peer_addr = ?serve_config.peer_listen,
        tls = serve_config.tls.is_some(),
        max_connections = limits.max_connections,
        max_connections_per_client = limits.max_connections_per_client,
        max_subscribers = serve_config.api.request_limits.max_subscribers,
        max_leases = node.quotas.max_leases,
        max_waiters = node.quotas.max_waiters,
        "serving"
    );
    let router = crate::api::router(started.clone(), &serve_config.api);
    let peers = Peers {
        gate: Gate::new(serve_config.api.secrets.cluster_secret.clone(), PEER_HELLO_TIMEOUT),
        raft: started.raft().inbound(),
        snapshots: started.state_store().clone(),
        node: started.clone(),
    };
    let limits = serve_config.connection_limits;
    match peer_listener {
        None => serve(listener, router, Accepts::Both(peers), serve_config.tls, limits, shutdown).await,
        Some(peer_listener) => {
            let client_tls = serve_config.tls.as_ref().map(|tls| offering(tls, CLIENT_ALPN));
            let peer_tls =
                serve_config.peer_tls.or_else(|| serve_config.tls.as_ref().map(|tls| offering(tls, &[peer::ALPN])));
            // Both listeners stop when `shutdown` resolves: when `stop` is
            // dropped, every receiver's `changed` ends.
            let (stop, stopped) = tokio::sync::watch::channel(());
            let stopping = |mut stopped: tokio::sync::watch::Receiver<()>| async move {
                let _ = stopped.changed().await;
            };
            let unproven = ConnectionLimits {
                header_read_timeout: PEER_HELLO_TIMEOUT,
                max_connections: MAX_UNPROVEN,
                max_connections_per_client: MAX_UNPROVEN_PER_ADDRESS,
            };
            tokio::join!(
                serve(listener, router.clone(), Accepts::Clients, client_tls, limits, stopping(stopped.clone())),
                serve(peer_listener, router, Accepts::Members(peers), peer_tls, unproven, stopping(stopped)),
                async move {
                    shutdown.await;
                    drop(stop);
                },
            );
        }
    }
    started.shutdown().await;
    Ok(())
}

/// What serves the members' peer connections: the gate that checks their
/// hello, and this node's Raft behind it.
#[derive(Clone)]
pub struct Peers {
    pub gate: Gate,
    pub raft: Inbound,
    /// Where a snapshot sent on the peer transport is received.
    pub snapshots: StateStore,
    /// Takes the commands followers hand over ([`peer::Channel::Propose`]).
    pub node: Arc<Node>,
}

/// `tls` offering only the ALPN protocols `alpn`: with a peer listener of
/// its own, the client listener does not offer the peer transport's, and
/// the peer listener offers nothing else (a handshake asking for another
/// fails).
fn offering(tls: &Arc<rustls::ServerConfig>, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::clone(tls);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Which connections a listener takes.
#[derive(Clone)]
pub enum Accepts {
    /// Clients' and members' (no peer listener of its own): members' are
    /// told apart by their preface, or ALPN protocol under TLS.
    Both(Peers),
    /// Clients' only: members have a listener of their own.
    Clients,
    /// Members' only: anything but a peer connection is closed unanswered.
    Members(Peers),
}

/// Binds the listener with the longest accept queue the kernel allows.
/// A flood's connections come back together (closed together by the
/// header-read timeout, or a fleet retrying at once): past a full queue the
/// kernel drops their handshakes, and every client whose connection is
/// dropped, a flooder or not, waits out SYN retransmits of 1, 3, 7, 15 s.
/// Tokio's `TcpListener::bind` asks for 1 024 places.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets open
/// connections finish for a few seconds. With `tls`, only TLS connections are
/// served; a plain HTTP request is answered 400 `tls_required` and closed.
/// `limits` bound the connections not yet known to be a member's.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    accepts: Accepts,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let tls = tls.map(TlsAcceptor::from);
    let open = Budget::new(limits.max_connections, limits.max_connections_per_client);
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let peer_slots = Arc::new(Semaphore::new(MAX_PEER_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    http.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .keep_alive_interval(HTTP2_KEEPALIVE);
    let mut forwarded = auto::Builder::new(TokioExecutor::new()).http2_only();
    forwarded
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_FORWARDED_STREAMS)
        .keep_alive_interval(HTTP2_KEEPALIVE);
    tokio::pin!(shutdown);
    loop {
        let (stream, from) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let client = from.ip().to_canonical();
        let tls = tls.clone();
        // Over the budget, the connection may still be a member's (which
        // the budget does not cover): it is looked at briefly, as one of the
        // refusals in progress, and refused only if it is a client's.
        let (place, first_bytes_within) = match open.try_take(client) {
            Ok(permit) => (Place::Client { _permit: permit }, limits.header_read_timeout),
            // A peer listener has no clients to answer.
            Err(_) if matches!(accepts, Accepts::Members(_)) => continue,
            Err(refusal) => match refusing.clone().try_acquire_owned() {
                Ok(refusing) => (Place::OverBudget { refusal, _refusing: refusing }, REFUSAL_TIME),
                Err(_) => {
                    tracing::debug!("refusals at their limit; closing a new connection unanswered");
                    continue;
                }
            },
        };
        let connection = Connection {
            http: http.clone(),
            forwarded: forwarded.clone(),
            router: router.clone(),
            accepts: accepts.clone(),
            peer_slots: peer_slots.clone(),
            client,
            place,
            watcher: graceful.watcher(),
            first_bytes_within,
        };
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
    http: auto::Builder<TokioExecutor>,
    /// For members' forwarding channels: HTTP/2 only, many streams.
    forwarded: auto::Builder<TokioExecutor>,
    router: Router,
    accepts: Accepts,
    peer_slots: Arc<Semaphore>,
    client: IpAddr,
    place: Place,
    watcher: hyper_util::server::graceful::Watcher,
    /// How long it may take to show what it is (preface, TLS handshake).
    first_bytes_within: Duration,
}

/// A connection's place before it is known whose it is.
enum Place {
    /// One of the client connections (held until the connection ends);
    /// given back if it is a member's.
    Client { _permit: Permit },
    /// None was free: served only if it is a member's, else refused for
    /// `refusal`, holding one of the refusals in progress meanwhile.
    OverBudget { refusal: Refusal, _refusing: tokio::sync::OwnedSemaphorePermit },
    /// A member's: counted among the peer connections instead.
    Peer,
}

impl Connection {
    /// A plain connection: the peer transport if it opens with its preface
    /// (consumed here) on a listener that takes members', else HTTP on one
    /// that takes clients'.
    async fn serve_plain(self, mut stream: TcpStream) {
        let (peers, clients_too) = match &self.accepts {
            Accepts::Clients => return self.serve_http(stream, None).await,
            Accepts::Both(peers) => (peers.clone(), true),
            Accepts::Members(peers) => (peers.clone(), false),
        };
        match tokio::time::timeout(self.first_bytes_within, opens_with_preface(&stream)).await {
            Ok(Ok(true)) => {
                let mut preface = [0u8; peer::PREFACE.len()];
                if stream.read_exact(&mut preface).await.is_ok() {
                    self.serve_peer(peers, stream).await;
                }
            }
            Ok(Ok(false)) if clients_too => self.serve_http(stream, None).await,
            // Silent for too long: a client's (members speak at once).
            Err(_) => {
                if let Place::OverBudget { refusal, .. } = self.place {
                    refuse(stream, refusal).await;
                }
            }
            Ok(_) => {}
        }
    }

    /// A peer connection: once its hello has proved the cluster secret, it
    /// leaves the client connection budget for the peers' own, so client
    /// load cannot crowd Raft out. Until then it is a client's connection
    /// (it keeps the place it was accepted with, in the client budget or
    /// among the refusals) with [`PEER_HELLO_TIMEOUT`] to say hello: bytes
    /// from someone without the secret never take a peer slot, and hold a
    /// client place for at most that long. After the hello it carries Raft
    /// RPC, or relayed client requests over HTTP/2.
    async fn serve_peer<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(mut self, peers: Peers, mut io: I) {
        let Some((channel, from)) = peers.gate.hello(&mut io).await else { return };
        let Ok(_slot) = self.peer_slots.clone().try_acquire_owned() else {
            tracing::warn!("peer connection limit reached; closing a member's new peer connection");
            return;
        };
        self.place = Place::Peer;
        match channel {
            Channel::Raft => peers.raft.serve_raft(io).await,
            Channel::RaftStream => peers.raft.serve_raft_stream(io).await,
            Channel::Snapshot => peers.raft.serve_snapshot(io, peers.snapshots.receiving_path()).await,
            Channel::Forward => {
                let caller = Caller { addr: self.client, via_member: true };
                let http = self.forwarded.clone();
                // The member's own connection has no client certificate: a
                // caller's certificate user travels in the relayed request.
                serve_with(&http, self.router, self.watcher, io, caller, None).await
            }
            Channel::Propose => peers.node.serve_hand_offs(from, io).await,
        }
    }

    /// A client's connection: served if it has a place, else refused.
    /// `certificate`: the client certificate its TLS handshake verified.
    async fn serve_http<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
        self,
        io: I,
        certificate: Option<ClientCertificate>,
    ) {
        match self.place {
            Place::Client { .. } => {
                let caller = Caller { addr: self.client, via_member: false };
                serve_with(&self.http, self.router, self.watcher, io, caller, certificate).await
            }
            Place::OverBudget { refusal, .. } => refuse(io, refusal).await,
            Place::Peer => {}
        }
    }

    /// The TLS handshake counts against the header-read timeout: a client
    /// that starts one and stalls is closed like a slow plain one. (Each
    /// listener's TLS settings offer only the ALPN protocols it serves.)
    async fn serve_tls(self, acceptor: TlsAcceptor, stream: TcpStream) {
        match tokio::time::timeout(self.first_bytes_within, tls_handshake(&acceptor, stream)).await {
            Ok(Some(tls)) => match (&self.accepts, tls.get_ref().1.alpn_protocol() == Some(peer::ALPN)) {
                (Accepts::Both(peers) | Accepts::Members(peers), true) => {
                    let peers = peers.clone();
                    self.serve_peer(peers, tls).await
                }
                (Accepts::Both(_) | Accepts::Clients, false) => {
                    let certificate = ClientCertificate::of(tls.get_ref().1);
                    self.serve_http(tls, certificate).await
                }
                _ => {}
            },
            Ok(None) => {}
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    }
}

/// Serves HTTP on `io` with `router`, every request marked with `caller`
/// and the connection's client `certificate`, if any (the guard reads it).
async fn serve_with<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    http: &auto::Builder<TokioExecutor>,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
    io: I,
    caller: Caller,
    certificate: Option<ClientCertificate>,
) {
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(caller);
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        let mut router = router.clone();
        router.call(request)
    });
    if let Err(e) = watcher.watch(http.serve_connection(TokioIo::new(io), service)).await {
        tracing::debug!(error = %e, "connection ended");
    }
}

/// The server side of a TLS handshake; a plain HTTP request is answered
/// 400 `tls_required` instead (`None`).
async fn tls_handshake(
    acceptor: &TlsAcceptor,
    mut stream: TcpStream,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1) if first[0] != TLS_HANDSHAKE => {
            refuse_plain_http(&mut stream).await;
            None
        }
        Ok(_) => match acceptor.accept(stream).await {
            Ok(tls) => Some(tls),
            Err(e) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
        },
        Err(_) => None,
    }
}

/// Answers every request on a client's connection over the budget with
/// `503 overloaded` and `Retry-After`, then closes it. The request body is
/// read first (up to the API's bound): closing a socket with unread data
/// resets it, and the reset could destroy the answer.
async fn refuse<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: I, refusal: Refusal) {
    let message = refusal.describe("connections");
    let answer = move |request: hyper::Request<Incoming>| {
        let message = message.clone();
        async move {
            let _ = axum::body::to_bytes(axum::body::Body::new(request.into_body()), crate::api::MAX_BODY_BYTES).await;
            let mut response = ApiError::new(ErrorCode::Overloaded, message).into_response();
            response.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
            Ok::<_, Infallible>(response)
        }
    };
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1().keep_alive(false).timer(TokioTimer::new()).header_read_timeout(REFUSAL_TIME);
    let served = http.serve_connection(TokioIo::new(io), hyper::service::service_fn(answer));
    if let Ok(Err(e)) = tokio::time::timeout(REFUSAL_TIME, served).await {
        tracing::debug!(error = %e, "refused connection ended");
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
    let _ = tokio::time::timeout(REFUSAL_TIME, drain).await;
}
