//! How long a call pauses between tries: short and growing while a node is
//! unreachable or an election runs, at least as long as the node asks when
//! it is overloaded; always jittered, so that clients refused together do
//! not come back together.

use std::time::Duration;

/// How long to pause before the next try of one call.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Duration::from_millis(25) }
    }
}

/// The longest pause while there is no leader.
const MAX_UNAVAILABLE_PAUSE: Duration = Duration::from_millis(500);
/// Assumed when an `overloaded` answer names no `Retry-After`.
const DEFAULT_OVERLOADED_PAUSE: Duration = Duration::from_secs(1);

impl Backoff {
    /// After an unreachable node or an election in progress: doubling from
    /// 25 ms, at most 500 ms, each pause drawn from its upper half. The
    /// server's `Retry-After` (a whole second) is not waited for here: an
    /// election usually ends sooner.
    pub(crate) fn unavailable(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(MAX_UNAVAILABLE_PAUSE);
        jitter(pause / 2, pause)
    }

    /// After `overloaded`: the server's `Retry-After`, stretched by up to
    /// half again, so the clients it refused together come back spread out.
    pub(crate) fn overloaded(&mut self, retry_after: Option<Duration>) -> Duration {
        let pause = retry_after.unwrap_or(DEFAULT_OVERLOADED_PAUSE).max(self.next);
        jitter(pause, pause + pause / 2)
    }
}

/// A uniformly drawn duration in `[low, high]`.
fn jitter(low: Duration, high: Duration) -> Duration {
    let span = high.saturating_sub(low).as_micros() as u64;
    low + Duration::from_micros(fastrand::u64(0..=span))
}
