//! The acquire protocol, with or without waiting in the lock's queue.
//!
//! A try-acquire is one proposal. A waiting acquire registers for its turn
//! *before* proposing (so a hand-over cannot fall between the answer and the
//! registration), proposes, and if queued waits — without polling — for the
//! state machine to hand the lock to this owner or to end its wait. If the
//! caller goes away before it is answered (its future is dropped), its place
//! in the queue is given up with a `Cancel` proposal.
//!
//! This lives in the node, below HTTP, so it is one call for every front end
//! and testable without sockets.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{Command, EventKind, FencingToken, Grant, Limits, LockError, Outcome};

use super::{Node, NodeError};
use crate::raft::{LockResult, Turn};

/// How much longer than its `wait_ms` a waiting acquire may go unanswered
/// (the cluster decides the wait's end on its ticks) before it is told the
/// cluster is unavailable and may retry with its request id.
pub const WAIT_SLACK: Duration = Duration::from_secs(10);

/// What an acquire asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireRequest {
    pub name: String,
    pub owner: String,
    pub ttl_ms: u64,
    /// Wait up to this long in the queue when another owner holds the lock.
    pub wait: Option<Duration>,
    pub request_id: Option<String>,
    /// Should the lease expire, nobody is granted the lock for this long after.
    pub lock_delay_ms: Option<u64>,
}

/// A successful acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub grant: Grant,
    /// The owner already held the lock (same token, lease restarted).
    pub reacquired: bool,
}

impl Node {
    /// Acquires `request.name` for `request.owner`: at once, or after
    /// waiting in the lock's FIFO queue when `request.wait` is given.
    ///
    /// The outer error is the cluster's (no quorum, not leader, the wait not
    /// ended in time); the inner one the lock's answer (`HeldByOther`,
    /// `WaitTimeout`, `Invalid`, ...), as for [`Node::propose`].
    pub async fn acquire(self: &Arc<Self>, request: AcquireRequest) -> Result<Result<Acquired, LockError>, NodeError> {
        let AcquireRequest { name, owner, ttl_ms, wait, request_id, lock_delay_ms } = request;
        let wait = wait.unwrap_or_default();
        let command = Command::Acquire {
            name: name.clone(),
            owner: owner.clone(),
            ttl_ms,
            wait_ms: (!wait.is_zero()).then_some(wait.as_millis() as u64),
            request_id,
            lock_delay_ms,
        };
        if let Err(invalid) = command.validate(&Limits::DEFAULT) {
            return Ok(Err(LockError::Invalid(invalid)));
        }
        // A try-acquire, the common case, does not register at all.
        let turn = (!wait.is_zero()).then(|| self.locks().watch_turn(&name, &owner));
        // Armed before proposing: if the caller of a waiting acquire goes away
        // at any point before it is answered, its place in the queue is given up.
        let mut place =
            QueuePlace { node: self.clone(), name: name.clone(), owner: owner.clone(), armed: !wait.is_zero() };
        let answer = match self.propose(command).await? {
            Ok(Outcome::Granted { grant, reacquired }) => Ok(Ok(Acquired { grant, reacquired })),
            Ok(Outcome::Queued { .. }) => self.wait_for_turn(turn, &name, &owner, wait + WAIT_SLACK).await,
            Ok(other) => Err(NodeError::Internal(format!("unexpected outcome {other:?}"))),
            Err(refused) => Ok(Err(refused)),
        };
        place.armed = false;
        answer
    }

    /// Waits, without polling, for the state machine to hand `name` to
    /// `owner` or to end its wait. `turn` is a registration taken before the
    /// proposal; without one (a queued answer replayed for a retry sent
    /// without `wait_ms`) it registers now. Either way the table is read
    /// once after registering, so a hand-over applied before it is not missed.
    async fn wait_for_turn(
        &self,
        turn: Option<Turn>,
        name: &str,
        owner: &str,
        bound: Duration,
    ) -> Result<Result<Acquired, LockError>, NodeError> {
        let mut turn = turn.unwrap_or_else(|| self.locks().watch_turn(name, owner));
        let wait_timeout = || LockError::WaitTimeout { name: name.to_owned() };
        let ended = async {
            if let Some(settled) = self.standing(name, owner) {
                return Ok(settled.ok_or_else(wait_timeout));
            }
            loop {
                let Some(event) = turn.next().await else {
                    return Err(NodeError::Unavailable("node shutting down".into()));
                };
                match event.kind {
                    EventKind::Acquired { token, .. } | EventKind::HandedOver { token, .. } => return Ok(Ok(token)),
                    EventKind::WaitTimeout { .. } | EventKind::Cancelled { .. } => return Ok(Err(wait_timeout())),
                    _ => {}
                }
            }
        };
        let token = match tokio::time::timeout(bound, ended).await {
            Ok(Ok(Ok(token))) => token,
            Ok(Ok(Err(refused))) => return Ok(Err(refused)),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(NodeError::Unavailable(
                    "the cluster did not end this wait in time; retry with the same request_id".into(),
                ))
            }
        };
        let grant = self.locks().read(|t| t.holder(name)).filter(|g| g.token == token).unwrap_or_else(
            // Granted and already gone again (the answer came later than the lease's ttl).
            || Grant {
                name: name.to_owned(),
                owner: owner.to_owned(),
                token,
                ttl_ms: 0,
                expires_in_ms: 0,
                deadline_tick: 0,
            },
        );
        Ok(Ok(Acquired { grant, reacquired: false }))
    }

    /// Where `owner` stands on `name` according to the applied table: holder
    /// (`Some(Some(token))`), still waiting (`None`), or neither: its wait
    /// ended (`Some(None)`).
    fn standing(&self, name: &str, owner: &str) -> Option<Option<FencingToken>> {
        match self.locks().read(|t| (t.holder(name), t.is_waiting(name, owner))) {
            (Some(grant), _) if grant.owner == owner => Some(Some(grant.token)),
            (_, true) => None,
            _ => Some(None),
        }
    }
}

/// A waiter's place in a queue, given up (a `Cancel` proposed) when the
/// acquire is dropped before it was answered: its caller went away.
struct QueuePlace {
    node: Arc<Node>,
    name: String,
    owner: String,
    armed: bool,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if self.armed {
            let node = self.node.clone();
            let command =
                Command::Cancel { name: std::mem::take(&mut self.name), owner: std::mem::take(&mut self.owner) };
            tokio::spawn(async move {
                let cancelled: Result<LockResult, NodeError> = node.propose(command).await;
                if let Err(e) = cancelled {
                    tracing::warn!(error = %e, "could not cancel an abandoned wait; it ends with its wait_ms");
                }
            });
        }
    }
}
