//! The client API: acquire (try or wait), renew, release, get and list locks;
//! acquire and release several locks at once.
//!
//! Every handler here runs on the leader (see `forward`). Writes go through
//! the Raft log; reads are linearizable (ReadIndex).

use super::auth::Authz;
use leasehold_core::Permission;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::limits::RequestSlot;
use super::{list_limit, propose, unexpected, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::node::{Node, WAIT_SLACK};
use leasehold_core::{Command, FencingToken, Limits, LockError, Outcome};
use leasehold_proto::locks::{
    AcquireRequest, LeaseResponse, LeaseView, ListQuery, ListResponse, LockMode, MultiAcquireRequest,
    MultiLeaseResponse, MultiReleaseRequest, MultiReleaseResponse, ReleaseRequest, ReleaseResponse, RenewRequest,
    SharedHoldersResponse, SharedLockView,
};

/// Time to propose the acquire before the wait and to answer after it.
const QUEUE_ANSWER_SLACK: Duration = Duration::from_secs(10);

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/locks", get(list))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/locks/{name}/shared", get(get_shared))
        .route("/v1/locks/{name}/acquire", post(acquire))
        .route("/v1/locks/{name}/renew", post(renew))
        .route("/v1/locks/{name}/release", post(release))
        .route("/v1/multi/acquire", post(acquire_many))
        .route("/v1/multi/release", post(release_many))
}

/// `POST /v1/locks/{name}/acquire`: 200 with the grant; 409 `held` with the
/// holder (or `shared_holders`), 409 `lock_delayed` while a lock delay runs; with `wait_ms`, waits in the lock's queue and answers 200 when the
/// lock passes to this owner, 409 `wait_timeout`, or at once 409
/// `deadlock` when waiting would close a cycle; 400 on invalid input.
/// `mode: "shared"` takes a shared lease (see `docs/api.md`).
async fn acquire(
    State(node): State<Arc<Node>>,
    authz: Authz,
    slot: Option<Extension<RequestSlot>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<AcquireRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let answer = grant_or_queue(&node, &authz, slot, name, req).await;
    let result = match &answer {
        Ok(Json(LeaseResponse { reacquired: Some(true), .. })) => "reacquired",
        _ => result_label(&answer, "granted"),
    };
    node.metrics().acquire(result);
    answer
}

/// The acquire itself ([`Node::acquire`]), after its waiting request is
/// taken out of the request deadline.
async fn grant_or_queue(
    node: &Arc<Node>,
    authz: &Authz,
    slot: Option<Extension<RequestSlot>>,
    name: String,
    req: AcquireRequest,
) -> Result<Json<LeaseResponse>, ApiError> {
    let wait_ms = park_for_wait(slot, req.wait_ms)?;
    let command = match req.mode.unwrap_or_default() {
        LockMode::Exclusive => Command::Acquire {
            name,
            owner: req.owner,
            ttl_ms: req.ttl_ms,
            session: req.session,
            wait_ms,
            request_id: req.request_id,
            lock_delay_ms: req.lock_delay_ms,
            seq: req.seq,
        },
        LockMode::Shared => {
            // A lock delay protects the next holder from a paused
            // exclusive one; shared holders write nothing to protect.
            if req.lock_delay_ms.is_some() {
                return Err(
                    ApiError::bad_request("lock_delay_ms is not taken in shared mode").with("field", "lock_delay_ms")
                );
            }
            Command::AcquireShared {
                name,
                owner: req.owner,
                ttl_ms: req.ttl_ms,
                session: req.session,
                wait_ms,
                request_id: req.request_id,
                seq: req.seq,
            }
        }
    };
    match node.acquire(command, authz.0.clone()).await?? {
        Outcome::Granted { grant, reacquired } => {
            Ok(Json(LeaseResponse { grant: grant.into(), reacquired: Some(reacquired) }))
        }
        other => Err(unexpected(other)),
    }
}

/// The wait asked for by `wait_ms` (none when 0), once its request is
/// taken out of the request deadline: the body is read and the wait
/// bounded, so the request may now wait its turn past the request timeout,
/// without a place among those in flight.
pub(super) fn park_for_wait(
    slot: Option<Extension<RequestSlot>>,
    wait_ms: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    let wait_ms = wait_ms.filter(|w| *w > 0);
    if let (Some(Extension(slot)), Some(wait)) = (slot, wait_ms) {
        if wait <= Limits::DEFAULT.max_wait_ms {
            slot.park(Duration::from_millis(wait) + WAIT_SLACK + QUEUE_ANSWER_SLACK)?;
        }
    }
    Ok(wait_ms)
}

/// `POST /v1/multi/acquire`: 200 with one grant per lock under one token,
/// all granted in one entry; 409 `held` with `conflicts` (every lock that
/// cannot be granted now); with `wait_ms`, waits until all can be granted
/// together and answers 200 or 409 `wait_timeout`; 400 on invalid input.
async fn acquire_many(
    State(node): State<Arc<Node>>,
    authz: Authz,
    slot: Option<Extension<RequestSlot>>,
    ApiJson(req): ApiJson<MultiAcquireRequest>,
) -> Result<Json<MultiLeaseResponse>, ApiError> {
    authz.may(&node, Permission::Lock, req.names.iter().map(String::as_str))?;
    let answer = grant_many(&node, &authz, slot, req).await;
    let result = match &answer {
        Ok(Json(MultiLeaseResponse { reacquired: true, .. })) => "reacquired",
        _ => result_label(&answer, "granted"),
    };
    node.metrics().multi_acquire(result);
    answer
}

async fn grant_many(
    node: &Arc<Node>,
    authz: &Authz,
    slot: Option<Extension<RequestSlot>>,
    req: MultiAcquireRequest,
) -> Result<Json<MultiLeaseResponse>, ApiError> {
    let command = Command::AcquireMany {
        names: req.names,
        owner: req.owner,
        ttl_ms: req.ttl_ms,
        session: req.session,
        wait_ms: park_for_wait(slot, req.wait_ms)?,
        request_id: req.request_id,
        lock_delay_ms: req.lock_delay_ms,
        seq: req.seq,
    };
    match node.acquire(command, authz.0.clone()).await?? {
        Outcome::GrantedMany { grants, reacquired } => {
            let token = grants.first().map_or(FencingToken::default(), |g| g.token);
            let grants = grants.into_iter().map(Into::into).collect();
            Ok(Json(MultiLeaseResponse { token, grants, reacquired }))
        }
        other => Err(unexpected(other)),
    }
}

/// `POST /v1/multi/release`: 200 when every lock was held under `token` and
/// is now released (each handed on); else nothing changes: 409
/// `stale_token`, 404 `not_held` for the first lock that is not.
async fn release_many(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiJson(req): ApiJson<MultiReleaseRequest>,
) -> Result<Json<MultiReleaseResponse>, ApiError> {
    authz.may(&node, Permission::Lock, req.names.iter().map(String::as_str))?;
    let command = Command::ReleaseMany {
        names: req.names,
        token: req.token,
        request_id: req.request_id,
        session: req.session,
        seq: req.seq,
    };
    let answer = match propose(&node, &authz, command).await {
        Ok(Outcome::ReleasedMany { names, token }) => Ok(Json(MultiReleaseResponse { names, token, released: true })),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().multi_release(result_label(&answer, "released"));
    answer
}

/// The `result` label of an answer: `ok` when it succeeded, its error code otherwise.
fn result_label<T>(answer: &Result<T, ApiError>, ok: &'static str) -> &'static str {
    answer.as_ref().map_or_else(|e| e.code.as_str(), |_| ok)
}

/// `POST /v1/locks/{name}/renew`: 200 with the lease; 409 `stale_token`;
/// 409 `held_under_session` for a lease (shared or not) held under a
/// session, which its keepalives keep; 404 `not_held`.
async fn renew(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<RenewRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = match shared_owner(req.mode, req.owner)? {
        None => Command::Renew { name, token: req.token, ttl_ms: req.ttl_ms, request_id: req.request_id },
        Some(owner) => {
            Command::RenewShared { name, owner, token: req.token, ttl_ms: req.ttl_ms, request_id: req.request_id }
        }
    };
    let answer = match propose(&node, &authz, command).await {
        Ok(Outcome::Renewed { grant }) => Ok(Json(LeaseResponse { grant: grant.into(), reacquired: None })),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().renew(result_label(&answer, "renewed"));
    answer
}

/// `POST /v1/locks/{name}/release`: 200; 409 `stale_token`; 404 `not_held`.
async fn release(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<ReleaseRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    authz.may(&node, Permission::Lock, [name.as_str()])?;
    let command = match shared_owner(req.mode, req.owner)? {
        None => {
            Command::Release { name, token: req.token, request_id: req.request_id, session: req.session, seq: req.seq }
        }
        Some(owner) if req.session.is_none() && req.seq.is_none() => {
            Command::ReleaseShared { name, owner, token: req.token, request_id: req.request_id }
        }
        // A shared lease is named by its owner and token, under a session or not.
        Some(_) => {
            return Err(ApiError::bad_request("session is not taken by a shared release").with("field", "session"))
        }
    };
    let answer = match propose(&node, &authz, command).await {
        Ok(Outcome::Released { name, token }) => Ok(Json(ReleaseResponse { name, token, released: true })),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().release(result_label(&answer, "released"));
    answer
}

/// The owner a renew or release of a shared lease names (`None`: an
/// exclusive one, which names none).
fn shared_owner(mode: Option<LockMode>, owner: Option<String>) -> Result<Option<String>, ApiError> {
    match (mode.unwrap_or_default(), owner) {
        (LockMode::Exclusive, None) => Ok(None),
        (LockMode::Exclusive, Some(_)) => {
            Err(ApiError::bad_request("owner is named with mode \"shared\" only").with("field", "owner"))
        }
        (LockMode::Shared, Some(owner)) => Ok(Some(owner)),
        (LockMode::Shared, None) => Err(ApiError::bad_request("mode \"shared\" needs owner").with("field", "owner")),
    }
}

/// `GET /v1/locks/{name}`: linearizable; 200 with the lease, 404 `not_held`
/// when free. A free lock under a lock delay is free too (nobody holds it):
/// its 404 says until when with `delayed_until_tick`, so the answer for a
/// held lock keeps its shape.
async fn get_lock(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<LeaseView>, ApiError> {
    authz.may(&node, Permission::Read, [name.as_str()])?;
    Limits::DEFAULT.check_name("name", &name)?;
    match node.read(|table| table.get(&name).ok_or_else(|| table.delayed_until(&name))).await? {
        Ok(view) => Ok(Json(view.into())),
        Err(delayed_until_tick) => {
            let free = ApiError::from(LockError::NotHeld { name });
            Err(match delayed_until_tick {
                Some(tick) => free.with("delayed_until_tick", tick),
                None => free,
            })
        }
    }
}

/// `GET /v1/locks/{name}/shared`: linearizable; 200 with the shared
/// holders (oldest grant first; empty when none), and the exclusive holder
/// if any.
async fn get_shared(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<SharedHoldersResponse>, ApiError> {
    authz.may(&node, Permission::Read, [name.as_str()])?;
    Limits::DEFAULT.check_name("name", &name)?;
    let (shared, exclusive) = node.read(|table| (table.shared_holders(&name), table.holder(&name))).await?;
    Ok(Json(SharedHoldersResponse {
        name,
        shared: shared.into_iter().map(Into::into).collect(),
        exclusive: exclusive.map(Into::into),
    }))
}

/// `GET /v1/locks?prefix=..&limit=..`: held locks in name order, and
/// those held in shared mode with their holders.
async fn list(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ListResponse>, ApiError> {
    authz.may_list(&node, Permission::Read, &query.prefix)?;
    let limit = list_limit(&query)?;
    let (locks, shared) =
        node.read(|table| (table.list(&query.prefix, limit), table.list_shared(&query.prefix, limit))).await?;
    let shared = shared
        .into_iter()
        .map(|(name, holders)| SharedLockView { name, holders: holders.into_iter().map(Into::into).collect() })
        .collect();
    Ok(Json(ListResponse { locks: locks.into_iter().map(LeaseView::from).collect(), shared }))
}
