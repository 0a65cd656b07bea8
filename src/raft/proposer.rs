//! Batches concurrent client commands into log entries.
//!
//! Proposed one by one, every command paid for a log entry of its own: an
//! append, an fsync on the leader, a place in replication and an apply. Under
//! load the leader then fsynced once per command and spent most of its CPU on
//! that. The proposer instead keeps at most [`IN_FLIGHT`] entries between
//! proposal and apply; commands that arrive meanwhile wait, and go out
//! together in the next entry (a [`Batch`]). A lone command on an idle node
//! is proposed at once, so batching costs no latency when there is nothing to
//! batch.
//!
//! A command that would only queue behind another holder (a waiting acquire
//! of a held lock, [`Urgency::WithNext`]) does not make an entry of its own:
//! it waits for the next entry another command makes, for at most
//! [`DEFER_MAX`]. On a hot lock every hand-off used to cost two entries, the
//! holder's release and, a moment later, the previous holder queuing again;
//! now both share one, and the queuing acquire is no later for it, since its
//! turn can only come with a later command or Tick anyway.
//!
//! Every entry it makes carries this node's [`Quotas`]: the limits on leases
//! and waiters the entry's commands are applied under, on every replica.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::errors::{ClientWriteError, Fatal, RaftError};
use openraft::impls::ProgressResponder;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::types::{LockResult, TypeConfig};
use super::Raft;
use crate::metrics::Metrics;
use leasehold_core::{Batch, Command, Principal, Quotas};

/// Why a proposal was not answered with its result.
pub type ProposeError = RaftError<TypeConfig, ClientWriteError<TypeConfig>>;

/// Entries proposed and not yet applied, at most: two keep replication busy
/// (one entry is on its way while the next fills up), and few slots make
/// commands that arrive under load share an entry. Measured on 3 nodes at
/// 16 and 64 clients, 2 beat both 1 and 4.
const IN_FLIGHT: usize = 2;

/// How long a [`Urgency::WithNext`] command waits for another command to
/// share an entry with, before it is proposed on its own. Only an idle lock
/// with one waiter waits this long: under load the next command comes in
/// well under a millisecond.
const DEFER_MAX: Duration = Duration::from_millis(2);

/// Commands waiting for an entry. The API bounds requests in flight well
/// below this; the bound only stops a runaway caller from queueing without end.
const QUEUE: usize = 16 * 1024;

/// A command's result, with the index of the entry it was applied in.
type Reply = oneshot::Sender<Result<(LockResult, u64), ProposeError>>;

struct Proposal {
    command: Command,
    /// Whose request it is: recorded with the command in its entry (always
    /// one: only Ticks, which the ticker proposes itself, have none).
    by: Option<Principal>,
    /// `Some(arrival)` for a command that may wait for the next entry.
    deferred_since: Option<Instant>,
    reply: Reply,
}

/// Whether a command makes an entry at once, or may wait to share the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// In the next entry, made as soon as a slot is free.
    Now,
    /// In the next entry another command makes, or on its own after
    /// [`DEFER_MAX`]: a command that would only queue behind another holder
    /// ([`leasehold_core::LockTable::would_queue`]).
    WithNext,
}

/// The leader-side entry point for client commands. Cheap to share; the
/// batching task stops when the proposer is dropped.
pub struct Proposer {
    queue: mpsc::Sender<Proposal>,
}

impl Proposer {
    /// Starts the batching task on the current tokio runtime; its entries
    /// carry `quotas`.
    pub fn start(raft: Raft, quotas: Quotas, metrics: Arc<Metrics>) -> Proposer {
        let (queue, arrivals) = mpsc::channel(QUEUE);
        tokio::spawn(batch_and_propose(raft, quotas, arrivals, metrics));
        Proposer { queue }
    }

    /// Proposes `command`, asked for by `by`, in the next entry with room
    /// for it (with `urgency`), and waits until that entry is committed and
    /// applied here; its result, and the entry's index (a follower that
    /// handed the command over waits until it has applied that entry itself
    /// before it answers).
    pub async fn propose(
        &self,
        command: Command,
        by: Principal,
        urgency: Urgency,
    ) -> Result<(LockResult, u64), ProposeError> {
        let (reply, answer) = oneshot::channel();
        let deferred_since = (urgency == Urgency::WithNext).then(Instant::now);
        self.queue.send(Proposal { command, by: Some(by), deferred_since, reply }).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> ProposeError {
    RaftError::Fatal(Fatal::Stopped)
}

/// The batching task: whenever an entry slot is free and commands wait, the
/// waiting commands go out as one entry, in arrival order, unless all of
/// them may wait for the next one and none has waited [`DEFER_MAX`] yet.
async fn batch_and_propose(raft: Raft, quotas: Quotas, mut arrivals: mpsc::Receiver<Proposal>, metrics: Arc<Metrics>) {
    let mut waiting: VecDeque<Proposal> = VecDeque::new();
    let mut in_flight = JoinSet::new();
    loop {
        // When the commands waiting may all wait for a command to share an
        // entry with: until the oldest has waited long enough.
        let mut deferred_until = None;
        if in_flight.len() < IN_FLIGHT {
            while let Ok(p) = arrivals.try_recv() {
                waiting.push_back(p);
            }
            deferred_until = deferred_until_of(&waiting).filter(|until| *until > Instant::now());
            if let Some(first) = deferred_until.is_none().then(|| waiting.pop_front()).flatten() {
                let (batch, replies) = next_entry(quotas, first, &mut waiting);
                metrics.proposed(batch.len());
                let proposed = Instant::now();
                // `client_write_ff` queues the entry in Raft before returning,
                // so entries reach the log in the order they were made here;
                // the responder answers once it is applied.
                let (responder, applied) = ProgressResponder::complete_only();
                match raft.client_write_ff(batch, Some(responder)).await {
                    Ok(()) => {
                        let metrics = metrics.clone();
                        in_flight.spawn(async move {
                            let results = match applied.await {
                                Ok(Ok(response)) => Ok((response.log_id.index, response.data)),
                                Ok(Err(e)) => Err(RaftError::APIError(e)),
                                Err(_) => Err(stopped()),
                            };
                            metrics.entry_committed(proposed.elapsed().as_secs_f64());
                            answer(replies, results);
                        });
                    }
                    Err(fatal) => answer(replies, Err(RaftError::Fatal(fatal))),
                }
                continue;
            }
        }
        tokio::select! {
            arrived = arrivals.recv() => match arrived {
                Some(p) => waiting.push_back(p),
                // The proposer is gone: the node is shutting down.
                None => return,
            },
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            () = tokio::time::sleep_until(deferred_until.unwrap_or_else(Instant::now).into()),
                if deferred_until.is_some() => {}
        }
    }
}

/// Until when the commands in `waiting` may wait for another to share an
/// entry with: `None` when one of them may not wait (or none waits).
fn deferred_until_of(waiting: &VecDeque<Proposal>) -> Option<Instant> {
    let mut oldest = None;
    for proposal in waiting {
        oldest = Some(oldest.unwrap_or(proposal.deferred_since?));
    }
    oldest.map(|since: Instant| since + DEFER_MAX)
}

/// The next entry, under `quotas`: `first`, then as many commands from the
/// front of `waiting` as [`Batch`] lets share an entry with it.
fn next_entry(quotas: Quotas, first: Proposal, waiting: &mut VecDeque<Proposal>) -> (Batch, Vec<Reply>) {
    let mut batch = Batch::within(quotas, first.command, first.by);
    let mut replies = vec![first.reply];
    while let Some(next) = waiting.pop_front() {
        match batch.try_push(next.command, next.by) {
            Ok(()) => replies.push(next.reply),
            Err((command, by)) => {
                waiting.push_front(Proposal { command, by, deferred_since: next.deferred_since, reply: next.reply });
                break;
            }
        }
    }
    (batch, replies)
}

/// Answers each command of an entry with its own result (the state machine
/// returns one per command, in order), or all of them with the entry's error.
fn answer(replies: Vec<Reply>, results: Result<(u64, Vec<LockResult>), ProposeError>) {
    // A caller that stopped waiting (deadline, disconnect) is not an error.
    match results {
        Ok((index, results)) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(Ok((result, index)));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
