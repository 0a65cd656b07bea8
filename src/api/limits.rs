//! Per-request limits: a deadline for every request, a bound on client and
//! admin requests in flight at once, and a bound on requests waiting at once
//! (in total and per client address, [`crate::admission`]), so slow or
//! abusive clients cannot use up a node (the listener bounds connections and
//! header reads, see [`crate::server`]).
//!
//! The deadline covers reading the body and answering. A request that is
//! meant to wait long — an acquire with `wait_ms` (up to an hour), adding a
//! learner that must catch up, a request a follower relays to the leader —
//! [`park`](RequestSlot::park)s once its body is read: its deadline moves out
//! by the wait, and it stops counting as in flight and counts as waiting
//! instead (waiting costs a queue place, not a worker). Over the waiting
//! bound the request is answered 503 `overloaded` before it joins a queue.
//! Requests another member relays are not counted again: the member that
//! took the client's request counted it. An events stream
//! is not cut either: its handler answers at once and the stream that follows
//! is not a request in flight.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::ApiError;
use crate::admission::{Budget, Caller, Defaults, Permit};
use leasehold_proto::ErrorCode;

/// Default time to receive a request and answer it (waits excepted).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of client and admin requests in flight at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// The request limits of a node.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    pub timeout: Duration,
    pub max_in_flight: usize,
    /// Requests waiting at once (queued acquires, relayed requests).
    pub max_waiting: usize,
    /// Requests one client address may have waiting at once.
    pub max_waiting_per_client: usize,
    /// Event streams open at once (`api/events.rs`).
    pub max_subscribers: usize,
    /// Event streams one client address may have open at once.
    pub max_subscribers_per_client: usize,
}

impl RequestLimits {
    pub fn new(defaults: &Defaults) -> RequestLimits {
        RequestLimits {
            timeout: DEFAULT_REQUEST_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_waiting: defaults.max_waiting,
            max_waiting_per_client: defaults.max_waiting_per_client,
            max_subscribers: defaults.max_subscribers,
            max_subscribers_per_client: defaults.max_subscribers_per_client,
        }
    }
}

/// Limits for a process with the usual 1024 open files (tests, embedders).
impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits::new(&Defaults::for_fd_limit(1024))
    }
}

/// The middleware's state for one part of the router.
#[derive(Debug, Clone)]
pub struct Admission {
    timeout: Duration,
    /// Permits for requests in flight; `None` where they are not counted.
    in_flight: Option<Arc<Semaphore>>,
    /// Places for waiting requests; `None` where they are not counted.
    waiting: Option<Arc<Budget>>,
}

impl Admission {
    /// Deadline, in-flight and waiting bounds, for the client and admin API.
    pub fn new(limits: &RequestLimits) -> Admission {
        Admission {
            timeout: limits.timeout,
            in_flight: Some(Arc::new(Semaphore::new(limits.max_in_flight))),
            waiting: Some(Budget::new(limits.max_waiting, limits.max_waiting_per_client)),
        }
    }

    /// Deadline only, for Raft RPC: it comes from the few members (it is
    /// authenticated by the cluster secret), and shedding it under a flood
    /// of client requests would cost the cluster its leader.
    pub fn deadline_only(limits: &RequestLimits) -> Admission {
        Admission { timeout: limits.timeout, in_flight: None, waiting: None }
    }
}

/// One request's deadline and place among the requests in flight, in its
/// extensions for handlers that wait.
#[derive(Debug, Clone)]
pub struct RequestSlot(Arc<Mutex<SlotState>>);

#[derive(Debug)]
struct SlotState {
    deadline: Instant,
    permit: Option<OwnedSemaphorePermit>,
    /// Where the request counts once it waits; `None` if it does not.
    waiting: Option<(Arc<Budget>, Caller)>,
    /// Its place among the waiting requests, once parked.
    waiting_place: Option<Permit>,
}

impl RequestSlot {
    fn state(&self) -> std::sync::MutexGuard<'_, SlotState> {
        // The state is two plain fields: a panic elsewhere cannot leave it torn.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The request will now wait up to `wait`: it takes a place among the
    /// waiting requests (503 `overloaded` if its address or the node has
    /// none left), its deadline becomes at least now + `wait` (unchanged if
    /// that is past what a clock can hold), and it leaves the requests in
    /// flight.
    pub fn park(&self, wait: Duration) -> Result<(), ApiError> {
        let mut state = self.state();
        if state.waiting_place.is_none() {
            if let Some((budget, caller)) = &state.waiting {
                let place = budget
                    .try_take(caller.addr)
                    .map_err(|refusal| ApiError::new(ErrorCode::Overloaded, refusal.describe("waiting requests")))?;
                state.waiting_place = Some(place);
            }
        }
        if let Some(until) = Instant::now().checked_add(wait) {
            state.deadline = state.deadline.max(until);
        }
        state.permit = None;
        Ok(())
    }

    fn deadline(&self) -> Instant {
        self.state().deadline
    }
}

/// Middleware: answer 503 `overloaded` (with `Retry-After`) when
/// `max_in_flight` requests are already being served, rather than queue
/// more; and 408 `request_timeout` when a request has not been answered by
/// its deadline (moved only by [`RequestSlot::park`]).
pub async fn admit(State(admission): State<Admission>, mut request: Request, next: Next) -> Response {
    let permit = match admission.in_flight.map(Semaphore::try_acquire_owned) {
        Some(Err(_)) => {
            return ApiError::new(ErrorCode::Overloaded, "too many requests in flight; retry").into_response();
        }
        Some(Ok(permit)) => Some(permit),
        None => None,
    };
    // Requests a member relays were counted where the client sent them; a
    // request without a caller comes from an in-process test.
    let caller = request.extensions().get::<Caller>().copied().filter(|caller| !caller.via_member);
    let waiting = admission.waiting.zip(caller);
    let slot = RequestSlot(Arc::new(Mutex::new(SlotState {
        deadline: Instant::now() + admission.timeout,
        permit,
        waiting,
        waiting_place: None,
    })));
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request);
    tokio::pin!(response);
    loop {
        let deadline = slot.deadline();
        tokio::select! {
            response = &mut response => return response,
            _ = tokio::time::sleep_until(deadline) => {
                if slot.deadline() <= Instant::now() {
                    return ApiError::new(ErrorCode::RequestTimeout,
                        format!(
                            "request not received and answered within {} ms; a write may still take effect",
                            admission.timeout.as_millis()
                        ),
                    )
                    .into_response();
                }
            }
        }
    }
}
