//! The status page at `GET /` and `GET /ui`: one static HTML file with its
//! script, compiled into the binary (no build step). It polls
//! `/v1/cluster/nodes` and `/v1/locks`, and follows `/v1/events`.

use std::sync::Arc;

use axum::response::Html;
use axum::routing::get;
use axum::Router;

use crate::node::Node;

const PAGE: &str = include_str!("ui.html");

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/", get(page)).route("/ui", get(page))
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}
