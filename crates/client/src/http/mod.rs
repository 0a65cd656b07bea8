//! The client's HTTP: each node's pool of HTTP/1.1 connections for quick
//! requests, and one HTTP/2 connection per node for requests that wait in
//! a queue (many waits share it).
//!
//! # Layout
//!
//! - this file — `Http`: each node's connections, and the one a request
//!   goes on; [`JsonClient`].
//! - `endpoint.rs` — [`Endpoint`] and [`target`]: where a request goes.
//! - `h1.rs` — HTTP/1.1, spoken directly: each node's pool of connections.
//! - `h2.rs` — HTTP/2 through hyper: each node's one connection for waits.
//! - `reply.rs` — [`Reply`] and [`SendError`]: what a request comes back with.
//! - `tls.rs` — rustls: connectors, the TCP or TLS stream, PEM certificates.

mod endpoint;
mod h1;
mod h2;
mod reply;
mod tls;

use http::Method;
use rustls::pki_types::CertificateDer;

use self::tls::Tls;

pub use endpoint::{target, Endpoint};
pub(crate) use h1::StreamedBody;
pub use reply::{Reply, SendError};
pub(crate) use tls::{certified_key, parse_pem};

/// The longest answer body read for an API call; a longer one is refused
/// ([`SendError::TooLarge`]) before it is read. The longest legitimate
/// answers are lists (at most 1000 locks or sessions of a few hundred bytes
/// each) and a lock with its queue (about 100 bytes a waiter), so this
/// leaves room for a queue of some 600 000 waiters, more than a 3-node
/// cluster's default waiting budgets admit (4 × 65 024 a node at most).
pub const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Connections to a list of nodes: what a [`Client`](crate::Client) sends on.
pub(crate) struct Http {
    nodes: Vec<NodeConnections>,
    tls: Option<Tls>,
    /// `authorization: Bearer …` line, with its line end, when a token is set.
    authorization: Option<String>,
}

/// One node's connections.
struct NodeConnections {
    endpoint: Endpoint,
    http1: h1::Pool,
    http2: h2::Multiplexed,
}

impl Http {
    /// `ca`: the certificates https nodes must chain to, else the web roots.
    pub(crate) fn new(
        endpoints: Vec<Endpoint>,
        ca: Option<&[CertificateDer<'static>]>,
        identity: Option<&crate::Identity>,
        token: Option<&str>,
    ) -> Http {
        let tls = endpoints.iter().any(|e| e.https).then(|| Tls::new(ca, identity));
        let nodes = endpoints
            .into_iter()
            .map(|endpoint| NodeConnections { endpoint, http1: h1::Pool::default(), http2: h2::Multiplexed::default() })
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

    /// `method target` with `body` (JSON) to node `node` over HTTP/1.1; an
    /// answer body longer than `limit` bytes is refused.
    pub(crate) async fn send(
        &self,
        node: usize,
        method: &Method,
        target: &str,
        body: Option<&[u8]>,
        limit: u64,
    ) -> Result<Reply, SendError> {
        let node = &self.nodes[node];
        let tls = self.tls.as_ref().map(|t| &t.http1);
        let request = h1::Request { authorization: self.authorization.as_deref(), method, target, body, limit };
        node.http1.send(&node.endpoint, tls, &request).await
    }

    /// `method target` with `body` (JSON) to node `node` over its HTTP/2
    /// connection, opened if there is none; an answer body longer than
    /// [`MAX_ANSWER_BYTES`] is refused.
    pub(crate) async fn send_multiplexed(
        &self,
        node: usize,
        method: &Method,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<Reply, SendError> {
        let node = &self.nodes[node];
        let tls = self.tls.as_ref().map(|t| &t.http2);
        node.http2.send(&node.endpoint, tls, self.authorization.as_deref(), method, target, body).await
    }

    /// `GET target` to node `node` on a connection of its own, an event
    /// stream: a 200 answer comes back with its body still to read.
    pub(crate) async fn open_stream(
        &self,
        node: usize,
        target: &str,
    ) -> Result<(Reply, Option<StreamedBody>), SendError> {
        let node = &self.nodes[node];
        let tls = self.tls.as_ref().map(|t| &t.http1);
        let request = h1::Request {
            authorization: self.authorization.as_deref(),
            method: &Method::GET,
            target,
            body: None,
            limit: MAX_ANSWER_BYTES,
        };
        h1::open_stream(&node.endpoint, tls, &request).await
    }

    /// Whether a quick request to node `node` should go over HTTP/2: after a
    /// long wait its HTTP/1.1 connections have idled out, while the HTTP/2
    /// connection that carried the wait has just answered. A release in a
    /// hand-over's critical path then pays no new connection.
    pub(crate) fn prefers_multiplexed(&self, node: usize) -> bool {
        let node = &self.nodes[node];
        let idle_http1 = node.http1.has_fresh();
        let open_http2 = node.http2.is_open();
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
        Some(JsonClient { http: Http::new(vec![endpoint], None, None, None) })
    }

    /// `POST target` with a JSON `body`; an answer body longer than
    /// [`MAX_ANSWER_BYTES`] is refused.
    pub async fn post(&self, target: &str, body: &[u8]) -> Result<Reply, SendError> {
        self.http.send(0, &Method::POST, target, Some(body), MAX_ANSWER_BYTES).await
    }
}
