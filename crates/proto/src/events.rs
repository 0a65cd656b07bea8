//! The lock events of `GET /v1/locks/{name}/events`, `GET /v1/events` and
//! `GET /v1/elections/{name}/observe`: each Server-Sent Event's `data` is one
//! [`LockEvent`] as JSON, its `event` the `type` field, its `id` where it
//! stands in the log: the entry index for the last event of an entry,
//! `INDEX.ORDINAL` for an earlier one. A stream resumes right after any id
//! (`Last-Event-ID`, or `?after=`) on any node. Every event says who caused
//! it in `by` ([`Actor`]: `user:NAME`, `client`, `admin`, `cluster`,
//! `unknown`), and the streams take `?by=` to keep only one actor's. Twins
//! of the core's values (see the crate documentation).

use serde::{Deserialize, Serialize};

use crate::FencingToken;
pub use leasehold_core::Actor;

/// The query of `GET /v1/events`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events of locks (and elections) whose names start with this
    /// (session events have no name: they come only without a prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Resume right after this event id (an entry index, or
    /// `INDEX.ORDINAL`); takes precedence over `Last-Event-ID`. Without
    /// either, the stream starts with the next entry applied. An id older
    /// than the node's history is answered `410 compacted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub after: Option<String>,
    /// Only events caused by this actor: `user:NAME`, `client`, `admin`,
    /// `cluster` or `unknown` (each event's `by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::actor_filter))]
    pub by: Option<Actor>,
}

/// The query of a stream of one name (`/v1/locks/{name}/events`,
/// `/v1/elections/{name}/observe`): where it resumes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ResumeQuery {
    /// Resume right after this event id (an entry index, or
    /// `INDEX.ORDINAL`); takes precedence over `Last-Event-ID`. Without
    /// either, the stream starts with the next entry applied. An id older
    /// than the node's history is answered `410 compacted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub after: Option<String>,
    /// Only events caused by this actor: `user:NAME`, `client`, `admin`,
    /// `cluster` or `unknown` (each event's `by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::actor_filter))]
    pub by: Option<Actor>,
}

/// The last frame of a stream that fell behind the node's event history
/// (SSE event `compacted`): re-read the state, then resume after the index
/// of that read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedFrame {
    /// Events of entries before this index may be gone from the history.
    pub compacted_before: u64,
}

/// One change to one lock, stamped with the index of the log entry that made
/// it and who caused it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockEvent {
    pub index: u64,
    pub name: String,
    #[serde(flatten)]
    pub kind: EventKind,
    /// Who caused it; `unknown` from a server of an earlier version, which
    /// does not send it.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::actor))]
    pub by: Actor,
}

/// What happened; `type` names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A free lock was granted (token = `index`): to a new acquire, or to
    /// the first waiter when a lock delay ends.
    Acquired {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
    },
    /// The holder restarted its lease (also a same-owner re-acquire).
    Renewed {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
    },
    Released {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
    },
    /// A Tick reached the lease's deadline. With `delayed_until_tick` the
    /// lease had a lock delay: the lock stays free for everyone until that
    /// tick (`delay_ended`), and is not handed over before.
    Expired {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delayed_until_tick: Option<u64>,
    },
    /// The lock delay after the expiry of `owner`'s lease under `token`
    /// ended; the first waiter, if any, is granted in the same entry.
    DelayEnded {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
    },
    /// The lock passed to the first waiter in the entry that freed it (token = `index`).
    HandedOver {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
        from_owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        from_token: FencingToken,
    },
    /// `owner` joined the queue at `position` (1 = next).
    Queued { owner: String, position: usize },
    /// `owner`'s wait ran out before the lock passed to it.
    WaitTimeout { owner: String },
    /// `owner` left the queue because its client went away, or because
    /// the session it waited under ended.
    Cancelled { owner: String },
    /// `owner` opened `session` (its id is `index`). Session events have an
    /// empty `name`: they are about no one lock (`GET /v1/events` only).
    SessionCreated { owner: String, session: u64, ttl_ms: u64 },
    /// The session's deadline passed; its locks expired in this entry.
    SessionExpired { owner: String, session: u64 },
    /// The session was deleted; its locks were released in this entry.
    SessionDeleted { owner: String, session: u64 },
    /// `owner`, leader of the election `name` under `token`, announces
    /// `value`: when it is elected (right after the `acquired` or
    /// `handed_over` event of the same entry) and when it proclaims.
    Proclaimed {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
        value: serde_json::Value,
    },
    /// Semaphore `name` granted `permits` to `owner` (token = `index`).
    /// Semaphore events have kinds of their own: a lock's stream of the
    /// same name shows them, told apart by `type`.
    PermitsGranted {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
        permits: u32,
    },
    PermitsRenewed {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
    },
    PermitsReleased {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
        permits: u32,
    },
    /// The permits' lease ended on a Tick: they are free again.
    PermitsExpired {
        owner: String,
        #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
        token: FencingToken,
        permits: u32,
    },
    /// `owner` joined the semaphore's queue at `position` (1 = next).
    PermitsQueued { owner: String, permits: u32, position: usize },
    /// `owner` left the semaphore's queue ungranted (`timed_out`, or its client went away).
    PermitWaitEnded { owner: String, timed_out: bool },
    /// Users and roles changed (no lock name; only the admin API's callers
    /// read it): `change` is `user_added`, `user_removed`, `token_added`,
    /// `token_revoked`, `role_added`, `role_removed`, `granted`, `revoked`,
    /// `role_assigned` or `role_unassigned`; `subject` the user or role;
    /// `detail` a token's id (never the token), a grant, or a role.
    AccessChanged {
        change: String,
        subject: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

impl From<leasehold_core::LockEvent> for LockEvent {
    fn from(e: leasehold_core::LockEvent) -> Self {
        use leasehold_core::EventKind as Core;
        let kind = match e.kind {
            Core::Acquired { owner, token } => EventKind::Acquired { owner, token },
            Core::Renewed { owner, token } => EventKind::Renewed { owner, token },
            Core::Released { owner, token, .. } => EventKind::Released { owner, token },
            Core::Expired { owner, token, delayed_until_tick, .. } => {
                EventKind::Expired { owner, token, delayed_until_tick }
            }
            Core::DelayEnded { owner, token } => EventKind::DelayEnded { owner, token },
            Core::HandedOver { owner, token, from_owner, from_token } => {
                EventKind::HandedOver { owner, token, from_owner, from_token }
            }
            Core::Queued { owner, position } => EventKind::Queued { owner, position },
            Core::WaitTimeout { owner } => EventKind::WaitTimeout { owner },
            Core::Cancelled { owner } => EventKind::Cancelled { owner },
            Core::SessionCreated { owner, session, ttl_ms } => EventKind::SessionCreated { owner, session, ttl_ms },
            Core::SessionExpired { owner, session } => EventKind::SessionExpired { owner, session },
            Core::SessionDeleted { owner, session } => EventKind::SessionDeleted { owner, session },
            Core::Proclaimed { owner, token, value } => {
                EventKind::Proclaimed { owner, token, value: crate::elections::parse_value(&value) }
            }
            Core::PermitsGranted { owner, token, permits } => EventKind::PermitsGranted { owner, token, permits },
            Core::PermitsRenewed { owner, token } => EventKind::PermitsRenewed { owner, token },
            Core::PermitsReleased { owner, token, permits } => EventKind::PermitsReleased { owner, token, permits },
            Core::PermitsExpired { owner, token, permits } => EventKind::PermitsExpired { owner, token, permits },
            Core::PermitsQueued { owner, permits, position } => EventKind::PermitsQueued { owner, permits, position },
            Core::PermitWaitEnded { owner, timed_out } => EventKind::PermitWaitEnded { owner, timed_out },
            Core::AccessChanged { change, subject, detail } => EventKind::AccessChanged { change, subject, detail },
        };
        LockEvent { index: e.index, name: e.name, kind, by: e.by }
    }
}

impl EventKind {
    /// The event's name on the stream: its `type`.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Acquired { .. } => "acquired",
            EventKind::Renewed { .. } => "renewed",
            EventKind::Released { .. } => "released",
            EventKind::Expired { .. } => "expired",
            EventKind::DelayEnded { .. } => "delay_ended",
            EventKind::HandedOver { .. } => "handed_over",
            EventKind::Queued { .. } => "queued",
            EventKind::WaitTimeout { .. } => "wait_timeout",
            EventKind::Cancelled { .. } => "cancelled",
            EventKind::SessionCreated { .. } => "session_created",
            EventKind::SessionExpired { .. } => "session_expired",
            EventKind::SessionDeleted { .. } => "session_deleted",
            EventKind::Proclaimed { .. } => "proclaimed",
            EventKind::PermitsGranted { .. } => "permits_granted",
            EventKind::PermitsRenewed { .. } => "permits_renewed",
            EventKind::PermitsReleased { .. } => "permits_released",
            EventKind::PermitsExpired { .. } => "permits_expired",
            EventKind::PermitsQueued { .. } => "permits_queued",
            EventKind::PermitWaitEnded { .. } => "permit_wait_ended",
            EventKind::AccessChanged { .. } => "access_changed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures the twin writes exactly the JSON of the core's event, and its name is its `type`.
    #[test]
    fn twin_writes_the_core_json() {
        let core = leasehold_core::LockEvent {
            index: 9,
            name: "n".into(),
            kind: leasehold_core::EventKind::HandedOver {
                owner: "b".into(),
                token: FencingToken::granted_at(9),
                from_owner: "a".into(),
                from_token: FencingToken::granted_at(3),
            },
            by: Actor::Principal(leasehold_core::Principal::User("alice".into())),
        };
        let session = leasehold_core::LockEvent {
            index: 4,
            name: String::new(),
            kind: leasehold_core::EventKind::SessionExpired { owner: "s".into(), session: 2 },
            by: Actor::Cluster,
        };
        let permits = leasehold_core::LockEvent {
            index: 5,
            name: "s".into(),
            kind: leasehold_core::EventKind::PermitsExpired {
                owner: "p".into(),
                token: FencingToken::granted_at(3),
                permits: 2,
            },
            by: Actor::Unknown,
        };
        for core in [core, session, permits] {
            let twin = LockEvent::from(core.clone());
            let json = serde_json::to_value(&twin).unwrap();
            assert_eq!(json, serde_json::to_value(&core).unwrap());
            assert_eq!(json["type"], twin.kind.name());
        }
    }

    // Ensures an event says who caused it as `by`, and one from a server of
    // an earlier version (no `by`) reads as `unknown`.
    #[test]
    fn by_is_text_and_optional() {
        let json = r#"{"index":3,"name":"a","type":"acquired","owner":"o","token":3,"by":"user:alice"}"#;
        let event: LockEvent = serde_json::from_str(json).unwrap();
        assert_eq!(event.by.to_string(), "user:alice");
        assert_eq!(serde_json::to_string(&event).unwrap(), json);
        let old: LockEvent = serde_json::from_str(r#"{"index":3,"name":"a","type":"cancelled","owner":"o"}"#).unwrap();
        assert_eq!(old.by, Actor::Unknown);
    }
}
