//! What an acquire asks for and what it gives: [`AcquireOptions`], the
//! [`Lifetime`] of the lease, and the [`Lease`] anchored at the request's
//! send time (see the crate's doc on the client contract).

use std::time::{Duration, Instant};

use leasehold_proto::{FencingToken, Grant};

use crate::SessionId;

/// A lease the client holds, with the instant its request was sent.
#[derive(Debug, Clone)]
pub struct Lease {
    pub grant: Grant,
    /// Send time of the request that produced this grant or renewal (of its
    /// first attempt, when it was retried), on this process's monotonic
    /// clock: the anchor of the lease.
    pub sent_at: Instant,
}

impl Lease {
    pub fn token(&self) -> FencingToken {
        self.grant.token
    }

    /// Until when the holder may act on this lease: its send time + ttl −
    /// `margin`. The cluster cannot expire it earlier (no early expiry); the
    /// margin covers drift between this process's clock and the leader's.
    ///
    /// Not for a lease held under a session ([`Lifetime::Session`]): its
    /// acquire restarts no deadline, so the lease lasts as long as the
    /// session, until the send time of the session's last successful
    /// keepalive + ttl − margin ([`Session::valid_until`](crate::Session::valid_until)
    /// keeps that), which may be up to a keepalive interval (ttl / 3), or
    /// more when keepalives fail, sooner than this.
    pub fn valid_until(&self, margin: Duration) -> Instant {
        (self.sent_at + Duration::from_millis(self.grant.ttl_ms)).checked_sub(margin).unwrap_or(self.sent_at)
    }
}

/// What an acquire's lease lives by: its own ttl, or a session (with the
/// request's sequence number in it). [`Session`](crate::Session) passes the
/// second for its locks; [`Client::acquire_for`](crate::Client::acquire_for)
/// takes either, for callers (the fault suite) that keep a session alive
/// themselves.
#[derive(Debug, Clone, Copy)]
pub enum Lifetime {
    /// A lease of its own, `ttl_ms` long.
    Ttl(u64),
    /// Held as long as session `id` lives; `seq` is the request's number in
    /// the session's sequence (the same on each retry of one call).
    Session { id: SessionId, seq: u64 },
}

impl Lifetime {
    /// The request's `ttl_ms`, `session` and `seq`: one of the first two.
    pub(crate) fn fields(self) -> (Option<u64>, Option<SessionId>, Option<u64>) {
        match self {
            Lifetime::Ttl(ttl_ms) => (Some(ttl_ms), None, None),
            Lifetime::Session { id, seq } => (None, Some(id), Some(seq)),
        }
    }
}

/// Options of [`Client::acquire_with`](crate::Client::acquire_with).
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    /// Wait up to this long in the lock's FIFO queue when another owner
    /// holds it (the cluster answers `wait_timeout` when it runs out).
    pub wait: Option<Duration>,
    /// Request id for de-duplication; generated when absent.
    pub request_id: Option<String>,
    /// Should the lease expire (not be released), nobody is granted the lock
    /// for this long after (whole ms; `lock_delayed` meanwhile).
    pub lock_delay: Option<Duration>,
}
