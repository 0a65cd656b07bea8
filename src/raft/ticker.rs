//! The leader's clock: proposes one `Tick` per period through Raft.
//!
//! Safety rule (DESIGN.md, "Time"): consecutive Ticks are proposed at least one
//! period apart in real time, so the committed tick count never runs ahead of
//! real time and no lease expires early. Hence:
//! - one Tick in flight at a time: each write is awaited;
//! - the next Tick is proposed a full period after the previous one completed
//!   (a sleep after completion, so a stall is never followed by a burst);
//! - a new leader waits a full period before its first Tick, because Ticks of
//!   the old leader may still commit after the election;
//! - a leader without a recent quorum acknowledgement stops ticking (openraft
//!   0.9 has no CheckQuorum: a partitioned leader believes it leads until it
//!   hears a higher term);
//! - the period is never shorter than the one already recorded in the log, so
//!   deadlines computed with it never mean less real time than promised.
//!
//! Time is read only from `tokio::time` (monotonic), never from the wall clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use tokio::time::sleep;

use super::Raft;
use crate::metrics::Metrics;
use crate::store::LockState;
use leasehold_core::{Batch, Command};

pub struct Ticker {
    raft: Raft,
    state: LockState,
    /// This node's configured period.
    tick: Duration,
    /// How recent the last quorum acknowledgement must be to keep ticking.
    quorum_window: Duration,
    metrics: Arc<Metrics>,
}

impl Ticker {
    pub fn new(raft: Raft, state: LockState, tick: Duration, quorum_window: Duration, metrics: Arc<Metrics>) -> Self {
        Ticker { raft, state, tick, quorum_window, metrics }
    }

    /// Runs until Raft shuts down: waits for leadership, ticks while it lasts.
    pub async fn run(self) {
        let mut metrics = self.raft.metrics();
        loop {
            let term = {
                let m = metrics.borrow_and_update();
                (m.state == ServerState::Leader).then_some(m.current_term)
            };
            match term {
                Some(term) => self.lead(term).await,
                None => {
                    if metrics.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Ticks while this node leads in `term`, and reports how far the ticks
    /// committed since it began lag behind its monotonic clock.
    async fn lead(&self, term: u64) {
        tracing::info!(term, "leader: ticking starts after one full period");
        let began = Instant::now();
        let mut ticked = Duration::ZERO;
        loop {
            let period = self.sleep_one_period().await;
            let m = self.raft.metrics().borrow_watched().clone();
            if m.state != ServerState::Leader || m.current_term != term {
                tracing::info!(term, "no longer leader: ticking stops");
                self.metrics.tick_lag(0.0);
                return;
            }
            let since_ack = super::millis_since_quorum_ack(&m);
            let quorum_fresh = since_ack.is_some_and(|ms| ms <= self.quorum_window.as_millis() as u64);
            if !quorum_fresh {
                tracing::warn!(term, since_ack_ms = ?since_ack, "no recent quorum ack: not ticking");
                continue;
            }
            let period_ms = period.as_millis() as u64;
            match self.raft.client_write(Batch::single(Command::Tick { period_ms })).await {
                Ok(_) => {
                    ticked += period;
                    self.metrics.tick_lag(began.elapsed().saturating_sub(ticked).as_secs_f64());
                }
                // Losing leadership with a Tick in flight is part of every
                // leader change, not a fault: the new leader ticks on.
                Err(e) if e.forward_to_leader().is_some() => {
                    tracing::info!(term, error = %e, "no longer leader with a tick in flight: ticking stops");
                    self.metrics.tick_lag(0.0);
                    return;
                }
                Err(e) => tracing::warn!(term, error = %e, "tick not committed"),
            }
        }
    }

    /// Sleeps one period and returns it. The period is the longer of this
    /// node's and the one recorded in the log; if the log's grew during the
    /// sleep, the sleep is extended to match.
    async fn sleep_one_period(&self) -> Duration {
        let mut slept = Duration::ZERO;
        loop {
            let period = self.tick.max(Duration::from_millis(self.state.read(|t| t.tick_ms())));
            if slept >= period {
                return period;
            }
            sleep(period - slept).await;
            slept = period;
        }
    }
}
