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
//!
//! Streams are bounded per node and per client address ([`Subscribers`]):
//! each one receives every applied event, so without a bound any client
//! could make every entry cost the node more. Past the bound a new stream is
//! answered 503 `overloaded` with `Retry-After`. Each event's frame is made
//! once and its bytes shared by every stream that sends it
//! ([`PublishedEvent`](crate::store::PublishedEvent)).

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_stream::wrappers::{errors::BroadcastStreamRecvError, BroadcastStream};
use tokio_stream::StreamExt;

use super::{ApiError, ApiPath};
use crate::admission::{Budget, Caller};
use crate::node::Node;
use leasehold_core::{Limits, LockEvent};
use leasehold_proto::cluster::{ClusterStatus, QuotaUse};
use leasehold_proto::ErrorCode;

/// A comment line sent after this long without an event, so proxies and
/// clients do not take a quiet stream for a dead one.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
const KEEP_ALIVE_FRAME: &[u8] = b":\n\n";

/// The quota of event streams, by the name status and metrics give it.
pub const SUBSCRIBERS: &str = "subscribers";

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/v1/locks/{name}/events", get(lock_events)).route("/v1/events", get(all_events))
}

/// The event streams open on this node, bounded in total and per client
/// address; a stream holds its place until it ends (its client goes away).
#[derive(Debug, Clone)]
pub struct Subscribers(Arc<Budget>);

impl Subscribers {
    pub fn new(max: usize, max_per_client: usize) -> Subscribers {
        Subscribers(Budget::new(max, max_per_client))
    }

    /// Streams open now, against the bound.
    pub fn quota_use(&self) -> QuotaUse {
        QuotaUse { used: self.0.in_use() as u64, limit: self.0.total() as u64 }
    }

    /// `node`'s status, with its event streams among its quotas.
    pub fn status_of(&self, node: &Node) -> ClusterStatus {
        let mut status = node.status();
        status.quotas.insert(SUBSCRIBERS.into(), self.quota_use());
        status
    }
}

async fn lock_events(
    State(node): State<Arc<Node>>,
    Extension(subscribers): Extension<Subscribers>,
    caller: Option<Extension<Caller>>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    Limits::DEFAULT.check_name("name", &name)?;
    events(&node, &subscribers, caller, move |event| event.name == name)
}

async fn all_events(
    State(node): State<Arc<Node>>,
    Extension(subscribers): Extension<Subscribers>,
    caller: Option<Extension<Caller>>,
) -> Result<Response, ApiError> {
    events(&node, &subscribers, caller, |_| true)
}

/// The applied events that pass `wanted`, as SSE, from now on; 503
/// `overloaded` when the caller's address or the node has no stream left.
fn events(
    node: &Node,
    subscribers: &Subscribers,
    caller: Option<Extension<Caller>>,
    wanted: impl Fn(&LockEvent) -> bool + Send + 'static,
) -> Result<Response, ApiError> {
    // The listener names every caller; requests made in-process (tests)
    // have no address and share one.
    let addr = caller.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |Extension(caller)| caller.addr);
    let place = subscribers.0.try_take(addr).map_err(|refusal| {
        node.metrics().quota_refused(SUBSCRIBERS);
        ApiError::new(ErrorCode::Overloaded, refusal.describe("event streams"))
    })?;
    let frames = BroadcastStream::new(node.locks().subscribe()).filter_map(move |item| match item {
        Ok(published) if wanted(&published.event) => published.frame(sse_frame),
        Ok(_) => None,
        Err(BroadcastStreamRecvError::Lagged(missed)) => {
            Some(Bytes::from(format!("event: lagged\ndata: {{\"missed\":{missed}}}\n\n")))
        }
    });
    let mut keep_alive = interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let body = frames.timeout_repeating(keep_alive).map(move |frame| {
        // The body owns the stream's place: hyper drops the body when the
        // client goes away (or the node stops), and the place comes back.
        let _ = &place;
        Ok::<_, Infallible>(frame.unwrap_or(Bytes::from_static(KEEP_ALIVE_FRAME)))
    });
    let headers = [(CONTENT_TYPE, "text/event-stream"), (CACHE_CONTROL, "no-cache")];
    Ok((headers, Body::from_stream(body)).into_response())
}

/// One event as its SSE frame: named by its `type`, its entry index as the
/// id, its JSON as the data (`None` if it cannot be encoded, which a plain
/// struct never fails).
fn sse_frame(event: &LockEvent) -> Option<Bytes> {
    let event = leasehold_proto::LockEvent::from(event.clone());
    let json = serde_json::to_string(&event).ok()?;
    Some(Bytes::from(format!("event: {}\nid: {}\ndata: {json}\n\n", event.kind.name(), event.index)))
}
