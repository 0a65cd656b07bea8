//! [`Lock`]: a held lock whose lease a watchdog task keeps renewing, and that
//! tells its holder, through [`Lock::lost`], the moment it can no longer be
//! sure it holds the lock.
//!
//! The timing (the safe deadline, renewals every `ttl / 3`, when `lost`
//! fires) is the watchdog's, shared with [`Session`](crate::Session): see
//! `watchdog.rs`. A renewal answered `stale_token` or `not_held` means the
//! lease has ended on the cluster: `lost` fires at once.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::watchdog::{ended_by, whole_ms, LostReason, Renewal, Timing, Watched};
use crate::{AcquireOptions, Client, ClientError, ErrorCode, FencingToken};

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
    /// Held in shared mode (a [`ReadLock`](crate::ReadLock)).
    shared: bool,
    watched: Watched,
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
        Lock::acquire_in_mode(client, name, options, false).await
    }

    /// [`acquire`](Self::acquire) in exclusive mode, or with `shared` in
    /// shared mode (renewed and released as the shared lease of its owner).
    pub(crate) async fn acquire_in_mode(
        client: Arc<Client>,
        name: &str,
        options: LockOptions,
        shared: bool,
    ) -> Result<Lock, ClientError> {
        let ttl_ms = whole_ms(options.ttl)?;
        let drift_margin = options.effective_drift_margin();
        let requested_ttl = Duration::from_millis(ttl_ms);
        // Refused before anything is sent.
        Timing::new(requested_ttl, drift_margin)?;
        let request = AcquireOptions { wait: options.wait, request_id: None, lock_delay: None };
        let started = Instant::now();
        let lease = if shared {
            client.acquire_shared(name, &options.owner, ttl_ms, &request).await?
        } else {
            client.acquire_with(name, &options.owner, ttl_ms, &request).await?
        };
        let grant = Granted { token: lease.token(), ttl_ms: lease.grant.ttl_ms, anchor: started.min(lease.sent_at) };
        Lock::held(client, name, options.owner, ttl_ms, drift_margin, grant, shared).await
    }

    /// The guard of `grant` of `name` to `owner`, asked for with `ttl_ms`
    /// (held `shared` or not): starts its watchdog. When the grant took so
    /// long (a queue wait, retries) that less than a renewal interval is left
    /// before the safe deadline, renews once first, to re-anchor the lease;
    /// if that renewal fails, its error is returned and the lease runs out
    /// after its ttl.
    pub(crate) async fn held(
        client: Arc<Client>,
        name: &str,
        owner: String,
        ttl_ms: u64,
        drift_margin: Duration,
        grant: Granted,
        shared: bool,
    ) -> Result<Lock, ClientError> {
        let Granted { token, mut anchor, .. } = grant;
        // The shorter of what was asked and what was granted.
        let ttl = Duration::from_millis(ttl_ms.min(grant.ttl_ms));
        // Not refused now that the lock is held: a shorter grant only brings the deadline closer.
        let timing = Timing { ttl, drift_margin };
        let renewal = LeaseRenewal {
            client: Arc::clone(&client),
            name: name.to_string(),
            token,
            ttl_ms,
            shared_owner: shared.then(|| owner.clone()),
        };
        if timing.deadline(anchor) < Instant::now() + timing.interval() {
            let started = Instant::now();
            let renewed = renewal.send().await?;
            if renewed.token() != token {
                return Err(ClientError::Decode(format!(
                    "renewal of token {token} answered token {}",
                    renewed.token()
                )));
            }
            anchor = started.min(renewed.sent_at);
        }
        let watched = Watched::start(renewal, timing, anchor);
        Ok(Lock { client, name: name.to_string(), owner, token, ttl, drift_margin, shared, watched })
    }

    /// Stops the watchdog and waits until it has stopped: no renewal is
    /// sent after this returns.
    pub(crate) async fn stop_renewing(&mut self) {
        self.watched.stop().await;
    }

    pub(crate) fn client(&self) -> &Arc<Client> {
        &self.client
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
        self.watched.valid_until()
    }

    /// When the watchdog's next renewal is due (it stays put while that
    /// renewal fails).
    pub(crate) fn renewal_due(&self) -> Instant {
        self.watched.renewal_due()
    }

    /// True once `lost` has fired, or when the safe deadline has passed (the
    /// watchdog fires `lost` at that moment). `false` means the lease is safe
    /// at the time of the call.
    pub fn is_lost(&self) -> bool {
        self.watched.is_lost()
    }

    /// True while the lease is still safe but its renewal is going wrong: an
    /// attempt failed, or the due renewal is half an interval late, and no
    /// renewal has succeeded since. False once lost (see
    /// [`is_lost`](Self::is_lost)) and again after a successful renewal.
    /// Time to finish or checkpoint the work before `lost` fires.
    pub fn is_at_risk(&self) -> bool {
        self.watched.is_at_risk()
    }

    /// The reason, once `lost` has fired.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.watched.lost_reason()
    }

    /// Resolves when the lock is lost, with the reason; at once if it already
    /// is. Call it as often as needed; the future does not borrow the guard,
    /// so it can move into another task (if it outlives the guard it resolves
    /// with [`LostReason::Ended`] when the guard is released or dropped).
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.watched.lost()
    }

    /// Stops the watchdog, then releases the lock. Errors are the cluster's
    /// (e.g. `stale_token` or `not_held` when the lock was already lost) or
    /// unavailability, in which case the lease runs out after its ttl.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.watched.stop().await;
        if self.shared {
            self.client.release_shared(&self.name, &self.owner, self.token).await
        } else {
            self.client.release(&self.name, self.token).await
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("ttl", &self.ttl)
            .field("drift_margin", &self.drift_margin)
            .field("shared", &self.shared)
            .field("watched", &self.watched)
            .finish()
    }
}

/// A grant a guard is made of: its token, the ttl granted (ms), and the
/// anchor of the lease (the start of the call that produced it).
pub(crate) struct Granted {
    pub(crate) token: FencingToken,
    pub(crate) ttl_ms: u64,
    pub(crate) anchor: Instant,
}

/// The renewal of one lease under its token.
struct LeaseRenewal {
    client: Arc<Client>,
    name: String,
    token: FencingToken,
    ttl_ms: u64,
    /// The owner of a shared lease, which its renewal names.
    shared_owner: Option<String>,
}

impl LeaseRenewal {
    /// One renew request of the lease.
    async fn send(&self) -> Result<crate::Lease, ClientError> {
        match &self.shared_owner {
            Some(owner) => self.client.renew_shared(&self.name, owner, self.token, Some(self.ttl_ms)).await,
            None => self.client.renew(&self.name, self.token, Some(self.ttl_ms)).await,
        }
    }
}

impl Renewal for LeaseRenewal {
    fn subject(&self) -> String {
        format!("lock {:?} (token {})", self.name, self.token)
    }

    async fn renew(&self) -> Result<Instant, Result<LostReason, ClientError>> {
        match self.send().await {
            Ok(lease) if lease.token() != self.token => Err(Ok(LostReason::Revoked {
                code: ErrorCode::StaleToken,
                message: format!("the renewal answered token {}", lease.token()),
            })),
            Ok(lease) => Ok(lease.sent_at),
            Err(e) => Err(ended_by(e, &[ErrorCode::StaleToken, ErrorCode::NotHeld])),
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
    fn default_margin_is_a_tenth_of_the_ttl() {
        let options = LockOptions::new(Duration::from_secs(10));
        assert_eq!(options.effective_drift_margin(), Duration::from_secs(1));
        assert_eq!(options.with_drift_margin(Duration::ZERO).effective_drift_margin(), Duration::ZERO);
    }
}
