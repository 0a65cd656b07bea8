//! `GET /metrics`: this node's series in Prometheus (OpenMetrics) text.

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::events::{self, Subscribers};
use crate::metrics::MAX_NAMED_SERIES;
use crate::node::Node;

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/metrics", get(scrape))
}

/// Sets the series read from state (lock table, Raft), then encodes them all.
async fn scrape(State(node): State<Arc<Node>>, Extension(subscribers): Extension<Subscribers>) -> impl IntoResponse {
    let metrics = node.metrics();
    metrics.tick.set(node.locks().read(|t| t.now_tick()) as i64);
    // The table's counts from the one read that gives the quotas' use.
    let quotas = node.quota_use();
    let used = |name: &str| quotas.get(name).map_or(0, |q| q.used as i64);
    metrics.live_leases.set(used("leases"));
    metrics.live_sessions.set(used("sessions"));
    metrics.queue_depth.set(used("waiters"));
    for (quota, used) in quotas {
        metrics.quota(&quota, used);
    }
    metrics.quota(events::SUBSCRIBERS, subscribers.quota_use());
    let (semaphores, shared) =
        node.locks().read(|t| (t.semaphore_use(MAX_NAMED_SERIES), t.shared_use(MAX_NAMED_SERIES)));
    metrics.shared_state(&semaphores, &shared);
    node.raft().observe(metrics);
    ([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], metrics.encode())
}
