//! One leasehold node: wires the stores, openraft, the proposer and the
//! ticker together, and offers the API layer the few operations it needs
//! (propose a command, acquire with or without waiting, read linearizably,
//! report status, change membership). It knows nothing of HTTP serving: the
//! listener and its settings are [`crate::server`]'s.

mod acquire;
mod handoff;
mod ready;
mod waiters;

pub use acquire::WAIT_SLACK;
pub use ready::NotReady;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use leasehold_proto::cluster::{ClusterStatus, Member, QuotaUse, SnapshotTaken, StateDigest, StoreStats};

use self::waiters::Waiters;
use crate::metrics::Metrics;
use crate::peer::handoff::{HandOff, HandingFollowers, Ready};
use crate::peer::Dialer;
use crate::raft::Member as RaftMember;
use crate::raft::{
    Consensus, ConsensusError, Leadership, LockResult, MembershipChange, Network, NodeId, RaftSettings,
    LEADER_SILENCE_MS,
};
use crate::store::{self, LockState, StateStore};
use leasehold_core::{Command, LockError, LockTable, Principal, Quotas, MAX_GATES, MAX_RECORDS, MAX_SESSIONS};
use leasehold_proto::Secret;

/// Default entries between snapshots. A snapshot serializes the whole table
/// (leases, queues and up to 50 000 request records) on every node, so taking
/// one too often costs more than replaying this many entries at start.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 50_000;
/// How long a proposal or a read may wait for a quorum before the client is
/// told the cluster is unavailable (the proposal may still commit later).
const QUORUM_WAIT: Duration = Duration::from_secs(3);
/// How long `POST /v1/cluster/snapshot` waits for the snapshot (a million
/// leases take about a second to encode).
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(120);
/// How often that wait asks for the snapshot again.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_secs(1);
/// Default limits on live leases and queue places, sized from what each
/// costs every replica: a lease about 450 bytes of RSS at rest (up to about
/// 850 while a checkpoint rewrites the table), so a million leases take
/// about 450 MB per node; a queue place 1.3 KB of heap (a waiting acquire
/// of one lock) to 2.7 KB (of 64 locks: each place keeps the whole set),
/// so 100 000 places take 130 to 270 MB. Both fit a 2 GB node together.
pub const DEFAULT_QUOTAS: Quotas = Quotas { max_leases: 1_000_000, max_waiters: 100_000 };
/// How long a digest, snapshot or backup asked for waits for the one
/// running on this node before it is refused as overloaded: they run one at
/// a time, as each reads or writes the whole table.
pub const WHOLE_TABLE_TURN_WAIT: Duration = Duration::from_secs(10);
/// How long a member may take to answer a status or health probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Everything a node needs to start: its Raft identity, its storage, and how
/// it reaches its peers. (Where and how it serves clients is
/// [`crate::server::ServeConfig`].)
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    /// Address clients (and, without `peer_advertise`, peers) use to reach
    /// this node.
    pub advertise: String,
    /// Address of this node's own peer listener (`--peer-addr`), when it
    /// has one: what the others dial for Raft RPC and forwarding.
    pub peer_advertise: Option<String>,
    pub data_dir: PathBuf,
    /// The leader's tick period.
    pub tick_ms: u64,
    /// The initial cluster (`--peers`): with [`InitialClusterState::New`],
    /// the node with the lowest id in it initializes the cluster with these
    /// members if its store is empty.
    pub initial_members: BTreeMap<NodeId, RaftMember>,
    /// Whether this start may form a new cluster from `initial_members`.
    pub initial_cluster_state: InitialClusterState,
    /// Entries between snapshots; the log keeps a fiftieth of that behind
    /// each snapshot for followers that are only a little behind.
    pub snapshot_every: u64,
    /// The limits on leases and waiters this node stamps on the entries it
    /// proposes as leader (the cluster's while it leads).
    pub quotas: Quotas,
    /// Events this node keeps for event streams to resume in
    /// ([`store::EventHistory`]).
    pub event_history: usize,
    pub peers: PeerTransport,
}

/// Whether a node may initialize a cluster (etcd's `--initial-cluster-state`).
///
/// A node that lost its data folder and starts again with the command line
/// of its first start must not form a second cluster under the same member
/// list: so only `New` ever initializes, and `New` still refuses when
/// another listed member already belongs to a cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InitialClusterState {
    /// The first start of a new cluster: the lowest id initializes it.
    New,
    /// The cluster exists (or will be formed elsewhere): never initialize.
    #[default]
    Existing,
}

/// How a node calls the others (Raft RPC, forwarding to the leader, probes).
#[derive(Debug, Clone, Default)]
pub struct PeerTransport {
    /// The nodes serve https (all of them or none).
    pub tls: bool,
    /// CA the other nodes' certificates chain to (else the built-in roots).
    pub ca: Option<leasehold_client::Ca>,
    /// Sent on every Raft RPC; the others refuse Raft RPC without it.
    pub cluster_secret: Option<Secret>,
    /// TLS client settings of the peer transport (`tls` on and a CA file
    /// given); without them, under TLS, Raft RPC goes over HTTP.
    pub peer_tls: Option<Arc<rustls::ClientConfig>>,
    /// Presented when asking another member for its status (the bootstrap
    /// check, `/v1/cluster/nodes`): a secret the members share, which a
    /// secured node asks of every status request. `None` when they run open.
    pub status_token: Option<Secret>,
}

/// Why a node operation failed. The API turns each into one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("this node is not the leader")]
    NotLeader { leader: Option<(NodeId, String)> },
    #[error("cluster unavailable: {0}")]
    Unavailable(String),
    #[error("cluster already initialized")]
    AlreadyInitialized,
    /// `New` on an empty store while another member already has a cluster.
    #[error(
        "refusing to initialize: node {id} ({addr}) already belongs to a cluster (term {term}), so this node's \
         data folder was lost or replaced; start it under a new id and add that to the cluster \
         (docs/operations.md, \"Replacing a node\"), or start it with --initial-cluster-state existing"
    )]
    ClusterExists { id: NodeId, addr: String, term: u64 },
    #[error("invalid membership: {0}")]
    InvalidMembership(String),
    #[error("node {0} is not a member")]
    NotMember(NodeId),
    #[error("refused: only {reachable} of the new voters answer now, a quorum needs {needed}")]
    WouldLoseQuorum { reachable: usize, needed: usize },
    /// Another digest, snapshot or backup kept this node busy for
    /// [`WHOLE_TABLE_TURN_WAIT`].
    #[error("another digest, snapshot or backup is running on this node; retry")]
    Busy,
    /// The data folder is in another format than this binary's.
    #[error(transparent)]
    DataFormat(store::FormatError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<ConsensusError> for NodeError {
    fn from(e: ConsensusError) -> Self {
        match e {
            ConsensusError::NotLeader(leader) => NodeError::NotLeader { leader },
            ConsensusError::Unavailable(why) => NodeError::Unavailable(why),
            ConsensusError::AlreadyInitialized => NodeError::AlreadyInitialized,
            ConsensusError::InvalidMembership(why) => NodeError::InvalidMembership(why),
            ConsensusError::Stopped(why) => NodeError::Internal(why),
        }
    }
}

/// A running node, shared by the HTTP handlers.
pub struct Node {
    id: NodeId,
    /// This node's addresses, as it enters a membership it initializes.
    addrs: RaftMember,
    raft: Consensus,
    locks: LockState,
    /// The waiting acquires, each woken by the events about its own wait.
    waiters: Arc<Waiters>,
    /// One pooled https client: status probes of the other members, and
    /// forwarding when the peer transport cannot be verified (TLS, no CA).
    http: reqwest::Client,
    /// How to open peer connections (Raft's, and forwarding channels).
    dialer: Option<Dialer>,
    /// The hand-off channels to the leader (none without a dialer).
    handoff: Option<HandOff>,
    /// The followers with a hand-off channel open to this node.
    handing: Arc<HandingFollowers>,
    /// `https` when the nodes serve TLS, else `http`.
    scheme: &'static str,
    /// What this node presents on status probes ([`PeerTransport::status_token`]).
    status_token: Option<Secret>,
    /// Held by the digest, snapshot or backup under way: they read or write
    /// the whole table, so at most one runs (FIFO, see [`WHOLE_TABLE_TURN_WAIT`]).
    whole_table: tokio::sync::Mutex<()>,
    tick_ms: u64,
    /// What this node stamps on the entries it proposes as leader.
    quotas: Quotas,
    data_dir: PathBuf,
    state_store: StateStore,
    metrics: Arc<Metrics>,
}

impl Node {
    /// Opens the stores and starts Raft and the ticker.
    pub async fn start(config: &NodeConfig) -> Result<Arc<Node>, NodeError> {
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| NodeError::Internal(format!("create {}: {e}", config.data_dir.display())))?;
        let metrics = Arc::new(Metrics::new());
        let waiters = Arc::new(Waiters::default());
        let (log_store, sm_store) =
            store::open_stores(&config.data_dir, metrics.clone(), waiters.clone()).map_err(|e| match e {
                store::OpenError::Format(e) => NodeError::DataFormat(e),
                e => NodeError::Internal(e.to_string()),
            })?;
        let locks = sm_store.state();
        // Before Raft starts replaying the log into it.
        locks.history().set_capacity(config.event_history);
        let state_store = sm_store.store();
        let http = peer_http_client(config.peers.ca.as_ref())?;
        let scheme = if config.peers.tls { "https" } else { "http" };
        let dialer = (!config.peers.tls || config.peers.peer_tls.is_some()).then(|| Dialer {
            from: config.id,
            tls: config.peers.peer_tls.clone(),
            cluster_secret: config.peers.cluster_secret.clone(),
        });
        let handing = Arc::new(HandingFollowers::default());
        let network =
            Network::new(http.clone(), scheme, config.peers.cluster_secret.clone(), dialer.clone(), handing.clone());
        let settings = RaftSettings {
            id: config.id,
            tick: Duration::from_millis(config.tick_ms),
            snapshot_every: config.snapshot_every,
            quotas: config.quotas,
        };
        let raft = Consensus::start(settings, network, log_store, sm_store, metrics.clone())
            .await
            .map_err(|e| NodeError::Internal(e.to_string()))?;
        let node = Arc::new(Node {
            id: config.id,
            addrs: RaftMember { addr: config.advertise.clone(), peer_addr: config.peer_advertise.clone() },
            raft,
            locks,
            waiters,
            http,
            handoff: dialer.clone().map(HandOff::new),
            dialer,
            handing,
            scheme,
            status_token: config.peers.status_token.clone(),
            whole_table: tokio::sync::Mutex::new(()),
            tick_ms: config.tick_ms,
            quotas: config.quotas,
            data_dir: config.data_dir.clone(),
            state_store,
            metrics,
        });
        node.end_hand_offs_to_former_leaders();
        node.bootstrap(&config.initial_members, config.initial_cluster_state).await?;
        Ok(node)
    }

    /// With `New`, initializes the cluster from `members` if this node has
    /// the lowest id and an empty store, and no other member already belongs
    /// to a cluster. Exactly one node bootstraps, so two clusters cannot be
    /// formed from one member list.
    async fn bootstrap(
        &self,
        members: &BTreeMap<NodeId, RaftMember>,
        state: InitialClusterState,
    ) -> Result<(), NodeError> {
        let initialized = self.raft.is_initialized().await?;
        if initialized {
            return Ok(());
        }
        if state == InitialClusterState::Existing {
            if !members.is_empty() {
                tracing::warn!(
                    "empty data folder and --initial-cluster-state is not `new`: this node does not initialize \
                     a cluster; it waits for a leader to replicate to it (give `new` on the first start of a new cluster)"
                );
            }
            return Ok(());
        }
        if members.keys().next() != Some(&self.id) {
            return Ok(());
        }
        if let Some((id, addr, term)) = self.member_of_a_cluster(members).await {
            return Err(NodeError::ClusterExists { id, addr, term });
        }
        match self.init(members.clone()).await {
            Ok(()) => {
                tracing::info!(members = ?members, "cluster initialized");
                Ok(())
            }
            Err(NodeError::AlreadyInitialized) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The first of the other `members` that answers with a membership:
    /// `(id, addr, term)`. Members that do not answer count as new (on the
    /// first start the others may not run yet).
    async fn member_of_a_cluster(&self, members: &BTreeMap<NodeId, RaftMember>) -> Option<(NodeId, String, u64)> {
        for (id, member) in members.iter().filter(|(id, _)| **id != self.id) {
            let Ok(status) = self.status_of_member(&member.addr).await else { continue };
            if !status.members.is_empty() {
                return Some((*id, member.addr.clone(), status.term));
            }
        }
        None
    }

    /// The status of the member at `addr`, asked with this node's status
    /// token, within a second; why not, as text, when it does not answer
    /// with one.
    pub async fn status_of_member(&self, addr: &str) -> Result<ClusterStatus, String> {
        let mut ask = self.http.get(self.url_of(addr, "/v1/cluster/status")).timeout(PROBE_TIMEOUT);
        if let Some(token) = &self.status_token {
            ask = ask.bearer_auth(token.expose());
        }
        let reply = ask.send().await.map_err(|e| format!("unreachable: {e}"))?;
        if !reply.status().is_success() {
            return Err(format!("answered {}", reply.status()));
        }
        reply.json().await.map_err(|e| format!("unreadable status: {e}"))
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// How this node opens peer connections; `None` under TLS without a CA
    /// file, when peers cannot be verified on the peer transport.
    pub fn dialer(&self) -> Option<&Dialer> {
        self.dialer.as_ref()
    }

    /// The URL of `path` on the node at `addr`, in the scheme the nodes serve.
    pub fn url_of(&self, addr: &str, path: &str) -> String {
        format!("{}://{addr}{path}", self.scheme)
    }

    /// The leader this node knows of, with its addresses.
    pub fn leader(&self) -> Option<(NodeId, RaftMember)> {
        self.raft.leader()
    }

    /// The term and the leader this node knows of now.
    pub fn leadership(&self) -> Leadership {
        self.raft.leadership()
    }

    /// Waits, until `until` at most, for a leader other than the one
    /// `seen` named: the next one elected, once this node hears of it.
    pub async fn next_leadership(&self, seen: &Leadership, until: tokio::time::Instant) -> Option<Leadership> {
        self.raft.next_leadership(seen, until).await
    }

    /// Proposes `command` (in an entry shared with other commands proposed
    /// at the same time) and waits until it is committed and applied (on
    /// the leader). On a follower the command is handed to the leader, and
    /// held for the next one during an election; the follower waits to have
    /// applied the entry itself only when the caller reads its table next
    /// (a queued acquire, a campaign: `node/handoff.rs`). A refusal for want
    /// of room is counted by the quota it names. `by` is the principal whose
    /// request it is: the entry records it with the command, and the events
    /// the command causes say they are by it.
    pub async fn propose(&self, command: Command, by: Principal) -> Result<LockResult, NodeError> {
        self.propose_waiting(command, by, None).await
    }

    /// [`Node::propose`] of an acquire that may wait up to `wait` for its
    /// turn (see [`handoff::waits_at_leader`]): on a follower whose leader
    /// takes waiting acquires whole, answered only once the wait ended.
    async fn propose_waiting(
        &self,
        command: Command,
        by: Principal,
        wait: Option<Duration>,
    ) -> Result<LockResult, NodeError> {
        let result = self.propose_anywhere(command, by, wait).await?;
        if let Err(LockError::Full { what, .. }) = &result {
            self.metrics.quota_refused(what);
        }
        Ok(result)
    }

    /// Runs `read` on the lock table once it reflects every write committed
    /// before this call (ReadIndex: the leader confirms it still leads, then
    /// waits until its state machine has applied the commit index; a
    /// follower asks the leader for that index and waits until it has
    /// applied it itself).
    pub async fn read<T>(&self, read: impl FnOnce(&LockTable) -> T) -> Result<T, NodeError> {
        Ok(self.read_at(read).await?.1)
    }

    /// [`Node::read`], with the index of the last entry the read reflects:
    /// an event stream resumed after it misses nothing the read did not show.
    pub async fn read_at<T>(&self, read: impl FnOnce(&LockTable) -> T) -> Result<(u64, T), NodeError> {
        self.read_barrier().await?;
        Ok(self.locks.read_at(read))
    }

    /// Whether the client API's requests for the leader at `leader` may run
    /// here, their commands handed to it: `Relay` when they are to be
    /// relayed whole (no peer transport to hand them over on, or a leader
    /// of an earlier version); `Unavailable` when it cannot be reached.
    pub async fn hand_off_ready(&self, leader: &RaftMember) -> Result<Ready, NodeError> {
        let Some(handoff) = &self.handoff else { return Ok(Ready::Relay) };
        handoff.ready(leader.peer_dial_addr()).await.map_err(|e| NodeError::Unavailable(e.to_string()))
    }

    /// This node's view of the cluster (local, not linearizable).
    pub fn status(&self) -> ClusterStatus {
        let view = self.raft.view();
        let members = view
            .members
            .iter()
            .map(|(id, m)| Member {
                id: *id,
                addr: m.addr.clone(),
                peer_addr: m.peer_addr.clone(),
                voter: view.voters.contains(id),
            })
            .collect();
        let tick = self.locks.read(|t| t.now_tick());
        // One read of the table for the counts and the quotas alike.
        let quotas = self.quota_use();
        let used = |name: &str| quotas.get(name).map_or(0, |q| q.used as usize);
        let (locks_held, sessions) = (used("leases"), used("sessions"));
        ClusterStatus {
            id: self.id,
            version: crate::VERSION.into(),
            commit: crate::COMMIT.into(),
            role: view.role.as_str().into(),
            leader: view.leader,
            leader_addr: view.leader.and_then(|id| Some(view.members.get(&id)?.addr.clone())),
            term: view.term,
            last_log_index: view.last_log_index,
            applied_index: view.applied_index,
            snapshot_index: view.snapshot_index,
            purged_index: view.purged_index,
            tick,
            tick_ms: self.tick_ms,
            millis_since_quorum_ack: view.millis_since_quorum_ack,
            locks_held,
            sessions,
            quotas,
            members,
            storage: self.store_stats(),
            data_dir_bytes: dir_bytes(&self.data_dir),
            replication: view.replication,
            state_digest: None,
        }
    }

    /// The use of each quota of the applied table here (not linearizable),
    /// by the name a `full` refusal gives it: leases and waiters against the
    /// limits this node proposes under as leader, the rest against the
    /// table's fixed bounds.
    pub fn quota_use(&self) -> BTreeMap<String, QuotaUse> {
        let (leases, waiters, sessions, (records, gates)) =
            self.locks.read(|t| (t.holdings(), t.waiting(), t.sessions(), t.records_and_gates()));
        let quota = |name: &str, used: usize, limit: u64| (name.to_owned(), QuotaUse { used: used as u64, limit });
        BTreeMap::from([
            quota("leases", leases, self.quotas.max_leases),
            quota("waiters", waiters, self.quotas.max_waiters),
            quota("sessions", sessions, MAX_SESSIONS as u64),
            quota("records", records, MAX_RECORDS as u64),
            quota("gates", gates, MAX_GATES as u64),
        ])
    }

    /// What Ticks and snapshots cost on this node lately.
    fn store_stats(&self) -> StoreStats {
        let mut ticks = self.locks.recent_tick_apply_us();
        ticks.sort_unstable();
        let snapshot = self.locks.snapshot_stats();
        StoreStats {
            tick_apply_p50_us: ticks.get(ticks.len() / 2).copied().unwrap_or(0),
            tick_apply_max_us: ticks.last().copied().unwrap_or(0),
            snapshot_bytes: self.state_store.snapshot_file_bytes(),
            snapshot_build_ms: snapshot.build_ms,
            snapshot_install_ms: snapshot.install_ms,
            checkpoint_rows: snapshot.checkpoint_rows,
            checkpoint_bytes: snapshot.checkpoint_bytes,
            checkpoint_in_progress: self.state_store.writing(),
        }
    }

    /// A digest of the table as of everything applied here now (see
    /// [`StateDigest`]): a checkpoint of it is taken first, and the digest
    /// read from that checkpoint's rows, off the lock that applying takes;
    /// `None` before anything is applied. One at a time with snapshots and
    /// backups ([`NodeError::Busy`] after [`WHOLE_TABLE_TURN_WAIT`]).
    pub async fn state_digest(&self) -> Result<Option<StateDigest>, NodeError> {
        let _turn = self.whole_table_turn().await?;
        if self.raft.view().applied_index.is_none() {
            return Ok(None);
        }
        self.raft.snapshot_covering_applied(SNAPSHOT_WAIT, SNAPSHOT_RETRIGGER).await?;
        let store = self.state_store.clone();
        // Hashing a large table's rows takes long: off the runtime.
        let digest = tokio::task::spawn_blocking(move || store.digest())
            .await
            .map_err(|e| NodeError::Internal(e.to_string()))?
            .map_err(|e| NodeError::Internal(format!("reading the checkpoint: {e}")))?;
        Ok(digest.map(|(applied_index, digest)| StateDigest { applied_index, digest: format!("{digest:016x}") }))
    }

    /// Checkpoints everything applied here so far, waits until it is
    /// stored (the log behind it may then be purged) and writes its
    /// snapshot file. One at a time with digests and backups.
    pub async fn snapshot_now(&self) -> Result<SnapshotTaken, NodeError> {
        let _turn = self.whole_table_turn().await?;
        let snapshot_index = self.raft.snapshot_covering_applied(SNAPSHOT_WAIT, SNAPSHOT_RETRIGGER).await?;
        // The file a backup downloads, written now so its size can be told.
        let snapshot_bytes = self.write_backup().await?.map(|(_, bytes)| bytes);
        Ok(SnapshotTaken { snapshot_index, snapshot_bytes, snapshot_build_ms: self.locks.snapshot_stats().build_ms })
    }

    /// This node's current snapshot as a backup file (see
    /// [`crate::store::restore`]) and its size; `None` before its first
    /// snapshot. One at a time with digests and snapshots; reading the file
    /// that this returns is not, as it costs no more than any download.
    pub async fn backup(&self) -> Result<Option<(std::path::PathBuf, u64)>, NodeError> {
        let _turn = self.whole_table_turn().await?;
        self.write_backup().await
    }

    /// [`Node::backup`] within a turn already taken.
    async fn write_backup(&self) -> Result<Option<(std::path::PathBuf, u64)>, NodeError> {
        // Writing a large table to a file takes long: off the runtime.
        let store = self.state_store.clone();
        tokio::task::spawn_blocking(move || store.backup())
            .await
            .map_err(|e| NodeError::Internal(e.to_string()))?
            .map_err(|e| NodeError::Internal(e.to_string()))
    }

    /// This node's turn for work over the whole table, once the one before
    /// has finished; [`NodeError::Busy`] if that takes longer than
    /// [`WHOLE_TABLE_TURN_WAIT`]. A caller that gives up leaves the queue.
    async fn whole_table_turn(&self) -> Result<tokio::sync::MutexGuard<'_, ()>, NodeError> {
        tokio::time::timeout(WHOLE_TABLE_TURN_WAIT, self.whole_table.lock()).await.map_err(|_| NodeError::Busy)
    }

    /// The durable state, for the snapshot route to receive into.
    pub fn state_store(&self) -> &StateStore {
        &self.state_store
    }

    /// Initializes a new cluster with `members` (this node alone when empty).
    pub async fn init(&self, mut members: BTreeMap<NodeId, RaftMember>) -> Result<(), NodeError> {
        if members.is_empty() {
            members.insert(self.id, self.addrs.clone());
        }
        // Asked first because openraft logs a refused initialize at ERROR,
        // and a refusal here is routine: every restart of the bootstrapping
        // node, every repeated `POST /v1/cluster/init`.
        if self.raft.is_initialized().await? {
            return Err(NodeError::AlreadyInitialized);
        }
        Ok(self.raft.initialize(members).await?)
    }

    /// Adds a learner and waits until it has caught up with the log.
    pub async fn add_learner(&self, id: NodeId, member: RaftMember) -> Result<u64, NodeError> {
        Ok(self.raft.add_learner(id, member).await?)
    }

    /// Makes `voters` the voting members; voters left out are removed from
    /// the cluster (learners stay). Refused with `WouldLoseQuorum` when fewer
    /// than a majority of the new voters answer right now: the change itself
    /// could never commit, and the cluster would hang in it.
    pub async fn change_membership(&self, voters: BTreeSet<NodeId>) -> Result<u64, NodeError> {
        self.check_quorum_of(&voters).await?;
        self.commit_membership(MembershipChange::ReplaceVoters(voters)).await
    }

    /// Makes learner `id` a voter (same quorum check).
    pub async fn promote(&self, id: NodeId) -> Result<u64, NodeError> {
        let (mut voters, members) = self.membership();
        if !members.contains(&id) {
            return Err(NodeError::NotMember(id));
        }
        voters.insert(id);
        self.check_quorum_of(&voters).await?;
        self.commit_membership(MembershipChange::AddVoters(BTreeSet::from([id]))).await
    }

    /// Removes node `id`, voter or learner, from the cluster (same quorum
    /// check for the voters that remain).
    pub async fn remove_member(&self, id: NodeId) -> Result<u64, NodeError> {
        let (mut voters, members) = self.membership();
        if !members.contains(&id) {
            return Err(NodeError::NotMember(id));
        }
        if voters.remove(&id) {
            self.check_quorum_of(&voters).await?;
            self.commit_membership(MembershipChange::ReplaceVoters(voters)).await
        } else {
            self.commit_membership(MembershipChange::RemoveNodes(BTreeSet::from([id]))).await
        }
    }

    /// (voters, all members) of the current membership.
    fn membership(&self) -> (BTreeSet<NodeId>, BTreeSet<NodeId>) {
        let view = self.raft.view();
        (view.voters, view.members.into_keys().collect())
    }

    async fn commit_membership(&self, change: MembershipChange) -> Result<u64, NodeError> {
        Ok(self.raft.change_membership(change).await?)
    }

    /// Refuses a voter set of which fewer than a majority answer this node now.
    async fn check_quorum_of(&self, voters: &BTreeSet<NodeId>) -> Result<(), NodeError> {
        if voters.is_empty() {
            return Err(NodeError::InvalidMembership("the voter set must not be empty".into()));
        }
        let mut reachable = 0;
        for id in voters {
            if *id == self.id || self.answers(*id).await {
                reachable += 1;
            }
        }
        let needed = voters.len() / 2 + 1;
        if reachable < needed {
            return Err(NodeError::WouldLoseQuorum { reachable, needed });
        }
        Ok(())
    }

    /// Whether member `id` answers `/healthz` within `PROBE_TIMEOUT`.
    async fn answers(&self, id: NodeId) -> bool {
        let Some(member) = self.raft.member(id) else { return false };
        let probe = self.http.get(self.url_of(&member.addr, "/healthz")).timeout(PROBE_TIMEOUT).send().await;
        probe.is_ok_and(|r| r.status().is_success())
    }

    /// Stops Raft (and the leader's ticker first).
    pub async fn shutdown(&self) {
        self.raft.shutdown().await;
    }

    /// The running Raft, for the listener (peers' RPC) and the metrics scrape.
    pub(crate) fn raft(&self) -> &Consensus {
        &self.raft
    }

    /// This node's Prometheus series.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The applied lock table (local, not linearizable) and its event stream.
    pub fn locks(&self) -> &LockState {
        &self.locks
    }
}

/// Total size of the files under `dir` (unreadable entries count as 0: this
/// is a gauge for status, not an audit).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The HTTP client a node calls the others with where the peer transport
/// does not reach (snapshots, https relays, probes): HTTP/1.1, no system
/// proxy (members are addressed directly), bounded connect time; with `ca`,
/// https members are trusted when they chain to it (and only then).
fn peer_http_client(ca: Option<&leasehold_client::Ca>) -> Result<reqwest::Client, NodeError> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .connect_timeout(std::time::Duration::from_secs(1))
        .tcp_nodelay(true)
        // Below the members' header-read timeout, which closes idle
        // connections: the pool drops one before the member does.
        .pool_idle_timeout(std::time::Duration::from_secs(5));
    if let Some(ca) = ca {
        let certificate = reqwest::Certificate::from_pem(ca.pem())
            .map_err(|e| NodeError::Internal(format!("CA certificate: {e}")))?;
        builder = builder.tls_built_in_root_certs(false).add_root_certificate(certificate);
    }
    builder.build().map_err(|e| NodeError::Internal(format!("HTTP client: {e}")))
}
