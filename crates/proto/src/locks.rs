//! The lock API: `POST /v1/locks/{name}/acquire|renew|release`,
//! `GET /v1/locks/{name}` (a [`LeaseView`]) and `GET /v1/locks`.

use serde::{Deserialize, Serialize};

use crate::{FencingToken, Grant, LeaseView};

/// Default and largest page of `GET /v1/locks`.
pub const DEFAULT_LIST_LIMIT: usize = 100;
pub const MAX_LIST_LIMIT: usize = 1000;

/// `POST /v1/locks/{name}/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// Who takes the lock; an acquire by the holder returns its own grant again.
    pub owner: String,
    pub ttl_ms: u64,
    /// Wait up to this long in the lock's FIFO queue when another owner holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Retries with the same id get the first answer (the same token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/locks/{name}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    pub token: FencingToken,
    /// The new ttl; the grant's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/locks/{name}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The answer to acquire and renew: the grant, with its fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    pub token: FencingToken,
    pub released: bool,
}

/// The query of `GET /v1/locks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only locks whose names start with this.
    #[serde(default)]
    pub prefix: String,
    /// At most this many locks (1–1000, default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// The answer to `GET /v1/locks`: held locks in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    pub locks: Vec<LeaseView>,
}
