//! The fence API: `POST /v1/fence/check`, `PUT|GET /v1/records/{key}`,
//! `POST /v1/fence/gate/{resource}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::FencingToken;

/// `POST /v1/fence/check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_name))]
    pub lock: String,
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
}

/// The answer to a fence check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckResponse {
    pub lock: String,
    /// Whether `token` is the current holder's token.
    pub current: bool,
    /// The current holder's token; `null` when the lock is free.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::schema::TokenNumber>))]
    pub token: Option<FencingToken>,
}

/// `PUT /v1/records/{key}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PutRecordRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_name))]
    pub lock: String,
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    /// Any JSON value, at most 4 KiB as JSON text.
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// The answer to a record write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PutRecordResponse {
    pub key: String,
    pub lock: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    /// Index of the log entry that wrote the record.
    pub index: u64,
}

/// `GET /v1/records/{key}`: a fenced record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Record {
    pub key: String,
    pub value: Value,
    /// The lock whose holder wrote it, and the holder's token.
    pub lock: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    /// Index of the log entry that wrote it.
    pub index: u64,
}

/// `POST /v1/fence/gate/{resource}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GateRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_name))]
    pub lock: String,
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// The answer to a gate pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GateResponse {
    pub resource: String,
    pub lock: String,
    pub admitted: bool,
    /// The highest token admitted so far (this one).
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub highest: FencingToken,
}
