//! The status page at `GET /` and `GET /ui`: one static HTML file with its
//! script, compiled into the binary (no build step). It polls
//! `/v1/cluster/nodes`, `/v1/locks` and `/v1/sessions`, and follows
//! `/v1/events`, sending the token one enters in it when a node asks for one.
//! `?by=` in the page's address (its "caused by" field sets it) filters that
//! feed by who caused each event: the page asks the node for
//! `/v1/events?by=`, so the node filters, and the page holds no data itself.
//!
//! The page itself is open (it holds no data). Its Content-Security-Policy
//! lets it load nothing and connect nowhere but its own origin, so the token
//! it sends cannot reach another site even through a mistake in the script;
//! no other site may frame it (to trick one into typing the token there).

use std::sync::Arc;

use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;

use crate::node::Node;

const PAGE: &str = include_str!("ui.html");

/// Inline script and style only; requests to this origin only; no form
/// submission, no `<base>`, no framing.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                      connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'";

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/", get(page)).route("/ui", get(page))
}

async fn page() -> impl IntoResponse {
    ([(header::CONTENT_SECURITY_POLICY, POLICY), (header::REFERRER_POLICY, "no-referrer")], Html(PAGE))
}
