//! [`Consensus`]: the one handle on a node's running Raft — openraft itself,
//! the proposer that batches commands into entries, the leader's ticker,
//! the checkpoint policy and the metrics observer — offering the node only
//! what it needs in its own terms (propose, confirm leadership for a read,
//! a view of the cluster, membership changes, snapshots), so that no code
//! above `raft/` names an openraft type.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, InitializeError, LinearizableReadError, RaftError};
use openraft::metrics::WaitError;
use openraft::Instant as _;
use openraft::{ChangeMembers, ReadPolicy, ServerState, SnapshotPolicy};

use super::checkpoint_policy::checkpoint_when_due;
use super::inbound::Inbound;
use super::messages::SNAPSHOT_TIMEOUT;
use super::network::Network;
use super::observer::{follow_leadership, observe};
use super::proposer::{ProposeError, Proposer, Urgency};
use super::ticker::Ticker;
use super::types::{LockResult, Member, NodeId};
use super::Raft;
use crate::metrics::Metrics;
use crate::store::{LockState, LogStore, StateMachineStore};
use leasehold_core::{Command, Principal, Quotas};

/// Raft heartbeat period: a follower hears from a live leader this often
/// even when no client writes.
const HEARTBEAT_MS: u64 = 50;
/// openraft's election timeout bounds. A follower that stops hearing from
/// its leader first waits out the leader's lease (openraft makes it
/// `election_timeout_max`: until then voters refuse to elect anyone else),
/// then its own timeout drawn from these bounds, and only then campaigns:
/// a dead leader is replaced 700–900 ms after its last heartbeat, the
/// first of two survivors to time out campaigning. At 600–1200 ms that was
/// 1.8–2.4 s, the whole of a failover's write gap.
const ELECTION_TIMEOUT_MIN_MS: u64 = 250;
const ELECTION_TIMEOUT_MAX_MS: u64 = 450;
/// The shortest silence after which a follower campaigns (the lease plus
/// the least timeout): how recent a leader's quorum must be for it to
/// tick, or for a node to call itself ready. Fourteen heartbeats, so a
/// busy moment on a loaded machine does not unseat a live leader.
pub const LEADER_SILENCE_MS: u64 = ELECTION_TIMEOUT_MAX_MS + ELECTION_TIMEOUT_MIN_MS;
/// How long an election may take when a vote splits once: a follower
/// holds a client's request this long for a new leader, and a new leader
/// a write for its first quorum, before answering `unavailable` (well
/// inside the clients' six-second attempt timeout).
pub const ELECTION_BOUND: Duration = Duration::from_millis(2 * (ELECTION_TIMEOUT_MAX_MS + ELECTION_TIMEOUT_MAX_MS));

/// Who leads, as this node knows it: the term and, once elected and heard
/// from, the leader with its addresses.
#[derive(Debug, Clone)]
pub struct Leadership {
    pub term: u64,
    pub leader: Option<(NodeId, Member)>,
}

/// How a node's Raft runs: its identity, the leader's tick period, how
/// often it checkpoints, and the quotas it stamps on the entries it
/// proposes as leader.
#[derive(Debug, Clone, Copy)]
pub struct RaftSettings {
    pub id: NodeId,
    pub tick: Duration,
    /// Entries between snapshots; the log keeps a fiftieth of that behind
    /// each snapshot for followers that are only a little behind.
    pub snapshot_every: u64,
    pub quotas: Quotas,
}

/// Why a call into Raft failed, in the node's terms.
#[derive(Debug, thiserror::Error)]
pub enum ConsensusError {
    /// This node does not lead; the leader it knows of, with its address.
    #[error("this node is not the leader")]
    NotLeader(Option<(NodeId, String)>),
    /// The leadership was not confirmed by a quorum just now.
    #[error("{0}")]
    Unavailable(String),
    #[error("cluster already initialized")]
    AlreadyInitialized,
    #[error("invalid membership: {0}")]
    InvalidMembership(String),
    /// Raft stopped (a storage error, or shutdown).
    #[error("raft stopped: {0}")]
    Stopped(String),
}

/// A membership change.
#[derive(Debug, Clone)]
pub enum MembershipChange {
    /// These become the voters; voters left out are removed (learners stay).
    ReplaceVoters(BTreeSet<NodeId>),
    /// These learners become voters.
    AddVoters(BTreeSet<NodeId>),
    /// These nodes (learners) leave the cluster.
    RemoveNodes(BTreeSet<NodeId>),
}

/// A node's role in Raft, as status reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    Shutdown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
        }
    }
}

/// This node's view of Raft right now (local, not linearizable).
#[derive(Debug, Clone)]
pub struct RaftView {
    pub role: Role,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// How long ago a quorum last acknowledged this node as leader.
    pub millis_since_quorum_ack: Option<u64>,
    /// Every member's addresses.
    pub members: BTreeMap<NodeId, Member>,
    pub voters: BTreeSet<NodeId>,
    /// On a leader: each follower's matched index.
    pub replication: Option<BTreeMap<NodeId, Option<u64>>>,
}

/// What readiness needs to know: the commit index this node knows of, and
/// how long ago it last heard from the leader it follows.
#[derive(Debug, Clone, Copy)]
pub struct Heard {
    pub committed_index: Option<u64>,
    pub millis_since_leader: Option<u64>,
}

/// A node's running Raft. Dropping it does not stop Raft: call
/// [`Consensus::shutdown`].
pub struct Consensus {
    raft: Raft,
    proposer: Proposer,
    /// The leader clock's task, stopped before Raft at shutdown.
    ticker: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The term and leader this node knows of, changed only when either
    /// does (`observer::follow_leadership`).
    leaders: tokio::sync::watch::Receiver<(u64, Option<NodeId>)>,
}

impl Consensus {
    /// Starts Raft on the stores, with the ticker, the checkpoint policy,
    /// the leader-change counter and the proposer beside it.
    pub async fn start(
        settings: RaftSettings,
        network: Network,
        log: LogStore,
        state_machine: StateMachineStore,
        metrics: Arc<Metrics>,
    ) -> Result<Consensus, ConsensusError> {
        let config = openraft::Config {
            cluster_name: "leasehold".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
            election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
            // Ticks are log entries: snapshot and purge so the log stays bounded.
            snapshot_policy: SnapshotPolicy::LogsSinceLast(settings.snapshot_every),
            max_in_snapshot_log_to_keep: settings.snapshot_every / 50,
            max_payload_entries: 256,
            snapshot_max_chunk_size: 1 << 20,
            // A snapshot travels whole (openraft 0.10): the timeout is the
            // whole transfer's.
            install_snapshot_timeout: SNAPSHOT_TIMEOUT.as_millis() as u64,
            // A node whose saved vote is its own committed vote must win a
            // new election after a restart, not lead its old term again at
            // once: a quorum may have committed an entry the old leader had
            // not flushed itself, and leading the same term it could write a
            // different entry under the same (term, index), which followers
            // take as identical; its read index would also come from a
            // stale commit index. With restore off, openraft demotes that
            // vote in memory (it still keeps the node from voting twice in
            // that term), and Raft's up-to-date check in the election picks
            // a log that has every committed entry.
            enable_leader_restore: Some(false),
            // See `Network::pre_vote`.
            enable_pre_vote: Some(true),
            ..Default::default()
        }
        .validate()
        .map_err(|e| ConsensusError::Stopped(e.to_string()))?;
        let locks: LockState = state_machine.state();
        let log_size = log.clone();
        let raft = Raft::new(settings.id, Arc::new(config), network, log, state_machine)
            .await
            .map_err(|e| ConsensusError::Stopped(e.to_string()))?;
        tokio::spawn(checkpoint_when_due(raft.clone(), log_size, locks.clone()));
        let quorum_window = Duration::from_millis(LEADER_SILENCE_MS);
        let ticker = Ticker::new(raft.clone(), locks, settings.tick, quorum_window, metrics.clone());
        let ticker = tokio::spawn(ticker.run());
        let leaders = follow_leadership(&raft, metrics.clone());
        let proposer = Proposer::start(raft.clone(), settings.quotas, metrics);
        Ok(Consensus { raft, proposer, ticker: std::sync::Mutex::new(Some(ticker)), leaders })
    }

    /// Proposes `command`, asked for by `by` (in an entry shared with other
    /// commands proposed at the same time, which records `by` with it; with
    /// `urgency`) and waits until it is committed and applied here; its
    /// result and the index of its entry.
    pub async fn propose(
        &self,
        command: Command,
        by: Principal,
        urgency: Urgency,
    ) -> Result<(LockResult, u64), ConsensusError> {
        self.until_first_quorum().await;
        self.proposer.propose(command, by, urgency).await.map_err(|e| self.write_error(e))
    }

    /// A leader just elected takes no write until a quorum has answered it:
    /// openraft starts the leader's lease at its first quorum
    /// acknowledgement and until then refuses writes as if it did not lead
    /// (`ForwardToLeader`, naming nobody), for the few milliseconds of one
    /// round trip after the election. A write that comes in that window
    /// waits for the acknowledgement (up to [`ELECTION_BOUND`]) instead of
    /// sending its client away to retry.
    async fn until_first_quorum(&self) {
        let mut metrics = self.raft.metrics();
        // Every proposal passes here: the common case (a follower, or a
        // leader already acknowledged) returns on the first two checks.
        let mut until = None;
        loop {
            {
                let m = metrics.borrow_watched();
                if m.state != ServerState::Leader
                    || m.last_quorum_acked.is_some()
                    || m.membership_config.membership().voter_ids().nth(1).is_none()
                {
                    return;
                }
            }
            let until = *until.get_or_insert_with(|| tokio::time::Instant::now() + ELECTION_BOUND);
            if !matches!(tokio::time::timeout_at(until, metrics.changed()).await, Ok(Ok(()))) {
                return;
            }
        }
    }

    /// Returns once this node has confirmed with a quorum that it still
    /// leads and has applied everything committed before the call
    /// (ReadIndex). Sound because a node never resumes leadership after a
    /// restart (`enable_leader_restore` is off): a leader's read index
    /// always comes from a term it won by election, after its own entry of
    /// that term committed.
    pub async fn read_barrier(&self) -> Result<(), ConsensusError> {
        match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => Ok(()),
            // A heartbeat round that missed a quorum (a slow or lost
            // follower): the cluster may well be fine a moment later.
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(e))) => {
                Err(ConsensusError::Unavailable(format!("leadership not confirmed: {e}")))
            }
            Err(e) => match e.forward_to_leader() {
                Some(f) => Err(self.not_leader(f.leader_id)),
                None => Err(ConsensusError::Stopped(e.to_string())),
            },
        }
    }

    /// The leader this node knows of, with its addresses.
    pub fn leader(&self) -> Option<(NodeId, Member)> {
        self.leadership().leader
    }

    /// The term and leader this node knows of now.
    pub fn leadership(&self) -> Leadership {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        let leader =
            m.current_leader.and_then(|id| Some((id, m.membership_config.membership().get_node(&id)?.clone())));
        Leadership { term: m.current_term, leader }
    }

    /// The term and leader this node knows of, as a watch that changes
    /// only when either does.
    pub fn leader_changes(&self) -> tokio::sync::watch::Receiver<(u64, Option<NodeId>)> {
        self.leaders.clone()
    }

    /// Waits until this node knows a leader other than the one `seen`
    /// named (a later term's: the same node may be elected again), or
    /// until `until`; `None` then.
    pub async fn next_leadership(&self, seen: &Leadership, until: tokio::time::Instant) -> Option<Leadership> {
        let mut known = self.leaders.clone();
        let seen_leader = seen.leader.as_ref().map(|(id, _)| *id);
        loop {
            // Marked seen before reading: a change after the read wakes the wait.
            known.borrow_and_update();
            let now = self.leadership();
            let leader = now.leader.as_ref().map(|(id, _)| *id);
            if leader.is_some() && (now.term, leader) != (seen.term, seen_leader) {
                return Some(now);
            }
            tokio::time::timeout_at(until, known.changed()).await.ok()?.ok()?;
        }
    }

    /// The addresses of member `id`.
    pub fn member(&self, id: NodeId) -> Option<Member> {
        let m = self.raft.metrics();
        let member = m.borrow_watched().membership_config.membership().get_node(&id)?.clone();
        Some(member)
    }

    /// This node's view of Raft now.
    pub fn view(&self) -> RaftView {
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        RaftView {
            role: match m.state {
                ServerState::Leader => Role::Leader,
                ServerState::Follower => Role::Follower,
                ServerState::Candidate => Role::Candidate,
                ServerState::Learner => Role::Learner,
                ServerState::Shutdown => Role::Shutdown,
            },
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            millis_since_quorum_ack: super::millis_since_quorum_ack(&m),
            members: membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
            voters: membership.voter_ids().collect(),
            replication: m.replication.as_ref().map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect()),
        }
    }

    /// Why this node's Raft has stopped, if it has: a storage error (a log
    /// write that failed on a full disk, say), a panic of its core, or a
    /// shutdown. A stopped Raft never runs again in this process.
    pub fn stopped(&self) -> Option<String> {
        let mut metrics = self.raft.metrics();
        let running = metrics.borrow_and_update().running_state.clone();
        if let Err(fatal) = running {
            return Some(fatal.to_string());
        }
        // A core that panicked records no running state: its task ended,
        // dropping the metrics' sender, which `changed` then reports at
        // once (the value was just marked seen, so a running core's leaves
        // it pending).
        match metrics.changed().now_or_never() {
            Some(Err(_)) => Some("the raft core task ended (it panicked; see the log)".into()),
            _ => None,
        }
    }

    /// The commit index this node knows of and how long ago the leader it
    /// follows last reached it (every AppendEntries, heartbeats included,
    /// touches its vote).
    pub async fn heard(&self) -> Result<Heard, ConsensusError> {
        self.raft
            .with_raft_state(|st| Heard {
                committed_index: st.local_committed().map(|l| l.index),
                millis_since_leader: st.vote_last_modified().map(|t| t.elapsed().as_millis() as u64),
            })
            .await
            .map_err(|e| ConsensusError::Stopped(e.to_string()))
    }

    /// The index of the last entry applied here.
    pub fn applied_index(&self) -> Option<u64> {
        self.raft.metrics().borrow_watched().last_applied.map(|l| l.index)
    }

    /// Waits up to `timeout` until this node has applied `index`; the
    /// applied index then (or at the timeout, as the error).
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<Option<u64>, Option<u64>> {
        let waited = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.last_applied.is_some_and(|l| l.index >= index), "applied up to commit")
            .await;
        match waited {
            Ok(m) => Ok(m.last_applied.map(|l| l.index)),
            Err(_) => Err(self.raft.metrics().borrow_watched().last_applied.map(|l| l.index)),
        }
    }

    /// Checkpoints everything applied here so far and waits (up to `wait`,
    /// asking again every `retrigger`) until a snapshot covers it; its index.
    pub async fn snapshot_covering_applied(&self, wait: Duration, retrigger: Duration) -> Result<u64, ConsensusError> {
        let target = self.raft.metrics().borrow_watched().last_applied.map_or(0, |l| l.index);
        let deadline = tokio::time::Instant::now() + wait;
        // openraft ignores a trigger while it is building a snapshot, and one
        // that began before `target` was applied does not cover it: trigger
        // again each `retrigger` until a snapshot does (or the wait runs out).
        loop {
            self.raft.trigger().snapshot().await.map_err(|e| ConsensusError::Stopped(e.to_string()))?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let waited = self
                .raft
                .wait(Some(left.min(retrigger)))
                .metrics(|m| m.snapshot.is_some_and(|s| s.index >= target), "snapshot")
                .await;
            match waited {
                Ok(m) => return Ok(m.snapshot.map_or(0, |s| s.index)),
                Err(WaitError::Timeout(..)) if left > retrigger => continue,
                Err(e) => return Err(ConsensusError::Unavailable(format!("snapshot not built: {e}"))),
            }
        }
    }

    /// Whether this node's Raft has a membership (it or a leader initialized it).
    pub async fn is_initialized(&self) -> Result<bool, ConsensusError> {
        self.raft.is_initialized().await.map_err(|e| ConsensusError::Stopped(e.to_string()))
    }

    /// Initializes a new cluster with `members`.
    pub async fn initialize(&self, members: BTreeMap<NodeId, Member>) -> Result<(), ConsensusError> {
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Err(ConsensusError::AlreadyInitialized),
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => {
                Err(ConsensusError::InvalidMembership(e.to_string()))
            }
            Err(RaftError::Fatal(e)) => Err(ConsensusError::Stopped(e.to_string())),
        }
    }

    /// Adds a learner and waits until it has caught up with the log; the
    /// index of the membership entry.
    pub async fn add_learner(&self, id: NodeId, member: Member) -> Result<u64, ConsensusError> {
        let response = self.raft.add_learner(id, member, true).await.map_err(|e| self.write_error(e))?;
        Ok(response.log_id.index)
    }

    /// Commits `change`; the index of the membership entry.
    pub async fn change_membership(&self, change: MembershipChange) -> Result<u64, ConsensusError> {
        let change = match change {
            MembershipChange::ReplaceVoters(ids) => ChangeMembers::ReplaceAllVoters(ids),
            MembershipChange::AddVoters(ids) => ChangeMembers::AddVoterIds(ids),
            MembershipChange::RemoveNodes(ids) => ChangeMembers::RemoveNodes(ids),
        };
        crash_point!("membership-before-change");
        let response = self.raft.change_membership(change, false).await.map_err(|e| self.write_error(e))?;
        crash_point!("membership-after-change");
        Ok(response.log_id.index)
    }

    /// Stops the ticker, then Raft. In that order because a Tick in flight
    /// when Raft stops fails (openraft logs "core_call fatal error" at ERROR
    /// for it) although nothing is wrong; a Tick abandoned here is harmless,
    /// as no Tick follows it from this node.
    pub async fn shutdown(&self) {
        let ticker = self.ticker.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        if let Some(ticker) = ticker {
            ticker.abort();
            let _ = ticker.await;
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }

    /// What answers the Raft RPC peers send this node.
    pub fn inbound(&self) -> Inbound {
        Inbound::new(self.raft.clone())
    }

    /// Sets the Raft series of `metrics` from this node's current view.
    pub fn observe(&self, metrics: &Metrics) {
        observe(&self.raft, metrics);
    }

    fn write_error(&self, e: ProposeError) -> ConsensusError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => self.not_leader(f.leader_id),
            // The entry was proposed but lost with the leadership before it
            // committed: the write did not take effect; retry on the leader.
            RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => self.not_leader(f.leader_id),
            // Not used: no write here names preconditions.
            RaftError::APIError(ClientWriteError::PreconditionFailed(e)) => ConsensusError::Stopped(e.to_string()),
            RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
                ConsensusError::InvalidMembership(e.to_string())
            }
            RaftError::Fatal(e) => ConsensusError::Stopped(e.to_string()),
        }
    }

    fn not_leader(&self, leader_id: Option<NodeId>) -> ConsensusError {
        ConsensusError::NotLeader(leader_id.and_then(|id| Some((id, self.member(id)?.addr))))
    }
}
