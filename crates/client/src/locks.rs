//! The lock endpoints on [`Client`]: acquire, renew, release, get and list
//! (`/v1/locks`). Several locks at once are `multi.rs`'s.

use std::time::Duration;

use ::http::Method;

use leasehold_proto::locks::{
    AcquireRequest, LeaseResponse, ListResponse, ReleaseRequest, ReleaseResponse, RenewRequest,
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
            mode: None,
        };
        let path = ["v1", "locks", name, "acquire"];
        let (reply, sent_at): (LeaseResponse, _) = self.call(Method::POST, &path, &[], Some(&body), wait).await?;
        Ok(Lease { grant: reply.grant, sent_at })
    }

    /// Restarts the lease held under `token`, with `ttl_ms` or the grant's ttl.
    pub async fn renew(&self, name: &str, token: FencingToken, ttl_ms: Option<u64>) -> Result<Lease, ClientError> {
        let body = RenewRequest { token, ttl_ms, request_id: Some(new_request_id()), mode: None, owner: None };
        let path = ["v1", "locks", name, "renew"];
        let (reply, sent_at): (LeaseResponse, _) =
            self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(Lease { grant: reply.grant, sent_at })
    }

    /// Releases the lock held under `token`.
    pub async fn release(&self, name: &str, token: FencingToken) -> Result<(), ClientError> {
        let body = ReleaseRequest {
            token,
            request_id: Some(new_request_id()),
            session: None,
            seq: None,
            mode: None,
            owner: None,
        };
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
