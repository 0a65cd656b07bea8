//! `GET /metrics`: this node's series in Prometheus (OpenMetrics) text.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::events::{self, Subscribers};
use crate::node::Node;

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/metrics", get(scrape))
}

/// Sets the series read from state (lock table, Raft), then encodes them all.
async fn scrape(State(node): State<Arc<Node>>, Extension(subscribers): Extension<Subscribers>) -> impl IntoResponse {
    let metrics = node.metrics();
    let (live, sessions, waiting, tick) = node.locks().read(|t| (t.len(), t.sessions(), t.waiting(), t.now_tick()));
    metrics.live_leases.set(live as i64);
    metrics.live_sessions.set(sessions as i64);
    metrics.queue_depth.set(waiting as i64);
    metrics.tick.set(tick as i64);
    for (quota, used) in node.quota_use() {
        metrics.quota(&quota, used);
    }
    metrics.quota(events::SUBSCRIBERS, subscribers.quota_use());
    node.raft().observe(metrics);
    ([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], metrics.encode())
}
