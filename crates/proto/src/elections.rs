//! The election API: `POST /v1/elections/{name}/campaign|proclaim|resign`,
//! `GET /v1/elections/{name}` (the [`Leader`]), `GET /v1/elections` and
//! `GET /v1/elections/{name}/observe` (leadership changes as Server-Sent
//! Events). An election is the lock of the same name whose holder carries a
//! value; the leader's token is the index of the entry that elected it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::FencingToken;

/// `POST /v1/elections/{name}/campaign`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CampaignRequest {
    /// Who stands; a campaign by the leader returns its own leadership
    /// again (same token) and announces `value`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub candidate: String,
    /// What the candidate announces once elected: any JSON value, at most
    /// 4 KiB as JSON text.
    pub value: Value,
    /// The leadership's ttl; exactly one of `ttl_ms` and `session`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_ttl_ms))]
    pub ttl_ms: Option<u64>,
    /// Lead as long as this session lives, instead of a ttl.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::acquire_session))]
    pub session: Option<u64>,
    /// Wait up to this long, in FIFO order, to be elected.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::wait_ms))]
    pub wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
    /// Should this leadership expire (not be resigned), nobody is elected
    /// for this long after the expiry.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_u64")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::lock_delay_ms))]
    pub lock_delay_ms: Option<u64>,
    /// With `session`: this request's sequence number in the session.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int::option_token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::seq))]
    pub seq: Option<u64>,
}

/// `POST /v1/elections/{name}/proclaim`: the leader announces a new value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProclaimRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub candidate: String,
    /// The token the campaign answered.
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// `POST /v1/elections/{name}/resign`: the leader steps down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResignRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::owner))]
    pub candidate: String,
    #[serde(deserialize_with = "crate::int::token")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::token))]
    pub token: FencingToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::request_id))]
    pub request_id: Option<String>,
}

/// The answer to a resign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResignResponse {
    pub name: String,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub resigned: bool,
}

/// The leader of an election: the answer to a campaign, a proclaim and
/// `GET /v1/elections/{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Leader {
    pub name: String,
    pub candidate: String,
    /// The fencing token: the index of the entry that elected this leader,
    /// higher than every earlier leader's.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::TokenNumber))]
    pub token: FencingToken,
    pub value: Value,
    /// The cluster tick it was elected at (absent in a waiting campaign's
    /// answer when the leadership already ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_tick: Option<u64>,
    pub ttl_ms: u64,
    /// Lower bound on the real time the leadership has left, from the
    /// commit of the entry that answered.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Campaign answers only: true when the candidate already led (same token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reacquired: Option<bool>,
    /// Reads only: the log index the read reflects; an observer that
    /// re-read after `410 compacted` resumes its stream after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
}

impl Leader {
    /// The wire form of the core's leader (its value is JSON text written
    /// by the API from a parsed value, so it parses back).
    pub fn from_core(l: leasehold_core::Leader) -> Leader {
        Leader {
            value: parse_value(&l.value),
            name: l.name,
            candidate: l.candidate,
            token: l.token,
            since_tick: Some(l.since_tick),
            ttl_ms: l.ttl_ms,
            expires_in_ms: l.expires_in_ms,
            deadline_tick: l.deadline_tick,
            session: l.session,
            reacquired: None,
            index: None,
        }
    }
}

/// A value the core keeps as JSON text; text that is not JSON (never
/// written by the API) comes back as a string rather than failing.
pub fn parse_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// `GET /v1/elections`: elections with a leader, in name order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaderList {
    pub elections: Vec<Leader>,
}
