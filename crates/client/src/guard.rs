//! [`Lock`]: a held lock whose lease a watchdog task keeps renewing, and that
//! tells its holder, through [`Lock::lost`], the moment it can no longer be
//! sure it holds the lock.
//!
//! # Timing
//!
//! The cluster never expires a lease before `ttl` of real time has passed
//! since the entry that granted or renewed it was committed (guarantee 2 of
//! the README), and that commit happens after the client sent the request.
//! So, on this process's monotonic clock, the lease is certainly still held
//! until
//!
//! ```text
//! anchor + ttl − drift_margin
//! ```
//!
//! where `anchor` is a send time of the request that produced the last grant
//! or renewal, and `drift_margin` covers the difference between the rates of
//! this machine's clock and the leader's. That instant is the guard's *safe
//! deadline* ([`Lock::valid_until`]). The cluster's `expires_in_ms` plays no
//! part: it is counted from the commit, which this process cannot observe.
//!
//! The guard anchors each call at the instant it started the call, which is
//! no later than the send time of any attempt the client's retry loop made
//! (`Lease::sent_at`, the first attempt's send time, is never earlier). When
//! the cluster de-duplicates a retried request by its request id, the answer
//! may stem from an earlier attempt's commit; the start of the call precedes
//! every attempt, so the anchor stays safe whichever attempt took effect.
//!
//! The watchdog renews every `ttl / 3` after the anchor. A failed renewal is
//! retried with a short back-off until the safe deadline; every attempt is
//! cut off at that deadline (the client's own retry budget, 10 s by default,
//! does not delay it), so `lost` fires no later than the safe deadline even
//! when every node hangs. A renewal answered `stale_token` or `not_held`
//! means the lease has ended on the cluster: `lost` fires at once.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{AcquireOptions, Client, ClientError, ErrorCode, FencingToken};

/// First pause after a failed renewal; it doubles up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// How to acquire and keep a [`Lock`].
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// Holder identity, unique per holder (two holders with one owner share
    /// the lock). Defaults to [`default_owner`]: `hostname-pid-random`.
    pub owner: String,
    /// Lease time to live, sent as whole milliseconds (the cluster accepts
    /// 3 s to 1 h). The watchdog renews every `ttl / 3`.
    pub ttl: Duration,
    /// Wait up to this long in the lock's queue when another owner holds it;
    /// `None` fails at once with `409 held`.
    pub wait: Option<Duration>,
    /// Subtracted from every lease to cover clock-rate drift between this
    /// machine and the leader (see the module docs). `None` means `ttl / 10`,
    /// far more than the drift of sane hardware (well under 1 %), and it also
    /// leaves room for scheduling delays of the watchdog. At most `ttl / 2`.
    pub drift_margin: Option<Duration>,
}

impl LockOptions {
    /// Options with `ttl`, a fresh [`default_owner`], no wait and the default margin.
    pub fn new(ttl: Duration) -> Self {
        LockOptions { owner: default_owner(), ttl, wait: None, drift_margin: None }
    }

    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    pub fn with_drift_margin(mut self, margin: Duration) -> Self {
        self.drift_margin = Some(margin);
        self
    }

    /// The margin in effect: `drift_margin`, or `ttl / 10`.
    pub fn effective_drift_margin(&self) -> Duration {
        self.drift_margin.unwrap_or(self.ttl / 10)
    }
}

impl Default for LockOptions {
    /// A 10 s ttl.
    fn default() -> Self {
        LockOptions::new(Duration::from_secs(10))
    }
}

/// A fresh owner id, `hostname-pid-random` (printable ASCII, at most 93
/// bytes), different for every call.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.chars().filter(char::is_ascii_graphic).take(64).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string());
    format!("{host}-{}-{:016x}", std::process::id(), fastrand::u64(..))
}

/// Why a [`Lock`] stopped protecting its holder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// The safe deadline passed without a successful renewal (no quorum,
    /// nodes unreachable or hung, this process paused). The lease may still
    /// be held on the cluster, but nothing guarantees it any more.
    #[error("no renewal succeeded before the safe deadline (last error: {last_error})")]
    Expired { last_error: String },
    /// The cluster answered a renewal with `stale_token` or `not_held`: the
    /// lease has ended and another owner may hold the lock.
    #[error("the cluster ended the lease: {code}: {message}")]
    Revoked { code: ErrorCode, message: String },
    /// The guard was released or dropped before anything was lost. Only a
    /// future from [`Lock::lost`] that outlives its guard sees this.
    #[error("the lock guard was released or dropped")]
    Ended,
}

/// What the watchdog publishes.
#[derive(Debug, Clone)]
struct State {
    valid_until: Instant,
    lost: Option<LostReason>,
}

/// A held lock, kept alive by a watchdog task that renews its lease every
/// `ttl / 3`.
///
/// Pass [`token`](Self::token) with every write to the protected resource
/// and stop acting when [`lost`](Self::lost) fires (or check
/// [`is_lost`](Self::is_lost) / [`valid_until`](Self::valid_until) before
/// each action). The module docs explain the timing.
///
/// **Dropping a `Lock` does not release it.** Drop stops the watchdog, so the
/// lease simply runs out after its ttl. Drop cannot await, so a release from
/// drop would have to be fire-and-forget: a task that may run after the
/// holder has moved on, for instance after the same owner acquired the lock
/// again, and whose failure nobody sees. Call [`release`](Self::release)
/// to give the lock up at once and learn whether that worked.
pub struct Lock {
    client: Arc<Client>,
    name: String,
    owner: String,
    token: FencingToken,
    ttl: Duration,
    drift_margin: Duration,
    state: watch::Receiver<State>,
    /// Set before the watchdog is stopped on purpose (release or drop).
    ended: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

impl Client {
    /// Acquires `name` and returns a [`Lock`] whose watchdog keeps renewing
    /// it. See [`Lock::acquire`].
    pub async fn lock(self: &Arc<Self>, name: &str, options: LockOptions) -> Result<Lock, ClientError> {
        Lock::acquire(Arc::clone(self), name, options).await
    }
}

impl Lock {
    /// Acquires `name` (waiting in its queue up to `options.wait`) and starts
    /// the watchdog. Errors as [`Client::acquire_with`] (`409 held`,
    /// `wait_timeout`, 400, unavailable), and
    /// [`ClientError::InvalidArgument`] for a zero ttl or a drift margin over
    /// `ttl / 2`.
    ///
    /// When the acquire took so long (a queue wait, retries) that less than a
    /// renewal interval is left before the safe deadline, this renews once
    /// before returning, to re-anchor the lease; if that renewal fails, its
    /// error is returned and the lease runs out after its ttl.
    pub async fn acquire(client: Arc<Client>, name: &str, options: LockOptions) -> Result<Lock, ClientError> {
        let ttl_ms = u64::try_from(options.ttl.as_millis()).ok().filter(|ms| *ms > 0).ok_or_else(|| {
            ClientError::InvalidArgument(format!("ttl {:?} is not a whole number of ms", options.ttl))
        })?;
        let drift_margin = options.effective_drift_margin();
        let requested_ttl = Duration::from_millis(ttl_ms);
        if drift_margin > requested_ttl / 2 {
            return Err(ClientError::InvalidArgument(format!(
                "drift margin {drift_margin:?} is more than half the ttl {requested_ttl:?}"
            )));
        }
        let request = AcquireOptions { wait: options.wait, request_id: None, lock_delay: None };
        let started = Instant::now();
        let lease = client.acquire_with(name, &options.owner, ttl_ms, &request).await?;
        let token = lease.token();
        // The shorter of what was asked and what was granted.
        let ttl = requested_ttl.min(Duration::from_millis(lease.grant.ttl_ms));
        let timing = Timing { ttl, ttl_ms, drift_margin };
        let mut anchor = started.min(lease.sent_at);
        if timing.deadline(anchor) < Instant::now() + timing.interval() {
            let started = Instant::now();
            let renewed = client.renew(name, token, Some(ttl_ms)).await?;
            if renewed.token() != token {
                return Err(ClientError::Decode(format!(
                    "renewal of token {token} answered token {}",
                    renewed.token()
                )));
            }
            anchor = started.min(renewed.sent_at);
        }
        let (sender, state) = watch::channel(State { valid_until: timing.deadline(anchor), lost: None });
        let watchdog = Watchdog { client: Arc::clone(&client), name: name.to_string(), token, timing, state: sender };
        let watchdog = tokio::spawn(watchdog.run(anchor));
        Ok(Lock {
            client,
            name: name.to_string(),
            owner: options.owner,
            token,
            ttl,
            drift_margin,
            state,
            ended: Arc::new(AtomicBool::new(false)),
            watchdog: Some(watchdog),
        })
    }

    /// The fencing token of this grant: send it with every write.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The lease's ttl (as granted, whole milliseconds).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The drift margin in effect.
    pub fn drift_margin(&self) -> Duration {
        self.drift_margin
    }

    /// The current safe deadline: until this instant the cluster cannot have
    /// expired the lease (send time of the last successful grant or renewal +
    /// ttl − drift margin). It only moves forward, and stops moving once
    /// `lost` has fired.
    pub fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// True once `lost` has fired, or when the safe deadline has passed (the
    /// watchdog fires `lost` at that moment). `false` means the lease is safe
    /// at the time of the call.
    pub fn is_lost(&self) -> bool {
        let state = self.state.borrow();
        state.lost.is_some() || Instant::now() >= state.valid_until
    }

    /// The reason, once `lost` has fired.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.state.borrow().lost.clone()
    }

    /// Resolves when the lock is lost, with the reason; at once if it already
    /// is. Call it as often as needed; the future does not borrow the guard,
    /// so it can move into another task (if it outlives the guard it resolves
    /// with [`LostReason::Ended`] when the guard is released or dropped).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut state = self.state.clone();
        let ended = Arc::clone(&self.ended);
        async move {
            let fired = state.wait_for(|s| s.lost.is_some()).await.map(|s| s.lost.clone());
            match fired {
                Ok(Some(reason)) => reason,
                // The watchdog is gone without firing: stopped by release or
                // drop, or it died (a panic, the runtime shutting down), in
                // which case nothing renews the lease any more.
                _ if ended.load(Ordering::SeqCst) => LostReason::Ended,
                _ => LostReason::Expired { last_error: "the watchdog task stopped".to_string() },
            }
        }
    }

    /// Stops the watchdog, then releases the lock. Errors are the cluster's
    /// (e.g. `stale_token` or `not_held` when the lock was already lost) or
    /// unavailability, in which case the lease runs out after its ttl.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.stop_watchdog();
        if let Some(watchdog) = self.watchdog.take() {
            // An aborted task ends with a cancelled JoinError; wait for it so
            // no renewal is sent after the release.
            let _ = watchdog.await;
        }
        self.client.release(&self.name, self.token).await
    }

    fn stop_watchdog(&mut self) {
        self.ended.store(true, Ordering::SeqCst);
        if let Some(watchdog) = &self.watchdog {
            watchdog.abort();
        }
    }
}

impl Drop for Lock {
    /// Stops the watchdog; does not release (see the type's docs).
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("ttl", &self.ttl)
            .field("drift_margin", &self.drift_margin)
            .field("valid_until", &state.valid_until)
            .field("lost", &state.lost)
            .finish()
    }
}

#[derive(Debug, Clone, Copy)]
struct Timing {
    ttl: Duration,
    ttl_ms: u64,
    drift_margin: Duration,
}

impl Timing {
    /// The safe deadline of a lease anchored at `anchor`.
    fn deadline(&self, anchor: Instant) -> Instant {
        (anchor + self.ttl).checked_sub(self.drift_margin).unwrap_or(anchor)
    }

    /// Time between the anchor and the next renewal.
    fn interval(&self) -> Duration {
        self.ttl / 3
    }
}

struct Watchdog {
    client: Arc<Client>,
    name: String,
    token: FencingToken,
    timing: Timing,
    state: watch::Sender<State>,
}

impl Watchdog {
    /// Renews every interval after the anchor until a renewal cannot be
    /// obtained before the safe deadline; then publishes the reason and ends.
    async fn run(self, mut anchor: Instant) {
        loop {
            let renew_at = anchor + self.timing.interval();
            tokio::time::sleep_until(renew_at.into()).await;
            match self.renew_before(self.timing.deadline(anchor)).await {
                Ok(new_anchor) => {
                    anchor = new_anchor;
                    let valid_until = self.timing.deadline(anchor);
                    self.state.send_modify(|s| s.valid_until = s.valid_until.max(valid_until));
                }
                Err(reason) => {
                    tracing::warn!(lock = %self.name, token = self.token, %reason, "lock lost");
                    self.state.send_modify(|s| s.lost = Some(reason));
                    return;
                }
            }
        }
    }

    /// Renews, retrying failures, until `deadline`. Returns the new anchor
    /// (the start of the call that succeeded).
    async fn renew_before(&self, deadline: Instant) -> Result<Instant, LostReason> {
        let mut backoff = INITIAL_BACKOFF;
        let mut last_error = "no renewal attempt finished".to_string();
        loop {
            if Instant::now() >= deadline {
                return Err(LostReason::Expired { last_error });
            }
            let started = Instant::now();
            let renew = self.client.renew(&self.name, self.token, Some(self.timing.ttl_ms));
            let answer = tokio::time::timeout_at(deadline.into(), renew).await;
            // Past the deadline the lease is no longer known to be safe (and
            // `is_lost` already says so): a success that comes in now does
            // not count, and the loop's check fires `lost`.
            let late = Instant::now() >= deadline;
            match answer {
                Ok(Ok(lease)) if lease.token() != self.token => {
                    return Err(LostReason::Revoked {
                        code: ErrorCode::StaleToken,
                        message: format!("the renewal answered token {}", lease.token()),
                    })
                }
                Ok(Ok(_)) if late => last_error = "the renewal was answered after the safe deadline".to_string(),
                Ok(Ok(lease)) => return Ok(started.min(lease.sent_at)),
                Ok(Err(ClientError::Api { error, .. }))
                    if matches!(error.code, ErrorCode::StaleToken | ErrorCode::NotHeld) =>
                {
                    return Err(LostReason::Revoked { code: error.code, message: error.message })
                }
                Ok(Err(e)) => last_error = e.to_string(),
                Err(_) => last_error = "the renewal was still unanswered at the safe deadline".to_string(),
            }
            if late {
                continue;
            }
            tracing::debug!(lock = %self.name, error = %last_error, "renewal failed; retrying");
            let pause = Instant::now() + backoff;
            tokio::time::sleep_until(pause.min(deadline).into()).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_owner_is_printable_short_and_unique() {
        let (a, b) = (default_owner(), default_owner());
        assert_ne!(a, b);
        assert!(a.len() <= 128 && a.chars().all(|c| c.is_ascii_graphic()), "{a}");
        assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
    }

    #[test]
    fn deadline_is_anchor_plus_ttl_minus_margin() {
        let timing = Timing { ttl: Duration::from_secs(3), ttl_ms: 3000, drift_margin: Duration::from_millis(300) };
        let anchor = Instant::now();
        assert_eq!(timing.deadline(anchor), anchor + Duration::from_millis(2700));
        assert_eq!(timing.interval(), Duration::from_secs(1));
        assert!(anchor + timing.interval() < timing.deadline(anchor));
    }

    #[test]
    fn default_margin_is_a_tenth_of_the_ttl() {
        let options = LockOptions::new(Duration::from_secs(10));
        assert_eq!(options.effective_drift_margin(), Duration::from_secs(1));
        assert_eq!(options.with_drift_margin(Duration::ZERO).effective_drift_margin(), Duration::ZERO);
    }
}
