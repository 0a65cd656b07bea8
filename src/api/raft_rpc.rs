//! Inbound Raft RPC from the other nodes: append entries, vote, install
//! snapshot (streamed to a file, then installed). Answers 200 with the response, or 500 with the error.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use super::{ApiError, ApiJson};
use crate::node::Node;
use crate::raft::{AppendRpc, JsonAnswer, SnapshotHead, VoteRpc, MAX_SNAPSHOT_BYTES};

pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route(crate::raft::APPEND_PATH, post(append))
        .route(crate::raft::VOTE_PATH, post(vote))
        .route(crate::raft::SNAPSHOT_PATH, post(snapshot))
}

fn reply(answer: JsonAnswer) -> Response {
    let status = if answer.ok { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
    (status, [(header::CONTENT_TYPE, "application/json")], answer.body).into_response()
}

async fn append(State(node): State<Arc<Node>>, ApiJson(rpc): ApiJson<AppendRpc>) -> Response {
    reply(node.raft().inbound().append_json(rpc).await)
}

async fn vote(State(node): State<Arc<Node>>, ApiJson(rpc): ApiJson<VoteRpc>) -> Response {
    reply(node.raft().inbound().vote_json(rpc).await)
}

async fn snapshot(State(node): State<Arc<Node>>, body: Body) -> Response {
    let path = node.state_store().receiving_path();
    match SnapshotHead::receive(body.into_data_stream(), path.clone(), MAX_SNAPSHOT_BYTES).await {
        Ok((vote, snapshot)) => reply(node.raft().inbound().install_snapshot(vote, snapshot).await),
        Err(e) => {
            // Not installed: nothing else will remove the part.
            let _ = tokio::fs::remove_file(&path).await;
            ApiError::bad_request(format!("snapshot not received: {e}")).into_response()
        }
    }
}
