//! The lock API: `POST /v1/locks/{name}/acquire|renew|release`,
//! `GET /v1/locks/{name}` (a [`LeaseView`]), `GET /v1/locks/{name}/shared`
//! and `GET /v1/locks`; several
//! locks at once: `POST /v1/multi/acquire|release`.

use serde::{Deserialize, Serialize};

use crate::FencingToken;

/// `POST /v1/locks/{name}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// Who takes the lock; an acquire by the holder returns its own grant
    /// again. Under a session, the session's owner.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub owner: String,
    /// The lease's ttl; exactly one of `ttl_ms` and `session`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_ttl_ms))]
    pub ttl_ms: Option<u64>,
    /// Hold the lock as long as this session lives, instead of a ttl.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_session))]
    pub session: Option<u64>,
    /// Wait up to this long in the lock's FIFO queue when another owner holds it.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::wait_ms))]
    pub wait_ms: Option<u64>,
    /// Retries with the same id get the first answer (the same token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// Should this lease expire (not be released), nobody is granted the lock
    /// for this long after the expiry (`lock_delayed`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_delay_ms))]
    pub lock_delay_ms: Option<u64>,
    /// With `session`: this request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
    /// `exclusive` (the default) or `shared`: shared holders coexist, an
    /// exclusive holder excludes all. Shared mode takes `ttl_ms` or
    /// `session` (and `seq`), but no lock delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
}

/// How a lock is held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// One holder at a time (a write lock).
    #[default]
    Exclusive,
    /// Any number of shared holders together, none while an exclusive
    /// holder holds (a read lock).
    Shared,
}

/// `POST /v1/multi/acquire`: every lock of `names` in one log entry, or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MultiAcquireRequest {
    /// 1 to 64 distinct lock names, answered in this order.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_names))]
    pub names: Vec<String>,
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub owner: String,
    /// The leases' ttl; exactly one of `ttl_ms` and `session`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_ttl_ms))]
    pub ttl_ms: Option<u64>,
    /// Hold every lock as long as this session lives, instead of a ttl.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_session))]
    pub session: Option<u64>,
    /// Wait up to this long until every lock can be granted at once.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::wait_ms))]
    pub wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_delay_ms))]
    pub lock_delay_ms: Option<u64>,
    /// With `session`: this request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
}

/// The answer to a multi-acquire: one grant per lock, in the order asked,
/// all under `token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiLeaseResponse {
    /// The fencing token of every grant: the index of the entry that granted them.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub grants: Vec<Grant>,
    /// True when the owner already held every lock under `token` (leases restarted).
    pub reacquired: bool,
}

/// `POST /v1/multi/release`: every lock of `names`, all held under `token`, or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MultiReleaseRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_names))]
    pub names: Vec<String>,
    /// The token the multi-acquire answered (one for all its locks).
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// The session the lock(s) are held under; needed with `seq`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::release_session))]
    pub session: Option<u64>,
    /// With `session`: this request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
}

/// The answer to a multi-release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MultiReleaseResponse {
    pub names: Vec<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub released: bool,
}

/// `POST /v1/locks/{name}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    /// The new ttl; the grant's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::renew_ttl_ms))]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// `shared` for a shared lease, which `owner` must then name (shared
    /// holders granted in one entry share a token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// The shared holder; with `mode: "shared"` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::shared_owner))]
    pub owner: Option<String>,
}

/// `POST /v1/locks/{name}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// The session the lock(s) are held under; needed with `seq`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::release_session))]
    pub session: Option<u64>,
    /// With `session`: this request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
    /// `shared` for a shared lease, which `owner` must then name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
    /// The shared holder; with `mode: "shared"` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::shared_owner))]
    pub owner: Option<String>,
}

/// The answer to acquire and renew: the grant, with its fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseResponse {
    #[serde(flatten)]
    pub grant: Grant,
    /// Acquire only: true when the owner already held the lock (same token,
    /// lease restarted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reacquired: Option<bool>,
}

/// The answer to release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseResponse {
    pub name: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub released: bool,
}

/// The answer to `GET /v1/locks/{name}/shared`: who holds the lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SharedHoldersResponse {
    pub name: String,
    /// The shared holders, oldest grant first (empty when none).
    pub shared: Vec<Grant>,
    /// The exclusive holder, if any (never together with shared holders).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Grant>,
}

/// The query of `GET /v1/locks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only locks whose names start with this.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::list_prefix))]
    pub prefix: String,
    /// At most this many locks (1–1000, default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::list_limit))]
    pub limit: Option<usize>,
}

/// The answer to `GET /v1/locks`: held locks in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListResponse {
    /// Locks held exclusively.
    pub locks: Vec<LeaseView>,
    /// Locks held in shared mode (same `prefix` and `limit`), each with its
    /// shared holders; left out when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<SharedLockView>,
}

/// A lock held in shared mode, as `GET /v1/locks` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SharedLockView {
    pub name: String,
    /// Oldest grant first.
    pub holders: Vec<Grant>,
}

/// A successful acquire or renew, as the holder sees it: the wire twin of
/// the core's [`leasehold_core::Grant`] (same fields, same JSON), which the
/// core cannot describe in the OpenAPI document itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    pub name: String,
    pub owner: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub ttl_ms: u64,
    /// Real time the lease is guaranteed to last from the commit of the entry
    /// that produced this answer (longer if an election stalls the ticks).
    pub expires_in_ms: u64,
    /// The tick at which the lease expires.
    pub deadline_tick: u64,
}

impl From<leasehold_core::Grant> for Grant {
    fn from(g: leasehold_core::Grant) -> Self {
        let leasehold_core::Grant { name, owner, token, ttl_ms, expires_in_ms, deadline_tick } = g;
        Grant { name, owner, token, ttl_ms, expires_in_ms, deadline_tick }
    }
}

/// One lock of a multi-acquire that cannot be granted now, and why: an
/// element of `conflicts` in its 409 `held` (twin of [`leasehold_core::Conflict`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    pub name: String,
    #[serde(flatten)]
    pub blocker: Blocker,
}

/// What keeps a lock from a new acquire; `reason` names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Blocker {
    Held {
        holder: String,
        token: FencingToken,
        expires_in_ms: u64,
    },
    /// Free, under the lock delay of an expired lease.
    Delayed {
        delayed_until_tick: u64,
    },
    /// Free, and kept for the multi-acquire first in its queue.
    Reserved {
        first_waiter: String,
    },
    /// Held in shared mode by `holders` owners, the newest grant under `token`.
    Shared {
        holders: usize,
        token: FencingToken,
    },
}

impl From<leasehold_core::Conflict> for Conflict {
    fn from(c: leasehold_core::Conflict) -> Self {
        use leasehold_core::Blocker as Core;
        let blocker = match c.blocker {
            Core::Held { holder, token, expires_in_ms } => Blocker::Held { holder, token, expires_in_ms },
            Core::Delayed { delayed_until_tick } => Blocker::Delayed { delayed_until_tick },
            Core::Reserved { first_waiter } => Blocker::Reserved { first_waiter },
            Core::Shared { holders, token } => Blocker::Shared { holders, token },
        };
        Conflict { name: c.name, blocker }
    }
}

/// A waiter as a reader sees it (twin of [`leasehold_core::WaiterView`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaiterView {
    pub owner: String,
    /// 1 = next in line.
    pub position: usize,
}

impl From<leasehold_core::WaiterView> for WaiterView {
    fn from(w: leasehold_core::WaiterView) -> Self {
        WaiterView { owner: w.owner, position: w.position }
    }
}

/// A held lock as a reader sees it (twin of [`leasehold_core::LeaseView`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseView {
    pub name: String,
    pub owner: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub ttl_ms: u64,
    /// Lower bound on the real time left, counted in whole tick periods.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The session the lease lives by, if any (`ttl_ms` and the deadline
    /// are then the session's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// The queue, first in line first.
    #[serde(default)]
    pub waiters: Vec<WaiterView>,
}

impl From<leasehold_core::LeaseView> for LeaseView {
    fn from(v: leasehold_core::LeaseView) -> Self {
        let leasehold_core::LeaseView {
            name,
            owner,
            token,
            ttl_ms,
            expires_in_ms,
            deadline_tick,
            request_id,
            session,
            waiters,
        } = v;
        let waiters = waiters.into_iter().map(WaiterView::from).collect();
        LeaseView { name, owner, token, ttl_ms, expires_in_ms, deadline_tick, request_id, session, waiters }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures the twins write exactly the JSON of the core's values, so the
    // wire did not change with them.
    #[test]
    fn twins_write_the_core_json() {
        let grant = leasehold_core::Grant {
            name: "n".into(),
            owner: "o".into(),
            token: FencingToken::granted_at(7),
            ttl_ms: 5000,
            expires_in_ms: 4900,
            deadline_tick: 50,
        };
        let view = leasehold_core::LeaseView {
            name: "n".into(),
            owner: "o".into(),
            token: FencingToken::granted_at(7),
            ttl_ms: 5000,
            expires_in_ms: 4900,
            deadline_tick: 50,
            request_id: Some("r".into()),
            session: Some(4),
            waiters: vec![leasehold_core::WaiterView { owner: "w".into(), position: 1 }],
        };
        let json = |v: &dyn erased::Json| v.json();
        assert_eq!(json(&Grant::from(grant.clone())), json(&grant));
        let blockers = [
            leasehold_core::Blocker::Held {
                holder: "h".into(),
                token: FencingToken::granted_at(3),
                expires_in_ms: 100,
            },
            leasehold_core::Blocker::Delayed { delayed_until_tick: 9 },
            leasehold_core::Blocker::Reserved { first_waiter: "w".into() },
            leasehold_core::Blocker::Shared { holders: 2, token: FencingToken::granted_at(4) },
        ];
        for blocker in blockers {
            let conflict = leasehold_core::Conflict { name: "n".into(), blocker };
            assert_eq!(json(&Conflict::from(conflict.clone())), json(&conflict));
        }
        assert_eq!(json(&LeaseView::from(view.clone())), json(&view));
        let response = LeaseResponse { grant: grant.clone().into(), reacquired: Some(false) };
        let mut expected = serde_json::to_value(&grant).unwrap();
        expected["reacquired"] = false.into();
        assert_eq!(serde_json::to_value(&response).unwrap(), expected);
    }

    mod erased {
        pub trait Json {
            fn json(&self) -> serde_json::Value;
        }
        impl<T: serde::Serialize> Json for T {
            fn json(&self) -> serde_json::Value {
                serde_json::to_value(self).unwrap()
            }
        }
    }
}
