//! The fence API: the cluster checks tokens for resources that cannot.
//!
//! - `POST /v1/fence/check` — is this token current for this lock? (linearizable read)
//! - `PUT /v1/records/{key}` / `GET /v1/records/{key}` — fenced records: the
//!   token check and the write are one log entry.
//! - `POST /v1/fence/gate/{resource}` — admits the lock's current token, so
//!   the tokens it admits never go down.

use super::auth::Authz;
use leasehold_core::Permission;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::{post, put};
use axum::{Json, Router};

use super::{propose, unexpected, ApiError, ApiJson, ApiPath};
use crate::node::Node;
use leasehold_core::{Command, Limits, Outcome};
use leasehold_proto::fence::{
    CheckRequest, CheckResponse, GateRequest, GateResponse, PutRecordRequest, PutRecordResponse, Record,
};
use leasehold_proto::ErrorCode;

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/fence/check", post(check))
        .route("/v1/fence/gate/{resource}", post(gate))
        .route("/v1/records/{key}", put(put_record).get(get_record))
}

/// `POST /v1/fence/check {"lock","token"}`: linearizable; 200
/// `{"current":bool,"token":current|null}`.
async fn check(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiJson(req): ApiJson<CheckRequest>,
) -> Result<Json<CheckResponse>, ApiError> {
    authz.may(&node, Permission::Read, [req.lock.as_str()])?;
    Limits::DEFAULT.check_name("lock", &req.lock)?;
    let current = node.read(|t| t.current_token(&req.lock)).await?;
    Ok(Json(CheckResponse { current: current == Some(req.token), token: current, lock: req.lock }))
}

/// `PUT /v1/records/{key} {"lock","token","value"}`: 200 when `token` is the
/// current token of `lock` as the write applies; 409 `stale_token` with
/// `current_token` otherwise, and nothing changes.
async fn put_record(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(key): ApiPath<String>,
    ApiJson(req): ApiJson<PutRecordRequest>,
) -> Result<Json<PutRecordResponse>, ApiError> {
    authz.may(&node, Permission::Fence, [key.as_str(), req.lock.as_str()])?;
    // The core keeps the value as JSON text; serde_json writes it canonically.
    let value = req.value.to_string();
    let command = Command::PutRecord { key, lock: req.lock, token: req.token, value, request_id: req.request_id };
    match propose(&node, &authz, command).await? {
        Outcome::RecordWritten { key, lock, token, index } => Ok(Json(PutRecordResponse { key, lock, token, index })),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/records/{key}`: linearizable; 200 with the value, the lock and
/// token that wrote it and the log index; 404 `no_record`.
async fn get_record(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(key): ApiPath<String>,
) -> Result<Json<Record>, ApiError> {
    authz.may(&node, Permission::Read, [key.as_str()])?;
    Limits::DEFAULT.check_name("key", &key)?;
    match node.read(|t| t.record(&key).cloned()).await? {
        Some(record) => {
            // Written by the API from a parsed value, so it always parses back.
            let value = serde_json::from_str(&record.value).map_err(ApiError::internal)?;
            Ok(Json(Record { key: record.key, value, lock: record.lock, token: record.token, index: record.index }))
        }
        None => Err(ApiError::new(ErrorCode::NoRecord, format!("no record {key:?}")).with("key", key)),
    }
}

/// `POST /v1/fence/gate/{resource} {"lock","token"}`: 200 when `token` is
/// the current token of `lock` and at least the highest admitted so far;
/// 409 `stale_token` with `highest` below that, with `current_token` for
/// any other token; 409 `lock_mismatch` when the gate serves another lock.
async fn gate(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(resource): ApiPath<String>,
    ApiJson(req): ApiJson<GateRequest>,
) -> Result<Json<GateResponse>, ApiError> {
    authz.may(&node, Permission::Fence, [resource.as_str(), req.lock.as_str()])?;
    let command = Command::Gate { resource, lock: req.lock, token: req.token, request_id: req.request_id };
    match propose(&node, &authz, command).await? {
        Outcome::GateAdmitted { resource, lock, token } => {
            Ok(Json(GateResponse { resource, lock, admitted: true, highest: token }))
        }
        other => Err(unexpected(other)),
    }
}
