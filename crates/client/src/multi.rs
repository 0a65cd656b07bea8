//! Several locks at once: [`Client::acquire_many`] takes every lock of a
//! list in one log entry, under one fencing token, or none of them;
//! [`LockSet`] is the guard that releases them together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::Method;

use super::{new_request_id, AcquireOptions, Client, ClientError, Lifetime};
use leasehold_proto::locks::{MultiAcquireRequest, MultiLeaseResponse, MultiReleaseRequest, MultiReleaseResponse};
use leasehold_proto::{FencingToken, Grant};

/// Locks granted together, with the instant their request was sent.
#[derive(Debug, Clone)]
pub struct Leases {
    /// One grant per lock, in the order asked, all under [`token`](Self::token).
    pub grants: Vec<Grant>,
    pub token: FencingToken,
    /// The owner already held all of them under this token (leases restarted).
    pub reacquired: bool,
    /// Send time of the request's first attempt: the anchor of every lease.
    pub sent_at: Instant,
}

impl Leases {
    /// Until when the holder may act on these leases (they share one ttl):
    /// as [`Lease::valid_until`](super::Lease::valid_until), and, as that,
    /// not for leases held under a session.
    pub fn valid_until(&self, margin: Duration) -> Instant {
        let ttl = self.grants.iter().map(|g| g.ttl_ms).min().unwrap_or(0);
        (self.sent_at + Duration::from_millis(ttl)).checked_sub(margin).unwrap_or(self.sent_at)
    }

    pub fn names(&self) -> Vec<&str> {
        self.grants.iter().map(|g| g.name.as_str()).collect()
    }
}

impl Client {
    /// Acquires every lock of `names` for `owner` in one log entry, under
    /// one token, or none: `409 held` with `conflicts` (see
    /// [`ErrorDetail::conflicts`](super::ErrorDetail::conflicts)) naming
    /// every lock in the way. With `options.wait`, waits until all can be
    /// granted together, holding none meanwhile.
    pub async fn acquire_many(
        &self,
        names: &[&str],
        owner: &str,
        ttl_ms: u64,
        options: &AcquireOptions,
    ) -> Result<Leases, ClientError> {
        self.acquire_many_for(names, owner, Lifetime::Ttl(ttl_ms), options).await
    }

    /// The multi-acquire of `names` with leases that live by `lifetime`
    /// (see [`Client::acquire_for`]).
    pub async fn acquire_many_for(
        &self,
        names: &[&str],
        owner: &str,
        lifetime: Lifetime,
        options: &AcquireOptions,
    ) -> Result<Leases, ClientError> {
        let wait = options.wait.unwrap_or_default();
        let (ttl_ms, session, seq) = lifetime.fields();
        let body = MultiAcquireRequest {
            names: names.iter().map(|n| n.to_string()).collect(),
            owner: owner.to_owned(),
            ttl_ms,
            session,
            seq,
            wait_ms: (!wait.is_zero()).then_some(wait.as_millis() as u64),
            request_id: Some(options.request_id.clone().unwrap_or_else(new_request_id)),
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
        };
        let path = ["v1", "multi", "acquire"];
        let (reply, sent_at): (MultiLeaseResponse, _) = self.call(Method::POST, &path, &[], Some(&body), wait).await?;
        let MultiLeaseResponse { grants, token, reacquired } = reply;
        Ok(Leases { grants, token, reacquired, sent_at })
    }

    /// Releases every lock of `names`, all held under `token`, or none.
    pub async fn release_many(&self, names: &[&str], token: FencingToken) -> Result<(), ClientError> {
        let names = names.iter().map(|n| n.to_string()).collect();
        let body = MultiReleaseRequest { names, token, request_id: Some(new_request_id()), session: None, seq: None };
        let path = ["v1", "multi", "release"];
        let _: (MultiReleaseResponse, _) = self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(())
    }

    /// Acquires every lock of `names` as [`acquire_many`](Self::acquire_many)
    /// does, and returns the guard that releases them together.
    pub async fn lock_many(
        self: &Arc<Self>,
        names: &[&str],
        owner: &str,
        ttl_ms: u64,
        options: &AcquireOptions,
    ) -> Result<LockSet, ClientError> {
        let leases = self.acquire_many(names, owner, ttl_ms, options).await?;
        Ok(LockSet { client: Arc::clone(self), leases })
    }
}

/// Locks held together under one token until [`release`](Self::release).
///
/// No watchdog renews them: a set is for work that fits in its ttl (check
/// [`valid_until`](Leases::valid_until)); for longer work take the set
/// under a [`Session`](super::Session) ([`Session::lock_many`](super::Session::lock_many)),
/// whose one watchdog keeps every lock of it. As with [`Lock`](super::Lock),
/// dropping the guard does not release: the leases run out after their ttl.
pub struct LockSet {
    client: Arc<Client>,
    leases: Leases,
}

impl std::fmt::Debug for LockSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockSet").field("leases", &self.leases).finish_non_exhaustive()
    }
}

impl LockSet {
    /// The fencing token of every lock in the set.
    pub fn token(&self) -> FencingToken {
        self.leases.token
    }

    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// Releases every lock of the set in one log entry.
    pub async fn release(self) -> Result<(), ClientError> {
        self.client.release_many(&self.leases.names(), self.leases.token).await
    }
}
