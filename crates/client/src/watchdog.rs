//! The watchdog shared by [`Lock`](crate::Lock) (which renews one lease)
//! and [`Session`](crate::Session) (which keeps one session, and so all its
//! locks, alive): what it renews differs, the timing and the `lost` signal
//! do not.
//!
//! # Timing
//!
//! The cluster never expires a lease or a session before `ttl` of real time
//! has passed since the entry that granted or renewed it was committed
//! (guarantee 2 of the README), and that commit happens after the client
//! sent the request. So, on this process's monotonic clock, it is certainly
//! still alive until
//!
//! ```text
//! anchor + ttl − drift_margin
//! ```
//!
//! where `anchor` is a send time of the request that produced the last grant
//! or renewal, and `drift_margin` covers the difference between the rates of
//! this machine's clock and the leader's. That instant is the *safe
//! deadline*. The cluster's `expires_in_ms` plays no part: it is counted from
//! the commit, which this process cannot observe.
//!
//! Each call is anchored at the instant it started, which is no later than
//! the send time of any attempt the client's retry loop made (the answer's
//! `sent_at`, the first attempt's send time, is never earlier). When the
//! cluster de-duplicates a retried request by its request id, the answer may
//! stem from an earlier attempt's commit; the start of the call precedes
//! every attempt, so the anchor stays safe whichever attempt took effect.
//!
//! The watchdog renews every `ttl / 3` after the anchor. A failed renewal is
//! retried with a short back-off until the safe deadline; every attempt is
//! cut off at that deadline (the client's own retry budget, 10 s by default,
//! does not delay it), so `lost` fires no later than the safe deadline even
//! when every node hangs. A renewal the cluster refuses because the lease or
//! session has ended fires `lost` at once.
//!
//! # At risk
//!
//! Between a renewal going wrong and the safe deadline the holder is *at
//! risk*: still safe, but the watchdog cannot say it will stay so. That is
//! the case once an attempt of the due renewal has failed, or when the due
//! renewal is still unanswered half an interval after it was due (every
//! node hangs, so no attempt fails), until a renewal succeeds. A holder
//! that sees it can finish or checkpoint its work before `lost` fires.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{ClientError, ErrorCode};

/// First pause after a failed renewal; it doubles up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Why a [`Lock`](crate::Lock) or a [`Session`](crate::Session) stopped
/// protecting its holder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// The safe deadline passed without a successful renewal (no quorum,
    /// nodes unreachable or hung, this process paused). The lease may still
    /// be held on the cluster, but nothing guarantees it any more.
    #[error("no renewal succeeded before the safe deadline (last error: {last_error})")]
    Expired { last_error: String },
    /// The cluster answered a renewal with `stale_token` or `not_held` (a
    /// lock), or `session_not_found` (a session): it has ended and another
    /// owner may hold the lock.
    #[error("the cluster ended the lease: {code}: {message}")]
    Revoked { code: ErrorCode, message: String },
    /// The guard was released or dropped before anything was lost. Only a
    /// future from `lost` that outlives its guard sees this.
    #[error("the lock guard was released or dropped")]
    Ended,
}

/// What a watchdog keeps alive: one renewal request of it.
pub(crate) trait Renewal: Send + Sync + 'static {
    /// What the logs call it.
    fn subject(&self) -> String;

    /// Sends one renewal; answers the send time of its first attempt, or why
    /// it failed. `Err(Ok(reason))`: the cluster says it has ended.
    fn renew(&self) -> impl Future<Output = Result<Instant, Result<LostReason, ClientError>>> + Send;
}

/// The safe-deadline arithmetic of one ttl.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) ttl: Duration,
    pub(crate) drift_margin: Duration,
}

impl Timing {
    /// The timing of `ttl` with `drift_margin`, which must be at most half of it.
    pub(crate) fn new(ttl: Duration, drift_margin: Duration) -> Result<Timing, ClientError> {
        if drift_margin > ttl / 2 {
            return Err(ClientError::InvalidArgument(format!(
                "drift margin {drift_margin:?} is more than half the ttl {ttl:?}"
            )));
        }
        Ok(Timing { ttl, drift_margin })
    }

    /// The safe deadline of a lease anchored at `anchor`.
    pub(crate) fn deadline(&self, anchor: Instant) -> Instant {
        (anchor + self.ttl).checked_sub(self.drift_margin).unwrap_or(anchor)
    }

    /// Time between the anchor and the next renewal.
    pub(crate) fn interval(&self) -> Duration {
        self.ttl / 3
    }

    /// When a renewal due at `anchor + interval` that has not succeeded yet
    /// puts the holder at risk even though no attempt has failed: half an
    /// interval late, `anchor + ttl / 2`, never after the safe deadline
    /// (the margin is at most `ttl / 2`).
    pub(crate) fn overdue(&self, anchor: Instant) -> Instant {
        anchor + self.interval() + self.interval() / 2
    }
}

/// A `ttl` as the whole milliseconds the cluster takes, refusing zero.
pub(crate) fn whole_ms(ttl: Duration) -> Result<u64, ClientError> {
    u64::try_from(ttl.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| ClientError::InvalidArgument(format!("ttl {ttl:?} is not a whole number of ms")))
}

/// What the watchdog publishes.
#[derive(Debug, Clone)]
struct State {
    /// The anchor of the last successful grant or renewal; the safe
    /// deadline is `timing.deadline(anchor)`.
    anchor: Instant,
    /// An attempt of the due renewal failed, and none has succeeded since.
    failing: bool,
    lost: Option<LostReason>,
}

/// The holder's side of a running watchdog: the safe deadline and the
/// `lost` signal, and the switch that stops it.
pub(crate) struct Watched {
    timing: Timing,
    state: watch::Receiver<State>,
    /// Set before the watchdog is stopped on purpose (release or drop).
    ended: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

impl Watched {
    /// Starts the watchdog of `renewal`, anchored at `anchor`.
    pub(crate) fn start(renewal: impl Renewal, timing: Timing, anchor: Instant) -> Watched {
        let (sender, state) = watch::channel(State { anchor, failing: false, lost: None });
        let watchdog = Watchdog { renewal, timing, state: sender };
        let watchdog = Some(tokio::spawn(watchdog.run(anchor)));
        Watched { timing, state, ended: Arc::new(AtomicBool::new(false)), watchdog }
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.timing.deadline(self.state.borrow().anchor)
    }

    /// When the next renewal is due: an interval after the last anchor.
    /// Until a renewal succeeds, it stays where it is.
    pub(crate) fn renewal_due(&self) -> Instant {
        self.state.borrow().anchor + self.timing.interval()
    }

    pub(crate) fn is_lost(&self) -> bool {
        let state = self.state.borrow();
        state.lost.is_some() || Instant::now() >= self.timing.deadline(state.anchor)
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.state.borrow().lost.clone()
    }

    /// True while the holder is still safe but a renewal is going wrong (see
    /// the module docs): false once lost, and again once a renewal succeeds.
    pub(crate) fn is_at_risk(&self) -> bool {
        let state = self.state.borrow();
        let now = Instant::now();
        state.lost.is_none()
            && now < self.timing.deadline(state.anchor)
            && (state.failing || now >= self.timing.overdue(state.anchor))
    }

    pub(crate) fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let mut state = self.state.clone();
        let ended = Arc::clone(&self.ended);
        async move {
            let fired = state.wait_for(|s| s.lost.is_some()).await.map(|s| s.lost.clone());
            match fired {
                Ok(Some(reason)) => reason,
                // The watchdog is gone without firing: stopped by release or
                // drop, or it died (a panic, the runtime shutting down), in
                // which case nothing renews any more.
                _ if ended.load(Ordering::SeqCst) => LostReason::Ended,
                _ => LostReason::Expired { last_error: "the watchdog task stopped".to_string() },
            }
        }
    }

    /// Stops the watchdog and waits until it has stopped, so no renewal is
    /// sent after whatever the caller does next.
    pub(crate) async fn stop(&mut self) {
        self.abort();
        if let Some(watchdog) = self.watchdog.take() {
            // An aborted task ends with a cancelled JoinError.
            let _ = watchdog.await;
        }
    }

    /// Stops the watchdog without waiting (drop cannot wait).
    pub(crate) fn abort(&mut self) {
        self.ended.store(true, Ordering::SeqCst);
        if let Some(watchdog) = &self.watchdog {
            watchdog.abort();
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.abort();
    }
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("Watched")
            .field("valid_until", &self.timing.deadline(state.anchor))
            .field("failing", &state.failing)
            .field("lost", &state.lost)
            .finish()
    }
}

struct Watchdog<R> {
    renewal: R,
    timing: Timing,
    state: watch::Sender<State>,
}

impl<R: Renewal> Watchdog<R> {
    /// Renews every interval after the anchor until a renewal cannot be
    /// obtained before the safe deadline; then publishes the reason and ends.
    async fn run(self, mut anchor: Instant) {
        loop {
            let renew_at = anchor + self.timing.interval();
            tokio::time::sleep_until(renew_at.into()).await;
            match self.renew_before(self.timing.deadline(anchor)).await {
                Ok(new_anchor) => {
                    anchor = new_anchor;
                    self.state.send_modify(|s| {
                        s.anchor = s.anchor.max(anchor);
                        s.failing = false;
                    });
                }
                Err(reason) => {
                    tracing::warn!(subject = %self.renewal.subject(), %reason, "lost");
                    self.state.send_modify(|s| s.lost = Some(reason));
                    return;
                }
            }
        }
    }

    /// Renews, retrying failures, until `deadline`. Returns the new anchor
    /// (the start of the call that succeeded).
    async fn renew_before(&self, deadline: Instant) -> Result<Instant, LostReason> {
        let mut backoff = INITIAL_BACKOFF;
        let mut last_error = "no renewal attempt finished".to_string();
        loop {
            if Instant::now() >= deadline {
                return Err(LostReason::Expired { last_error });
            }
            let started = Instant::now();
            let answer = tokio::time::timeout_at(deadline.into(), self.renewal.renew()).await;
            // Past the deadline it is no longer known to be safe (and
            // `is_lost` already says so): a success that comes in now does
            // not count, and the loop's check fires `lost`.
            let late = Instant::now() >= deadline;
            match answer {
                Ok(Ok(_)) if late => last_error = "the renewal was answered after the safe deadline".to_string(),
                Ok(Ok(sent_at)) => return Ok(started.min(sent_at)),
                Ok(Err(Ok(ended))) => return Err(ended),
                Ok(Err(Err(e))) => last_error = e.to_string(),
                Err(_) => last_error = "the renewal was still unanswered at the safe deadline".to_string(),
            }
            if late {
                continue;
            }
            self.state.send_modify(|s| s.failing = true);
            tracing::debug!(subject = %self.renewal.subject(), error = %last_error, "renewal failed; retrying");
            let pause = Instant::now() + backoff;
            tokio::time::sleep_until(pause.min(deadline).into()).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// `Err(Ok(reason))` when `error` is one of `codes`, the cluster's word that
/// what was renewed has ended; else the error as is.
pub(crate) fn ended_by(error: ClientError, codes: &[ErrorCode]) -> Result<LostReason, ClientError> {
    match error {
        ClientError::Api { error, .. } if codes.contains(&error.code) => {
            Ok(LostReason::Revoked { code: error.code, message: error.message })
        }
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A renewal whose first call succeeds, recording when it was sent;
    /// every later one hangs, so the first one's anchor stays.
    struct OnceOnly(Arc<Mutex<Option<Instant>>>);

    impl Renewal for OnceOnly {
        fn subject(&self) -> String {
            "once only".to_string()
        }

        async fn renew(&self) -> Result<Instant, Result<LostReason, ClientError>> {
            let sent_at = Instant::now();
            let first = self.0.lock().unwrap().get_or_insert(sent_at) == &sent_at;
            if !first {
                std::future::pending::<()>().await;
            }
            Ok(sent_at)
        }
    }

    // Ensures a successful renewal (for a session, a keepalive) re-anchors
    // the safe deadline at the start of its call, no later than its send,
    // and not before it was due, and moves the next renewal an interval
    // after that anchor.
    #[tokio::test]
    async fn a_renewal_re_anchors_at_the_start_of_its_call() {
        let timing = Timing::new(Duration::from_millis(300), Duration::from_millis(30)).unwrap();
        let sent = Arc::new(Mutex::new(None));
        let created = Instant::now();
        let mut watched = Watched::start(OnceOnly(Arc::clone(&sent)), timing, created);
        assert_eq!(watched.valid_until(), timing.deadline(created));
        assert_eq!(watched.renewal_due(), created + timing.interval());
        let mut state = watched.state.clone();
        let renewed = tokio::time::timeout(Duration::from_secs(5), state.wait_for(|s| s.anchor != created))
            .await
            .expect("renewed within 5 s")
            .expect("the watchdog runs")
            .clone();
        let first_sent = sent.lock().unwrap().expect("a renewal was sent");
        assert!(created + timing.interval() <= renewed.anchor && renewed.anchor <= first_sent, "{renewed:?}");
        assert_eq!(watched.valid_until(), timing.deadline(renewed.anchor));
        assert_eq!(watched.renewal_due(), renewed.anchor + timing.interval());
        watched.stop().await;
    }

    /// A renewal that fails at once, or hangs, every time.
    struct Failing {
        hang: bool,
    }

    impl Renewal for Failing {
        fn subject(&self) -> String {
            "failing".to_string()
        }

        async fn renew(&self) -> Result<Instant, Result<LostReason, ClientError>> {
            if self.hang {
                std::future::pending::<()>().await;
            }
            Err(Err(ClientError::Unavailable("refused".to_string())))
        }
    }

    /// Polls `watched` every 5 ms until the safe deadline has passed by
    /// 200 ms, answering when it was first seen at risk and when lost.
    async fn watch_until_lost(watched: &Watched) -> (Option<Instant>, Option<Instant>) {
        let (mut at_risk, mut lost) = (None, None);
        let give_up = watched.valid_until() + Duration::from_millis(200);
        while Instant::now() < give_up && lost.is_none() {
            if watched.is_at_risk() {
                assert!(!watched.is_lost(), "at risk and lost at once");
                at_risk.get_or_insert_with(Instant::now);
            }
            if watched.lost_reason().is_some() {
                lost = Some(Instant::now());
                assert!(!watched.is_at_risk(), "still at risk once lost");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (at_risk, lost)
    }

    // Ensures a failing renewal puts the holder at risk from its first
    // failed attempt (due at ttl/3) until `lost` fires, which ends it.
    #[tokio::test]
    async fn a_failed_renewal_is_at_risk_until_lost() {
        let timing = Timing::new(Duration::from_millis(600), Duration::from_millis(60)).unwrap();
        let anchor = Instant::now();
        let watched = Watched::start(Failing { hang: false }, timing, anchor);
        assert!(!watched.is_at_risk());
        let (at_risk, lost) = watch_until_lost(&watched).await;
        let (at_risk, lost) = (at_risk.expect("seen at risk"), lost.expect("lost fired"));
        assert!(at_risk >= anchor + timing.interval(), "at risk before the renewal was due");
        // The first attempt fails at once: at risk well before half an interval late.
        assert!(at_risk < timing.overdue(anchor), "at risk only at {:?}", at_risk - anchor);
        assert!(lost >= timing.deadline(anchor));
    }

    // Ensures a renewal that hangs (no attempt ever fails) puts the holder
    // at risk half an interval after it was due, before the safe deadline.
    #[tokio::test]
    async fn a_hung_renewal_is_at_risk_once_overdue() {
        let timing = Timing::new(Duration::from_millis(600), Duration::from_millis(60)).unwrap();
        let anchor = Instant::now();
        let watched = Watched::start(Failing { hang: true }, timing, anchor);
        let (at_risk, lost) = watch_until_lost(&watched).await;
        let at_risk = at_risk.expect("seen at risk");
        assert!(at_risk >= timing.overdue(anchor) && at_risk < timing.deadline(anchor));
        assert!(lost.expect("lost fired") >= timing.deadline(anchor));
    }

    /// A renewal whose first attempt fails, the second succeeds, and every
    /// later one hangs.
    struct FailsOnce(Mutex<u32>);

    impl Renewal for FailsOnce {
        fn subject(&self) -> String {
            "fails once".to_string()
        }

        async fn renew(&self) -> Result<Instant, Result<LostReason, ClientError>> {
            let attempt = {
                let mut calls = self.0.lock().unwrap();
                *calls += 1;
                *calls
            };
            match attempt {
                1 => Err(Err(ClientError::Unavailable("refused".to_string()))),
                2 => Ok(Instant::now()),
                _ => std::future::pending().await,
            }
        }
    }

    // Ensures the risk ends when a renewal succeeds after a failed attempt.
    #[tokio::test]
    async fn a_renewal_that_succeeds_ends_the_risk() {
        let timing = Timing::new(Duration::from_millis(600), Duration::from_millis(60)).unwrap();
        let created = Instant::now();
        let mut watched = Watched::start(FailsOnce(Mutex::new(0)), timing, created);
        let mut state = watched.state.clone();
        tokio::time::timeout(Duration::from_secs(5), state.wait_for(|s| s.failing)).await.unwrap().unwrap();
        assert!(watched.is_at_risk());
        tokio::time::timeout(Duration::from_secs(5), state.wait_for(|s| s.anchor != created)).await.unwrap().unwrap();
        assert!(!watched.is_at_risk());
        watched.stop().await;
    }

    #[test]
    fn deadline_is_anchor_plus_ttl_minus_margin() {
        let timing = Timing::new(Duration::from_secs(3), Duration::from_millis(300)).unwrap();
        let anchor = Instant::now();
        assert_eq!(timing.deadline(anchor), anchor + Duration::from_millis(2700));
        assert_eq!(timing.interval(), Duration::from_secs(1));
        assert!(anchor + timing.interval() < timing.deadline(anchor));
        assert!(Timing::new(Duration::from_secs(3), Duration::from_millis(1501)).is_err());
    }
}
