//! [`Client`]: a client of one cluster, built from its nodes' endpoints,
//! and `call`, the loop every request of the endpoint modules goes
//! through: the same body (so the same request id) on every try, HTTP/1.1
//! or HTTP/2 per try, the named leader or the next node after a failure
//! (at once after a refused connection or a 503 naming another leader, once
//! per other node between pauses), and pauses from `Backoff` until the retry
//! budget is spent.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ::http::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use leasehold_proto::{ErrorBody, ErrorCode, ErrorDetail};

use crate::backoff::Backoff;
use crate::http::{target, Endpoint, Http, Reply, SendError, MAX_ANSWER_BYTES};
use crate::{Ca, ClientError, Credentials, Secret};

/// How long one try of a call may take, beyond the time it may wait in a queue.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(6);
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
                credentials.identity.as_ref(),
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

    /// One request to one node, without retries; an answer body longer
    /// than `limit` bytes is refused.
    pub(crate) async fn send_to(
        &self,
        endpoint: usize,
        method: Method,
        segments: &[&str],
        timeout: Duration,
        limit: u64,
    ) -> Result<Reply, ClientError> {
        if endpoint >= self.http.len() {
            return Err(ClientError::InvalidArgument(format!("no endpoint {endpoint}")));
        }
        let target = target(segments, &[]);
        let sent = self.http.send(endpoint, &method, &target, None, limit);
        match tokio::time::timeout(timeout, sent).await {
            Ok(Err(e)) if e.is_too_large() => Err(too_large(e)),
            Ok(reply) => reply.map_err(|e| ClientError::Unavailable(e.to_string())),
            Err(_) => Err(ClientError::Unavailable(format!("no answer within {} ms", timeout.as_millis()))),
        }
    }

    /// Number of endpoints.
    pub fn endpoint_count(&self) -> usize {
        self.http.len()
    }

    pub(crate) fn retry_budget(&self) -> Duration {
        self.retry_budget
    }

    /// The endpoint tried first: the leader as last named, or the last that answered.
    pub(crate) fn preferred_endpoint(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.http.len()
    }

    pub(crate) fn endpoint(&self, endpoint: usize) -> &Endpoint {
        self.http.endpoint(endpoint)
    }

    pub(crate) fn http(&self) -> &Http {
        &self.http
    }

    /// Sends one request, following the leader and retrying unavailability.
    /// `wait` is how long the server may legitimately hold the request (a
    /// queued acquire); it extends the attempt timeout and the retry budget.
    /// Returns the decoded answer and the send time of the *first* attempt:
    /// a retry may be answered from the request-id record of an earlier
    /// attempt, whose commit came after the first send, never before it.
    pub(crate) async fn call<T: DeserializeOwned>(
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
        // Tries left before the next pause that go to another node at once:
        // one refused the connection (the request never reached it: the
        // node is down, as its leader is after a crash) or named another
        // leader in its 503. At most one per other node between pauses, so
        // nodes that name each other, or all refusing, cannot make it spin.
        let sweep = self.http.len() - 1;
        let mut at_once = sweep;
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
                    self.http.send(endpoint, &method, &target, body.as_deref(), MAX_ANSWER_BYTES).await
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
                            Some(other) => {
                                self.preferred.store(other, Ordering::Relaxed);
                                if at_once > 0 {
                                    at_once -= 1;
                                    continue;
                                }
                            }
                            None => self.move_on_from(endpoint),
                        }
                        (failure.message, backoff.unavailable())
                    }
                }
                // Every node would answer the same: no retry.
                Ok(Err(e)) if e.is_too_large() => return Err(too_large(e)),
                Ok(Err(e)) if e.is_untrusted() => return Err(ClientError::Unavailable(e.to_string())),
                Ok(Err(e)) if multiplexed && !e.is_connect() => {
                    probing_http1 = true;
                    continue;
                }
                Ok(Err(e)) if e.is_connect() && at_once > 0 => {
                    tracing::debug!(error = %e, "node refused the connection; trying the next one at once");
                    probing_http1 = false;
                    at_once -= 1;
                    self.move_on_from(endpoint);
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
            at_once = sweep;
        }
    }

    /// The endpoint the answer names as leader, when it is one of ours.
    fn named_leader(&self, reply: &Reply) -> Option<usize> {
        let addr = reply.leader_addr.as_deref()?;
        self.http.endpoints().position(|e| e.authority() == addr)
    }

    /// Prefers the endpoint after `endpoint`, unless another call already
    /// moved the preference elsewhere.
    pub(crate) fn move_on_from(&self, endpoint: usize) {
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

/// An answer refused for its length: not what the API answers.
fn too_large(e: SendError) -> ClientError {
    ClientError::Decode(e.to_string())
}

/// Decodes a 2xx JSON body, or turns an error body into [`ClientError::Api`].
pub(crate) fn decode<T: DeserializeOwned>(reply: Reply) -> Result<T, ClientError> {
    serde_json::from_slice(&body(reply)?).map_err(|e| ClientError::Decode(e.to_string()))
}

/// The body of a 2xx answer, or its error body as [`ClientError::Api`].
pub(crate) fn body(reply: Reply) -> Result<bytes::Bytes, ClientError> {
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
pub(crate) const NO_BODY: Option<&()> = None;
