//! Leader forwarding: clients may talk to any node. On a follower the
//! client API's handlers run there ([`Forwarding::handing_off`]): the node
//! hands each command, and each linearizable read's request for a read
//! index, to the leader over the peer transport ([`crate::peer::handoff`],
//! `node/handoff.rs`), and answers with the leader's result (a read once
//! it has applied the leader's read index).
//! Other routes (the admin API), and every route when the leader is of an
//! earlier version that closes the hand-off channel unanswered, are
//! relayed whole: the follower sends the request to the leader and relays
//! the answer. Every answer names the leader in the `x-leasehold-leader`
//! (id) and `x-leasehold-leader-addr` headers. During an election, or when
//! the leader this node knows has died, a request is held for the next
//! leader (up to the election bound) instead of being refused: a failover
//! costs a client of a survivor the election, not the election plus its
//! back-off. A request that may have reached the dead leader is answered
//! `unavailable` (retried with its request id, which the state machine
//! de-duplicates). Each request forwarded either way is counted in
//! `leasehold_forwarded_requests_total` (`handed`, `relayed`, `held`, or
//! the error it was answered with).
//!
//! Relayed requests travel on one HTTP/2 connection per leader, opened as a
//! peer connection ([`crate::peer::relay`]): the leader serves it outside its
//! client connection budget, and a herd of waiting acquires relayed through a
//! follower is a herd of streams on that one connection, not a connection
//! each. (Under TLS without a CA file the nodes cannot verify each other's
//! certificates on the peer transport; then requests are relayed over
//! ordinary https requests, which count as client connections on the
//! leader, and none is handed off.)
//!
//! With auth on, the follower checks the caller's token itself. A relayed
//! request carries the caller's own `authorization` header, and the leader
//! checks it again. The cluster secret is not used for this: it would let a
//! follower lend its own authority to any request it let through, while the
//! caller's token can open on the leader only what it opens anywhere. A
//! hand-off carries no token: the member that sends it holds the cluster
//! secret, which already lets it write any Raft entry, and the leader
//! refuses on that channel the commands no client may send.
//!
//! A caller identified by a client certificate has no token to relay: the
//! relayed request names the user in [`CERTIFICATE_USER_HEADER`], which
//! the leader believes only on a member's peer connection (so relaying it
//! needs the peer transport: over the https fallback the leader refuses it).

use std::sync::Arc;

use tokio::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::{Credential, CERTIFICATE_USER_HEADER};
use super::limits::RequestSlot;
use super::{ApiError, MAX_BODY_BYTES};
use crate::node::Node;
use crate::peer::handoff::Ready;
use crate::peer::relay::{Relay, RelayError, Relayed};
use crate::raft::{Leadership, Member as RaftMember, NodeId, ELECTION_BOUND};
use leasehold_core::Principal;
use leasehold_proto::{ErrorCode, LEADER_ADDR_HEADER, LEADER_HEADER};

/// Marks a request a node forwarded, so it is never forwarded twice (two
/// nodes that each believe the other leads would otherwise bounce it).
const FORWARDED_HEADER: &str = "x-leasehold-forwarded-by";

/// How long a forwarded request may take: the longest queue wait plus the
/// leader's own quorum wait. A client that gives up sooner closes its
/// connection, which drops the forwarded request with it.
const FORWARD_TIMEOUT: std::time::Duration =
    std::time::Duration::from_millis(leasehold_core::Limits::DEFAULT.max_wait_ms + 15_000);

/// The forwarding middleware's state: the node, its relay to the leader
/// (`None` when the peer transport cannot be verified: then requests go
/// over https), and whether its routes run here with their commands
/// handed over instead of being relayed.
pub struct Forwarding {
    node: Arc<Node>,
    relay: Option<Relay>,
    hand_off: bool,
}

impl Forwarding {
    /// For routes relayed whole to the leader (the admin API's).
    pub fn relaying(node: Arc<Node>) -> Arc<Forwarding> {
        let relay = node.dialer().cloned().map(Relay::new);
        Arc::new(Forwarding { node, relay, hand_off: false })
    }

    /// For routes whose handlers may run on a follower: every proposal
    /// and linearizable read of theirs goes through the node, which hands
    /// it to the leader (the client API's).
    pub fn handing_off(node: Arc<Node>) -> Arc<Forwarding> {
        let relay = node.dialer().cloned().map(Relay::new);
        Arc::new(Forwarding { node, relay, hand_off: true })
    }
}

/// Middleware: run the handler on the leader; elsewhere, run it here with
/// its commands handed to the leader ([`Forwarding::handing_off`] routes,
/// when the leader takes hand-offs), or relay the request to the leader.
/// While there is no leader, or the one this node knows cannot be reached
/// (it died: its followers learn so only when they elect another), the
/// request is held for the next leader, up to [`ELECTION_BOUND`], rather
/// than answered `unavailable` at once: a client that asked a survivor is
/// then answered as soon as the cluster can write again, instead of after
/// its own back-off.
pub async fn to_leader(
    State(forwarding): State<Arc<Forwarding>>,
    slot: Option<Extension<RequestSlot>>,
    request: Request,
    next: Next,
) -> Response {
    let node = &forwarding.node;
    let slot = slot.map(|Extension(s)| s);
    let give_up = Instant::now() + ELECTION_BOUND;
    let mut seen = node.leadership();
    let (leader, member) = loop {
        if seen.leader.is_none() {
            seen = match wait_for_leader(node, slot.as_ref(), &seen, give_up).await {
                Ok(next) => next,
                Err(e) => return e.into_response(),
            };
        }
        let Some((leader, member)) = seen.leader.clone() else {
            return ApiError::unavailable("no leader elected; retry").into_response();
        };
        if leader == node.id() {
            return run_here(next, request, leader, &member.addr).await;
        }
        if !forwarding.hand_off || request.headers().contains_key(FORWARDED_HEADER) {
            break (leader, member);
        }
        match node.hand_off_ready(&member).await {
            Ok(Ready::HandOff) => {
                node.metrics().forwarded("handed");
                return run_handing_off(node, next, request, leader, &member.addr).await;
            }
            Ok(Ready::Relay) => break (leader, member),
            // Cannot reach it: hold the request for the next leader.
            Err(e) => {
                node.metrics().forwarded("held");
                tracing::debug!(error = %e, leader, "leader unreachable; holding the request for the next leader");
                seen = match wait_for_leader(node, slot.as_ref(), &seen, give_up).await {
                    Ok(next) => next,
                    Err(_) => return refused(node, ApiError::unavailable(e.to_string())),
                };
            }
        }
    };
    if request.headers().contains_key(FORWARDED_HEADER) {
        return ApiError::unavailable("forwarded request reached a node that is not the leader; retry").into_response();
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => return refused(node, ApiError::new(ErrorCode::BodyTooLarge, "request body too large")),
    };
    // The whole request is here; from now on the leader bounds it (and
    // counts it in flight), this node only waits for the answer.
    if let Some(slot) = &slot {
        if let Err(e) = slot.park(FORWARD_TIMEOUT) {
            return refused(node, e);
        }
    }
    let (mut leader, mut member) = (leader, member);
    loop {
        match forward(&forwarding, &member, &parts, body.clone()).await {
            Ok(mut response) => {
                node.metrics().forwarded("relayed");
                name_leader(response.headers_mut(), leader, &member.addr);
                return response;
            }
            // Never sent: the leader is gone. Safe to send again, to the next one.
            Err(Forwarded::NotSent(e)) if Instant::now() < give_up => {
                node.metrics().forwarded("held");
                tracing::debug!(error = %e, leader, "leader unreachable; holding the request for the next leader");
                seen = match wait_for_leader(node, None, &seen, give_up).await {
                    Ok(next) => next,
                    Err(_) => return refused(node, ApiError::unavailable(e.to_string())),
                };
                let Some((next_leader, next_member)) = seen.leader.clone() else {
                    return refused(node, ApiError::unavailable(e.to_string()));
                };
                if next_leader == node.id() {
                    let request = Request::from_parts(parts, Body::from(body));
                    return run_here(next, request, next_leader, &next_member.addr).await;
                }
                (leader, member) = (next_leader, next_member);
            }
            // Named no leader: the one this node knows is gone or not answering.
            Err(Forwarded::NotSent(e)) => return refused(node, ApiError::unavailable(e.to_string())),
            Err(Forwarded::Failed(e)) => return refused(node, e),
        }
    }
}

/// The handler, on this follower: its proposals and reads go to the
/// leader through the node. The answer names the leader known once the
/// handler is done (a proposal held through an election went to the next).
async fn run_handing_off(node: &Node, next: Next, request: Request, leader: NodeId, addr: &str) -> Response {
    let mut response = next.run(request).await;
    match node.leadership().leader {
        Some((now, member)) => name_leader(response.headers_mut(), now, &member.addr),
        None => name_leader(response.headers_mut(), leader, addr),
    }
    response
}

/// The handler, on this node, the leader.
async fn run_here(next: Next, request: Request, leader: NodeId, addr: &str) -> Response {
    let mut response = next.run(request).await;
    name_leader(response.headers_mut(), leader, addr);
    response
}

/// Holds a request (parked, if it counts in flight) until this node knows a
/// leader other than the one `seen` named, or `unavailable` at `give_up`.
async fn wait_for_leader(
    node: &Node,
    slot: Option<&RequestSlot>,
    seen: &Leadership,
    give_up: Instant,
) -> Result<Leadership, ApiError> {
    if let Some(slot) = slot {
        slot.park(ELECTION_BOUND)?;
    }
    node.next_leadership(seen, give_up).await.ok_or_else(|| {
        ApiError::unavailable(format!("no leader elected within {} ms; retry", ELECTION_BOUND.as_millis()))
    })
}

/// A request this follower could not relay, counted by its error code.
fn refused(node: &Node, e: ApiError) -> Response {
    node.metrics().forwarded(e.code.as_str());
    e.into_response()
}

fn name_leader(headers: &mut HeaderMap, leader: NodeId, addr: &str) {
    headers.insert(LEADER_HEADER, HeaderValue::from(leader));
    if let Ok(v) = HeaderValue::from_str(addr) {
        headers.insert(LEADER_ADDR_HEADER, v);
    }
}

/// Why a request was not relayed.
enum Forwarded {
    /// It never left this node: it may be sent again.
    NotSent(RelayError),
    /// It may have reached the leader, or cannot be relayed at all.
    Failed(ApiError),
}

async fn forward(
    forwarding: &Forwarding,
    leader: &RaftMember,
    parts: &axum::http::request::Parts,
    body: Bytes,
) -> Result<Response, Forwarded> {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = forwarding.node.url_of(&leader.addr, path);
    let mut outbound =
        hyper::Request::builder().method(parts.method.clone()).uri(&url).header(FORWARDED_HEADER, forwarding.node.id());
    for name in [axum::http::header::CONTENT_TYPE, axum::http::header::AUTHORIZATION] {
        if let Some(value) = parts.headers.get(&name) {
            outbound = outbound.header(name, value);
        }
    }
    if let (Some(Credential::Certificate), Some(Principal::User(user))) =
        (parts.extensions.get::<Credential>(), parts.extensions.get::<Principal>())
    {
        outbound = outbound.header(CERTIFICATE_USER_HEADER, user.as_str());
    }
    let outbound = outbound
        .body(Body::from(body))
        .map_err(|e| Forwarded::Failed(ApiError::bad_request(format!("cannot relay: {e}"))))?;
    let relayed = async {
        match &forwarding.relay {
            Some(relay) => relay.send(leader.peer_dial_addr(), outbound).await.map_err(|e| match e {
                RelayError::NotSent(_) => Forwarded::NotSent(e),
                RelayError::Lost(_) => Forwarded::Failed(ApiError::unavailable(e.to_string())),
            }),
            None => relay_over_https(&forwarding.node, outbound).await,
        }
    };
    let (status, headers, bytes) = tokio::time::timeout(FORWARD_TIMEOUT, relayed)
        .await
        .map_err(|_| Forwarded::Failed(ApiError::unavailable("leader did not answer in time")))??;
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
async fn relay_over_https(node: &Node, request: hyper::Request<Body>) -> Result<Relayed, Forwarded> {
    let (parts, body) = request.into_parts();
    let body =
        axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| Forwarded::Failed(ApiError::internal(e)))?;
    let reply = node
        .http()
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .timeout(FORWARD_TIMEOUT)
        .body(body)
        .send()
        .await
        .map_err(|e| {
            if e.is_connect() {
                Forwarded::NotSent(RelayError::NotSent(e.to_string()))
            } else {
                Forwarded::Failed(ApiError::unavailable(format!("leader unreachable: {e}")))
            }
        })?;
    let status = reply.status();
    let headers = reply.headers().clone();
    let bytes =
        reply.bytes().await.map_err(|e| Forwarded::Failed(ApiError::unavailable(format!("leader reply lost: {e}"))))?;
    Ok((status, headers, bytes))
}
