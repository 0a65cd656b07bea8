//! Inbound Raft RPC from the other nodes: append entries, vote, install
//! snapshot (whole). Answers 200 with the response, or 500 with the error.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use serde::Serialize;

use super::{ApiError, ApiJson};
use crate::node::Node;
use crate::raft::{SnapshotHead, TypeConfig};

/// Largest snapshot a follower accepts: one request carries a whole
/// snapshot since openraft 0.10.
const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

pub fn routes() -> Router<Arc<Node>> {
    // The snapshot route's own limit, set inside the router's, wins for it.
    let snapshots = Router::new()
        .route(crate::raft::SNAPSHOT_PATH, post(snapshot))
        .layer(DefaultBodyLimit::max(MAX_SNAPSHOT_BYTES));
    Router::new()
        .route(crate::raft::APPEND_PATH, post(append))
        .route(crate::raft::VOTE_PATH, post(vote))
        .merge(snapshots)
}

fn reply<T: Serialize, E: Serialize>(result: Result<T, E>) -> Response {
    match result {
        Ok(r) => Json(r).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, Json(e)).into_response(),
    }
}

async fn append(State(node): State<Arc<Node>>, ApiJson(rpc): ApiJson<AppendEntriesRequest<TypeConfig>>) -> Response {
    reply(node.raft().append_entries(rpc).await)
}

async fn vote(State(node): State<Arc<Node>>, ApiJson(rpc): ApiJson<VoteRequest<TypeConfig>>) -> Response {
    reply(node.raft().vote(rpc).await)
}

async fn snapshot(State(node): State<Arc<Node>>, body: Bytes) -> Response {
    match SnapshotHead::decode(&body) {
        Some((vote, snapshot)) => reply(node.raft().install_full_snapshot(vote, snapshot).await),
        None => ApiError::bad_request("malformed snapshot chunk").into_response(),
    }
}
