//! The lock endpoints on [`Client`]: acquire, renew, release, get and list
//! (`/v1/locks`). Several locks at once are `multi.rs`'s.

use std::time::Duration;

use ::http::Method;

use leasehold_proto::locks::{
    AcquireRequest, LeaseResponse, ListResponse, LockMode, ReleaseRequest, ReleaseResponse, RenewRequest,
};
use leasehold_proto::{ErrorCode, FencingToken, LeaseView};

use crate::client::NO_BODY;
use crate::{new_request_id, AcquireOptions, Client, ClientError, Lease, Lifetime};

impl Client {
    /// Acquires `name` for `owner` without waiting: `409 held` when another
    /// owner holds it.
    pub async fn acquire(&self, name: &str, owner: &str, ttl_ms: u64) -> Result<Lease, ClientError> {
        self.acquire_with(name, owner, ttl_ms, &AcquireOptions::default()).await
    }

    /// Acquires `name` for `owner`, waiting in the queue when asked to.
    pub async fn acquire_with(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        options: &AcquireOptions,
    ) -> Result<Lease, ClientError> {
        self.acquire_for(name, owner, Lifetime::Ttl(ttl_ms), options).await
    }

    /// The acquire of `name` with a lease that lives by `lifetime`. Errors
    /// as [`acquire_with`](Self::acquire_with), and `session_not_found` for
    /// a session that has ended.
    pub async fn acquire_for(
        &self,
        name: &str,
        owner: &str,
        lifetime: Lifetime,
        options: &AcquireOptions,
    ) -> Result<Lease, ClientError> {
        self.send_acquire(name, owner, lifetime, options, None).await
    }

    /// Acquires `name` in shared mode (a read lock) for `owner` with a
    /// lease of `ttl_ms`, waiting in its queue when `options.wait` says so
    /// (`options.lock_delay` does not apply to shared leases and is refused).
    /// Shared holders coexist; `409 held` while an exclusive owner holds it,
    /// `409 reserved` without a wait while anyone waits first.
    pub async fn acquire_shared(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        options: &AcquireOptions,
    ) -> Result<Lease, ClientError> {
        self.acquire_shared_for(name, owner, Lifetime::Ttl(ttl_ms), options).await
    }

    /// The shared acquire of `name` with a lease that lives by `lifetime`.
    /// Errors as [`acquire_shared`](Self::acquire_shared), and
    /// `session_not_found` for a session that has ended.
    pub async fn acquire_shared_for(
        &self,
        name: &str,
        owner: &str,
        lifetime: Lifetime,
        options: &AcquireOptions,
    ) -> Result<Lease, ClientError> {
        self.send_acquire(name, owner, lifetime, options, Some(LockMode::Shared)).await
    }

    /// Sends an acquire of `name` in `mode`, waiting as long as `options.wait`.
    async fn send_acquire(
        &self,
        name: &str,
        owner: &str,
        lifetime: Lifetime,
        options: &AcquireOptions,
        mode: Option<LockMode>,
    ) -> Result<Lease, ClientError> {
        let wait = options.wait.unwrap_or_default();
        let (ttl_ms, session, seq) = lifetime.fields();
        let body = AcquireRequest {
            owner: owner.to_owned(),
            ttl_ms,
            session,
            seq,
            wait_ms: (!wait.is_zero()).then_some(wait.as_millis() as u64),
            request_id: Some(options.request_id.clone().unwrap_or_else(new_request_id)),
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
            mode,
        };
        let path = ["v1", "locks", name, "acquire"];
        let (reply, sent_at): (LeaseResponse, _) = self.call(Method::POST, &path, &[], Some(&body), wait).await?;
        Ok(Lease { grant: reply.grant, sent_at })
    }

    /// Restarts the lease held under `token`, with `ttl_ms` or the grant's ttl.
    pub async fn renew(&self, name: &str, token: FencingToken, ttl_ms: Option<u64>) -> Result<Lease, ClientError> {
        self.renew_as(name, None, token, ttl_ms).await
    }

    /// Restarts `owner`'s shared lease of `name` held under `token`.
    pub async fn renew_shared(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        ttl_ms: Option<u64>,
    ) -> Result<Lease, ClientError> {
        self.renew_as(name, Some(owner), token, ttl_ms).await
    }

    /// The renew of an exclusive lease, or of `shared_owner`'s shared one.
    async fn renew_as(
        &self,
        name: &str,
        shared_owner: Option<&str>,
        token: FencingToken,
        ttl_ms: Option<u64>,
    ) -> Result<Lease, ClientError> {
        let (mode, owner) = shared_fields(shared_owner);
        let body = RenewRequest { token, ttl_ms, request_id: Some(new_request_id()), mode, owner };
        let path = ["v1", "locks", name, "renew"];
        let (reply, sent_at): (LeaseResponse, _) =
            self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(Lease { grant: reply.grant, sent_at })
    }

    /// Releases the lock held under `token`.
    pub async fn release(&self, name: &str, token: FencingToken) -> Result<(), ClientError> {
        self.release_as(name, None, token).await
    }

    /// Releases `owner`'s shared lease of `name` held under `token`.
    pub async fn release_shared(&self, name: &str, owner: &str, token: FencingToken) -> Result<(), ClientError> {
        self.release_as(name, Some(owner), token).await
    }

    /// The release of an exclusive lease, or of `shared_owner`'s shared one.
    async fn release_as(&self, name: &str, shared_owner: Option<&str>, token: FencingToken) -> Result<(), ClientError> {
        let (mode, owner) = shared_fields(shared_owner);
        let body = ReleaseRequest { token, request_id: Some(new_request_id()), session: None, seq: None, mode, owner };
        let path = ["v1", "locks", name, "release"];
        let _: (ReleaseResponse, _) = self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(())
    }

    /// The lease of `name` (linearizable), or `None` when free.
    pub async fn get(&self, name: &str) -> Result<Option<LeaseView>, ClientError> {
        match self.call(Method::GET, &["v1", "locks", name], &[], NO_BODY, Duration::ZERO).await {
            Ok((view, _)) => Ok(Some(view)),
            Err(e) if e.code() == Some(ErrorCode::NotHeld) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Held locks whose names start with `prefix`, at most `limit`.
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LeaseView>, ClientError> {
        let limit = limit.to_string();
        let query = [("prefix", prefix), ("limit", limit.as_str())];
        let (listed, _): (ListResponse, _) =
            self.call(Method::GET, &["v1", "locks"], &query, NO_BODY, Duration::ZERO).await?;
        Ok(listed.locks)
    }
}

/// The `mode` and `owner` of a renew or release: none for an exclusive
/// lease, `shared` and the owner for a shared one.
fn shared_fields(shared_owner: Option<&str>) -> (Option<LockMode>, Option<String>) {
    match shared_owner {
        Some(owner) => (Some(LockMode::Shared), Some(owner.to_owned())),
        None => (None, None),
    }
}
