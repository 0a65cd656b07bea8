//! The acquire protocol, of one lock or of several at once, with or without
//! waiting in the locks' queues.
//!
//! Shared acquires wait in the lock's queue like exclusive ones; permits
//! of a semaphore wait in the semaphore's, told by events of their own kinds.
//!
//! A try-acquire is one proposal. A waiting acquire registers for its turn
//! *before* proposing (so a hand-over cannot fall between the answer and the
//! registration), proposes, and if queued waits — without polling — for the
//! state machine to hand the lock to this owner or to end its wait. If the
//! caller goes away before it is answered (its future is dropped), its place
//! in the queue is given up with a `Cancel` proposal.
//!
//! On a follower whose leader takes them, a waiting acquire is handed to
//! the leader whole and waits there ([`Node::acquire_as_leader`]; see
//! `node/handoff.rs`): nothing registers here, and the caller's going away
//! still gives up its place with a `Cancel` proposed from here.
//!
//! This lives in the node, below HTTP, so it is one call for every front end
//! and testable without sockets.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    Command, EventKind, FencingToken, Grant, Limits, LockError, Outcome, PermitGrant, Principal, SessionId,
};

use super::handoff::waits_at_leader;
use super::waiters::Waiter;
use super::{Node, NodeError};
use crate::raft::LockResult;

/// How much longer than its `wait_ms` a waiting acquire may go unanswered
/// (the cluster decides the wait's end on its ticks) before it is told the
/// cluster is unavailable and may retry with its request id.
pub const WAIT_SLACK: Duration = Duration::from_secs(10);

/// How an acquire that may wait ended well: answered by its own entry, or
/// granted later under `token` by the entry that handed it the lock(s).
enum Turned {
    Answered(Outcome),
    Handed(FencingToken),
}

impl Node {
    /// Applies an `Acquire`, `AcquireMany`, `AcquireShared` or
    /// `AcquirePermits` `command`: at once, or, with
    /// `wait_ms`, after waiting in the locks' FIFO queues until every lock
    /// asked for can be granted together (holding none meanwhile). A
    /// multi-acquire waits keyed by its first lock: the state machine
    /// grants all of them in one entry, so the event about the first is the
    /// event about all, and a `Cancel` of the first leaves every queue. Any
    /// other command is proposed as [`Node::propose`] does.
    ///
    /// The outer error is the cluster's (no quorum, not leader, the wait not
    /// ended in time); the inner one the lock's answer (`HeldByOther`,
    /// `WaitTimeout`, `Invalid`, ...), as for [`Node::propose`].
    ///
    /// `by` is the principal whose request it is, recorded with the command
    /// (and with the `Cancel` that gives up its place, should its caller go
    /// away).
    pub async fn acquire(
        self: &Arc<Self>,
        command: Command,
        by: Principal,
    ) -> Result<Result<Outcome, LockError>, NodeError> {
        self.acquire_via(command, by, Via::Anywhere).await
    }

    /// [`Node::acquire`] of a waiting acquire a follower handed whole
    /// (`node/handoff.rs`): proposed on this node only, `NotLeader` if it
    /// does not lead (the follower then hands it to the next leader), and
    /// waited for in this node's registry. Nothing here gives up its place:
    /// the follower proposes the `Cancel` if its caller goes away.
    pub(super) async fn acquire_as_leader(
        self: &Arc<Self>,
        command: Command,
        by: Principal,
    ) -> Result<Result<Outcome, LockError>, NodeError> {
        self.acquire_via(command, by, Via::Here).await
    }

    async fn acquire_via(
        self: &Arc<Self>,
        command: Command,
        by: Principal,
        via: Via,
    ) -> Result<Result<Outcome, LockError>, NodeError> {
        let Some(parts) = command.acquire_parts() else { return self.propose(command, by).await };
        let (names, owner, session) = (parts.names.to_vec(), parts.owner.to_owned(), parts.session);
        let wait = Duration::from_millis(parts.wait_ms.unwrap_or_default());
        let many = matches!(command, Command::AcquireMany { .. });
        let queue = if matches!(command, Command::AcquirePermits { .. }) { Queue::Semaphore } else { Queue::Lock };
        // An empty list is refused by validation before `first` is needed.
        let first = names.first().cloned().unwrap_or_default();
        let turn = Turn { queue, name: &first, owner: &owner };
        Ok(match self.acquire_in_turn(command, by, turn, session, wait, via).await? {
            Ok(Turned::Answered(outcome)) => Ok(outcome),
            Ok(Turned::Handed(token)) if many => Ok(Outcome::GrantedMany {
                grants: names.iter().map(|name| self.handed(name, &owner, token)).collect(),
                reacquired: false,
            }),
            Ok(Turned::Handed(token)) if queue == Queue::Semaphore => {
                Ok(Outcome::PermitsGranted { grant: self.handed_permits(&first, &owner, token), reacquired: false })
            }
            Ok(Turned::Handed(token)) => {
                Ok(Outcome::Granted { grant: self.handed(&first, &owner, token), reacquired: false })
            }
            Err(refused) => Err(refused),
        })
    }

    /// Proposes an acquire `command` of `turn.owner`, keyed by `turn.name`
    /// in `turn.queue` for its turn: a try-acquire is one proposal and does not register at all;
    /// a waiting one registers for its turn *before* proposing (so a
    /// hand-over cannot fall between the answer and the registration) and,
    /// if queued, waits for it. If the caller goes away before it is
    /// answered, its place is given up with a `Cancel`. A wait under
    /// `session` that ends because the session did is `SessionNotFound`.
    /// `via`: where it is proposed; a waiting acquire handed whole to the
    /// leader waits there, and is answered here with how the wait ended.
    async fn acquire_in_turn(
        self: &Arc<Self>,
        command: Command,
        by: Principal,
        turn: Turn<'_>,
        session: Option<SessionId>,
        wait: Duration,
        via: Via,
    ) -> Result<Result<Turned, LockError>, NodeError> {
        if let Err(invalid) = command.validate(&Limits::DEFAULT) {
            return Ok(Err(LockError::Invalid(invalid)));
        }
        let waits_at_leader = !wait.is_zero() && via == Via::Anywhere && waits_at_leader(&command);
        // Not registered when the leader will wait its turn: were it queued
        // here after all (the leader changed meanwhile), `wait_for_turn`
        // registers then, and reads the table after registering.
        let handed_whole = waits_at_leader && self.leader_waits_turns();
        let registered = (!wait.is_zero() && !handed_whole).then(|| self.waiters.watch(turn.name, turn.owner));
        // Armed before proposing: if the caller of a waiting acquire goes away
        // at any point before it is answered, its place in the queue is given
        // up. Not for a follower's acquire handed whole: its task here is
        // never dropped, and a `Cancel` from here could overtake the same
        // acquire handed again to the next leader.
        let mut place = QueuePlace {
            node: self.clone(),
            queue: turn.queue,
            name: turn.name.to_owned(),
            owner: turn.owner.to_owned(),
            by: by.clone(),
            armed: !wait.is_zero() && via == Via::Anywhere,
        };
        // Kept to read its request record, should its wait be found ended.
        let asked = command.clone();
        let proposed = match via {
            Via::Anywhere => self.propose_waiting(command, by, waits_at_leader.then_some(wait)).await,
            Via::Here => self.propose_here(command, by).await.map(|(result, _)| result),
        };
        // An error of the cluster's tells the caller to retry with the same
        // request id, which finds the place the acquire may have taken in
        // the queue (a waiter handed whole to a leader that died meanwhile
        // is queued still), or the grant it got meanwhile, from the request
        // record. Given up here, the retry was answered `wait_timeout` at
        // once, for a wait nobody ended.
        let proposed = proposed.inspect_err(|_| place.armed = false)?;
        let answer = match proposed {
            Ok(Outcome::Queued { .. } | Outcome::QueuedMany { .. } | Outcome::PermitsQueued { .. }) => {
                let waited = self.wait_for_turn(registered, turn, &asked, wait + WAIT_SLACK).await;
                waited.map(|r| r.map(Turned::Handed).map_err(|timeout| self.session_ended(session).unwrap_or(timeout)))
            }
            Ok(outcome) => Ok(Ok(Turned::Answered(outcome))),
            Err(refused) => Ok(Err(refused)),
        };
        place.armed = false;
        answer
    }

    /// Waits, without polling, for the state machine to hand `name` to
    /// `owner` or to end its wait; answers the token it was handed. `turn`
    /// is a registration taken before the proposal; without one (a queued
    /// answer replayed for a retry sent without `wait_ms`) it registers now.
    /// Either way the table is read once after registering, so a hand-over
    /// applied before it is not missed. `asked` is the acquire command.
    ///
    /// That read, taken after the queuing entry was applied, is where the
    /// owner stands as of the last applied entry; only events of later
    /// entries can change it. The events of entries up to that one, which
    /// a registration taken before the proposal also received, are about
    /// what came before: a `Cancelled` or `WaitTimeout` among them ended an
    /// *earlier* wait of this owner (the abandoned first attempt of a
    /// retried request, whose `Cancel` forgot the request id, so the retry
    /// queued anew). Taken for the end of this wait, it answered
    /// `wait_timeout` to an owner still queued, who was then granted.
    ///
    /// The read may come long after the queuing entry (this task stalled,
    /// or a retry replayed the `Queued` answer): the owner may have been
    /// granted and lost the lease again since. The request record, resolved
    /// when the wait ended, tells that from a wait that ended without a
    /// grant; without a request id the read's answer stands.
    async fn wait_for_turn(
        &self,
        registered: Option<Waiter>,
        turn: Turn<'_>,
        asked: &Command,
        bound: Duration,
    ) -> Result<Result<FencingToken, LockError>, NodeError> {
        let Turn { queue, name, owner } = turn;
        let mut registered = registered.unwrap_or_else(|| self.waiters.watch(name, owner));
        let wait_timeout = || LockError::WaitTimeout { name: name.to_owned() };
        let ended = async {
            let (read_at, standing) = self.standing(queue, name, owner, asked);
            if let Some(settled) = standing {
                return Ok(settled.ok_or_else(wait_timeout));
            }
            loop {
                let Some(event) = registered.next().await else {
                    return Err(NodeError::Unavailable("node shutting down".into()));
                };
                if event.index <= read_at {
                    // Already in the table read above: not about this wait's end.
                    continue;
                }
                match (queue, event.kind) {
                    (Queue::Lock, EventKind::Acquired { token, .. } | EventKind::HandedOver { token, .. })
                    | (Queue::Semaphore, EventKind::PermitsGranted { token, .. }) => return Ok(Ok(token)),
                    (Queue::Lock, EventKind::WaitTimeout { .. } | EventKind::Cancelled { .. })
                    | (Queue::Semaphore, EventKind::PermitWaitEnded { .. }) => return Ok(Err(wait_timeout())),
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(bound, ended).await {
            Ok(answer) => answer,
            Err(_) => Err(NodeError::Unavailable(
                "the cluster did not end this wait in time; retry with the same request_id".into(),
            )),
        }
    }

    /// `SessionNotFound` when a wait under `session` ended because the
    /// session is gone (the state machine took its waiters out of the queues).
    fn session_ended(&self, session: Option<SessionId>) -> Option<LockError> {
        let session = session?;
        self.locks().read(|t| t.session(session).is_none()).then_some(LockError::SessionNotFound { session })
    }

    /// The permits of semaphore `name` the state machine handed `owner` under `token`.
    fn handed_permits(&self, name: &str, owner: &str, token: FencingToken) -> PermitGrant {
        self.locks().read(|t| t.permits_of(name, owner)).filter(|g| g.token == token).unwrap_or_else(
            // Granted and already gone again (the answer came later than the lease's ttl).
            || PermitGrant {
                name: name.to_owned(),
                owner: owner.to_owned(),
                token,
                permits: 0,
                limit: 0,
                ttl_ms: 0,
                expires_in_ms: 0,
                deadline_tick: 0,
            },
        )
    }

    /// The grant of `name` (exclusive, or shared) the state machine handed
    /// `owner` under `token`.
    fn handed(&self, name: &str, owner: &str, token: FencingToken) -> Grant {
        let held = self.locks().read(|t| t.holder(name).filter(|g| g.owner == owner).or(t.shared_holder(name, owner)));
        held.filter(|g| g.token == token).unwrap_or_else(
            // Granted and already gone again (the answer came later than the lease's ttl).
            || Grant {
                name: name.to_owned(),
                owner: owner.to_owned(),
                token,
                ttl_ms: 0,
                expires_in_ms: 0,
                deadline_tick: 0,
            },
        )
    }

    /// Where `owner` stands on `name` in `queue` according to the applied
    /// table: still waiting (`None`), granted (`Some(Some(token))`: holder,
    /// or granted by `asked` as its request record says, and already gone
    /// again), or neither: its wait ended (`Some(None)`); with the index of
    /// the last entry applied to the table read. Waiting is asked first: an
    /// owner may wait for `name` in a multi-acquire while it holds `name`
    /// under another grant.
    fn standing(&self, queue: Queue, name: &str, owner: &str, asked: &Command) -> (u64, Option<Option<FencingToken>>) {
        self.locks().read_at(|t| {
            let (waiting, held) = match queue {
                Queue::Lock => (
                    t.is_waiting(name, owner),
                    t.holder(name).filter(|g| g.owner == owner).or(t.shared_holder(name, owner)).map(|g| g.token),
                ),
                Queue::Semaphore => (t.is_waiting_for_permits(name, owner), t.permits_of(name, owner).map(|g| g.token)),
            };
            (!waiting).then(|| held.or_else(|| t.granted_by_record(asked)))
        })
    }
}

/// Where an acquire is proposed: on the leader wherever it is (a client's
/// acquire), or on this node only (a follower's, handed whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Anywhere,
    Here,
}

/// Which kind of queue a waiting acquire stands in: a lock's (exclusive or
/// shared) or a semaphore's. Their events have kinds of their own, so one
/// registry of waiters by (name, owner) serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Lock,
    Semaphore,
}

/// A waiting acquire's place: its queue, the lock or semaphore it is keyed
/// by, and its owner.
#[derive(Clone, Copy)]
struct Turn<'a> {
    queue: Queue,
    name: &'a str,
    owner: &'a str,
}

/// A waiter's place in a queue, given up (a `Cancel` proposed) when the
/// acquire is dropped before it was answered: its caller went away.
struct QueuePlace {
    node: Arc<Node>,
    queue: Queue,
    name: String,
    owner: String,
    /// Whose wait it is: the cancel is theirs.
    by: Principal,
    armed: bool,
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if self.armed {
            let node = self.node.clone();
            let (name, owner) = (std::mem::take(&mut self.name), std::mem::take(&mut self.owner));
            let by = self.by.clone();
            let command = match self.queue {
                Queue::Lock => Command::Cancel { name, owner },
                Queue::Semaphore => Command::CancelPermits { name, owner },
            };
            tokio::spawn(async move {
                let cancelled: Result<LockResult, NodeError> = node.propose(command, by).await;
                if let Err(e) = cancelled {
                    tracing::warn!(error = %e, "could not cancel an abandoned wait; it ends with its wait_ms");
                }
            });
        }
    }
}
