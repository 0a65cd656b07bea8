//! `GET /v1/locks/{name}/events`: the lock's changes as Server-Sent Events;
//! `GET /v1/events`: every lock's changes, in the same form (the status page
//! shows it as its live feed).
//!
//! Served by the node asked, from its own applied log (no forwarding): every
//! node applies the same entries, so every node tells the same story, in log
//! order, each event stamped with its entry index. Event names are the `type`
//! field: `acquired`, `renewed`, `released`, `expired`, `handed_over`,
//! `queued`, `wait_timeout`, `cancelled`; `lagged` says events were dropped
//! because the subscriber fell behind (re-read the lock).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::Router;
use tokio_stream::wrappers::{errors::BroadcastStreamRecvError, BroadcastStream};
use tokio_stream::{Stream, StreamExt};

use super::{ApiError, ApiPath};
use crate::node::Node;
use leasehold_core::{Limits, LockEvent};

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/v1/locks/{name}/events", get(lock_events)).route("/v1/events", get(all_events))
}

async fn lock_events(
    State(node): State<Arc<Node>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    Limits::DEFAULT.check_name("name", &name)?;
    Ok(events(&node, move |event| event.name == name))
}

async fn all_events(State(node): State<Arc<Node>>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    events(&node, |_| true)
}

/// The applied events that pass `wanted`, as SSE, from now on.
fn events(
    node: &Node,
    wanted: impl Fn(&LockEvent) -> bool + Send + 'static,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = BroadcastStream::new(node.locks().subscribe()).filter_map(move |item| match item {
        Ok(event) if wanted(&event) => {
            let event = leasehold_proto::LockEvent::from(event);
            Some(Ok(Event::default().event(event.kind.name()).id(event.index.to_string()).json_data(&event).ok()?))
        }
        Ok(_) => None,
        Err(BroadcastStreamRecvError::Lagged(missed)) => {
            Some(Ok(Event::default().event("lagged").data(format!("{{\"missed\":{missed}}}"))))
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
