//! [`Session`]: any number of locks kept alive by one session, whose
//! watchdog sends one keepalive every `ttl / 3` whatever it holds, and whose
//! one [`Session::lost`] speaks for all of them.
//!
//! The timing is the watchdog's, shared with [`Lock`](crate::Lock) (see
//! `watchdog.rs`): the session, and so every lock under it, is safe until
//! the send time of the last successful keepalive (or of the create) + ttl −
//! drift margin. A lock acquired under the session later, even after a long
//! wait in its queue, is safe exactly as long as the session: the cluster
//! ends it only with the session. A keepalive answered `session_not_found`
//! means the session has ended (its locks are gone): `lost` fires at once.
//!
//! Every acquire and keepalive of a session carries the next number of the
//! session's sequence (`seq`), the same on each retry of one call: the
//! cluster answers a retry it has applied from the session's memory, for the
//! session's whole life, not only while its request id is remembered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::proto::semaphores::PermitGrant;
use crate::watchdog::{ended_by, whole_ms, LostReason, Renewal, Timing, Watched};
use crate::{AcquireOptions, Client, ClientError, ErrorCode, Grant, Lifetime, SessionId};

/// How to open and keep a [`Session`].
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The owner every lock under the session is taken as.
    pub owner: String,
    /// The session's ttl, sent as whole milliseconds (3 s to 1 h).
    pub ttl: Duration,
    /// As [`LockOptions::drift_margin`](crate::LockOptions::drift_margin):
    /// `None` means `ttl / 10`, at most `ttl / 2`.
    pub drift_margin: Option<Duration>,
}

impl SessionOptions {
    pub fn new(owner: impl Into<String>, ttl: Duration) -> Self {
        SessionOptions { owner: owner.into(), ttl, drift_margin: None }
    }

    pub fn with_drift_margin(mut self, margin: Duration) -> Self {
        self.drift_margin = Some(margin);
        self
    }
}

impl Client {
    /// Opens a session for `owner` with `ttl` and starts its keepalive
    /// watchdog. See [`Session`].
    pub async fn session(self: &Arc<Self>, owner: &str, ttl: Duration) -> Result<Session, ClientError> {
        Session::open(Arc::clone(self), SessionOptions::new(owner, ttl)).await
    }
}

/// A live session, kept alive by a watchdog task, under which locks are
/// taken with [`lock`](Self::lock) and [`lock_many`](Self::lock_many),
/// shared (read) locks with [`read_lock`](Self::read_lock) and semaphore
/// permits with [`acquire_permits`](Self::acquire_permits).
///
/// Stop acting under any of its locks when [`lost`](Self::lost) fires (or
/// check [`is_lost`](Self::is_lost) / [`valid_until`](Self::valid_until));
/// pass each lock's token with every write.
///
/// [`close`](Self::close) deletes the session, releasing all its locks, and
/// says whether that worked. Dropping it deletes it too, from a spawned task
/// (when dropped inside a Tokio runtime): unlike a lock, whose owner may
/// hold it again by the time a late release arrives, a session id names one
/// session forever, so a late delete can only end the session it was meant
/// for. Without a runtime, or should the delete fail, the session simply
/// expires after its ttl.
pub struct Session {
    client: Arc<Client>,
    id: SessionId,
    owner: String,
    ttl: Duration,
    watched: Watched,
    /// The last `seq` sent, shared with the watchdog's keepalives.
    seq: Arc<AtomicU64>,
    /// False once `close` deleted it.
    open: bool,
}

impl Session {
    /// Opens a session and starts its watchdog. Errors as
    /// [`Client::create_session`], and [`ClientError::InvalidArgument`] for a
    /// zero ttl or a drift margin over `ttl / 2`.
    pub async fn open(client: Arc<Client>, options: SessionOptions) -> Result<Session, ClientError> {
        let ttl_ms = whole_ms(options.ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let timing = Timing::new(ttl, options.drift_margin.unwrap_or(ttl / 10))?;
        let started = Instant::now();
        let (view, sent_at) = client.create_session(&options.owner, ttl_ms).await?;
        let seq = Arc::new(AtomicU64::new(0));
        let renewal = KeepAlive { client: Arc::clone(&client), id: view.session, seq: Arc::clone(&seq) };
        let watched = Watched::start(renewal, timing, started.min(sent_at));
        Ok(Session { client, id: view.session, owner: options.owner, ttl, watched, seq, open: true })
    }

    pub fn id(&self) -> SessionId {
        self.id
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Until this instant the cluster cannot have ended the session, nor any
    /// lock held under it.
    pub fn valid_until(&self) -> Instant {
        self.watched.valid_until()
    }

    /// When the watchdog's next keepalive is due (it stays put while that
    /// keepalive fails).
    pub(crate) fn renewal_due(&self) -> Instant {
        self.watched.renewal_due()
    }

    /// True once `lost` has fired or the safe deadline has passed.
    pub fn is_lost(&self) -> bool {
        self.watched.is_lost()
    }

    /// True while the session is still safe but its renewal is going wrong: an
    /// attempt failed, or the due renewal is half an interval late, and no
    /// renewal has succeeded since. False once lost (see
    /// [`is_lost`](Self::is_lost)) and again after a successful renewal.
    /// Time to finish or checkpoint the work before `lost` fires.
    pub fn is_at_risk(&self) -> bool {
        self.watched.is_at_risk()
    }

    pub fn lost_reason(&self) -> Option<LostReason> {
        self.watched.lost_reason()
    }

    /// Resolves when the session, and with it every lock under it, is lost.
    /// As [`Lock::lost`](crate::Lock::lost).
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
        self.watched.lost()
    }

    /// Acquires `name` under this session, waiting in its queue up to
    /// `wait`: the lock lives as long as the session. Errors as
    /// [`Client::acquire_with`], and `session_not_found` once the session
    /// has ended.
    pub async fn lock(&self, name: &str, wait: Option<Duration>) -> Result<Grant, ClientError> {
        let options = AcquireOptions { wait, request_id: None, lock_delay: None };
        let lifetime = Lifetime::Session { id: self.id, seq: next(&self.seq) };
        let lease = self.client.acquire_for(name, &self.owner, lifetime, &options).await?;
        Ok(lease.grant)
    }

    /// Acquires `name` in shared mode (a read lock) under this session,
    /// waiting in its queue up to `wait`: the shared lease lives as long as
    /// the session. (The writer's side is [`lock`](Self::lock).) Errors as
    /// [`Client::acquire_shared`], and `session_not_found` once the session
    /// has ended.
    pub async fn read_lock(&self, name: &str, wait: Option<Duration>) -> Result<Grant, ClientError> {
        let options = AcquireOptions { wait, request_id: None, lock_delay: None };
        let lifetime = Lifetime::Session { id: self.id, seq: next(&self.seq) };
        let lease = self.client.acquire_shared_for(name, &self.owner, lifetime, &options).await?;
        Ok(lease.grant)
    }

    /// Takes `permits` of semaphore `name` (of `limit`) under this session,
    /// waiting in its queue up to `wait`: they return when the session
    /// ends. Release them early with [`Client::release_permits`]. Errors
    /// as [`Client::acquire_permits`], and `session_not_found` once the
    /// session has ended.
    pub async fn acquire_permits(
        &self,
        name: &str,
        limit: u32,
        permits: u32,
        wait: Option<Duration>,
    ) -> Result<PermitGrant, ClientError> {
        let lifetime = Lifetime::Session { id: self.id, seq: next(&self.seq) };
        let held = self.client.acquire_permits_for(name, &self.owner, limit, permits, lifetime, wait).await?;
        Ok(held.grant)
    }

    /// Acquires every lock of `names` under this session in one log entry,
    /// under one token, or none; as [`Client::acquire_many`]. The grants
    /// come in the order asked.
    pub async fn lock_many(&self, names: &[&str], wait: Option<Duration>) -> Result<Vec<Grant>, ClientError> {
        let options = AcquireOptions { wait, request_id: None, lock_delay: None };
        let lifetime = Lifetime::Session { id: self.id, seq: next(&self.seq) };
        let leases = self.client.acquire_many_for(names, &self.owner, lifetime, &options).await?;
        Ok(leases.grants)
    }

    /// Stops the watchdog and deletes the session, releasing every lock
    /// under it (each handed to its first waiter). Errors are the cluster's
    /// (`session_not_found` when it had already ended) or unavailability, in
    /// which case the session runs out after its ttl.
    pub async fn close(mut self) -> Result<Vec<String>, ClientError> {
        self.watched.stop().await;
        self.open = false;
        self.client.delete_session(self.id).await
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("ttl", &self.ttl)
            .field("watched", &self.watched)
            .finish()
    }
}

impl Drop for Session {
    /// Stops the watchdog and, inside a Tokio runtime, deletes the session
    /// from a spawned task (see the type's docs).
    fn drop(&mut self) {
        self.watched.abort();
        if !self.open {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, id) = (Arc::clone(&self.client), self.id);
            runtime.spawn(async move {
                if let Err(e) = client.delete_session(id).await {
                    tracing::debug!(session = id, error = %e, "could not delete a dropped session; it expires");
                }
            });
        }
    }
}

/// The next number of a session's sequence.
fn next(seq: &AtomicU64) -> u64 {
    seq.fetch_add(1, Ordering::Relaxed) + 1
}

/// The keepalive of one session.
struct KeepAlive {
    client: Arc<Client>,
    id: SessionId,
    seq: Arc<AtomicU64>,
}

impl Renewal for KeepAlive {
    fn subject(&self) -> String {
        format!("session {}", self.id)
    }

    async fn renew(&self) -> Result<Instant, Result<LostReason, ClientError>> {
        match self.client.keep_alive(self.id, Some(next(&self.seq))).await {
            Ok((_, sent_at)) => Ok(sent_at),
            Err(e) => Err(ended_by(e, &[ErrorCode::SessionNotFound])),
        }
    }
}
