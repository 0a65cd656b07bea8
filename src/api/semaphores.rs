//! The semaphore API: acquire (try or wait), renew and release permits,
//! read one semaphore or list them; the operator's limit change.
//!
//! Every handler here runs on the leader (see `forward`). Writes go through
//! the Raft log; reads are linearizable (ReadIndex).

use super::auth::Authz;
use leasehold_core::Permission;
use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::limits::RequestSlot;
use super::locks::park_for_wait;
use super::{list_limit, propose, unexpected, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::node::Node;
use leasehold_core::{Command, Limits, LockError, Outcome};
use leasehold_proto::locks::ListQuery;
use leasehold_proto::semaphores::{
    PermitResponse, SemaphoreAcquireRequest, SemaphoreLimitRequest, SemaphoreLimitResponse, SemaphoreListResponse,
    SemaphoreReleaseRequest, SemaphoreReleaseResponse, SemaphoreRenewRequest, SemaphoreView,
};

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/semaphores", get(list))
        .route("/v1/semaphores/{name}", get(get_semaphore))
        .route("/v1/semaphores/{name}/acquire", post(acquire))
        .route("/v1/semaphores/{name}/renew", post(renew))
        .route("/v1/semaphores/{name}/release", post(release))
}

/// The operator's routes (admin token).
pub fn admin_routes() -> Router<Arc<Node>> {
    Router::new().route("/v1/semaphores/{name}/limit", post(set_limit))
}

/// `POST /v1/semaphores/{name}/acquire`: 200 with the permits and their
/// token; 409 `semaphore_full` with the holders when too few are free (or
/// others wait first), 409 `limit_mismatch` when the semaphore lives with
/// another limit; with `wait_ms`, waits in the semaphore's FIFO queue and
/// answers 200 when its permits are granted, 409 `wait_timeout`, or at once
/// 409 `deadlock` when waiting would close a cycle; 400 on invalid input
/// (exactly one of `ttl_ms` and `session`); 404 `session_not_found` for a
/// session that has ended (also when it ends while this acquire waits).
async fn acquire(
    State(node): State<Arc<Node>>,
    authz: Authz,
    slot: Option<Extension<RequestSlot>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<SemaphoreAcquireRequest>,
) -> Result<Json<PermitResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = Command::AcquirePermits {
        name,
        owner: req.owner,
        limit: req.limit,
        permits: req.permits,
        ttl_ms: req.ttl_ms,
        session: req.session,
        wait_ms: park_for_wait(slot, req.wait_ms)?,
        request_id: req.request_id,
        seq: req.seq,
    };
    let answer = match node.acquire(command, authz.0.clone()).await? {
        Ok(Outcome::PermitsGranted { grant, reacquired }) => {
            Ok(Json(PermitResponse { grant: grant.into(), reacquired: Some(reacquired) }))
        }
        Ok(other) => Err(unexpected(other)),
        Err(refused) => Err(ApiError::from(refused)),
    };
    node.metrics().semaphore_request("acquire", result_label(&answer));
    answer
}

/// `POST /v1/semaphores/{name}/renew`: 200 with the permits' lease
/// restarted; 409 `stale_token`; 409 `held_under_session` for permits
/// held under a session, which its keepalives keep; 404 `not_held` or
/// `no_semaphore`.
async fn renew(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<SemaphoreRenewRequest>,
) -> Result<Json<PermitResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = Command::RenewPermits {
        name,
        owner: req.owner,
        token: req.token,
        ttl_ms: req.ttl_ms,
        request_id: req.request_id,
    };
    let answer = match propose(&node, &authz, command).await {
        Ok(Outcome::PermitsRenewed { grant }) => Ok(Json(PermitResponse { grant: grant.into(), reacquired: None })),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().semaphore_request("renew", result_label(&answer));
    answer
}

/// `POST /v1/semaphores/{name}/release`: 200, the permits go to the
/// waiters that now fit; 409 `stale_token`; 404 `not_held` or `no_semaphore`.
async fn release(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<SemaphoreReleaseRequest>,
) -> Result<Json<SemaphoreReleaseResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = Command::ReleasePermits { name, owner: req.owner, token: req.token, request_id: req.request_id };
    let answer = match propose(&node, &authz, command).await {
        Ok(Outcome::PermitsReleased { name, owner, token }) => {
            Ok(Json(SemaphoreReleaseResponse { name, owner, token, released: true }))
        }
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().semaphore_request("release", result_label(&answer));
    answer
}

/// `POST /v1/semaphores/{name}/limit` (admin): 200 with the new limit; a
/// higher one grants the waiters that now fit, a lower one revokes nothing;
/// 404 `no_semaphore` when nobody holds or waits for a permit.
async fn set_limit(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<SemaphoreLimitRequest>,
) -> Result<Json<SemaphoreLimitResponse>, ApiError> {
    authz.may(&node, Permission::Admin, [name.as_str()])?;
    match propose(&node, &authz, Command::SetSemaphoreLimit { name, limit: req.limit }).await? {
        Outcome::LimitSet { name, limit, in_use } => Ok(Json(SemaphoreLimitResponse { name, limit, in_use })),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/semaphores/{name}`: linearizable; 200 with the limit, holders
/// and waiters; 404 `no_semaphore` when nobody holds or waits for a permit.
async fn get_semaphore(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<SemaphoreView>, ApiError> {
    authz.may(&node, Permission::Read, [name.as_str()])?;
    Limits::DEFAULT.check_name("name", &name)?;
    match node.read(|table| table.semaphore(&name)).await? {
        Some(view) => Ok(Json(view.into())),
        None => Err(LockError::SemaphoreNotFound { name }.into()),
    }
}

/// `GET /v1/semaphores?prefix=..&limit=..`: live semaphores in name order.
async fn list(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<SemaphoreListResponse>, ApiError> {
    authz.may_list(&node, Permission::Read, &query.prefix)?;
    let limit = list_limit(&query)?;
    let semaphores = node.read(|table| table.list_semaphores(&query.prefix, limit)).await?;
    Ok(Json(SemaphoreListResponse { semaphores: semaphores.into_iter().map(Into::into).collect() }))
}

/// The `result` label of an answer: `ok` when it succeeded, its error code otherwise.
fn result_label<T>(answer: &Result<T, ApiError>) -> &'static str {
    answer.as_ref().map_or_else(|e| e.code.as_str(), |_| "ok")
}
