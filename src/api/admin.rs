//! The admin API: cluster status, initialization and membership, snapshots
//! and backups, health and readiness.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};

use super::auth::Guard;
use super::events::Subscribers;
use super::limits::RequestSlot;
use super::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::node::{Node, NotReady};
use crate::raft::Member as RaftMember;
use leasehold_proto::cluster::{
    ClusterStatus, Health, InitRequest, InitResponse, Member, MembershipRequest, MembershipResponse, NewMember,
    Readiness, SnapshotTaken, StatusQuery,
};
use leasehold_proto::ErrorCode;
use leasehold_proto::NodeId;

/// How long adding a learner may wait for it to catch up (a client that
/// gives up sooner closes the connection, which ends the wait).
const CATCH_UP_WAIT: Duration = Duration::from_secs(600);
/// Time to answer after the node's own snapshot wait ran out.
const SNAPSHOT_ANSWER_SLACK: Duration = Duration::from_secs(5);

/// Membership changes: served by the leader.
pub fn leader_routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/cluster/learners", post(add_learner))
        .route("/v1/cluster/membership", post(change_membership))
        .route("/v1/cluster/members/{id}/promote", post(promote))
        .route("/v1/cluster/members/{id}", delete(remove_member))
}

/// Admin calls answered by the node asked: initialization (there is no
/// leader yet) and this node's snapshot (a backup holds every lock and
/// record, so it needs the admin token).
pub fn local_admin_routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/cluster/init", post(init))
        .route("/v1/cluster/snapshot", post(take_snapshot).get(download_snapshot))
}

/// `/v1/cluster/status`, answered by the node asked. With `?digest=true` it
/// reads the whole table, which only `digests` (the admin API's guard)
/// lets through.
pub fn status_routes(digests: Guard) -> Router<Arc<Node>> {
    Router::new().route("/v1/cluster/status", get(status)).layer(Extension(digests))
}

/// Liveness and readiness, answered by the node asked, open to all: load
/// balancers and supervisors have no token.
pub fn health_routes() -> Router<Arc<Node>> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

/// `GET /v1/cluster/status`: this node's view (role, leader, term, indexes,
/// tick, members); with `?digest=true` (admin token) also its table's digest.
async fn status(
    State(node): State<Arc<Node>>,
    Extension(subscribers): Extension<Subscribers>,
    Extension(digests): Extension<Guard>,
    headers: HeaderMap,
    slot: Option<Extension<RequestSlot>>,
    ApiQuery(query): ApiQuery<StatusQuery>,
) -> Result<Json<ClusterStatus>, ApiError> {
    let mut status = subscribers.status_of(&node);
    if query.digest {
        digests.check(&headers)?;
        park_for_whole_table(slot)?;
        status.state_digest = node.state_digest().await?;
    }
    Ok(Json(status))
}

/// Lets a request that checkpoints the table (digest, snapshot) run past
/// the request deadline: waiting its turn, then serializing a large table,
/// may take longer than a request may.
fn park_for_whole_table(slot: Option<Extension<RequestSlot>>) -> Result<(), ApiError> {
    match slot {
        Some(Extension(slot)) => {
            slot.park(crate::node::WHOLE_TABLE_TURN_WAIT + crate::node::SNAPSHOT_WAIT + SNAPSHOT_ANSWER_SLACK)
        }
        None => Ok(()),
    }
}

/// `GET /healthz`: 200 while the process serves and its Raft runs; says
/// whether a leader is known. 503 `unavailable` (`reason: stopped`) once
/// Raft has stopped (a storage error, or shutdown): the process still
/// serves HTTP, but the node will never take part in the cluster again
/// until it is restarted, which is what orchestrators use this for.
async fn healthz(State(node): State<Arc<Node>>) -> Result<Json<Health>, ApiError> {
    if let Some(why) = node.raft().stopped() {
        return Err(ApiError::unavailable(format!("raft stopped: {why}")).with("reason", "stopped"));
    }
    Ok(Json(Health { status: "ok".into(), id: node.id(), leader: node.leader().map(|(id, _)| id) }))
}

/// `GET /readyz`: 200 when this node can serve now (see
/// [`Node::readiness`]); 503 `unavailable` with the `reason` otherwise. Load
/// balancers send traffic only to ready nodes; `/healthz` says whether to
/// restart the process.
async fn readyz(State(node): State<Arc<Node>>) -> Result<Json<Readiness>, ApiError> {
    node.readiness()
        .await
        .map(Json)
        .map_err(|e: NotReady| ApiError::unavailable(format!("not ready: {e}")).with("reason", e.reason()))
}

/// `POST /v1/cluster/snapshot`: this node builds a snapshot of everything it
/// has applied and answers once it is stored.
async fn take_snapshot(
    State(node): State<Arc<Node>>,
    slot: Option<Extension<RequestSlot>>,
) -> Result<Json<SnapshotTaken>, ApiError> {
    park_for_whole_table(slot)?;
    Ok(Json(node.snapshot_now().await?))
}

/// `GET /v1/cluster/snapshot`: this node's stored snapshot as a backup file
/// (`leasehold restore` seeds a new cluster from it); 404 `no_snapshot`
/// before its first one. Writing the file waits its turn among the whole-table
/// work; streaming it out does not hold the turn.
async fn download_snapshot(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let Some((path, bytes)) = node.backup().await? else {
        return Err(ApiError::new(ErrorCode::NoSnapshot, "this node has no snapshot yet"));
    };
    // Streamed from the file: a million leases make about 100 MB. A newer
    // checkpoint may delete the file, but not while it is open.
    let file =
        tokio::fs::File::open(&path).await.map_err(|e| ApiError::internal(format!("opening the snapshot: {e}")))?;
    let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(file));
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream".to_owned()), (header::CONTENT_LENGTH, bytes.to_string())],
        body,
    )
        .into_response())
}

/// `POST /v1/cluster/init`: 200; 409 `already_initialized`; 400 when this
/// node is not among the members.
async fn init(
    State(node): State<Arc<Node>>,
    ApiJson(req): ApiJson<InitRequest>,
) -> Result<Json<InitResponse>, ApiError> {
    let mut members = BTreeMap::new();
    for m in req.members {
        let id = m.id;
        if members.insert(id, raft_member(m)?).is_some() {
            return Err(ApiError::bad_request(format!("member {id} listed twice")).with("field", "members"));
        }
    }
    node.init(members).await?;
    Ok(Json(InitResponse { initialized: true }))
}

/// `POST /v1/cluster/learners` `{"id","addr","peer_addr"?}`: adds a non-voting member and
/// waits until it has caught up.
async fn add_learner(
    State(node): State<Arc<Node>>,
    slot: Option<Extension<RequestSlot>>,
    ApiJson(req): ApiJson<NewMember>,
) -> Result<Json<MembershipResponse>, ApiError> {
    let id = req.id;
    let member = raft_member(req)?;
    if let Some(Extension(slot)) = slot {
        // Catching up on a long log may take longer than a request may.
        slot.park(CATCH_UP_WAIT)?;
    }
    let log_index = node.add_learner(id, member).await?;
    Ok(Json(MembershipResponse { log_index, members: members(&node) }))
}

/// `POST /v1/cluster/membership` `{"voters":[ids]}`: makes exactly these
/// members voters (each must already be a member); others are removed.
async fn change_membership(
    State(node): State<Arc<Node>>,
    ApiJson(req): ApiJson<MembershipRequest>,
) -> Result<Json<MembershipResponse>, ApiError> {
    let log_index = node.change_membership(req.voters).await?;
    Ok(Json(MembershipResponse { log_index, members: members(&node) }))
}

/// `POST /v1/cluster/members/{id}/promote`: makes learner `id` a voter. 404
/// `not_member`; 409 `would_lose_quorum`.
async fn promote(
    State(node): State<Arc<Node>>,
    ApiPath(id): ApiPath<NodeId>,
) -> Result<Json<MembershipResponse>, ApiError> {
    let log_index = node.promote(id).await?;
    Ok(Json(MembershipResponse { log_index, members: members(&node) }))
}

/// `DELETE /v1/cluster/members/{id}`: removes a voter or learner. 404
/// `not_member`; 409 `would_lose_quorum` when the remaining voters could not
/// form a quorum now.
async fn remove_member(
    State(node): State<Arc<Node>>,
    ApiPath(id): ApiPath<NodeId>,
) -> Result<Json<MembershipResponse>, ApiError> {
    let log_index = node.remove_member(id).await?;
    Ok(Json(MembershipResponse { log_index, members: members(&node) }))
}

fn members(node: &Node) -> Vec<Member> {
    node.status().members
}

/// A new member's addresses as Raft records them, each checked.
fn raft_member(m: NewMember) -> Result<RaftMember, ApiError> {
    check_addr("addr", &m.addr)?;
    if let Some(peer_addr) = &m.peer_addr {
        check_addr("peer_addr", peer_addr)?;
    }
    Ok(RaftMember { addr: m.addr, peer_addr: m.peer_addr })
}

/// A node address is `host:port`, as peers dial it.
fn check_addr(field: &'static str, addr: &str) -> Result<(), ApiError> {
    let valid = addr.len() <= 256
        && addr.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        && !addr.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/');
    if valid {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!("{field} {addr:?} is not host:port")).with("field", field))
    }
}
