//! Proposals and reads from any node: on the leader they go to its own
//! Raft; on a follower they are handed to the leader over the peer
//! transport ([`crate::peer::handoff`]). A follower answers a read once it
//! has applied the leader's read index itself, and a command with the
//! leader's result — after applying its entry too when the caller goes on
//! to read this node's own table (a queued acquire, which waits in this
//! node's registry of waiters; a campaign): see `read_here_after`.
//!
//! A waiting acquire (not a campaign) goes to a leader that takes them
//! whole ([`Asked::Acquire`]): the leader waits its turn and answers the
//! grant of the entry that handed it the lock once it applied that entry
//! (so committed on a quorum), and the follower answers its client at
//! once: a hand-over through a follower costs the leader's commit and the
//! way back, not also this node's own append, fsync and apply of the
//! entry. A client that then reads through this node still sees its grant
//! (reads wait for the leader's read index). If the channel breaks during
//! the wait (the leader died) the acquire is answered `unavailable`, as any
//! hand-off whose answer was lost.
//!
//! Failover: while no leader is known, or the known one cannot be reached
//! (the hand-off never left this node), a proposal is held for the next
//! leader up to [`ELECTION_BOUND`] and then sent there (or proposed here,
//! if this node was elected). One that may have reached a leader that then
//! died, or that was replaced while it had it (the channel is ended then:
//! cut off without its connections closing, it would not answer until the
//! ask's bound; see [`Node::end_hand_offs_to_former_leaders`]), is answered
//! `unavailable`: its caller retries with the same request id, which the
//! state machine de-duplicates.
//!
//! The leader's side: [`Node::serve_hand_offs`] takes a follower's
//! channel, joins each handed command to the proposer's batching like one
//! of its own clients', and answers the result with its entry's index.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{Node, NodeError, QUORUM_WAIT, WAIT_SLACK};
use crate::peer::handoff::{
    encode_named_frame, handed_command, write_all_frames, Answer, Answered, Ask, Asked, HandOffError, Ready, Welcome,
    VERSION,
};
use crate::peer::{read_frame, FrameError};
use crate::raft::{LockResult, NodeId, Urgency, ELECTION_BOUND};
use leasehold_core::{Batch, Command, Limits, Outcome, Principal};

/// How long a follower waits for the leader's answer to a hand-off: the
/// leader's own quorum wait, and the way there and back.
const HAND_OFF_ANSWER: Duration = Duration::from_millis(QUORUM_WAIT.as_millis() as u64 + 2_000);
/// How often a wait for an entry to be applied here asks Raft too.
const APPLIED_RECHECK: Duration = Duration::from_millis(100);

impl Node {
    /// Proposes `command`, asked for by `by`, here, as leader (no
    /// hand-off): its result and the index of its entry. A command that
    /// would only queue behind another holder waits to share the next entry.
    pub(super) async fn propose_here(&self, command: Command, by: Principal) -> Result<(LockResult, u64), NodeError> {
        let urgency = match self.locks().read(|t| t.would_queue(&command)) {
            true => Urgency::WithNext,
            false => Urgency::Now,
        };
        match tokio::time::timeout(QUORUM_WAIT, self.raft.propose(command, by, urgency)).await {
            Err(_) => Err(NodeError::Unavailable(format!(
                "no quorum within {} ms; the request may still take effect",
                QUORUM_WAIT.as_millis()
            ))),
            Ok(result) => Ok(result?),
        }
    }

    /// Proposes `command`, asked for by `by`, on the leader, wherever it is
    /// (see the module comment); a follower hands `by` over with it.
    /// `wait`: the command is a waiting acquire (not a campaign) that may
    /// wait for its turn up to that long, and a leader elsewhere that takes
    /// waiting acquires whole answers only once the wait ended.
    pub(super) async fn propose_anywhere(
        &self,
        command: Command,
        by: Principal,
        wait: Option<Duration>,
    ) -> Result<LockResult, NodeError> {
        let Some(handoff) = &self.handoff else { return Ok(self.propose_here(command, by).await?.0) };
        let give_up = tokio::time::Instant::now() + ELECTION_BOUND;
        let mut seen = self.leadership();
        // The command, until it is handed over in a batch of its own
        // (kept for the next leader, should this one be unreachable).
        let mut command = Some(command);
        let mut batch: Option<Batch> = None;
        loop {
            if let Some((leader, member)) = &seen.leader {
                if *leader == self.id {
                    let command = match command.take() {
                        Some(command) => command,
                        None => batch.as_ref().and_then(|b| b.commands().first().cloned()).ok_or_else(no_command)?,
                    };
                    return Ok(self.propose_here(command, by).await?.0);
                }
                if batch.is_none() {
                    batch = command.take().map(|command| Batch::handed(command, by.clone()));
                }
                let batch = batch.as_ref().ok_or_else(no_command)?;
                let addr = member.peer_dial_addr();
                // A leader that cannot be reached is found out here already.
                let waits_there = match wait {
                    Some(wait) => {
                        handoff.ready(addr).await.map(|ready| matches!(ready, Ready::HandOff).then_some(wait))
                    }
                    None => Ok(None),
                };
                // Requests here read this node's table after their answer:
                // waiting acquires registered here, a campaign, or this one
                // if it is queued and waits here.
                let waiting = self.waiters.any()
                    || matches!(batch.commands(), [Command::Campaign { .. }])
                    || (wait.is_some() && !matches!(waits_there, Ok(Some(_))));
                let handed = match waits_there {
                    Err(e) => Ok(Err(e)),
                    Ok(Some(wait)) => {
                        let bound = HAND_OFF_ANSWER + wait + WAIT_SLACK;
                        let acquired = tokio::time::timeout(bound, handoff.acquire(addr, batch, waiting)).await;
                        acquired.map(|answer| answer.map(|result| (result, None)))
                    }
                    Ok(None) => {
                        let proposed =
                            tokio::time::timeout(HAND_OFF_ANSWER, handoff.propose(addr, batch, waiting)).await;
                        proposed.map(|answer| answer.map(|(result, index)| (result, Some(index))))
                    }
                };
                match handed {
                    Ok(Ok((result, index))) => {
                        if let Some(index) = index.filter(|_| read_here_after(batch.commands(), &result)) {
                            self.until_applied(index).await?;
                        }
                        return Ok(result);
                    }
                    Ok(Err(HandOffError::NotSent(e))) => {
                        tracing::debug!(error = %e, leader, "hand-off not sent; holding it for the next leader");
                    }
                    Ok(Err(HandOffError::Unsupported)) => {
                        return Err(NodeError::NotLeader { leader: Some((*leader, member.addr.clone())) })
                    }
                    Ok(Err(HandOffError::Refused(e))) => return Err(NodeError::Internal(e)),
                    Ok(Err(HandOffError::Unavailable(e))) => return Err(NodeError::Unavailable(e)),
                    Ok(Err(e @ HandOffError::Lost(_))) => {
                        return Err(NodeError::Unavailable(format!(
                            "{e}: the request may have taken effect; retry with the same request_id"
                        )))
                    }
                    Err(_) => {
                        return Err(NodeError::Unavailable(
                            "the leader did not answer in time; the request may still take effect".into(),
                        ))
                    }
                }
            }
            seen = self.next_leadership(&seen, give_up).await.ok_or_else(|| {
                NodeError::Unavailable(format!("no leader elected within {} ms; retry", ELECTION_BOUND.as_millis()))
            })?;
        }
    }

    /// Ends the hand-off channels to every node but the leader, each time
    /// this node hears of a new one, until Raft shuts down: an ask on a
    /// channel to a leader cut off without its connections closing (a
    /// partition, a paused process: no RST) would otherwise wait out its
    /// bound (5 s, a waiting acquire its `wait_ms` + 15 s) although the
    /// cluster has moved on. Its caller learns the answer is lost, as when
    /// a leader dies: a proposal is answered `unavailable` (retry with the
    /// same request id), a read asks the next leader. One watch for the
    /// node, nothing per ask.
    pub(super) fn end_hand_offs_to_former_leaders(self: &Arc<Self>) {
        let mut leaders = self.raft.leader_changes();
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            while leaders.changed().await.is_ok() {
                let Some(leader) = leaders.borrow_and_update().1 else { continue };
                let Some(node) = node.upgrade() else { return };
                let Some(handoff) = &node.handoff else { return };
                let kept = (leader != node.id).then(|| node.raft.member(leader)).flatten();
                handoff.end_all_but(kept.as_ref().map(|member| member.peer_dial_addr()));
            }
        });
    }

    /// Whether a waiting acquire proposed now would be handed whole to the
    /// leader (known, elsewhere, its channel open and of a version that
    /// takes them), which waits its turn: nothing need wait here. Does not
    /// dial: before the first hand-off it says no, and the acquire
    /// registers here for nothing.
    pub(super) fn leader_waits_turns(&self) -> bool {
        let Some(handoff) = &self.handoff else { return false };
        self.leader().is_some_and(|(leader, member)| leader != self.id && handoff.hands_off_to(member.peer_dial_addr()))
    }

    /// Returns once this node's table reflects every write committed
    /// before the call: on the leader its own ReadIndex; on a follower the
    /// leader's read index, once applied here.
    pub(super) async fn read_barrier(&self) -> Result<(), NodeError> {
        let Some(handoff) = &self.handoff else { return self.read_barrier_here().await };
        let give_up = tokio::time::Instant::now() + ELECTION_BOUND;
        let mut seen = self.leadership();
        loop {
            if let Some((leader, member)) = &seen.leader {
                if *leader == self.id {
                    return self.read_barrier_here().await;
                }
                let asked = tokio::time::timeout(HAND_OFF_ANSWER, handoff.read_index(member.peer_dial_addr()));
                match asked.await {
                    Ok(Ok(index)) => return self.until_applied(index).await,
                    // A read changes nothing: whatever became of the ask, it
                    // may be asked again of the next leader.
                    Ok(Err(HandOffError::NotSent(e) | HandOffError::Lost(e))) => {
                        tracing::debug!(error = %e, leader, "read index not answered; asking the next leader");
                    }
                    Ok(Err(HandOffError::Unsupported)) => {
                        return Err(NodeError::NotLeader { leader: Some((*leader, member.addr.clone())) })
                    }
                    Ok(Err(HandOffError::Refused(e))) => return Err(NodeError::Internal(e)),
                    Ok(Err(HandOffError::Unavailable(e))) => return Err(NodeError::Unavailable(e)),
                    Err(_) => return Err(NodeError::Unavailable("leadership not confirmed in time".into())),
                }
            }
            seen = self.next_leadership(&seen, give_up).await.ok_or_else(|| {
                NodeError::Unavailable(format!("no leader elected within {} ms; retry", ELECTION_BOUND.as_millis()))
            })?;
        }
    }

    /// ReadIndex on this node's own Raft (which must lead).
    async fn read_barrier_here(&self) -> Result<(), NodeError> {
        match tokio::time::timeout(QUORUM_WAIT, self.raft.read_barrier()).await {
            Err(_) => Err(NodeError::Unavailable("leadership not confirmed by a quorum".into())),
            Ok(barrier) => Ok(barrier?),
        }
    }

    /// Waits until this node has applied entry `index` (committed: the
    /// leader answered for it), woken by that entry's apply. Every
    /// [`APPLIED_RECHECK`] it also asks Raft: a snapshot installed
    /// meanwhile moves the applied index without applying entries here.
    async fn until_applied(&self, index: u64) -> Result<(), NodeError> {
        let give_up = tokio::time::Instant::now() + QUORUM_WAIT;
        loop {
            let Some(applied) = self.waiters.when_applied(index) else { return Ok(()) };
            if self.raft.applied_index().is_some_and(|applied| applied >= index) {
                return Ok(());
            }
            let recheck = (tokio::time::Instant::now() + APPLIED_RECHECK).min(give_up);
            if tokio::time::timeout_at(recheck, applied).await.is_ok() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= give_up {
                let applied = self.raft.applied_index();
                return Err(NodeError::Unavailable(format!(
                    "entry {index} is committed but this node has applied only up to {applied:?}; retry with the same request_id"
                )));
            }
        }
    }

    /// Serves follower `from`'s hand-off channel on `io` (after its hello):
    /// the welcome, then each ask answered as soon as it is done, until the
    /// follower closes the channel or sends a frame that is not an ask.
    pub async fn serve_hand_offs<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
        self: &Arc<Self>,
        from: NodeId,
        mut io: I,
    ) {
        let welcomed = match encode_named_frame(&Welcome::from(self.id)) {
            Ok(frame) => io.write_all(&frame).await.and(io.flush().await).is_ok(),
            Err(_) => false,
        };
        if !welcomed {
            return;
        }
        let _counted = self.handing.hold(from);
        let (reader, writer) = tokio::io::split(io);
        let mut reader = tokio::io::BufReader::new(reader);
        let (answers, mut frames) = mpsc::unbounded_channel();
        let mut write = tokio::spawn(async move { write_all_frames(writer, &mut frames).await });
        loop {
            let ask = tokio::select! {
                ask = read_frame::<_, Ask>(&mut reader) => ask,
                _ = &mut write => break,
            };
            match ask {
                Ok(Some(Ask { id, asked, waiting })) => {
                    self.handing.set_waiting(from, waiting);
                    let (node, answers) = (self.clone(), answers.clone());
                    tokio::spawn(async move {
                        let answered = node.answer_hand_off(asked).await;
                        match encode_named_frame(&Answer { id, answered }) {
                            Ok(frame) => {
                                let _ = answers.send(frame);
                            }
                            Err(e) => tracing::warn!(error = %e, "hand-off answer not encodable"),
                        }
                    });
                }
                Ok(None) => break,
                Err(e @ FrameError::Decode(_)) => {
                    // Asks this version does not know: the follower runs a
                    // later one and disregarded the version welcomed.
                    tracing::warn!(error = %e, from, version = VERSION, "hand-off ask not understood; channel closed");
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, from, "hand-off channel closed");
                    break;
                }
            }
        }
        write.abort();
    }

    /// The leader's answer to one ask.
    async fn answer_hand_off(self: &Arc<Self>, asked: Asked) -> Answered {
        let answer_error = |e: NodeError| match e {
            NodeError::NotLeader { .. } => Answered::NotLeader,
            e => Answered::Unavailable(e.to_string()),
        };
        match asked {
            Asked::Propose(batch) => {
                let (command, by) = match taken_command(&batch) {
                    Ok(taken) => taken,
                    Err(why) => return Answered::Refused(why),
                };
                match self.propose_here(command, by).await {
                    Ok((result, index)) => Answered::Applied { index, result },
                    Err(e) => answer_error(e),
                }
            }
            Asked::Acquire(batch) => {
                let (command, by) = match taken_command(&batch) {
                    Ok((command, by)) if waits_at_leader(&command) => (command, by),
                    Ok((command, _)) => return Answered::Refused(format!("{command} is not a waiting acquire")),
                    Err(why) => return Answered::Refused(why),
                };
                match self.acquire_as_leader(command, by).await {
                    Ok(result) => Answered::Acquired(result),
                    Err(e) => answer_error(e),
                }
            }
            Asked::ReadIndex => match self.read_barrier_here().await {
                // Applied here after the barrier, so committed: a follower
                // that has applied it reflects every write before the ask.
                Ok(()) => Answered::ReadIndex { index: self.raft.applied_index().unwrap_or(0) },
                Err(e) => answer_error(e),
            },
        }
    }
}

/// Whether the caller of a handed command reads this node's own table
/// after `result` (so this node must have applied the entry first): a
/// queued acquire waits in this node's registry of waiters and reads its
/// standing there; a granted campaign reads the election's start. Other
/// answers are the leader's, of a committed entry, as they are: a later
/// read through this node asks the leader for a read index and waits until
/// this node has applied it, so it sees the entry anyway. (Waiting for the
/// apply cost each answer this node's own append and fsync of the entry,
/// even when the other follower made the quorum.)
fn read_here_after(commands: &[Command], result: &LockResult) -> bool {
    matches!(result, Ok(Outcome::Queued { .. } | Outcome::QueuedMany { .. } | Outcome::PermitsQueued { .. }))
        || matches!(commands, [Command::Campaign { .. }])
}

/// The command of a follower's `batch`, if the leader takes it: one
/// command a client may send, valid; else why it is refused.
fn taken_command(batch: &Batch) -> Result<(Command, Principal), String> {
    let (command, by) = handed_command(batch)?;
    command.validate(&Limits::DEFAULT).map_err(|invalid| invalid.to_string())?;
    Ok((command.clone(), by.clone()))
}

/// Whether `command` is handed whole to a leader that takes waiting
/// acquires, which then waits its turn itself ([`Asked::Acquire`]): an
/// acquire with a wait, but not a campaign, whose caller reads the
/// election from this node's table next.
pub(super) fn waits_at_leader(command: &Command) -> bool {
    !matches!(command, Command::Campaign { .. })
        && command.acquire_parts().is_some_and(|parts| parts.wait_ms.is_some_and(|wait| wait > 0))
}

fn no_command() -> NodeError {
    NodeError::Internal("a proposal without its command".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::{FencingToken, Grant, LockError};

    fn acquire() -> Command {
        Command::Acquire {
            name: "a".into(),
            owner: "o".into(),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: Some(1000),
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        }
    }

    // Ensures a follower waits to have applied a handed entry exactly when
    // its caller reads the follower's own table next: a queued acquire, a
    // campaign; not a grant, a refusal or a release.
    #[test]
    fn only_answers_read_here_next_wait_for_the_apply() {
        let grant = Grant {
            name: "a".into(),
            owner: "o".into(),
            token: FencingToken::granted_at(3),
            ttl_ms: 5000,
            expires_in_ms: 5000,
            deadline_tick: 9,
        };
        let granted: LockResult = Ok(Outcome::Granted { grant, reacquired: false });
        assert!(!read_here_after(&[acquire()], &granted));
        let refused: LockResult = Err(LockError::WaitTimeout { name: "a".into() });
        assert!(!read_here_after(&[acquire()], &refused));
        let queued: LockResult = Ok(Outcome::Queued { name: "a".into(), owner: "o".into(), position: 1 });
        assert!(read_here_after(&[acquire()], &queued));
        let campaign = Command::Campaign {
            name: "e".into(),
            candidate: "c".into(),
            value: "1".into(),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: Some(1000),
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        };
        assert!(read_here_after(std::slice::from_ref(&campaign), &granted));
        assert!(!waits_at_leader(&campaign), "a campaign's caller reads the election here");
    }

    // Ensures exactly the acquires with a wait (not campaigns) are handed
    // whole to a leader that waits their turn.
    #[test]
    fn only_waiting_acquires_wait_at_the_leader() {
        assert!(waits_at_leader(&acquire()));
        let at_once = |wait_ms| match acquire() {
            Command::Acquire { name, owner, ttl_ms, session, request_id, lock_delay_ms, seq, .. } => {
                Command::Acquire { name, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq }
            }
            other => other,
        };
        assert!(!waits_at_leader(&at_once(None)));
        assert!(!waits_at_leader(&at_once(Some(0))));
        assert!(!waits_at_leader(&Command::Cancel { name: "a".into(), owner: "o".into() }));
    }
}
