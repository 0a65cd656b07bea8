//! Leader forwarding: a follower sends client requests to the leader itself
//! and relays the answer, so clients may talk to any node. Every answer names
//! the leader in the `x-leasehold-leader` (id) and `x-leasehold-leader-addr`
//! headers.
//!
//! Relayed requests travel on one HTTP/2 connection per leader, opened as a
//! peer connection ([`crate::peer::relay`]): the leader serves it outside its
//! client connection budget, and a herd of waiting acquires relayed through a
//! follower is a herd of streams on that one connection, not a connection
//! each. (Under TLS without a CA file the nodes cannot verify each other's
//! certificates on the peer transport; then requests are relayed over
//! ordinary https requests, which count as client connections on the leader.)
//!
//! With auth on, the follower forwards the caller's own `authorization`
//! header, and the leader checks it again. The cluster secret is not used
//! for this: it would let a follower lend its own authority to any request
//! it let through, while the caller's token can open on the leader only what
//! it opens anywhere. (The cluster secret only opens the channel.)

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::limits::RequestSlot;
use super::{ApiError, MAX_BODY_BYTES};
use crate::node::Node;
use crate::peer::relay::{Relay, Relayed};
use crate::raft::{Member as RaftMember, NodeId};
use leasehold_proto::{ErrorCode, LEADER_ADDR_HEADER, LEADER_HEADER};

/// Marks a request a node forwarded, so it is never forwarded twice (two
/// nodes that each believe the other leads would otherwise bounce it).
const FORWARDED_HEADER: &str = "x-leasehold-forwarded-by";

/// How long a forwarded request may take: the longest queue wait plus the
/// leader's own quorum wait. A client that gives up sooner closes its
/// connection, which drops the forwarded request with it.
const FORWARD_TIMEOUT: std::time::Duration =
    std::time::Duration::from_millis(leasehold_core::Limits::DEFAULT.max_wait_ms + 15_000);

/// The forwarding middleware's state: the node, and its relay to the
/// leader (`None` when the peer transport cannot be verified: then
/// requests go over https).
pub struct Forwarding {
    node: Arc<Node>,
    relay: Option<Relay>,
}

impl Forwarding {
    pub fn new(node: Arc<Node>) -> Arc<Forwarding> {
        let relay = node.dialer().cloned().map(Relay::new);
        Arc::new(Forwarding { node, relay })
    }
}

/// Middleware: run the handler on the leader, forward elsewhere.
pub async fn to_leader(
    State(forwarding): State<Arc<Forwarding>>,
    slot: Option<Extension<RequestSlot>>,
    request: Request,
    next: Next,
) -> Response {
    let node = &forwarding.node;
    let Some((leader, member)) = node.leader() else {
        return ApiError::unavailable("no leader elected; retry").into_response();
    };
    let mut response = if leader == node.id() {
        next.run(request).await
    } else if request.headers().contains_key(FORWARDED_HEADER) {
        ApiError::unavailable("forwarded request reached a node that is not the leader; retry").into_response()
    } else {
        match forward(&forwarding, &member, request, slot.map(|Extension(s)| s)).await {
            Ok(r) => {
                node.metrics().forwarded("relayed");
                r
            }
            Err(e) => {
                node.metrics().forwarded(e.code.as_str());
                e.into_response()
            }
        }
    };
    name_leader(response.headers_mut(), leader, &member.addr);
    response
}

fn name_leader(headers: &mut HeaderMap, leader: NodeId, addr: &str) {
    headers.insert(LEADER_HEADER, HeaderValue::from(leader));
    if let Ok(v) = HeaderValue::from_str(addr) {
        headers.insert(LEADER_ADDR_HEADER, v);
    }
}

async fn forward(
    forwarding: &Forwarding,
    leader: &RaftMember,
    request: Request,
    slot: Option<RequestSlot>,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::new(ErrorCode::BodyTooLarge, "request body too large"))?;
    // The whole request is here; from now on the leader bounds it (and
    // counts it in flight), this node only waits for the answer.
    if let Some(slot) = slot {
        slot.park(FORWARD_TIMEOUT)?;
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = forwarding.node.url_of(&leader.addr, path);
    let mut outbound =
        hyper::Request::builder().method(parts.method).uri(&url).header(FORWARDED_HEADER, forwarding.node.id());
    for name in [axum::http::header::CONTENT_TYPE, axum::http::header::AUTHORIZATION] {
        if let Some(value) = parts.headers.get(&name) {
            outbound = outbound.header(name, value);
        }
    }
    let outbound = outbound.body(Body::from(body)).map_err(|e| ApiError::bad_request(format!("cannot relay: {e}")))?;
    let relayed = async {
        match &forwarding.relay {
            Some(relay) => {
                relay.send(leader.peer_dial_addr(), outbound).await.map_err(|e| ApiError::unavailable(e.to_string()))
            }
            None => relay_over_https(&forwarding.node, outbound).await,
        }
    };
    let (status, headers, bytes) = tokio::time::timeout(FORWARD_TIMEOUT, relayed)
        .await
        .map_err(|_| ApiError::unavailable("leader did not answer in time"))??;
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    for name in [axum::http::header::CONTENT_TYPE, axum::http::header::RETRY_AFTER] {
        if let Some(v) = headers.get(&name) {
            response.headers_mut().insert(name, v.clone());
        }
    }
    Ok(response)
}

/// Relays `request` as an ordinary https request (see the module comment).
async fn relay_over_https(node: &Node, request: hyper::Request<Body>) -> Result<Relayed, ApiError> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(ApiError::internal)?;
    let reply = node
        .http()
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .timeout(FORWARD_TIMEOUT)
        .body(body)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("leader unreachable: {e}")))?;
    let status = reply.status();
    let headers = reply.headers().clone();
    let bytes = reply.bytes().await.map_err(|e| ApiError::unavailable(format!("leader reply lost: {e}")))?;
    Ok((status, headers, bytes))
}
