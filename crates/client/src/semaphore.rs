//! [`Semaphore`]: permits of a counting semaphore, kept by a watchdog that
//! renews their lease, with the safe deadline and `lost` signal of
//! [`Lock`](crate::Lock) (the watchdog is the same, see `watchdog.rs`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::semaphores::{PermitRequest, Permits};
use crate::watchdog::{ended_by, whole_ms, LostReason, Renewal, Timing, Watched};
use crate::{Client, ClientError, ErrorCode, FencingToken, LockOptions};

/// How to acquire and keep a [`Semaphore`]: the lock options (owner, ttl,
/// wait, drift margin), the semaphore's limit and the permits to take.
#[derive(Debug, Clone)]
pub struct SemaphoreOptions {
    pub lock: LockOptions,
    pub limit: u32,
    pub permits: u32,
}

impl SemaphoreOptions {
    /// One permit of a semaphore of `limit`, with a `ttl` lease.
    pub fn new(limit: u32, ttl: Duration) -> Self {
        SemaphoreOptions { lock: LockOptions::new(ttl), limit, permits: 1 }
    }
}

/// Permits of a semaphore held by this process, renewed by a watchdog every
/// `ttl / 3`. Stop acting when [`lost`](Self::lost) fires: the permits may
/// then have passed to another holder. Dropping it does not release the
/// permits (they return when their lease runs out); call
/// [`release`](Self::release).
pub struct Semaphore {
    client: Arc<Client>,
    name: String,
    owner: String,
    grant: crate::proto::semaphores::PermitGrant,
    ttl: Duration,
    watched: Watched,
}

impl Client {
    /// Takes permits of semaphore `name` and keeps them: see [`Semaphore`].
    /// Errors as [`Client::acquire_permits`], and
    /// [`ClientError::InvalidArgument`] for a zero ttl or a drift margin over
    /// `ttl / 2`. When the acquire waited so long that less than a renewal
    /// interval is left before the safe deadline, it renews once first.
    pub async fn semaphore(self: &Arc<Self>, name: &str, options: SemaphoreOptions) -> Result<Semaphore, ClientError> {
        let SemaphoreOptions { lock, limit, permits } = options;
        let ttl_ms = whole_ms(lock.ttl)?;
        let timing = Timing::new(Duration::from_millis(ttl_ms), lock.effective_drift_margin())?;
        let asked = PermitRequest { limit, permits, ttl_ms, wait: lock.wait };
        let started = Instant::now();
        let held = self.acquire_permits(name, &lock.owner, &asked).await?;
        let renewal = PermitRenewal {
            client: Arc::clone(self),
            name: name.to_owned(),
            owner: lock.owner.clone(),
            held: held.grant.token,
            ttl_ms,
        };
        let mut anchor = started.min(held.sent_at);
        if timing.deadline(anchor) < Instant::now() + timing.interval() {
            let started = Instant::now();
            anchor = started.min(renewal.send().await?.sent_at);
        }
        let watched = Watched::start(renewal, timing, anchor);
        Ok(Semaphore {
            client: Arc::clone(self),
            name: name.to_owned(),
            owner: lock.owner,
            grant: held.grant,
            ttl: timing.ttl,
            watched,
        })
    }
}

impl Semaphore {
    /// The token of this grant: the index of the entry that granted the
    /// permits, above every earlier grant of the semaphore.
    pub fn token(&self) -> FencingToken {
        self.grant.token
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Permits held.
    pub fn permits(&self) -> u32 {
        self.grant.permits
    }

    /// The semaphore's limit when the permits were granted.
    pub fn limit(&self) -> u32 {
        self.grant.limit
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The current safe deadline (see [`Lock::valid_until`](crate::Lock::valid_until)).
    pub fn valid_until(&self) -> Instant {
        self.watched.valid_until()
    }

    /// When the watchdog's next renewal is due.
    pub(crate) fn renewal_due(&self) -> Instant {
        self.watched.renewal_due()
    }

    /// True once `lost` has fired or the safe deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.watched.is_lost()
    }

    /// True while the permits are still safe but their renewal is going
    /// wrong, as [`Lock::is_at_risk`](crate::Lock::is_at_risk).
    pub fn is_at_risk(&self) -> bool {
        self.watched.is_at_risk()
    }

    pub fn lost_reason(&self) -> Option<LostReason> {
        self.watched.lost_reason()
    }

    /// Resolves when the permits are lost, with the reason.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.watched.lost()
    }

    /// Stops the watchdog, then returns the permits.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.watched.stop().await;
        self.client.release_permits(&self.name, &self.owner, self.grant.token).await
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("grant", &self.grant)
            .field("watched", &self.watched)
            .finish()
    }
}

/// The renewal of one holder's permits under their token.
struct PermitRenewal {
    client: Arc<Client>,
    name: String,
    owner: String,
    held: FencingToken,
    ttl_ms: u64,
}

impl PermitRenewal {
    async fn send(&self) -> Result<Permits, ClientError> {
        self.client.renew_permits(&self.name, &self.owner, self.held, Some(self.ttl_ms)).await
    }
}

impl Renewal for PermitRenewal {
    fn subject(&self) -> String {
        format!("semaphore {:?} (token {})", self.name, self.held)
    }

    async fn renew(&self) -> Result<Instant, Result<LostReason, ClientError>> {
        match self.send().await {
            Ok(permits) => Ok(permits.sent_at),
            Err(e) => Err(ended_by(e, &[ErrorCode::StaleToken, ErrorCode::NotHeld, ErrorCode::NoSemaphore])),
        }
    }
}
