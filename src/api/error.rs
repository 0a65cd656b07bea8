//! The one error type of the HTTP API. Every status code the API can answer
//! with is decided here.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};

use crate::node::NodeError;
use leasehold_core::{Denied, FencingToken, InvalidCommand, LockError};
use leasehold_proto::locks::Conflict;
use leasehold_proto::semaphores::PermitHolder;
use leasehold_proto::{ErrorBody, ErrorCode, ErrorDetail};

/// Seconds a client should wait before retrying a 503.
const RETRY_AFTER_SECS: u64 = 1;
/// How a 401 says which credentials it wants (RFC 6750).
const AUTHENTICATE: &str = "Bearer realm=\"leasehold\"";

/// An API error: a stable machine-readable [`ErrorCode`] (which fixes the
/// status), a message, and optional details merged into the body
/// `{"error": {"code": .., "message": .., ..details}}` ([`ErrorBody`]).
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Map<String, Value>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into(), details: Map::new() }
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    /// A fault of ours: logged with its detail, answered without it.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "internal error");
        Self::new(ErrorCode::Internal, "internal error")
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = ErrorBody { error: ErrorDetail { code: self.code, message: self.message, details: self.details } };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(AUTHENTICATE));
        }
        response
    }
}

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        let message = e.to_string();
        match e {
            LockError::HeldByOther { name, holder, token, expires_in_ms } => ApiError::new(ErrorCode::Held, message)
                .with("name", name)
                .with("holder", holder)
                .with("token", token.get())
                .with("expires_in_ms", expires_in_ms),
            LockError::NotHeld { name } => ApiError::new(ErrorCode::NotHeld, message).with("name", name),
            LockError::Reserved { name, first_waiter } => {
                ApiError::new(ErrorCode::Reserved, message).with("name", name).with("first_waiter", first_waiter)
            }
            LockError::Conflicts { conflicts } => {
                let conflicts: Vec<Conflict> = conflicts.into_iter().map(Conflict::from).collect();
                match serde_json::to_value(conflicts) {
                    Ok(conflicts) => ApiError::new(ErrorCode::Held, message).with("conflicts", conflicts),
                    Err(e) => ApiError::internal(e),
                }
            }
            LockError::LockDelayed { name, delayed_until_tick } => ApiError::new(ErrorCode::LockDelayed, message)
                .with("name", name)
                .with("delayed_until_tick", delayed_until_tick),
            LockError::StaleToken { name, given, current } => ApiError::new(ErrorCode::StaleToken, message)
                .with("name", name)
                .with("token", given.get())
                .with("current_token", current.get()),
            LockError::NotCurrent { lock, given, current } => ApiError::new(ErrorCode::StaleToken, message)
                .with("lock", lock)
                .with("token", given.get())
                .with("current_token", current.map(FencingToken::get)),
            LockError::GateRejected { resource, given, highest } => ApiError::new(ErrorCode::StaleToken, message)
                .with("resource", resource)
                .with("token", given.get())
                .with("highest", highest.get()),
            LockError::GateLockMismatch { resource, lock } => {
                ApiError::new(ErrorCode::LockMismatch, message).with("resource", resource).with("lock", lock)
            }
            LockError::Full { what, limit } => {
                ApiError::new(ErrorCode::Full, message).with("what", what).with("limit", limit)
            }
            LockError::WaitTimeout { name } => ApiError::new(ErrorCode::WaitTimeout, message).with("name", name),
            LockError::RequestIdReused { request_id } => {
                ApiError::new(ErrorCode::RequestIdReused, message).with("request_id", request_id)
            }
            LockError::SessionNotFound { session } => {
                ApiError::new(ErrorCode::SessionNotFound, message).with("session", session)
            }
            LockError::SeqTooOld { session, seq, oldest } => ApiError::new(ErrorCode::SeqTooOld, message)
                .with("session", session)
                .with("seq", seq)
                .with("oldest", oldest),
            LockError::SeqReused { session, seq } => {
                ApiError::new(ErrorCode::SeqReused, message).with("session", session).with("seq", seq)
            }
            LockError::HeldUnderSession { name, session } => {
                ApiError::new(ErrorCode::HeldUnderSession, message).with("name", name).with("session", session)
            }
            LockError::HeldShared { name, holders, token } => ApiError::new(ErrorCode::Held, message)
                .with("name", name)
                .with("shared_holders", holders)
                .with("token", token.get()),
            LockError::Deadlock { cycle } => ApiError::new(ErrorCode::Deadlock, message).with("cycle", cycle),
            LockError::SemaphoreFull { name, limit, in_use, waiting, holders } => {
                let holders: Vec<PermitHolder> = holders.into_iter().map(PermitHolder::from).collect();
                match serde_json::to_value(holders) {
                    Ok(holders) => ApiError::new(ErrorCode::SemaphoreFull, message)
                        .with("name", name)
                        .with("limit", limit)
                        .with("in_use", in_use)
                        .with("waiting", waiting)
                        .with("holders", holders),
                    Err(e) => ApiError::internal(e),
                }
            }
            LockError::LimitMismatch { name, limit, given } => ApiError::new(ErrorCode::LimitMismatch, message)
                .with("name", name)
                .with("limit", limit)
                .with("given", given),
            LockError::SemaphoreNotFound { name } => ApiError::new(ErrorCode::NoSemaphore, message).with("name", name),
            LockError::NoUser { user } => ApiError::new(ErrorCode::NoUser, message).with("user", user),
            LockError::NoRole { role } => ApiError::new(ErrorCode::NoRole, message).with("role", role),
            LockError::NoToken { user, token_id } => {
                ApiError::new(ErrorCode::NoToken, message).with("user", user).with("token_id", token_id)
            }
            LockError::Exists { what, name } => {
                ApiError::new(ErrorCode::AlreadyExists, message).with("what", what).with("name", name)
            }
            LockError::Invalid(invalid) => invalid.into(),
        }
    }
}

/// 403 `permission_denied`, naming the permission and the name (or the
/// list's prefix) it is missing on.
impl From<Denied> for ApiError {
    fn from(d: Denied) -> Self {
        let message = d.to_string();
        ApiError::new(ErrorCode::PermissionDenied, message)
            .with("permission", d.permission.as_str())
            .with("name", d.name)
            .with("principal", d.principal)
    }
}

impl From<InvalidCommand> for ApiError {
    fn from(e: InvalidCommand) -> Self {
        ApiError::bad_request(e.to_string()).with("field", e.field)
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::NotLeader { leader } => {
                let error = ApiError::new(ErrorCode::NotLeader, "leadership changed; retry");
                match leader {
                    Some((id, addr)) => error.with("leader", id).with("leader_addr", addr),
                    None => error,
                }
            }
            NodeError::Unavailable(m) => ApiError::unavailable(m),
            NodeError::AlreadyInitialized => {
                ApiError::new(ErrorCode::AlreadyInitialized, "cluster already initialized")
            }
            e @ NodeError::ClusterExists { .. } => ApiError::new(ErrorCode::AlreadyInitialized, e.to_string()),
            NodeError::InvalidMembership(m) => ApiError::bad_request(m),
            NodeError::NotMember(id) => {
                ApiError::new(ErrorCode::NotMember, format!("node {id} is not a member")).with("id", id)
            }
            e @ NodeError::WouldLoseQuorum { reachable, needed } => {
                ApiError::new(ErrorCode::WouldLoseQuorum, e.to_string())
                    .with("reachable", reachable)
                    .with("needed", needed)
            }
            e @ NodeError::Busy => ApiError::new(ErrorCode::Overloaded, e.to_string()),
            // Only a start meets a data folder's format.
            e @ NodeError::DataFormat(_) => ApiError::internal(e.to_string()),
            NodeError::Internal(m) => ApiError::internal(m),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(ErrorCode::BodyTooLarge, r.body_text()),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(ErrorCode::UnsupportedMediaType, r.body_text()),
            // Syntax errors, wrong types, missing and unknown fields.
            _ => ApiError::bad_request(r.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::bad_request(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::bad_request(r.body_text())
    }
}
