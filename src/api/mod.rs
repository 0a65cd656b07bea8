//! The HTTP API (axum): the client API under `/v1/locks`, `/v1/multi`, `/v1/semaphores`, `/v1/sessions` and
//! `/v1/elections` (with its SSE event streams, which resume after an event id), the fence API under `/v1/fence`
//! and `/v1/records`, the admin API under
//! `/v1/cluster`, inbound Raft RPC under `/raft`, `/healthz` (liveness) and
//! `/readyz` (readiness); for
//! operators, `/metrics` (Prometheus), the status page at `/` and `/ui`, and
//! the OpenAPI document at `/openapi.json`. Who may call what: [`auth`].
//!
//! Clients may talk to any node ([`forward`]). On a follower the client
//! API's handlers run there, and the node hands their commands (and asks
//! for the read index of their reads) to the leader over the peer
//! transport; membership changes and the rest of the admin API are relayed
//! to the leader whole. Handlers never touch sled; they call the [`Node`].

mod access;
mod admin;
mod auth;
mod elections;
mod error;
mod events;
mod fence;
mod forward;

mod limits;
pub use limits::{RequestLimits, DEFAULT_MAX_IN_FLIGHT, DEFAULT_REQUEST_TIMEOUT};
mod locks;
mod metrics;
mod nodes;
pub mod openapi;
mod raft_rpc;
mod semaphores;
mod sessions;
mod ui;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Extension, FromRequest, FromRequestParts};
use axum::{middleware, Router};
use leasehold_proto::locks::ListQuery;
use leasehold_proto::{ErrorCode, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};

pub use error::ApiError;

use crate::node::Node;
use crate::security::Secrets;
use auth::Authz;
use leasehold_core::{Command, Limits, Outcome};

/// Largest client or admin request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest Raft RPC body (entry batches and snapshot chunks are bigger).
const MAX_RAFT_BODY_BYTES: usize = 32 << 20;

/// A JSON body whose rejections become [`ApiError`]s.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// A path parameter whose rejections become [`ApiError`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// Query parameters whose rejections become [`ApiError`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// What the API checks on every request: the tokens of each part, and the
/// request limits.
#[derive(Debug, Clone, Default)]
pub struct ApiConfig {
    pub secrets: Secrets,
    pub request_limits: RequestLimits,
    /// The members reach this node on a peer port of its own: Raft RPC is
    /// not served here over HTTP (`/raft/*` answers 404), so the client
    /// port takes nothing from members.
    pub peer_port: bool,
}

/// The whole HTTP surface of a node.
///
/// Each part checks its token ([`auth`]) before anything else, on the node
/// asked, so a follower forwards only requests it would itself accept.
/// `/healthz`, `/readyz`, `/metrics` and the status page's HTML are open to
/// all (load balancers, supervisors and scrapers have no token, and the page
/// holds no data: it asks for a token and sends it on the calls it makes).
/// Once the node has any secret, everything else asks for a credential
/// ([`crate::security`]).
pub fn router(node: Arc<Node>, config: &ApiConfig) -> Router {
    let handing_off = forward::Forwarding::handing_off(node.clone());
    let relaying = forward::Forwarding::relaying(node.clone());
    let hand_off = || middleware::from_fn_with_state(handing_off.clone(), forward::to_leader);
    let to_leader = || middleware::from_fn_with_state(relaying.clone(), forward::to_leader);
    let users: Arc<dyn auth::Directory> = node.clone();
    let guard_of = |part| auth::Guard::new(&config.secrets, part, Some(users.clone()));
    let guard = |part| middleware::from_fn_with_state(guard_of(part), auth::require);
    let client = locks::routes()
        .merge(semaphores::routes())
        .merge(sessions::routes())
        .merge(fence::routes())
        .merge(elections::routes())
        .merge(access::client_routes())
        .route_layer(hand_off())
        .merge(events::routes())
        .merge(elections::observe_routes())
        .route_layer(guard(auth::Part::Client));
    let admin = admin::leader_routes()
        .merge(semaphores::admin_routes())
        .merge(access::admin_routes())
        .route_layer(to_leader())
        .merge(admin::local_admin_routes())
        .route_layer(guard(auth::Part::Admin));
    let observe = admin::status_routes(guard_of(auth::Part::Admin))
        .merge(nodes::routes())
        .merge(openapi::routes())
        .route_layer(guard(auth::Part::Observe));
    let limits = &config.request_limits;
    // The event streams' budget: taken by the streams, shown by status and metrics.
    let subscribers = events::Subscribers::new(limits.max_subscribers, limits.max_subscribers_per_client);
    let api = client
        .merge(admin)
        .merge(observe)
        .merge(admin::health_routes())
        .merge(metrics::routes())
        .merge(ui::routes())
        .layer(Extension(subscribers))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(limits::Admission::new(limits), limits::admit));
    let api = match config.peer_port {
        true => api,
        false => api.merge(
            raft_rpc::routes()
                .route_layer(guard(auth::Part::Raft))
                .layer(DefaultBodyLimit::max(MAX_RAFT_BODY_BYTES))
                .layer(middleware::from_fn_with_state(limits::Admission::deadline_only(limits), limits::admit)),
        ),
    };
    api.fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such endpoint") })
        .method_not_allowed_fallback(|| async { ApiError::new(ErrorCode::MethodNotAllowed, "method not allowed here") })
        .with_state(node)
}

/// The `limit` of a list query (its default when absent), once the limit
/// and the `prefix` are checked: one rule for every list of names.
fn list_limit(query: &ListQuery) -> Result<usize, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(
            ApiError::bad_request(format!("limit must be between 1 and {MAX_LIST_LIMIT}")).with("field", "limit")
        );
    }
    if query.prefix.len() > Limits::DEFAULT.max_name_bytes {
        return Err(ApiError::bad_request("prefix is longer than a name can be").with("field", "prefix"));
    }
    Ok(limit)
}

/// Validates `command`, proposes it as the caller's (its events say they
/// are by the caller's principal), and turns a refusal into its ApiError.
async fn propose(node: &Node, authz: &Authz, command: Command) -> Result<Outcome, ApiError> {
    command.validate(&Limits::DEFAULT)?;
    Ok(node.propose(command, authz.0.clone()).await??)
}

/// An outcome the handler's command cannot produce: a bug, answered 500.
fn unexpected(outcome: Outcome) -> ApiError {
    ApiError::internal(format!("unexpected outcome {outcome:?}"))
}

#[cfg(test)]
mod tests;
