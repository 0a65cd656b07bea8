//! The error body every non-2xx answer carries:
//! `{"error": {"code": "...", "message": "...", ..details}}`.
//!
//! [`ErrorCode`] is the stable, machine-readable part; each code has exactly
//! one HTTP status ([`ErrorCode::status`]), so a client can rely on either.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::FencingToken;

/// Every error code the API answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: a field is missing, malformed or out of range (`field` names it).
    InvalidArgument,
    /// 401: the part of the API asked for needs a bearer token.
    Unauthenticated,
    /// 403: the token presented does not open this part of the API.
    PermissionDenied,
    /// 404: no such endpoint.
    NotFound,
    /// 404: the lock is free (renew, release, get).
    NotHeld,
    /// 404: no fenced record under this key.
    NoRecord,
    /// 404: this node has no snapshot yet.
    NoSnapshot,
    /// 404: nobody holds or waits for a permit of this semaphore (`name`).
    NoSemaphore,
    /// 404: no member with this id.
    NotMember,
    /// 404: no live session with this id (`session`): never created,
    /// expired or deleted. Its locks are gone with it.
    SessionNotFound,
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 408: the request was not answered within the node's request timeout.
    RequestTimeout,
    /// 409: another owner holds the lock (`holder`, `token`, `expires_in_ms`);
    /// for a multi-acquire, some of its locks cannot be granted now
    /// (`conflicts`: one `{name, reason, ..}` each, see [`Conflict`]).
    ///
    /// [`Conflict`]: crate::locks::Conflict
    Held,
    /// 409: the lock is free, but its last lease expired with a lock delay
    /// that runs until tick `delayed_until_tick`.
    LockDelayed,
    /// 409: the lock is free, but reserved for `first_waiter`, a
    /// multi-acquire first in its queue that waits for its other locks.
    Reserved,
    /// 409: the token is not the current one (`current_token`, or a gate's `highest`).
    StaleToken,
    /// 409: the wait in the lock's queue ran out before the lock passed to this owner.
    WaitTimeout,
    /// 409: a gate serves another lock.
    LockMismatch,
    /// 409: a renew of a lock held under a session (`session`): keep the
    /// session alive instead; the lock has no lease of its own.
    HeldUnderSession,
    /// 409: a session-bound request's `seq` is older than the answers its
    /// session remembers (`session`, `seq`, `oldest`): not applied again.
    SeqTooOld,
    /// 409: a session-bound request's `seq` already answered a different
    /// request of its session (`session`, `seq`): not applied.
    SeqReused,
    /// 409: this request id was used for a different request.
    RequestIdReused,
    /// 409: the cluster is initialized already.
    AlreadyInitialized,
    /// 409: the membership change would leave no reachable quorum.
    WouldLoseQuorum,
    /// 404: the election has no leader (nobody campaigned, or the last
    /// leadership ended and no candidate waits).
    NoLeader,
    /// 410: an event stream was asked to resume after an index older than
    /// the node's event history keeps (`compacted_before`): re-read the
    /// state, then resume after the index of that read.
    Compacted,
    /// 413: the request body is too large.
    BodyTooLarge,
    /// 415: the request body is not `application/json`.
    UnsupportedMediaType,
    /// 500: a fault of the node (logged there with its detail).
    Internal,
    /// 503: no quorum, no leader, or shutting down; retry after `Retry-After`.
    Unavailable,
    /// 503: leadership changed while the request was served; retry.
    NotLeader,
    /// 503: too many connections, requests in flight, waiting requests or
    /// event streams on this node (in all, or from the caller's address);
    /// retry after `Retry-After`.
    Overloaded,
    /// 400: plain http sent to a node that serves https only.
    TlsRequired,
    /// 507: a quota is used up, and the request would take more of it: a
    /// new grant (`what`: `leases`), a new place in a queue (`waiters`), a
    /// session, a record or a gate; `limit` is the quota's size. Renewals,
    /// releases, re-acquires by the holder and expiry still work, so room
    /// comes back by itself.
    Full,
    /// 409: waiting would close a cycle of owners each waiting for the next
    /// (`cycle`: the asking owner first; the last waits for the first), so
    /// the acquire is refused at once instead of waiting out its `wait_ms`.
    Deadlock,
    /// 409: no permit of the semaphore is free for this acquire, or others
    /// wait first (`limit`, `in_use`, `waiting`, `holders`). Not `full`,
    /// which is the cluster's own quotas (507).
    SemaphoreFull,
    /// 409: the semaphore exists with another limit (`limit`, `given`).
    LimitMismatch,
    /// 404: no such user (`user`).
    NoUser,
    /// 404: no such role (`role`).
    NoRole,
    /// 404: the user has no token with this id (`user`, `token_id`).
    NoToken,
    /// 409: a user or role of this name exists already (`what`, `name`).
    AlreadyExists,
    /// A code this client does not know (a newer server): read `status`.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The HTTP status this code is always answered with.
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidArgument | TlsRequired => 400,
            Unauthenticated => 401,
            PermissionDenied => 403,
            NotFound | NotHeld | NoRecord | NoSnapshot | NoSemaphore | NotMember | SessionNotFound | NoLeader
            | NoUser | NoRole | NoToken => 404,
            MethodNotAllowed => 405,
            RequestTimeout => 408,
            Held | LockDelayed | Reserved | StaleToken | WaitTimeout | LockMismatch | HeldUnderSession | SeqTooOld
            | SeqReused | RequestIdReused | AlreadyInitialized | WouldLoseQuorum | Deadlock | SemaphoreFull
            | LimitMismatch | AlreadyExists => 409,
            Compacted => 410,
            BodyTooLarge => 413,
            UnsupportedMediaType => 415,
            Internal | Unknown => 500,
            Unavailable | NotLeader | Overloaded => 503,
            Full => 507,
        }
    }

    /// The code as it appears on the wire (`"held"`, `"stale_token"`, ...).
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidArgument => "invalid_argument",
            Unauthenticated => "unauthenticated",
            PermissionDenied => "permission_denied",
            NotFound => "not_found",
            NotHeld => "not_held",
            NoRecord => "no_record",
            NoSnapshot => "no_snapshot",
            NoSemaphore => "no_semaphore",
            NotMember => "not_member",
            SessionNotFound => "session_not_found",
            MethodNotAllowed => "method_not_allowed",
            RequestTimeout => "request_timeout",
            Held => "held",
            LockDelayed => "lock_delayed",
            Reserved => "reserved",
            StaleToken => "stale_token",
            WaitTimeout => "wait_timeout",
            LockMismatch => "lock_mismatch",
            HeldUnderSession => "held_under_session",
            SeqTooOld => "seq_too_old",
            SeqReused => "seq_reused",
            RequestIdReused => "request_id_reused",
            AlreadyInitialized => "already_initialized",
            WouldLoseQuorum => "would_lose_quorum",
            NoLeader => "no_leader",
            Compacted => "compacted",
            BodyTooLarge => "body_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            Internal => "internal",
            Unavailable => "unavailable",
            NotLeader => "not_leader",
            Overloaded => "overloaded",
            TlsRequired => "tls_required",
            Full => "full",
            Deadlock => "deadlock",
            SemaphoreFull => "semaphore_full",
            LimitMismatch => "limit_mismatch",
            NoUser => "no_user",
            NoRole => "no_role",
            NoToken => "no_token",
            AlreadyExists => "already_exists",
            Unknown => "unknown",
        }
    }

    /// Every code but [`ErrorCode::Unknown`], for documents and tests.
    pub const ALL: [ErrorCode; 41] = {
        use ErrorCode::*;
        [
            InvalidArgument,
            Unauthenticated,
            PermissionDenied,
            NotFound,
            NotHeld,
            NoRecord,
            NoSnapshot,
            NoSemaphore,
            NotMember,
            SessionNotFound,
            MethodNotAllowed,
            RequestTimeout,
            Held,
            LockDelayed,
            Reserved,
            StaleToken,
            WaitTimeout,
            LockMismatch,
            HeldUnderSession,
            SeqTooOld,
            SeqReused,
            RequestIdReused,
            AlreadyInitialized,
            WouldLoseQuorum,
            NoLeader,
            Compacted,
            BodyTooLarge,
            UnsupportedMediaType,
            Internal,
            Unavailable,
            NotLeader,
            Overloaded,
            TlsRequired,
            Full,
            Deadlock,
            SemaphoreFull,
            LimitMismatch,
            NoUser,
            NoRole,
            NoToken,
            AlreadyExists,
        ]
    };
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every error answer (`Error` in the OpenAPI document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Error))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: the code, a message for people, and the code's details
/// (`name`, `holder`, `token`, `current_token`, `field`, ...) beside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

impl ErrorDetail {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorDetail { code, message: message.into(), details: Map::new() }
    }

    /// The detail `key` as text.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.details.get(key)?.as_str()
    }

    /// The detail `key` as a number (tokens, limits, indexes).
    pub fn number(&self, key: &str) -> Option<u64> {
        self.details.get(key)?.as_u64()
    }

    /// `held`: who holds the lock.
    pub fn holder(&self) -> Option<&str> {
        self.text("holder")
    }

    /// `held` of a multi-acquire: every lock that could not be granted, and why.
    pub fn conflicts(&self) -> Vec<crate::locks::Conflict> {
        self.details.get("conflicts").and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default()
    }

    /// `stale_token`: the lock's current token (`None` when it is free, or
    /// for a gate's refusal of a token below its `highest`).
    pub fn current_token(&self) -> Option<FencingToken> {
        self.number("current_token").map(FencingToken::granted_at)
    }
}

/// The schemas by hand: `ErrorCode` lists [`ErrorCode::ALL`] (never
/// `unknown`, which only a client reads), and `ErrorDetail` has its code's
/// details beside `code` and `message` (serde's `flatten` of a map, which
/// the derive cannot describe).
#[cfg(feature = "openapi")]
mod openapi {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
    use utoipa::openapi::{Ref, RefOr};
    use utoipa::{PartialSchema, ToSchema};

    use super::{ErrorCode, ErrorDetail};

    impl PartialSchema for ErrorCode {
        fn schema() -> RefOr<Schema> {
            let codes = ErrorCode::ALL.iter().map(|c| c.as_str());
            let description = ErrorCode::ALL
                .iter()
                .map(|c| format!("`{}` ({})", c.as_str(), c.status()))
                .collect::<Vec<_>>()
                .join(", ");
            let schema = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(codes)).description(Some(
                format!("The stable, machine-readable error code; each has exactly one HTTP status: {description}."),
            ));
            RefOr::T(Schema::Object(schema.build()))
        }
    }

    impl ToSchema for ErrorCode {}

    impl PartialSchema for ErrorDetail {
        fn schema() -> RefOr<Schema> {
            let schema = ObjectBuilder::new()
                .property("code", Ref::from_schema_name(ErrorCode::name()))
                .required("code")
                .property("message", String::schema())
                .required("message")
                .additional_properties(Some(AdditionalProperties::FreeForm(true)))
                .description(Some(
                    "The code, a message for people, and the code's details (`name`, `holder`, `token`, \
                     `current_token`, `field`, ...) beside them.",
                ));
            RefOr::T(Schema::Object(schema.build()))
        }
    }

    impl ToSchema for ErrorDetail {
        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push((ErrorCode::name().into_owned(), ErrorCode::schema()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures every code's wire name is what serde writes, and reads back.
    #[test]
    fn codes_round_trip_by_their_wire_names() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
        assert_eq!(serde_json::from_str::<ErrorCode>("\"from_the_future\"").unwrap(), ErrorCode::Unknown);
    }

    // Ensures details sit beside code and message, as the API has always written them.
    #[test]
    fn details_are_flattened_into_the_error_object() {
        let text = r#"{"error":{"code":"held","message":"m","holder":"w1","token":7}}"#;
        let body: ErrorBody = serde_json::from_str(text).unwrap();
        assert_eq!(
            (body.error.code, body.error.holder(), body.error.number("token")),
            (ErrorCode::Held, Some("w1"), Some(7))
        );
        assert_eq!(serde_json::to_string(&body).unwrap(), text);
    }
}
