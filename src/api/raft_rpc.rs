//! Inbound Raft RPC from the other nodes: append entries, vote, install
//! snapshot (streamed to a file, then installed). Answers 200 with the response, or 500 with the error.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use serde::Serialize;

use super::{ApiError, ApiJson};
use crate::node::Node;
use crate::raft::{SnapshotHead, TypeConfig};

/// Largest snapshot a follower accepts. It is streamed to a file, never
/// held in memory: the bound is on disk use.
const MAX_SNAPSHOT_BYTES: u64 = 16 << 30;

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

async fn vote(State(node): State<Arc<Node>>, ApiJson(rpc): ApiJson<VoteRequest<TypeConfig>>) -> Response {
    reply(node.raft().vote(rpc).await)
}

async fn snapshot(State(node): State<Arc<Node>>, body: Body) -> Response {
    let path = node.state_store().receiving_path();
    match SnapshotHead::receive(body.into_data_stream(), path.clone(), MAX_SNAPSHOT_BYTES).await {
        Ok((vote, snapshot)) => reply(node.raft().install_full_snapshot(vote, snapshot).await),
        Err(e) => {
            // Not installed: nothing else will remove the part.
            let _ = tokio::fs::remove_file(&path).await;
            ApiError::bad_request(format!("snapshot not received: {e}")).into_response()
        }
    }
}
