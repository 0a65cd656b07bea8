//! `GET /v1/cluster/nodes`: every member's own status, asked by the node that
//! serves the request, with the replication lag the leader reports for each.
//! The status page polls it, so it shows the whole cluster from any node.
//! The node asks with its own status token: the caller passed the same
//! check here that each member would make of it.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::routing::get;
use axum::{Json, Router};
use tokio::task::JoinSet;

use super::events::Subscribers;
use crate::node::Node;
use crate::raft::NodeId;
use leasehold_proto::cluster::{ClusterStatus, Member, NodeView, NodesResponse};

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/v1/cluster/nodes", get(nodes))
}

async fn nodes(State(node): State<Arc<Node>>, Extension(subscribers): Extension<Subscribers>) -> Json<NodesResponse> {
    let own = subscribers.status_of(&node);
    let mut asks = JoinSet::new();
    for member in own.members.iter().filter(|m| m.id != own.id).cloned() {
        let node = node.clone();
        asks.spawn(async move {
            let status = node.status_of_member(&member.addr).await;
            (member, status)
        });
    }
    let mut answers: Vec<(Member, Result<ClusterStatus, String>)> = asks.join_all().await;
    if let Some(me) = own.members.iter().find(|m| m.id == own.id) {
        answers.push((me.clone(), Ok(own.clone())));
    }
    answers.sort_by_key(|(m, _)| m.id);
    let leader = answers
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .filter(|s| s.role == "leader")
        .max_by_key(|s| s.term)
        .cloned();
    let nodes = answers
        .into_iter()
        .map(|(member, status)| {
            let lag = leader.as_ref().and_then(|l| lag_of(l, member.id));
            let (status, error) = match status {
                Ok(s) => (Some(s), None),
                Err(e) => (None, Some(e)),
            };
            NodeView { member, status, error, lag }
        })
        .collect();
    Json(NodesResponse { asked: own.id, leader: leader.map(|l| l.id).or(own.leader), nodes })
}

/// Entries member `id` is behind `leader`'s log.
fn lag_of(leader: &ClusterStatus, id: NodeId) -> Option<u64> {
    let last = leader.last_log_index.unwrap_or(0);
    if id == leader.id {
        return Some(0);
    }
    let matched = leader.replication.as_ref()?.get(&id)?.unwrap_or(0);
    Some(last.saturating_sub(matched))
}
