//! The client API: acquire, renew, release, get and list locks.
//!
//! Every handler here runs on the leader (see `forward`). Writes go through
//! the Raft log; reads are linearizable (ReadIndex).

use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::lock::{Command, FencingToken, Grant, LeaseView, Limits, Outcome};
use crate::node::Node;

/// Default and largest page of `GET /v1/locks`.
pub const DEFAULT_LIST_LIMIT: usize = 100;
pub const MAX_LIST_LIMIT: usize = 1000;

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/locks", get(list))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/locks/{name}/acquire", post(acquire))
        .route("/v1/locks/{name}/renew", post(renew))
        .route("/v1/locks/{name}/release", post(release))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    pub owner: String,
    pub ttl_ms: u64,
    #[serde(default)]
    pub request_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    pub token: FencingToken,
    #[serde(default)]
    pub ttl_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub token: FencingToken,
}

/// The answer to acquire and renew.
#[derive(Debug, Serialize)]
pub struct LeaseResponse {
    #[serde(flatten)]
    pub grant: Grant,
    /// True when the owner already held the lock (same token, lease restarted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reacquired: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct ReleaseResponse {
    pub name: String,
    pub token: FencingToken,
    pub released: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    pub prefix: String,
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct ListResponse {
    pub locks: Vec<LeaseView>,
}

/// `POST /v1/locks/{name}/acquire`: 200 with the grant; 409 `held` with the
/// holder; 400 on invalid input.
async fn acquire(
    State(node): State<Arc<Node>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<AcquireRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    let command = Command::Acquire { name, owner: req.owner, ttl_ms: req.ttl_ms, request_id: req.request_id };
    match propose(&node, command).await? {
        Outcome::Granted { grant, reacquired } => Ok(Json(LeaseResponse { grant, reacquired: Some(reacquired) })),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/locks/{name}/renew`: 200 with the lease; 409 `stale_token`;
/// 404 `not_held`.
async fn renew(
    State(node): State<Arc<Node>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<RenewRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    match propose(&node, Command::Renew { name, token: req.token, ttl_ms: req.ttl_ms }).await? {
        Outcome::Renewed { grant } => Ok(Json(LeaseResponse { grant, reacquired: None })),
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/locks/{name}/release`: 200; 409 `stale_token`; 404 `not_held`.
async fn release(
    State(node): State<Arc<Node>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<ReleaseRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    match propose(&node, Command::Release { name, token: req.token }).await? {
        Outcome::Released { name, token } => Ok(Json(ReleaseResponse { name, token, released: true })),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/locks/{name}`: linearizable; 200 with the lease, 404 when free.
async fn get_lock(State(node): State<Arc<Node>>, ApiPath(name): ApiPath<String>) -> Result<Json<LeaseView>, ApiError> {
    // Validate the name as a release would, so bad names get the same 400.
    Command::Release { name: name.clone(), token: 0 }.validate(&Limits::DEFAULT)?;
    match node.read(|table| table.get(&name)).await? {
        Some(view) => Ok(Json(view)),
        None => Err(crate::lock::LockError::NotHeld { name }.into()),
    }
}

/// `GET /v1/locks?prefix=..&limit=..`: held locks in name order.
async fn list(
    State(node): State<Arc<Node>>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ListResponse>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(
            ApiError::bad_request(format!("limit must be between 1 and {MAX_LIST_LIMIT}")).with("field", "limit")
        );
    }
    if query.prefix.len() > Limits::DEFAULT.max_name_bytes {
        return Err(ApiError::bad_request("prefix is longer than a lock name can be").with("field", "prefix"));
    }
    let locks = node.read(|table| table.list(&query.prefix, limit)).await?;
    Ok(Json(ListResponse { locks }))
}

/// Validates `command`, proposes it, and turns a refusal into its ApiError.
async fn propose(node: &Node, command: Command) -> Result<Outcome, ApiError> {
    command.validate(&Limits::DEFAULT)?;
    Ok(node.propose(command).await??)
}

fn unexpected(outcome: Outcome) -> ApiError {
    ApiError::internal(format!("unexpected outcome {outcome:?}"))
}
