//! Inbound Raft RPC from the other nodes: append entries, vote, install
//! snapshot. Answers 200 with the response, or 500 with the `RaftError`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use serde::Serialize;

use super::{ApiError, ApiJson};
use crate::node::Node;
use crate::raft::{NodeId, SnapshotChunkHead, TypeConfig};

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route(crate::raft::APPEND_PATH, post(append))
        .route(crate::raft::VOTE_PATH, post(vote))
        .route(crate::raft::SNAPSHOT_PATH, post(snapshot))
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

async fn vote(State(node): State<Arc<Node>>, ApiJson(rpc): ApiJson<VoteRequest<NodeId>>) -> Response {
    reply(node.raft().vote(rpc).await)
}

async fn snapshot(State(node): State<Arc<Node>>, body: Bytes) -> Response {
    match SnapshotChunkHead::decode(&body) {
        Some(rpc) => reply(node.raft().install_snapshot(rpc).await),
        None => ApiError::bad_request("malformed snapshot chunk").into_response(),
    }
}
