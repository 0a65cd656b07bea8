//! `GET /v1/locks/{name}/events`: the lock's changes as Server-Sent Events;
//! `GET /v1/events`: every lock's changes (or those whose names start with
//! `?prefix=`), in the same form (the status page shows it as its live feed).
//! Every event says who caused it (`by`); `?by=user:alice` (or `client`,
//! `admin`, `cluster`, `unknown`) keeps only that actor's events.
//!
//! Served by the node asked, from its own history of applied events
//! ([`EventHistory`](crate::store::EventHistory), no forwarding): every node
//! applies the same entries, so every node tells the same story, in log
//! order, each event with its place in the log as its SSE `id` (the entry
//! index, or `INDEX.ORDINAL` for all but an entry's last event). A stream
//! resumes right after the id it got last (`?after=` or `Last-Event-ID`),
//! on this node or any other, with no gap and no duplicate. Event names are
//! the `type` field: `acquired`, `renewed`, `released`, `expired`,
//! `handed_over`, `queued`, `wait_timeout`, `cancelled`, `proclaimed`, the
//! session events; `compacted` ends a stream that fell further behind than
//! the history keeps (re-read, then resume after the read's index), and a
//! resume asked for before the history starts is answered `410 compacted`.
//!
//! Streams are bounded per node and per client address ([`Subscribers`]):
//! each one reads every applied event, so without a bound any client
//! could make every entry cost the node more. Past the bound a new stream is
//! answered 503 `overloaded` with `Retry-After`. Each event's frame is made
//! once and its bytes shared by every stream that sends it
//! ([`PublishedEvent`]).

use super::auth::{Authz, Directory};
use leasehold_core::Permission;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_stream::StreamExt;

use super::{ApiError, ApiPath, ApiQuery};
use crate::admission::{Budget, Caller};
use crate::node::Node;
use crate::store::{Compacted, Cursor, PublishedEvent};
use leasehold_core::{Actor, EventKind, Limits, LockEvent};
use leasehold_proto::cluster::{ClusterStatus, QuotaUse};
use leasehold_proto::events::{CompactedFrame, EventsQuery, ResumeQuery};
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

/// The header a reconnecting SSE client sends with the id it got last.
const LAST_EVENT_ID: &str = "last-event-id";

async fn lock_events(
    State(node): State<Arc<Node>>,
    authz: Authz,
    Extension(subscribers): Extension<Subscribers>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<ResumeQuery>,
) -> Result<Response, ApiError> {
    authz.may(&node, Permission::Read, [name.as_str()])?;
    Limits::DEFAULT.check_name("name", &name)?;
    let start = resume_point(query.after.as_deref(), &headers)?;
    let readable = readable_by(&node, authz);
    let wanted = caused_by(query.by);
    stream(&node, &subscribers, caller, start, Vec::new(), move |event| {
        event.name == name && wanted(event) && readable(event)
    })
}

async fn all_events(
    State(node): State<Arc<Node>>,
    authz: Authz,
    Extension(subscribers): Extension<Subscribers>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    authz.may_some(&node, Permission::Read)?;
    let prefix = query.prefix.clone().unwrap_or_default();
    if prefix.len() > Limits::DEFAULT.max_name_bytes {
        return Err(ApiError::bad_request("prefix is longer than a lock name can be").with("field", "prefix"));
    }
    let start = resume_point(query.after.as_deref(), &headers)?;
    let readable = readable_by(&node, authz);
    let wanted = caused_by(query.by);
    stream(&node, &subscribers, caller, start, Vec::new(), move |event| {
        event.name.starts_with(&prefix) && wanted(event) && readable(event)
    })
}

/// Whether an event passes a stream's `?by=` filter: caused by that actor
/// (every event passes without one).
pub(super) fn caused_by(by: Option<Actor>) -> impl Fn(&LockEvent) -> bool + Send + 'static {
    move |event| by.as_ref().is_none_or(|by| event.by == *by)
}

/// Whether the caller may read an event, asked as each event is sent: a
/// stream opened before a revoke stops delivering at the revoke's entry
/// on this node. A session's start or end (no lock name) needs `read` on
/// every name; a change of users and roles `admin`, as their endpoints do.
pub(super) fn readable_by(node: &Arc<Node>, authz: Authz) -> impl Fn(&LockEvent) -> bool + Send + 'static {
    let node = node.clone();
    move |event| {
        let permission = match event.kind {
            EventKind::AccessChanged { .. } => Permission::Admin,
            _ => Permission::Read,
        };
        node.may(&authz.0, permission, &[event.name.as_str()]).is_ok()
    }
}

/// Where a stream resumes: after `?after=`, else after `Last-Event-ID`,
/// else (`None`) from now on.
pub(super) fn resume_point(after: Option<&str>, headers: &HeaderMap) -> Result<Option<Cursor>, ApiError> {
    let (text, field) = match (after, headers.get(LAST_EVENT_ID)) {
        (Some(after), _) => (after, "after"),
        (None, Some(header)) => {
            (header.to_str().map_err(|_| ApiError::bad_request("Last-Event-ID is not text"))?, "last-event-id")
        }
        (None, None) => return Ok(None),
    };
    text.parse().map(Some).map_err(|e: String| ApiError::bad_request(e).with("field", field))
}

/// The applied events after `start` (from now on when `None`) that pass
/// `wanted`, as SSE, after the frames of `first`; 410 `compacted` when the
/// history no longer reaches `start`; 503 `overloaded` when the caller's
/// address or the node has no stream left.
pub(super) fn stream(
    node: &Node,
    subscribers: &Subscribers,
    caller: Option<Extension<Caller>>,
    start: Option<Cursor>,
    first: Vec<Bytes>,
    wanted: impl Fn(&LockEvent) -> bool + Send + 'static,
) -> Result<Response, ApiError> {
    let history = node.locks().history().clone();
    let start = start.unwrap_or_else(|| history.now());
    history.check(start).map_err(compacted)?;
    // The listener names every caller; requests made in-process (tests)
    // have no address and share one.
    let addr = caller.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |Extension(caller)| caller.addr);
    let place = subscribers.0.try_take(addr).map_err(|refusal| {
        node.metrics().quota_refused(SUBSCRIBERS);
        ApiError::new(ErrorCode::Overloaded, refusal.describe("event streams"))
    })?;
    let frames = history.follow(start).filter_map(move |item| match item {
        Ok(published) if wanted(&published.event) => published.frame(sse_frame),
        Ok(_) => None,
        Err(Compacted { compacted_before }) => {
            let data = serde_json::to_string(&CompactedFrame { compacted_before }).ok()?;
            Some(Bytes::from(format!("event: compacted\ndata: {data}\n\n")))
        }
    });
    let frames = tokio_stream::iter(first).chain(frames);
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

/// The refusal of a resume the history no longer reaches.
fn compacted(c: Compacted) -> ApiError {
    ApiError::new(
        ErrorCode::Compacted,
        format!(
            "this node keeps the events of entries from {} on; re-read the state and resume after its index",
            c.compacted_before
        ),
    )
    .with("compacted_before", c.compacted_before)
}

/// One event as its SSE frame: named by its `type`, its place in the log as
/// the id, its JSON as the data (`None` if it cannot be encoded, which a
/// plain struct never fails).
fn sse_frame(published: &PublishedEvent) -> Option<Bytes> {
    sse_frame_at(&published.event, published.cursor())
}

/// `event` as an SSE frame with id `cursor`.
pub(super) fn sse_frame_at(event: &LockEvent, cursor: Cursor) -> Option<Bytes> {
    let event = leasehold_proto::LockEvent::from(event.clone());
    let json = serde_json::to_string(&event).ok()?;
    Some(Bytes::from(format!("event: {}\nid: {cursor}\ndata: {json}\n\n", event.kind.name())))
}
