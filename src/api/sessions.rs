//! The session API: create, keep alive, delete, get and list sessions. Locks
//! are taken under a session by the lock API (`"session"` in an acquire).
//!
//! Every handler here runs on the leader (see `forward`). Writes go through
//! the Raft log; reads are linearizable (ReadIndex).

use super::auth::Authz;
use leasehold_core::{Permission, Principal};
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{propose, unexpected, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::node::Node;
use leasehold_core::{Command, LockError, Outcome};
use leasehold_proto::sessions::{
    CreateSessionRequest, DeleteSessionQuery, DeleteSessionResponse, KeepAliveRequest, SessionListQuery,
    SessionListResponse, SessionView,
};
use leasehold_proto::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, MAX_TOKEN};

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/sessions", post(create).get(list))
        .route("/v1/sessions/{id}", get(get_session).delete(delete))
        .route("/v1/sessions/{id}/keepalive", post(keep_alive))
}

/// `POST /v1/sessions`: 200 with the new session (its id is the index of
/// the entry that created it); 400 on invalid input.
async fn create(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiJson(req): ApiJson<CreateSessionRequest>,
) -> Result<Json<SessionView>, ApiError> {
    authz.may_some(&node, Permission::Lock)?;
    let by = match &authz.0 {
        Principal::User(user) => Some(user.clone()),
        Principal::Client | Principal::Admin => None,
    };
    let command = Command::CreateSession { owner: req.owner, ttl_ms: req.ttl_ms, request_id: req.request_id, by };
    match propose(&node, &authz, command).await? {
        Outcome::SessionCreated { session } => Ok(Json(session.into())),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/sessions/{id}/keepalive`: 200 with the session, its deadline
/// restarted (one entry, whatever it holds); 404 `session_not_found`.
async fn keep_alive(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(id): ApiPath<u64>,
    ApiJson(req): ApiJson<KeepAliveRequest>,
) -> Result<Json<SessionView>, ApiError> {
    may_use_session(&authz, &node, Permission::Lock, id)?;
    let command = Command::KeepAlive { session: id, ttl_ms: req.ttl_ms, request_id: req.request_id, seq: req.seq };
    match propose(&node, &authz, command).await? {
        Outcome::KeptAlive { session } => Ok(Json(session.into())),
        other => Err(unexpected(other)),
    }
}

/// `DELETE /v1/sessions/{id}?request_id=..`: 200 once every lock of the
/// session is released (each handed to its first waiter) in one entry; 404
/// `session_not_found`. A retry under the same request id gets the first
/// answer, so a delete whose answer was lost is not reported as not found.
async fn delete(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(id): ApiPath<u64>,
    ApiQuery(query): ApiQuery<DeleteSessionQuery>,
) -> Result<Json<DeleteSessionResponse>, ApiError> {
    may_use_session(&authz, &node, Permission::Lock, id)?;
    match propose(&node, &authz, Command::DeleteSession { session: id, request_id: query.request_id }).await? {
        Outcome::SessionDeleted { session, released } => {
            Ok(Json(DeleteSessionResponse { session, deleted: true, released }))
        }
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/sessions/{id}`: linearizable; 200 with the session and its
/// locks, 404 `session_not_found`.
async fn get_session(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(id): ApiPath<u64>,
) -> Result<Json<SessionView>, ApiError> {
    may_use_session(&authz, &node, Permission::Read, id)?;
    match node.read(|table| table.session(id)).await? {
        Some(view) => Ok(Json(view.into())),
        None => Err(LockError::SessionNotFound { session: id }.into()),
    }
}

/// `GET /v1/sessions?after=..&limit=..`: live sessions in id order, a page
/// at a time (pass the last id of a page as the next one's `after`).
async fn list(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiQuery(query): ApiQuery<SessionListQuery>,
) -> Result<Json<SessionListResponse>, ApiError> {
    authz.may_list(&node, Permission::Read, "")?;
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(
            ApiError::bad_request(format!("limit must be between 1 and {MAX_LIST_LIMIT}")).with("field", "limit")
        );
    }
    let after = query.after.unwrap_or(0);
    if after > MAX_TOKEN {
        return Err(ApiError::bad_request(format!("after must be at most {MAX_TOKEN}")).with("field", "after"));
    }
    let sessions = node.read(|table| table.list_sessions(after, limit)).await?;
    Ok(Json(SessionListResponse { sessions: sessions.into_iter().map(SessionView::from).collect() }))
}

/// Sessions have no name: a caller may keep alive, delete or read a session
/// it opened when it may `permission` on some name and on every lock the
/// session holds, as applied here; a session another principal opened
/// needs `permission` on every name. (A session gone answers 404 after this.)
fn may_use_session(authz: &Authz, node: &Node, permission: Permission, id: u64) -> Result<(), ApiError> {
    authz.may_some(node, permission)?;
    let (opened_by, held) = node.locks().read(|t| {
        let opened_by = t.session_opened_by(id).map(|by| by.map(str::to_owned));
        let held: Vec<String> =
            t.session(id).and_then(|s| s.locks).unwrap_or_default().into_iter().map(|l| l.name).collect();
        (opened_by, held)
    });
    let mine = match (&authz.0, &opened_by) {
        (Principal::User(me), Some(Some(by))) => me == by,
        (Principal::User(_), Some(None)) => false,
        // No such session (404 next), or a built-in principal.
        _ => true,
    };
    if !mine {
        authz.may(node, permission, [""])?;
    }
    authz.may(node, permission, held.iter().map(String::as_str))
}
