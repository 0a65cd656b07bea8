//! The client's HTTP: each node's pool of HTTP/1.1 connections for quick
//! requests, and one HTTP/2 connection per node for requests that wait in
//! a queue (many waits share it).
//!
//! HTTP/2 (hyper, h2c with prior knowledge or `h2` by ALPN) carries the
//! waits: a herd of waiters in one process then costs the node one
//! connection, not one each.
//!
//! # Layout
//!
//! - this file — `Http`: each node's connections, and the one a request
//!   goes on; [`JsonClient`].
//! - `endpoint.rs` — [`Endpoint`] and [`target`]: where a request goes.
//! - `h1.rs` — HTTP/1.1, spoken directly: each node's pool of connections.
//! - `reply.rs` — [`Reply`] and [`SendError`]: what a request comes back with.
//! - `tls.rs` — rustls: connectors, the TCP or TLS stream, PEM certificates.

mod endpoint;
mod h1;
mod reply;
mod tls;

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::CertificateDer;

use self::tls::{Stream, Tls};

pub use endpoint::{target, Endpoint};
pub use reply::{Reply, SendError};
pub(crate) use tls::parse_pem;

/// HTTP/2 pings (every 30 s, as a herd of thousands must not cost the node
/// thousands of pings a second) find a connection whose node vanished while
/// every request on it waits; a waiting request's own timeout bounds it anyway.
const HTTP2_KEEPALIVE: Duration = Duration::from_secs(30);
/// Connections to a list of nodes: what a [`Client`](crate::Client) sends on.
pub(crate) struct Http {
    nodes: Vec<Node>,
    tls: Option<Tls>,
    /// `authorization: Bearer …` line, with its line end, when a token is set.
    authorization: Option<String>,
}

/// One node's connections.
struct Node {
    endpoint: Endpoint,
    http1: h1::Pool,
    /// The HTTP/2 connection for waits, once opened.
    multiplexed: tokio::sync::Mutex<Option<http2::SendRequest<Full<Bytes>>>>,
}

impl Http {
    /// `ca`: the certificates https nodes must chain to, else the web roots.
    pub(crate) fn new(endpoints: Vec<Endpoint>, ca: Option<&[CertificateDer<'static>]>, token: Option<&str>) -> Http {
        let tls = endpoints.iter().any(|e| e.https).then(|| Tls::new(ca));
        let nodes = endpoints
            .into_iter()
            .map(|endpoint| Node { endpoint, http1: h1::Pool::default(), multiplexed: tokio::sync::Mutex::default() })
            .collect();
        Http { nodes, tls, authorization: token.map(|t| format!("authorization: Bearer {t}\r\n")) }
    }

    pub(crate) fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.nodes.iter().map(|n| &n.endpoint)
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn endpoint(&self, node: usize) -> &Endpoint {
        &self.nodes[node].endpoint
    }

    /// `method target` with `body` (JSON) to node `node` over HTTP/1.1.
    pub(crate) async fn send(
        &self,
        node: usize,
        method: &Method,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<Reply, SendError> {
        let node = &self.nodes[node];
        let tls = self.tls.as_ref().map(|t| &t.http1);
        node.http1.send(&node.endpoint, tls, self.authorization.as_deref(), method, target, body).await
    }

    /// `method target` with `body` (JSON) to node `node` over its HTTP/2
    /// connection, opened if there is none.
    pub(crate) async fn send_multiplexed(
        &self,
        node: usize,
        method: &Method,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<Reply, SendError> {
        let node = &self.nodes[node];
        let mut sender = self.multiplexed(node).await?;
        let uri = format!("{}{}", node.endpoint, target);
        let mut request = http::Request::builder().method(method.clone()).uri(uri);
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(line) = &self.authorization {
            let value = line.trim_start_matches("authorization: ").trim_end();
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let body = Full::new(body.map(Bytes::copy_from_slice).unwrap_or_default());
        let request = request.body(body).map_err(|e| SendError::Broken(e.to_string()))?;
        sender.ready().await.map_err(|e| SendError::Broken(e.to_string()))?;
        let answer = sender.send_request(request).await.map_err(|e| SendError::Broken(e.to_string()))?;
        let (parts, body) = answer.into_parts();
        let headers = parts.headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()));
        let mut reply = Reply::with_headers(parts.status.as_u16(), headers);
        reply.body = body.collect().await.map_err(|e| SendError::Broken(e.to_string()))?.to_bytes();
        Ok(reply)
    }

    /// The node's HTTP/2 connection: the open one, or a new one.
    async fn multiplexed(&self, node: &Node) -> Result<http2::SendRequest<Full<Bytes>>, SendError> {
        let mut slot = node.multiplexed.lock().await;
        if let Some(sender) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(sender.clone());
        }
        let stream = Stream::open(&node.endpoint, self.tls.as_ref().map(|t| &t.http2)).await?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(HTTP2_KEEPALIVE)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::Broken(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP/2 connection ended");
            }
        });
        *slot = Some(sender.clone());
        Ok(sender)
    }

    /// Whether a quick request to node `node` should go over HTTP/2: after a
    /// long wait its HTTP/1.1 connections have idled out, while the HTTP/2
    /// connection that carried the wait has just answered. A release in a
    /// hand-over's critical path then pays no new connection.
    pub(crate) fn prefers_multiplexed(&self, node: usize) -> bool {
        let node = &self.nodes[node];
        let idle_http1 = node.http1.has_fresh();
        let open_http2 = node.multiplexed.try_lock().is_ok_and(|s| s.as_ref().is_some_and(|s| !s.is_closed()));
        open_http2 && !idle_http1
    }
}

/// Plain HTTP/1.1 connections to one JSON-over-HTTP server, pooled: for
/// the benchmark's etcd adapter, which must talk to etcd's gateway as
/// leanly as the leasehold client talks to leasehold.
pub struct JsonClient {
    http: Http,
}

impl JsonClient {
    /// A client of `endpoint` (`host:port` or `http://host:port`); `None` when it is neither.
    pub fn new(endpoint: &str) -> Option<JsonClient> {
        let endpoint = Endpoint::parse(endpoint, false).filter(|e| !e.https)?;
        Some(JsonClient { http: Http::new(vec![endpoint], None, None) })
    }

    /// `POST target` with a JSON `body`.
    pub async fn post(&self, target: &str, body: &[u8]) -> Result<Reply, SendError> {
        self.http.send(0, &Method::POST, target, Some(body)).await
    }
}
