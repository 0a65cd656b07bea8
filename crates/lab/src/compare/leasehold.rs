//! leasehold through its own Rust [`Client`]: acquire (waiting in the lock's
//! queue when asked) and release by token, of locks and of semaphore
//! permits. The grant's token is the fencing token; its anchor is the
//! client's send time of the acquire.
//!
//! A session's Client knows every node and follows the leader, so nearly
//! every request goes straight to it; spread over the nodes
//! ([`LeaseholdSystem::spread_over_nodes`]), each session knows one node, as
//! behind a load balancer, and a follower forwards its requests.

use leasehold_client::ErrorCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::{drift_margin, AdapterError, BoxFuture, Grant, LockSession, LockSystem};
use leasehold_client::proto::cluster::ClusterStatus;
use leasehold_client::{AcquireOptions, Client, ClientError, Credentials, FencingToken, PermitRequest};
use std::net::SocketAddr;

/// A leasehold cluster at these endpoints.
pub struct LeaseholdSystem {
    endpoints: Vec<String>,
    credentials: Credentials,
    sessions: AtomicU64,
    /// Sessions pinned to one node each, in turn, instead of following the leader.
    spread: bool,
    /// The node the next spread session is pinned to.
    next_node: AtomicUsize,
}

impl LeaseholdSystem {
    /// A cluster without auth or TLS.
    pub fn new(endpoints: &[String]) -> Result<Self, ClientError> {
        LeaseholdSystem::with_credentials(endpoints, Credentials::default())
    }

    /// A cluster whose every session presents `credentials`.
    pub fn with_credentials(endpoints: &[String], credentials: Credentials) -> Result<Self, ClientError> {
        // Refuse bad endpoints here rather than at the first session.
        Client::with_credentials(endpoints, &credentials)?;
        Ok(LeaseholdSystem {
            endpoints: endpoints.to_vec(),
            credentials,
            sessions: AtomicU64::new(0),
            spread: false,
            next_node: AtomicUsize::new(0),
        })
    }

    /// Every session [`connect`](LockSystem::connect) opens from now on is
    /// pinned to one node, the nodes in turn: with N nodes, N − 1 requests in
    /// N reach a follower, which forwards them to the leader.
    pub fn spread_over_nodes(mut self) -> Self {
        self.spread = true;
        self
    }
}

impl LeaseholdSystem {
    /// The status of whichever node answers.
    async fn status(&self) -> Option<ClusterStatus> {
        Client::with_credentials(&self.endpoints, &self.credentials).ok()?.status().await.ok()
    }

    /// A session whose Client knows `endpoints`: its own keep-alive pool.
    fn session(&self, endpoints: &[String]) -> Result<Box<dyn LockSession>, AdapterError> {
        let client = Client::with_credentials(endpoints, &self.credentials)?;
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        let owner = format!("bench-{}-{n}", std::process::id());
        Ok(Box::new(LeaseholdSession { client, owner }))
    }
}

impl LockSystem for LeaseholdSystem {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>> {
        match self.spread {
            true => self.connect_pinned(self.next_node.fetch_add(1, Ordering::Relaxed)),
            false => Box::pin(async move { self.session(&self.endpoints) }),
        }
    }

    /// Only the `nth` node in turn: followers hand the leader their commands.
    fn connect_pinned(&self, nth: usize) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>> {
        Box::pin(async move { self.session(&self.endpoints[nth % self.endpoints.len()..][..1]) })
    }

    fn term(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async move { Some(self.status().await?.term) })
    }

    /// The leader, where every request ends up.
    fn flood_target(&self) -> BoxFuture<'_, Option<SocketAddr>> {
        Box::pin(async move { self.status().await?.leader_addr?.parse().ok() })
    }

    fn semaphores(&self) -> bool {
        true
    }
}

struct LeaseholdSession {
    client: Client,
    /// Unique per session: one owner holding a lock re-acquires it.
    owner: String,
}

impl LockSession for LeaseholdSession {
    fn acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        Box::pin(async move {
            let options = AcquireOptions { wait: queue_wait(wait), request_id: None, lock_delay: None };
            let lease = self.client.acquire_with(name, &self.owner, ttl.as_millis() as u64, &options).await;
            let lease = not_acquired_as_such(lease, || name.to_string(), wait)?;
            Ok(Grant {
                name: name.to_string(),
                token: Some(lease.token().get()),
                anchor: lease.sent_at,
                valid_until: lease.valid_until(drift_margin(ttl)),
                release_key: String::new(),
                own_lease: None,
            })
        })
    }

    fn release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(async move {
            let released = self.client.release(&grant.name, token_of(grant)?).await;
            not_held_as_such(released, || grant.name.clone())
        })
    }

    /// One multi-acquire: every lock in one entry, under one token.
    fn acquire_all<'a>(
        &'a mut self,
        names: &'a [String],
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Grant>, AdapterError>> {
        Box::pin(async move {
            let options = AcquireOptions { wait: queue_wait(wait), request_id: None, lock_delay: None };
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let leases = self.client.acquire_many(&names, &self.owner, ttl.as_millis() as u64, &options).await;
            let leases = not_acquired_as_such(leases, || names.join(","), wait)?;
            let valid_until = leases.valid_until(drift_margin(ttl));
            Ok(leases
                .grants
                .iter()
                .map(|g| Grant {
                    name: g.name.clone(),
                    token: Some(leases.token.get()),
                    anchor: leases.sent_at,
                    valid_until,
                    release_key: String::new(),
                    own_lease: None,
                })
                .collect())
        })
    }

    /// One multi-release of locks taken together.
    fn release_all<'a>(&'a mut self, grants: &'a [Grant]) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(async move {
            let first = grants.first().ok_or_else(|| AdapterError::Unexpected("no leasehold grants".into()))?;
            let names: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
            not_held_as_such(self.client.release_many(&names, token_of(first)?).await, || names.join(","))
        })
    }

    /// One permit of a semaphore, waiting in its FIFO queue; the grant's
    /// token (the index of the entry that granted it) is the fencing token.
    fn acquire_permit<'a>(
        &'a mut self,
        name: &'a str,
        limit: u32,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        Box::pin(async move {
            let asked = PermitRequest { limit, permits: 1, ttl_ms: ttl.as_millis() as u64, wait: queue_wait(wait) };
            let permits = self.client.acquire_permits(name, &self.owner, &asked).await;
            let permits = not_acquired_as_such(permits, || name.to_string(), wait)?;
            // As a lease's validity (`Lease::valid_until`), which permits lack.
            let granted = Duration::from_millis(permits.grant.ttl_ms);
            Ok(Grant {
                name: name.to_string(),
                token: Some(permits.grant.token.get()),
                anchor: permits.sent_at,
                valid_until: permits.sent_at + granted.saturating_sub(drift_margin(ttl)),
                release_key: String::new(),
                own_lease: None,
            })
        })
    }

    fn release_permit<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(async move {
            let released = self.client.release_permits(&grant.name, &self.owner, token_of(grant)?).await;
            not_held_as_such(released, || grant.name.clone())
        })
    }
}

/// A wait in the server's queue: none when zero.
fn queue_wait(wait: Duration) -> Option<Duration> {
    Some(wait).filter(|w| !w.is_zero())
}

/// The leasehold token a grant carries.
fn token_of(grant: &Grant) -> Result<FencingToken, AdapterError> {
    grant
        .token
        .map(FencingToken::granted_at)
        .ok_or_else(|| AdapterError::Unexpected("leasehold grant without a token".into()))
}

/// An acquire refused because it would have had to wait (longer), the lock
/// held or the semaphore full.
fn not_acquired_as_such<T>(
    acquired: Result<T, ClientError>,
    name: impl FnOnce() -> String,
    wait: Duration,
) -> Result<T, AdapterError> {
    match acquired {
        Err(e) if matches!(e.code(), Some(ErrorCode::Held | ErrorCode::SemaphoreFull | ErrorCode::WaitTimeout)) => {
            Err(AdapterError::NotAcquired { name: name(), waited: wait })
        }
        other => Ok(other?),
    }
}

/// A release refused because the lock was no longer this session's.
fn not_held_as_such(released: Result<(), ClientError>, name: impl FnOnce() -> String) -> Result<(), AdapterError> {
    match released {
        Err(e) if matches!(e.code(), Some(ErrorCode::StaleToken | ErrorCode::NotHeld)) => {
            Err(AdapterError::NotHeld { name: name() })
        }
        other => Ok(other?),
    }
}
