//! The semaphore endpoints on [`Client`]: acquire, renew and release
//! permits, read one semaphore (`/v1/semaphores`).

use std::time::{Duration, Instant};

use ::http::Method;

use leasehold_proto::semaphores::{
    PermitGrant, PermitResponse, SemaphoreAcquireRequest, SemaphoreReleaseRequest, SemaphoreReleaseResponse,
    SemaphoreRenewRequest, SemaphoreView,
};
use leasehold_proto::{ErrorCode, FencingToken};

use crate::client::NO_BODY;
use crate::{new_request_id, Client, ClientError, Lifetime};

/// Permits the client holds, with the instant their request was sent (the
/// anchor of their lease, as for a [`Lease`](crate::Lease)).
#[derive(Debug, Clone)]
pub struct Permits {
    pub grant: PermitGrant,
    pub sent_at: Instant,
}

/// What a semaphore acquire asks for.
#[derive(Debug, Clone, Copy)]
pub struct PermitRequest {
    /// The semaphore's limit: the acquire that creates it sets it; another
    /// one while it lives is `409 limit_mismatch`.
    pub limit: u32,
    /// Permits to take at once, all or none.
    pub permits: u32,
    pub ttl_ms: u64,
    /// Wait up to this long in the semaphore's FIFO queue.
    pub wait: Option<Duration>,
}

impl Client {
    /// Takes `asked.permits` of semaphore `name` for `owner`: `409
    /// semaphore_full` (with the holders) when too few are free and it does
    /// not wait, `limit_mismatch`, `wait_timeout`, `deadlock`.
    pub async fn acquire_permits(
        &self,
        name: &str,
        owner: &str,
        asked: &PermitRequest,
    ) -> Result<Permits, ClientError> {
        let PermitRequest { limit, permits, ttl_ms, wait } = *asked;
        self.acquire_permits_for(name, owner, limit, permits, Lifetime::Ttl(ttl_ms), wait).await
    }

    /// Takes `permits` of semaphore `name` (of `limit`) for `owner` with a
    /// lease that lives by `lifetime`, waiting up to `wait`. Errors as
    /// [`acquire_permits`](Self::acquire_permits), and `session_not_found`
    /// for a session that has ended.
    pub async fn acquire_permits_for(
        &self,
        name: &str,
        owner: &str,
        limit: u32,
        permits: u32,
        lifetime: Lifetime,
        wait: Option<Duration>,
    ) -> Result<Permits, ClientError> {
        let wait = wait.unwrap_or_default();
        let (ttl_ms, session, seq) = lifetime.fields();
        let body = SemaphoreAcquireRequest {
            owner: owner.to_owned(),
            limit,
            permits: Some(permits),
            ttl_ms,
            session,
            wait_ms: (!wait.is_zero()).then_some(wait.as_millis() as u64),
            request_id: Some(new_request_id()),
            seq,
        };
        let path = ["v1", "semaphores", name, "acquire"];
        let (reply, sent_at): (PermitResponse, _) = self.call(Method::POST, &path, &[], Some(&body), wait).await?;
        Ok(Permits { grant: reply.grant, sent_at })
    }

    /// Restarts the lease of `owner`'s permits held under `token`.
    pub async fn renew_permits(
        &self,
        name: &str,
        owner: &str,
        token: FencingToken,
        ttl_ms: Option<u64>,
    ) -> Result<Permits, ClientError> {
        let body = SemaphoreRenewRequest { owner: owner.to_owned(), token, ttl_ms, request_id: Some(new_request_id()) };
        let path = ["v1", "semaphores", name, "renew"];
        let (reply, sent_at): (PermitResponse, _) =
            self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(Permits { grant: reply.grant, sent_at })
    }

    /// Returns `owner`'s permits held under `token`.
    pub async fn release_permits(&self, name: &str, owner: &str, token: FencingToken) -> Result<(), ClientError> {
        let body = SemaphoreReleaseRequest { owner: owner.to_owned(), token, request_id: Some(new_request_id()) };
        let path = ["v1", "semaphores", name, "release"];
        let _: (SemaphoreReleaseResponse, _) = self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?;
        Ok(())
    }

    /// Semaphore `name` (linearizable), or `None` when nobody holds or waits.
    pub async fn semaphore_view(&self, name: &str) -> Result<Option<SemaphoreView>, ClientError> {
        match self.call(Method::GET, &["v1", "semaphores", name], &[], NO_BODY, Duration::ZERO).await {
            Ok((view, _)) => Ok(Some(view)),
            Err(e) if e.code() == Some(ErrorCode::NoSemaphore) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
