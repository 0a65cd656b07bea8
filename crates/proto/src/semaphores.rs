//! The semaphore API: `POST /v1/semaphores/{name}/acquire|renew|release`,
//! `GET /v1/semaphores/{name}` (a [`SemaphoreView`]), `GET /v1/semaphores`,
//! and the operator's `POST /v1/semaphores/{name}/limit`.

use serde::{Deserialize, Serialize};

use crate::FencingToken;

/// `POST /v1/semaphores/{name}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SemaphoreAcquireRequest {
    /// Who takes the permits; an acquire by a holder returns its own grant again.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub owner: String,
    #[serde(deserialize_with = "crate::int::u32")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::semaphore_limit))]
    pub limit: u32,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u32")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::permits))]
    pub permits: Option<u32>,
    /// The permits' ttl; exactly one of `ttl_ms` and `session`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_ttl_ms))]
    pub ttl_ms: Option<u64>,
    /// Hold the permits as long as this session lives, instead of a ttl.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_session))]
    pub session: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::semaphore_wait_ms))]
    pub wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// With `session`: this request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
}

/// `POST /v1/semaphores/{name}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SemaphoreRenewRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub owner: String,
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::renew_ttl_ms))]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// `POST /v1/semaphores/{name}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SemaphoreReleaseRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub owner: String,
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// `POST /v1/semaphores/{name}/limit` (admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SemaphoreLimitRequest {
    #[serde(deserialize_with = "crate::int::u32")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::semaphore_limit))]
    pub limit: u32,
}

/// The answer to a limit change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreLimitResponse {
    pub name: String,
    pub limit: u32,
    /// Permits in use after the change (a lower limit revokes none).
    pub in_use: u32,
}

/// Permits of a semaphore as their holder sees them (twin of
/// [`leasehold_core::PermitGrant`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermitGrant {
    pub name: String,
    pub owner: String,
    /// The index of the entry that granted these permits: above every
    /// earlier grant of this semaphore.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub permits: u32,
    pub limit: u32,
    pub ttl_ms: u64,
    /// Real time the lease is guaranteed to last from the commit of the entry
    /// that produced this answer (longer if an election stalls the ticks).
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
}

impl From<leasehold_core::PermitGrant> for PermitGrant {
    fn from(g: leasehold_core::PermitGrant) -> Self {
        let leasehold_core::PermitGrant { name, owner, token, permits, limit, ttl_ms, expires_in_ms, deadline_tick } =
            g;
        PermitGrant { name, owner, token, permits, limit, ttl_ms, expires_in_ms, deadline_tick }
    }
}

/// The answer to acquire and renew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermitResponse {
    #[serde(flatten)]
    pub grant: PermitGrant,
    /// Acquire only: true when the owner already held these permits (same
    /// token, lease restarted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reacquired: Option<bool>,
}

/// The answer to release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreReleaseResponse {
    pub name: String,
    pub owner: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub released: bool,
}

/// One holder of permits (twin of [`leasehold_core::PermitHolder`]): also
/// the `holders` of a 409 `semaphore_full`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermitHolder {
    pub owner: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub permits: u32,
    /// Lower bound on the real time left, counted in whole tick periods.
    pub expires_in_ms: u64,
}

impl From<leasehold_core::PermitHolder> for PermitHolder {
    fn from(h: leasehold_core::PermitHolder) -> Self {
        PermitHolder { owner: h.owner, token: h.token, permits: h.permits, expires_in_ms: h.expires_in_ms }
    }
}

/// One owner waiting for permits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PermitWaiterView {
    pub owner: String,
    pub permits: u32,
    /// 1 = next in line.
    pub position: usize,
}

/// A live semaphore as a reader sees it (twin of [`leasehold_core::SemaphoreView`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreView {
    pub name: String,
    pub limit: u32,
    pub in_use: u32,
    /// Oldest grant first.
    pub holders: Vec<PermitHolder>,
    /// The queue, first in line first.
    pub waiters: Vec<PermitWaiterView>,
}

impl From<leasehold_core::SemaphoreView> for SemaphoreView {
    fn from(v: leasehold_core::SemaphoreView) -> Self {
        let leasehold_core::SemaphoreView { name, limit, in_use, holders, waiters } = v;
        SemaphoreView {
            name,
            limit,
            in_use,
            holders: holders.into_iter().map(Into::into).collect(),
            waiters: waiters
                .into_iter()
                .map(|w| PermitWaiterView { owner: w.owner, permits: w.permits, position: w.position })
                .collect(),
        }
    }
}

/// The answer to `GET /v1/semaphores`: live semaphores in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreListResponse {
    pub semaphores: Vec<SemaphoreView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures the twins write exactly the JSON of the core's values.
    #[test]
    fn twins_write_the_core_json() {
        let token = FencingToken::granted_at(7);
        let grant = leasehold_core::PermitGrant {
            name: "s".into(),
            owner: "o".into(),
            token,
            permits: 2,
            limit: 3,
            ttl_ms: 5000,
            expires_in_ms: 4900,
            deadline_tick: 50,
        };
        let view = leasehold_core::SemaphoreView {
            name: "s".into(),
            limit: 3,
            in_use: 2,
            holders: vec![leasehold_core::PermitHolder { owner: "o".into(), token, permits: 2, expires_in_ms: 4900 }],
            waiters: vec![leasehold_core::PermitWaiterView { owner: "w".into(), permits: 2, position: 1 }],
        };
        let json = |v: serde_json::Result<serde_json::Value>| v.unwrap();
        assert_eq!(json(serde_json::to_value(PermitGrant::from(grant.clone()))), json(serde_json::to_value(&grant)));
        assert_eq!(json(serde_json::to_value(SemaphoreView::from(view.clone()))), json(serde_json::to_value(&view)));
    }
}
