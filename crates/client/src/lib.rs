//! The Rust client library: talks HTTP/JSON to any node of a cluster.
//!
//! A [`Client`] holds a list of endpoints. It sends each request to the node
//! it believes leads (learned from the `x-leasehold-leader-addr` header), moves
//! to the next endpoint when a node is unreachable, and retries 503 answers
//! with back-off until its retry budget is spent: a node that says it is
//! `overloaded` is left alone for its `Retry-After` (with jitter, so a herd
//! of clients does not come back at once); while there is no leader it
//! backs off from 25 ms to 500 ms, jittered, since an election usually ends
//! sooner than `Retry-After`'s whole second. It never reconnects in a loop.
//! Other answers (409, 404, 400, ...) are returned at once as
//! [`ClientError::Api`].
//!
//! A request that waits in a lock's queue while another wait of the same
//! client is in flight goes over HTTP/2 (h2c with prior knowledge, or `h2`
//! under TLS), so a herd of waiting acquires in one process shares one
//! connection instead of holding one each; everything else, a lone wait
//! included, stays on HTTP/1.1, which costs both sides less per request
//! (a hot lock's hand-over is a wait and a release), except right after a
//! wait that outlasted the HTTP/1.1 connections ([`http`]). Against a node
//! that does not speak HTTP/2 the client falls back to HTTP/1.1 for good.
//!
//! Every mutation carries a request id, the same on every retry of one call,
//! so a retry the cluster already applied returns the original result (the
//! same token), also when it reaches a new leader.
//!
//! [`Lock`] (`guard.rs`) holds a lock for as long as it lives: a watchdog
//! task renews it and fires [`Lock::lost`] by the client's safe deadline.
//! [`Session`] (`session.rs`) does the same for any number of locks at
//! once: one keepalive, one `lost` for all of them.
//!
//! For a cluster with auth or TLS on, [`Client::with_credentials`] sends a
//! bearer token on every request and trusts a custom CA; endpoints without a
//! scheme are then `https`.
//!
//! Request and answer bodies are the wire types of [`leasehold_proto`], the
//! same the server parses and writes; error codes are its [`ErrorCode`].
//!
//! # Layout
//!
//! - this file — [`Client`]: endpoints, leader following, retries, request ids.
//! - `admin.rs` — the admin endpoints: [`Client::status`], membership, snapshots, backups.
//! - `backoff.rs` — the pauses between a call's tries, jittered.
//! - `credentials.rs` — [`Credentials`]: a bearer [`Secret`] and a [`Ca`] to trust.
//! - `error.rs` — [`ClientError`]: what a call can fail with.
//! - `fence.rs` — the fence endpoints: [`Client::check`], records, gates.
//! - `lease.rs` — [`Lease`], [`Lifetime`], [`AcquireOptions`]: what an acquire asks for and gives.
//! - `locks.rs` — the lock endpoints: [`Client::acquire`], renew, release, get, list.
//! - `guard.rs` — [`Lock`]: a lock kept by its own lease.
//! - `watchdog.rs` — the watchdog that renews a lease or keeps a session alive, and the `lost` signal.
//! - `session.rs` — [`Session`]: locks kept by one session, and its keepalive.
//! - `sessions.rs` — the session endpoints: [`Client::create_session`], keepalive, delete, get, list.
//! - `multi.rs` — [`Client::acquire_many`]: several locks under one token, and [`LockSet`].
//! - [`run`] — `leasehold run`: a command under a lock, stopped when it is lost.
//! - [`http`] — the connections: HTTP/1.1 spoken directly for quick
//!   requests, HTTP/2 (hyper) for waits; endpoints and request targets.
//!
//! ```no_run
#![doc = include_str!("../examples/lock.rs")]
//! ```

mod admin;
mod backoff;
mod credentials;
mod error;
mod fence;
mod guard;
pub mod http;
mod lease;
mod locks;
mod multi;
pub mod run;
mod session;
mod sessions;
pub mod signals;
mod watchdog;

pub use credentials::{load_ca, Ca, Credentials};
pub use error::ClientError;
pub use guard::{default_owner, Lock, LockOptions};
pub use lease::{AcquireOptions, Lease, Lifetime};
pub use leasehold_proto as proto;
pub use leasehold_proto::{ErrorCode, ErrorDetail, FencingToken, Grant, LeaseView, Secret, SecretError};
pub use multi::{Leases, LockSet};
pub use session::{Session, SessionOptions};
pub use sessions::SessionId;
pub use watchdog::LostReason;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ::http::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use leasehold_proto::ErrorBody;

use self::backoff::Backoff;
use self::http::{target, Endpoint, Http, Reply};

const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(6);
const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(10);
/// A request id unique to this process run: pid, a per-process counter and
/// the start time, so two processes (or two runs) never share one.
pub fn new_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static STARTED: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let started = STARTED
        .get_or_init(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!("{:x}-{:x}-{:x}", std::process::id(), started, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A client of one cluster.
pub struct Client {
    /// Each endpoint's connections: HTTP/1.1 for quick requests, HTTP/2 for
    /// requests that wait in a queue, many per connection.
    http: Http,
    /// A node answered HTTP/2 with a protocol error: wait over HTTP/1.1.
    no_http2: AtomicBool,
    /// Requests that wait in a queue, in flight now: a second one goes
    /// over HTTP/2.
    waits: AtomicUsize,
    /// Index of the endpoint tried first: the last one that answered.
    preferred: AtomicUsize,
    retry_budget: Duration,
}

impl Client {
    /// `endpoints` are `host:port` or `http://host:port`, any nodes of the cluster.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Result<Client, ClientError> {
        Client::with_credentials(endpoints, &Credentials::default())
    }

    /// A client that presents `credentials`. `endpoints` are `host:port`
    /// (`https` when a CA is given, else `http`) or `scheme://host:port`.
    pub fn with_credentials<S: AsRef<str>>(endpoints: &[S], credentials: &Credentials) -> Result<Client, ClientError> {
        let endpoints = endpoints
            .iter()
            .map(|e| {
                let e = e.as_ref();
                Endpoint::parse(e, credentials.ca.is_some()).ok_or_else(|| ClientError::InvalidEndpoint(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(ClientError::InvalidEndpoint(String::new()));
        }
        Ok(Client {
            http: Http::new(
                endpoints,
                credentials.ca.as_ref().map(Ca::certificates),
                credentials.token.as_ref().map(Secret::expose),
            ),
            no_http2: AtomicBool::new(false),
            waits: AtomicUsize::new(0),
            preferred: AtomicUsize::new(0),
            retry_budget: DEFAULT_RETRY_BUDGET,
        })
    }

    /// How long one call keeps retrying unavailable answers (default 10 s).
    pub fn with_retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = budget;
        self
    }

    /// One request to one node, without retries.
    async fn send_to(
        &self,
        endpoint: usize,
        method: Method,
        segments: &[&str],
        timeout: Duration,
    ) -> Result<Reply, ClientError> {
        if endpoint >= self.http.len() {
            return Err(ClientError::InvalidArgument(format!("no endpoint {endpoint}")));
        }
        let target = target(segments, &[]);
        let sent = self.http.send(endpoint, &method, &target, None);
        match tokio::time::timeout(timeout, sent).await {
            Ok(reply) => reply.map_err(|e| ClientError::Unavailable(e.to_string())),
            Err(_) => Err(ClientError::Unavailable(format!("no answer within {} ms", timeout.as_millis()))),
        }
    }

    /// Number of endpoints.
    pub fn endpoint_count(&self) -> usize {
        self.http.len()
    }

    /// Sends one request, following the leader and retrying unavailability.
    /// `wait` is how long the server may legitimately hold the request (a
    /// queued acquire); it extends the attempt timeout and the retry budget.
    /// Returns the decoded answer and the send time of the *first* attempt:
    /// a retry may be answered from the request-id record of an earlier
    /// attempt, whose commit came after the first send, never before it.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&impl Serialize>,
        wait: Duration,
    ) -> Result<(T, Instant), ClientError> {
        let first_sent = Instant::now();
        let give_up = first_sent + self.retry_budget + wait;
        let mut backoff = Backoff::default();
        let target = target(segments, query);
        let body = body.map(serde_json::to_vec).transpose().map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        // Set after an HTTP/2 attempt broke other than by connect or timeout:
        // the next try, at once, is HTTP/1.1; if the node answers that, it
        // does not speak HTTP/2.
        let mut probing_http1 = false;
        let waiting = (!wait.is_zero()).then(|| Waiting::new(&self.waits));
        loop {
            let endpoint = self.preferred.load(Ordering::Relaxed) % self.http.len();
            let herd = waiting.as_ref().is_some_and(|w| w.others > 0);
            let multiplexed = (herd || self.http.prefers_multiplexed(endpoint))
                && !probing_http1
                && !self.no_http2.load(Ordering::Relaxed);
            let sent = async {
                if multiplexed {
                    self.http.send_multiplexed(endpoint, &method, &target, body.as_deref()).await
                } else {
                    self.http.send(endpoint, &method, &target, body.as_deref()).await
                }
            };
            let (failure, pause) = match tokio::time::timeout(ATTEMPT_TIMEOUT + wait, sent).await {
                Ok(Ok(reply)) => {
                    if std::mem::take(&mut probing_http1) {
                        tracing::debug!("node answers HTTP/1.1 only; waiting over HTTP/1.1 from now on");
                        self.no_http2.store(true, Ordering::Relaxed);
                    }
                    let leader = self.named_leader(&reply);
                    if reply.status != 503 {
                        self.preferred.store(leader.unwrap_or(endpoint), Ordering::Relaxed);
                        return decode(reply).map(|v| (v, first_sent));
                    }
                    let retry_after = reply.retry_after;
                    let failure = match decode::<serde_json::Value>(reply) {
                        Err(ClientError::Api { error, .. }) => error,
                        _ => ErrorDetail::new(ErrorCode::Unavailable, "503"),
                    };
                    if failure.code == ErrorCode::Overloaded {
                        // The node sheds load: leave it alone as long as it
                        // asks, and let the others take the next try.
                        self.move_on_from(endpoint);
                        (failure.message, backoff.overloaded(retry_after))
                    } else {
                        // A node that names itself leader yet cannot commit may be
                        // cut off from the others (openraft has no CheckQuorum):
                        // follow a leader named elsewhere, else try the next node.
                        match leader.filter(|l| *l != endpoint) {
                            Some(other) => self.preferred.store(other, Ordering::Relaxed),
                            None => self.move_on_from(endpoint),
                        }
                        (failure.message, backoff.unavailable())
                    }
                }
                Ok(Err(e)) if multiplexed && !e.is_connect() => {
                    probing_http1 = true;
                    continue;
                }
                failed => {
                    probing_http1 = false;
                    // Unreachable, refused or timed out: try the next node.
                    self.move_on_from(endpoint);
                    let failure = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("{} gave no answer in time", self.http.endpoint(endpoint)),
                    };
                    (failure, backoff.unavailable())
                }
            };
            if Instant::now() + pause > give_up {
                return Err(ClientError::Unavailable(failure));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// The endpoint the answer names as leader, when it is one of ours.
    fn named_leader(&self, reply: &Reply) -> Option<usize> {
        let addr = reply.leader_addr.as_deref()?;
        self.http.endpoints().position(|e| e.authority() == addr)
    }

    /// Prefers the endpoint after `endpoint`, unless another call already
    /// moved the preference elsewhere.
    fn move_on_from(&self, endpoint: usize) {
        let next = (endpoint + 1) % self.http.len();
        let _ = self.preferred.compare_exchange(endpoint, next, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A wait in flight, counted while it lives (dropped with the call, also
/// when the caller gives up on it).
struct Waiting<'a> {
    count: &'a AtomicUsize,
    /// Waits already in flight when this one began.
    others: usize,
}

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        Waiting { count, others: count.fetch_add(1, Ordering::Relaxed) }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Decodes a 2xx JSON body, or turns an error body into [`ClientError::Api`].
fn decode<T: DeserializeOwned>(reply: Reply) -> Result<T, ClientError> {
    serde_json::from_slice(&body(reply)?).map_err(|e| ClientError::Decode(e.to_string()))
}

/// The body of a 2xx answer, or its error body as [`ClientError::Api`].
fn body(reply: Reply) -> Result<bytes::Bytes, ClientError> {
    if (200..300).contains(&reply.status) {
        return Ok(reply.body);
    }
    let error = match serde_json::from_slice::<ErrorBody>(&reply.body) {
        Ok(body) => body.error,
        // Not a leasehold error body (a proxy in between, say): keep the status.
        Err(_) => ErrorDetail::new(
            ErrorCode::Unknown,
            String::from_utf8_lossy(&reply.body).chars().take(200).collect::<String>(),
        ),
    };
    Err(ClientError::Api { status: reply.status, error })
}

/// No request body (for `GET`s and body-less `POST`s).
const NO_BODY: Option<&()> = None;
