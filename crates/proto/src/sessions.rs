//! The session API: `POST /v1/sessions` (create), `POST
//! /v1/sessions/{id}/keepalive`, `DELETE /v1/sessions/{id}`, `GET
//! /v1/sessions/{id}` (the session and its locks) and `GET /v1/sessions`
//! (paged by id). Locks are taken under a session by naming it in an
//! acquire (`"session": id` instead of `ttl_ms`).

use serde::{Deserialize, Serialize};

use crate::FencingToken;

/// `POST /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    /// The owner of the session: every lock taken under it is taken as this owner.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::session_owner))]
    pub owner: String,
    #[serde(deserialize_with = "crate::int::u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::session_ttl_ms))]
    pub ttl_ms: u64,
    /// Retries with the same id get the first answer (the same session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// `POST /v1/sessions/{id}/keepalive`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct KeepAliveRequest {
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::keepalive_ttl_ms))]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// This request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
}

/// A session, as the answer to create, keepalive and get, and in lists
/// (twin of [`leasehold_core::SessionView`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionView {
    /// The id: the log index of the entry that created the session.
    pub session: u64,
    pub owner: String,
    pub ttl_ms: u64,
    /// Real time the session (and every lock under it) is guaranteed to
    /// last from the commit of the entry that produced this answer.
    pub expires_in_ms: u64,
    /// The tick at which the session expires.
    pub deadline_tick: u64,
    /// Locks held under the session.
    pub lock_count: usize,
    /// Locks a waiter of the session is queued for.
    pub waiting_count: usize,
    /// `GET /v1/sessions/{id}` only: the locks held under the session, in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<SessionLock>>,
}

/// A lock held under a session (twin of [`leasehold_core::SessionLock`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionLock {
    pub name: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
}

impl From<leasehold_core::SessionView> for SessionView {
    fn from(v: leasehold_core::SessionView) -> Self {
        let leasehold_core::SessionView {
            session,
            owner,
            ttl_ms,
            expires_in_ms,
            deadline_tick,
            lock_count,
            waiting_count,
            locks,
        } = v;
        let locks = locks.map(|l| l.into_iter().map(|l| SessionLock { name: l.name, token: l.token }).collect());
        SessionView { session, owner, ttl_ms, expires_in_ms, deadline_tick, lock_count, waiting_count, locks }
    }
}

/// The answer to `DELETE /v1/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeleteSessionResponse {
    pub session: u64,
    pub deleted: bool,
    /// The locks the session held, released (each handed to its first waiter) in the same entry.
    pub released: Vec<String>,
}

/// The query of `DELETE /v1/sessions/{id}`: a delete has no body, so its
/// request id rides in the query. A retry of a delete that took effect
/// (its answer lost) then gets the first answer, not `session_not_found`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct DeleteSessionQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// The query of `GET /v1/sessions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct SessionListQuery {
    /// Only sessions with ids above this: the last id of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::session_after))]
    pub after: Option<u64>,
    /// At most this many sessions (1–1000, default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::list_limit))]
    pub limit: Option<usize>,
}

/// The answer to `GET /v1/sessions`: live sessions in id order, without their lock lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionListResponse {
    pub sessions: Vec<SessionView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures the twin writes exactly the JSON of the core's view.
    #[test]
    fn twin_writes_the_core_json() {
        let core = leasehold_core::SessionView {
            session: 12,
            owner: "o".into(),
            ttl_ms: 5000,
            expires_in_ms: 4900,
            deadline_tick: 60,
            lock_count: 1,
            waiting_count: 0,
            locks: Some(vec![leasehold_core::SessionLock { name: "a".into(), token: FencingToken::granted_at(14) }]),
        };
        let twin = SessionView::from(core.clone());
        assert_eq!(serde_json::to_value(&twin).unwrap(), serde_json::to_value(&core).unwrap());
    }
}
