//! The election API: campaign (try or wait), proclaim, resign, the leader,
//! the elections with a leader, and the leadership changes of one election
//! as Server-Sent Events.
//!
//! An election is the lock of the same name whose holder carries a value
//! (see `leasehold_core`'s `election.rs`): the leader's token is the index
//! of the entry that elected it, fences (records, gates, the check) take it
//! as the lock's token, and everything locks promise about expiry, sessions,
//! queues and lock delays holds for leaderships. Writes and reads run on the
//! leader (see `forward`); `observe` is served by the node asked, from its
//! own event history, like the other event streams.

use super::auth::Authz;
use leasehold_core::Permission;
use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_core::{Actor, Command, EventKind, Limits, LockEvent, Outcome};
use leasehold_proto::elections::{CampaignRequest, Leader, LeaderList, ProclaimRequest, ResignRequest, ResignResponse};
use leasehold_proto::events::ResumeQuery;
use leasehold_proto::locks::ListQuery;
use leasehold_proto::ErrorCode;

use super::events::{caused_by, readable_by, resume_point, sse_frame_at, stream, Subscribers};
use super::limits::RequestSlot;
use super::locks::park_for_wait;
use super::{list_limit, propose, unexpected, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::admission::Caller;
use crate::node::Node;
use crate::store::Cursor;

/// Served on the leader (a follower forwards them).
pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/elections", get(list))
        .route("/v1/elections/{name}", get(get_leader))
        .route("/v1/elections/{name}/campaign", post(campaign))
        .route("/v1/elections/{name}/proclaim", post(proclaim))
        .route("/v1/elections/{name}/resign", post(resign))
}

/// Served by the node asked.
pub fn observe_routes() -> Router<Arc<Node>> {
    Router::new().route("/v1/elections/{name}/observe", get(observe))
}

/// `POST /v1/elections/{name}/campaign`: 200 with the leadership once
/// elected; 409 `held` naming the leader when another leads and the
/// request does not wait (`lock_delayed` while a lock delay runs); with
/// `wait_ms`, waits its turn in FIFO order and answers 200 or 409
/// `wait_timeout`; 400 on invalid input (a value over 4 KiB among them).
async fn campaign(
    State(node): State<Arc<Node>>,
    authz: Authz,
    slot: Option<Extension<RequestSlot>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<CampaignRequest>,
) -> Result<Json<Leader>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    // The core keeps the value as JSON text; serde_json writes it canonically.
    let value = req.value.to_string();
    let command = Command::Campaign {
        name: name.clone(),
        candidate: req.candidate.clone(),
        value,
        ttl_ms: req.ttl_ms,
        session: req.session,
        wait_ms: park_for_wait(slot, req.wait_ms)?,
        request_id: req.request_id,
        lock_delay_ms: req.lock_delay_ms,
        seq: req.seq,
    };
    match node.acquire(command, authz.0.clone()).await?? {
        Outcome::Granted { grant, reacquired } => {
            // The tick it was elected at, while it still leads under this token.
            let since_tick =
                node.locks().read(|t| t.leader(&name).filter(|l| l.token == grant.token)).map(|l| l.since_tick);
            Ok(Json(Leader {
                name,
                candidate: req.candidate,
                token: grant.token,
                value: req.value,
                since_tick,
                ttl_ms: grant.ttl_ms,
                expires_in_ms: grant.expires_in_ms,
                deadline_tick: grant.deadline_tick,
                session: req.session,
                reacquired: Some(reacquired),
                index: None,
            }))
        }
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/elections/{name}/proclaim`: 200 with the leader and its new
/// value; 409 `stale_token` for any token but the current leader's; 404
/// `not_held` without a leader; 400 when `candidate` is not the leader.
async fn proclaim(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<ProclaimRequest>,
) -> Result<Json<Leader>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = Command::Proclaim {
        name,
        candidate: req.candidate,
        token: req.token,
        value: req.value.to_string(),
        request_id: req.request_id,
    };
    match propose(&node, &authz, command).await? {
        Outcome::Proclaimed { leader } => Ok(Json(Leader::from_core(leader))),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/elections/{name}/resign`: 200; the next waiting candidate is
/// elected in the same entry. Errors as for proclaim.
async fn resign(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<ResignRequest>,
) -> Result<Json<ResignResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = Command::Resign { name, candidate: req.candidate, token: req.token, request_id: req.request_id };
    match propose(&node, &authz, command).await? {
        Outcome::Released { name, token } => Ok(Json(ResignResponse { name, token, resigned: true })),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/elections/{name}`: linearizable; 200 with the leader and the
/// index the read reflects; 404 `no_leader`.
async fn get_leader(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Leader>, ApiError> {
    authz.may(&node, Permission::Read, [name.as_str()])?;
    Limits::DEFAULT.check_name("name", &name)?;
    match node.read_at(|t| t.leader(&name)).await? {
        (index, Some(leader)) => Ok(Json(Leader { index: Some(index), ..Leader::from_core(leader) })),
        (index, None) => Err(no_leader(&name).with("index", index)),
    }
}

fn no_leader(name: &str) -> ApiError {
    ApiError::new(ErrorCode::NoLeader, format!("election {name:?} has no leader")).with("name", name)
}

/// `GET /v1/elections?prefix=..&limit=..`: elections with a leader, in name order.
async fn list(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<LeaderList>, ApiError> {
    authz.may_list(&node, Permission::Read, &query.prefix)?;
    let limit = list_limit(&query)?;
    let leaders = node.read(|t| t.leaders(&query.prefix, limit)).await?;
    Ok(Json(LeaderList { elections: leaders.into_iter().map(Leader::from_core).collect() }))
}

/// `GET /v1/elections/{name}/observe`: the election's leadership changes as
/// Server-Sent Events: `proclaimed` (a leader and its value: elected, or a
/// new value), `released` and `expired` (that leadership ended). A new
/// stream (no `after`, no `Last-Event-ID`) starts with the current leader,
/// as this node last applied it, as a `proclaimed` event whose id is the
/// index that state reflects; a resumed one with the next change after
/// its id. 410 `compacted` when the node's history no longer reaches it.
async fn observe(
    State(node): State<Arc<Node>>,
    authz: Authz,
    Extension(subscribers): Extension<Subscribers>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<ResumeQuery>,
) -> Result<Response, ApiError> {
    authz.may(&node, Permission::Read, [name.as_str()])?;
    Limits::DEFAULT.check_name("name", &name)?;
    let wanted = caused_by(query.by);
    let (start, first) = match resume_point(query.after.as_deref(), &headers)? {
        Some(cursor) => (cursor, Vec::new()),
        None => {
            let (index, leader) = node.locks().read_at(|t| t.leader(&name));
            // The state as read, not a change: the table keeps no record
            // of whose request made the current leader.
            let current = leader.map(|l| LockEvent {
                index,
                name: name.clone(),
                kind: EventKind::Proclaimed { owner: l.candidate, token: l.token, value: l.value },
                by: Actor::Unknown,
            });
            let cursor = Cursor::after_entry(index);
            let current = current.filter(|e| wanted(e));
            (cursor, current.and_then(|e| sse_frame_at(&e, cursor)).into_iter().collect())
        }
    };
    let leadership = |e: &LockEvent| {
        matches!(e.kind, EventKind::Proclaimed { .. } | EventKind::Released { .. } | EventKind::Expired { .. })
    };
    let readable = readable_by(&node, authz);
    stream(&node, &subscribers, caller, Some(start), first, move |e| {
        e.name == name && leadership(e) && wanted(e) && readable(e)
    })
}
