//! The one error type of the HTTP API. Every status code the API can answer
//! with is decided here.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::lock::{InvalidCommand, LockError};
use crate::node::NodeError;

/// Seconds a client should wait before retrying a 503.
const RETRY_AFTER_SECS: u64 = 1;
/// How a 401 says which credentials it wants (RFC 6750).
const AUTHENTICATE: &str = "Bearer realm=\"leasehold\"";

/// An API error: status, a stable machine-readable `code`, a message, and
/// optional details merged into the body
/// `{"error": {"code": .., "message": .., ..details}}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), details: Map::new() }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// A fault of ours: logged with its detail, answered without it.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = Map::new();
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.into());
        error.extend(self.details);
        let mut response = (self.status, Json(json!({ "error": error }))).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(AUTHENTICATE));
        }
        response
    }
}

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        let message = e.to_string();
        match e {
            LockError::HeldByOther { name, holder, token, expires_in_ms } => {
                ApiError::new(StatusCode::CONFLICT, "held", message)
                    .with("name", name)
                    .with("holder", holder)
                    .with("token", token)
                    .with("expires_in_ms", expires_in_ms)
            }
            LockError::NotHeld { name } => ApiError::new(StatusCode::NOT_FOUND, "not_held", message).with("name", name),
            LockError::StaleToken { name, given, current } => {
                ApiError::new(StatusCode::CONFLICT, "stale_token", message)
                    .with("name", name)
                    .with("token", given)
                    .with("current_token", current)
            }
            LockError::NotCurrent { lock, given, current } => {
                ApiError::new(StatusCode::CONFLICT, "stale_token", message)
                    .with("lock", lock)
                    .with("token", given)
                    .with("current_token", current)
            }
            LockError::GateRejected { resource, given, highest } => {
                ApiError::new(StatusCode::CONFLICT, "stale_token", message)
                    .with("resource", resource)
                    .with("token", given)
                    .with("highest", highest)
            }
            LockError::GateLockMismatch { resource, lock } => {
                ApiError::new(StatusCode::CONFLICT, "lock_mismatch", message)
                    .with("resource", resource)
                    .with("lock", lock)
            }
            LockError::Full { what, limit } => {
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "full", message).with("what", what).with("limit", limit)
            }
            LockError::WaitTimeout { name } => {
                ApiError::new(StatusCode::CONFLICT, "wait_timeout", message).with("name", name)
            }
            LockError::RequestIdReused { request_id } => {
                ApiError::new(StatusCode::CONFLICT, "request_id_reused", message).with("request_id", request_id)
            }
            LockError::Invalid(invalid) => invalid.into(),
        }
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
                let error = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_leader", "leadership changed; retry");
                match leader {
                    Some((id, addr)) => error.with("leader", id).with("leader_addr", addr),
                    None => error,
                }
            }
            NodeError::Unavailable(m) => ApiError::unavailable(m),
            NodeError::AlreadyInitialized => {
                ApiError::new(StatusCode::CONFLICT, "already_initialized", "cluster already initialized")
            }
            NodeError::InvalidMembership(m) => ApiError::bad_request(m),
            NodeError::NotMember(id) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_member", format!("node {id} is not a member")).with("id", id)
            }
            e @ NodeError::WouldLoseQuorum { reachable, needed } => {
                ApiError::new(StatusCode::CONFLICT, "would_lose_quorum", e.to_string())
                    .with("reachable", reachable)
                    .with("needed", needed)
            }
            NodeError::Internal(m) => ApiError::internal(m),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(r.status(), "body_too_large", r.body_text()),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(r.status(), "unsupported_media_type", r.body_text()),
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
