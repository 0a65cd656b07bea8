//! The client API: acquire (try or wait), renew, release, get and list locks.
//!
//! Every handler here runs on the leader (see `forward`). Writes go through
//! the Raft log; reads are linearizable (ReadIndex).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::limits::RequestSlot;
use super::{propose, unexpected, ApiError, ApiJson, ApiPath, ApiQuery};
use crate::node::Node;
use crate::raft::Turn;
use leasehold_core::{Command, EventKind, FencingToken, Grant, LeaseView, Limits, LockError, Outcome};
use leasehold_proto::locks::{
    AcquireRequest, LeaseResponse, ListQuery, ListResponse, ReleaseRequest, ReleaseResponse, RenewRequest,
    DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT,
};

/// How much longer than its `wait_ms` a waiting request may go unanswered
/// (the cluster decides the wait's end on its ticks) before it is told 503
/// and may retry with its request id.
const WAIT_SLACK: Duration = Duration::from_secs(10);
/// Time to propose the acquire before the wait and to answer after it.
const QUEUE_ANSWER_SLACK: Duration = Duration::from_secs(10);

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/locks", get(list))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/locks/{name}/acquire", post(acquire))
        .route("/v1/locks/{name}/renew", post(renew))
        .route("/v1/locks/{name}/release", post(release))
}

/// `POST /v1/locks/{name}/acquire`: 200 with the grant; 409 `held` with the
/// holder; with `wait_ms`, waits in the lock's queue and answers 200 when the
/// lock passes to this owner or 409 `wait_timeout`; 400 on invalid input.
async fn acquire(
    State(node): State<Arc<Node>>,
    slot: Option<Extension<RequestSlot>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<AcquireRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    let answer = grant_or_queue(&node, slot, name, req).await;
    let result = match &answer {
        Ok(Json(LeaseResponse { reacquired: Some(true), .. })) => "reacquired",
        _ => result_label(&answer, "granted"),
    };
    node.metrics().acquire(result);
    answer
}

/// The acquire itself: a grant now, or a place in the queue and then the
/// grant or the end of the wait.
async fn grant_or_queue(
    node: &Arc<Node>,
    slot: Option<Extension<RequestSlot>>,
    name: String,
    req: AcquireRequest,
) -> Result<Json<LeaseResponse>, ApiError> {
    let owner = req.owner.clone();
    let wait = Duration::from_millis(req.wait_ms.unwrap_or(0));
    let command = Command::Acquire {
        name: name.clone(),
        owner: req.owner,
        ttl_ms: req.ttl_ms,
        wait_ms: req.wait_ms,
        request_id: req.request_id,
    };
    command.validate(&Limits::DEFAULT)?;
    if let (Some(Extension(slot)), false) = (slot, wait.is_zero()) {
        // The body is read and the wait bounded: the request may now wait its
        // turn past the request timeout, without a place among those in flight.
        slot.park(wait + WAIT_SLACK + QUEUE_ANSWER_SLACK);
    }
    // A waiting acquire registers before proposing, so the hand-over cannot
    // fall between the answer and the registration. A try-acquire, the
    // common case, does not register at all.
    let turn = (!wait.is_zero()).then(|| node.locks().watch_turn(&name, &owner));
    // Armed before proposing: if the client of a waiting acquire goes away at
    // any point before it is answered, its place in the queue is given up.
    let mut place = QueuePlace { node: node.clone(), name: name.clone(), owner: owner.clone(), armed: !wait.is_zero() };
    let answer = match node.propose(command).await {
        Ok(Ok(Outcome::Granted { grant, reacquired })) => {
            Ok(Json(LeaseResponse { grant, reacquired: Some(reacquired) }))
        }
        Ok(Ok(Outcome::Queued { .. })) => wait_for_turn(node, turn, &name, &owner, wait + WAIT_SLACK).await,
        Ok(Ok(other)) => Err(unexpected(other)),
        Ok(Err(refused)) => Err(refused.into()),
        Err(unavailable) => Err(unavailable.into()),
    };
    place.armed = false;
    answer
}

/// The `result` label of an answer: `ok` when it succeeded, its error code otherwise.
fn result_label<T>(answer: &Result<T, ApiError>, ok: &'static str) -> &'static str {
    answer.as_ref().map_or_else(|e| e.code.as_str(), |_| ok)
}

/// Waits, without polling, for the state machine to hand `name` to `owner`
/// or to end its wait.
/// `events` is a subscription taken before the proposal; without one (a
/// queued answer replayed for a retry sent without `wait_ms`) it subscribes
/// now. Either way the table is read once after subscribing, so a hand-over
/// applied before the subscription is not missed.
async fn wait_for_turn(
    node: &Node,
    turn: Option<Turn>,
    name: &str,
    owner: &str,
    bound: Duration,
) -> Result<Json<LeaseResponse>, ApiError> {
    let mut turn = turn.unwrap_or_else(|| node.locks().watch_turn(name, owner));
    let ended = async {
        if let Some(settled) = standing(node, name, owner) {
            return settled;
        }
        loop {
            let Some(event) = turn.next().await else {
                return Err(ApiError::unavailable("node shutting down"));
            };
            match event.kind {
                EventKind::Acquired { token, .. } | EventKind::HandedOver { token, .. } => return Ok(token),
                EventKind::WaitTimeout { .. } | EventKind::Cancelled { .. } => {
                    return Err(LockError::WaitTimeout { name: name.to_owned() }.into())
                }
                _ => {}
            }
        }
    };
    let token = match tokio::time::timeout(bound, ended).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(ApiError::unavailable(
                "the cluster did not end this wait in time; retry with the same request_id",
            ))
        }
    };
    let grant = node.locks().read(|t| t.get(name)).filter(|v| v.token == token).map_or_else(
        // Granted and already gone again (the answer came later than the lease's ttl).
        || Grant {
            name: name.to_owned(),
            owner: owner.to_owned(),
            token,
            ttl_ms: 0,
            expires_in_ms: 0,
            deadline_tick: 0,
        },
        |v| Grant {
            name: v.name,
            owner: v.owner,
            token,
            ttl_ms: v.ttl_ms,
            expires_in_ms: v.expires_in_ms,
            deadline_tick: v.deadline_tick,
        },
    );
    Ok(Json(LeaseResponse { grant, reacquired: Some(false) }))
}

/// Where `owner` stands on `name` according to the applied table: holder
/// (its token), still waiting (`None`), or neither (its wait ended).
fn standing(node: &Node, name: &str, owner: &str) -> Option<Result<FencingToken, ApiError>> {
    match node.locks().read(|t| (t.get(name), t.is_waiting(name, owner))) {
        (Some(view), _) if view.owner == owner => Some(Ok(view.token)),
        (_, true) => None,
        _ => Some(Err(LockError::WaitTimeout { name: name.to_owned() }.into())),
    }
}

/// A waiter's place in a queue, given up (a `Cancel` proposed) when the
/// request is dropped before it was answered: its client went away.
struct QueuePlace {
    node: Arc<Node>,
    name: String,
    owner: String,
    armed: bool,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if self.armed {
            let node = self.node.clone();
            let command =
                Command::Cancel { name: std::mem::take(&mut self.name), owner: std::mem::take(&mut self.owner) };
            tokio::spawn(async move {
                if let Err(e) = node.propose(command).await {
                    tracing::warn!(error = %e, "could not cancel an abandoned wait; it ends with its wait_ms");
                }
            });
        }
    }
}

/// `POST /v1/locks/{name}/renew`: 200 with the lease; 409 `stale_token`;
/// 404 `not_held`.
async fn renew(
    State(node): State<Arc<Node>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<RenewRequest>,
) -> Result<Json<LeaseResponse>, ApiError> {
    let command = Command::Renew { name, token: req.token, ttl_ms: req.ttl_ms, request_id: req.request_id };
    let answer = match propose(&node, command).await {
        Ok(Outcome::Renewed { grant }) => Ok(Json(LeaseResponse { grant, reacquired: None })),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().renew(result_label(&answer, "renewed"));
    answer
}

/// `POST /v1/locks/{name}/release`: 200; 409 `stale_token`; 404 `not_held`.
async fn release(
    State(node): State<Arc<Node>>,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<ReleaseRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    let answer = match propose(&node, Command::Release { name, token: req.token, request_id: req.request_id }).await {
        Ok(Outcome::Released { name, token }) => Ok(Json(ReleaseResponse { name, token, released: true })),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(e),
    };
    node.metrics().release(result_label(&answer, "released"));
    answer
}

/// `GET /v1/locks/{name}`: linearizable; 200 with the lease, 404 when free.
async fn get_lock(State(node): State<Arc<Node>>, ApiPath(name): ApiPath<String>) -> Result<Json<LeaseView>, ApiError> {
    Limits::DEFAULT.check_name("name", &name)?;
    match node.read(|table| table.get(&name)).await? {
        Some(view) => Ok(Json(view)),
        None => Err(LockError::NotHeld { name }.into()),
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
