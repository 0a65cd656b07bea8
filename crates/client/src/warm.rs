//! Which of the client's two connection pools still holds an open
//! connection, so a request after a long wait does not dial a new one.
//!
//! A pooled connection is closed once it has been idle for [`POOL_IDLE`].
//! A worker of a herd waits in the queue over HTTP/2 for longer than that,
//! so by the time it is granted the lock its HTTP/1.1 connection is gone,
//! and its release would pay a TCP connect (and a TLS handshake) on both
//! sides, in the hand-over's critical path. The HTTP/2 connection that
//! carried the wait has just answered and is open: the release goes there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a pooled connection may stay idle before the pool closes it;
/// below the nodes' default header-read timeout, which also closes idle
/// connections, so the client drops one before the node does.
pub(crate) const POOL_IDLE: Duration = Duration::from_secs(5);

/// Headroom under [`POOL_IDLE`]: a connection idle for nearly that long may
/// be closed before the request reaches it.
const HEADROOM: Duration = Duration::from_secs(1);

/// When each pool last finished a request.
#[derive(Debug)]
pub(crate) struct Warmth {
    epoch: Instant,
    /// Milliseconds after `epoch` plus one; 0 for never.
    http1: AtomicU64,
    http2: AtomicU64,
}

impl Warmth {
    pub(crate) fn new() -> Self {
        Warmth { epoch: Instant::now(), http1: AtomicU64::new(0), http2: AtomicU64::new(0) }
    }

    /// Records that a request on the HTTP/2 pool (`multiplexed`) or the
    /// HTTP/1.1 pool finished at `now`.
    pub(crate) fn used(&self, multiplexed: bool, now: Instant) {
        let stamp = now.saturating_duration_since(self.epoch).as_millis() as u64 + 1;
        self.pool(multiplexed).fetch_max(stamp, Ordering::Relaxed);
    }

    /// Whether a quick request at `now` should go over HTTP/2: its
    /// connection is open while HTTP/1.1's has been closed (or never opened).
    pub(crate) fn prefers_http2(&self, now: Instant) -> bool {
        let open = |multiplexed| {
            let stamp = self.pool(multiplexed).load(Ordering::Relaxed);
            let idle = now.saturating_duration_since(self.epoch + Duration::from_millis(stamp.saturating_sub(1)));
            stamp != 0 && idle + HEADROOM < POOL_IDLE
        };
        open(true) && !open(false)
    }

    fn pool(&self, multiplexed: bool) -> &AtomicU64 {
        if multiplexed {
            &self.http2
        } else {
            &self.http1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures quick requests stay on HTTP/1.1 unless its connection is gone
    // while the HTTP/2 one (a wait just answered) is still open.
    #[test]
    fn http2_only_when_its_connection_is_open_and_http1_is_not() {
        let warmth = Warmth::new();
        let t0 = warmth.epoch;
        assert!(!warmth.prefers_http2(t0), "nothing open: the default, HTTP/1.1");
        warmth.used(false, t0);
        assert!(!warmth.prefers_http2(t0 + Duration::from_secs(1)));
        let granted = t0 + Duration::from_secs(20);
        warmth.used(true, granted);
        assert!(warmth.prefers_http2(granted), "HTTP/1.1 idle for 20 s, HTTP/2 just answered");
        assert!(!warmth.prefers_http2(granted + POOL_IDLE), "both closed again");
        warmth.used(false, granted + Duration::from_millis(10));
        assert!(!warmth.prefers_http2(granted + Duration::from_millis(20)), "HTTP/1.1 open again");
    }

    // Ensures a client whose first request waited sends the next over HTTP/2.
    #[test]
    fn a_wait_as_first_request_leaves_http2_preferred() {
        let warmth = Warmth::new();
        let answered = warmth.epoch + Duration::from_secs(3);
        warmth.used(true, answered);
        assert!(warmth.prefers_http2(answered + Duration::from_secs(2)));
        assert!(!warmth.prefers_http2(answered + POOL_IDLE - HEADROOM));
    }
}
