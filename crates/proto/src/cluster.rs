//! The admin API: `/v1/cluster/*` and `/healthz`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// `POST /v1/cluster/init`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InitRequest {
    /// The initial voters; this node alone when absent or empty.
    #[serde(default)]
    pub members: Vec<NewMember>,
}

/// `POST /v1/cluster/learners`: a node to add, as a learner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    pub id: NodeId,
    /// `host:port` of its client API (and of its peer transport, without
    /// `peer_addr`).
    pub addr: String,
    /// `host:port` of its own peer listener (`serve --peer-addr`), which
    /// the other members dial for Raft and forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
}

/// `POST /v1/cluster/membership`: exactly these members become voters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MembershipRequest {
    pub voters: BTreeSet<NodeId>,
}

/// The answer to `POST /v1/cluster/init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InitResponse {
    pub initialized: bool,
}

/// The answer to every membership change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MembershipResponse {
    /// Index of the entry that made the change.
    pub log_index: u64,
    /// The members after it.
    pub members: Vec<Member>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `"ok"`: the process serves and its Raft runs (once Raft has
    /// stopped, `/healthz` answers 503 `unavailable` instead).
    pub status: String,
    pub id: NodeId,
    pub leader: Option<NodeId>,
}

/// `GET /readyz` when the node is ready: it knows a leader that heard from
/// a quorum within the election timeout, and it has applied every entry it
/// knows committed. Otherwise `/readyz` answers 503 `unavailable` with a
/// `reason` (`no_leader`, `no_quorum`, `leader_unheard`, `catching_up`,
/// `stopped`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// Always `"ready"`.
    pub status: String,
    pub id: NodeId,
    pub leader: NodeId,
    /// Milliseconds since the leader last heard from a quorum (on the
    /// leader) or since this follower last heard from the leader.
    pub millis_since_heard: u64,
    pub committed_index: Option<u64>,
    pub applied_index: Option<u64>,
}

/// `POST /v1/cluster/snapshot`: the snapshot this node now has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotTaken {
    pub snapshot_index: u64,
    pub snapshot_bytes: Option<u64>,
    pub snapshot_build_ms: Option<u64>,
}

/// A member as `/v1/cluster/status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    pub id: NodeId,
    pub addr: String,
    /// Its own peer listener's address, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
    pub voter: bool,
}

/// `GET /v1/cluster/status`: one node's own view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterStatus {
    pub id: NodeId,
    /// This node's leasehold version and the git commit it was built from
    /// (`unknown` without git); during a rolling upgrade they differ.
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub commit: String,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    pub leader: Option<NodeId>,
    pub leader_addr: Option<String>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// Committed ticks applied on this node.
    pub tick: u64,
    pub tick_ms: u64,
    pub millis_since_quorum_ack: Option<u64>,
    pub locks_held: usize,
    /// Live sessions (absent from nodes that predate sessions).
    #[serde(default)]
    pub sessions: usize,
    /// Each quota's use on this node, by name: `leases` and `waiters`
    /// (places in lock queues) of the applied table, against the limits this
    /// node stamps on the entries it proposes as leader (the cluster's while
    /// it leads); `sessions`, `records` and `gates` against the table's fixed
    /// bounds (a 507 `full` names these five in `what`); `subscribers`, this
    /// node's open event streams (503 `overloaded` past it). Absent from
    /// nodes that predate quotas.
    #[serde(default)]
    pub quotas: BTreeMap<String, QuotaUse>,
    pub members: Vec<Member>,
    /// Tick apply time and snapshot costs on this node.
    #[serde(default)]
    pub storage: StoreStats,
    /// Bytes under this node's data folder (Raft log, snapshot, meta).
    #[serde(default)]
    pub data_dir_bytes: u64,
    /// Leader only: the highest log index known replicated to each member
    /// (`null` while unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::replication))]
    pub replication: Option<BTreeMap<NodeId, Option<u64>>>,
    /// With `?digest=true` only: a digest of the lock table, read from a
    /// checkpoint of everything applied (see [`StateDigest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_digest: Option<StateDigest>,
}

/// How much of one quota is in use, and its limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QuotaUse {
    pub used: u64,
    pub limit: u64,
}

/// The query of `GET /v1/cluster/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct StatusQuery {
    /// Also answer `state_digest` (admin token only). The node first takes a
    /// checkpoint of everything it has applied, then reads that checkpoint's
    /// rows whole, one such request at a time (with snapshots and backups):
    /// it is for checks, not for polling.
    #[serde(default)]
    pub digest: bool,
}

/// A digest of one node's lock table (leases, queues, lock delays,
/// sessions, request records, fenced records, gates, the tick clock) as of
/// `applied_index`: the rows of the checkpoint the node took for the request
/// (each a row key and its stored encoding). Two replicas at the same
/// `applied_index` hold the same rows, so they report the same `digest`;
/// any other pair is a bug. It is the same for every node whose rows were
/// written by the same leasehold version, not across versions that encode
/// rows differently, and it says nothing about the Raft log or membership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateDigest {
    /// The index of the last entry the checkpoint holds: at least what the
    /// node had applied when the request came.
    pub applied_index: u64,
    /// 64-bit FNV-1a of the checkpoint's stored pages in key order (each
    /// page's key and value preceded by its length), 16 hex digits.
    pub digest: String,
}

/// Costs of one replica's state machine: Tick apply time must follow the
/// number of leases expiring, not the number live, and snapshot size and
/// time grow with the table; operators and the scale benchmark read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoreStats {
    /// Median apply time of the last 64 Tick entries on this node, in µs:
    /// CPU time of the applying thread, so a Tick preempted on a busy
    /// machine does not read as slow.
    pub tick_apply_p50_us: u64,
    /// Slowest of those, in µs.
    pub tick_apply_max_us: u64,
    /// Size of the last snapshot file this node wrote (for a follower or a
    /// backup) or installed; `null` before the first.
    pub snapshot_bytes: Option<u64>,
    /// Time of the last checkpoint (what openraft calls building a snapshot):
    /// writing the rows changed since the previous one, and syncing them.
    pub snapshot_build_ms: Option<u64>,
    /// Time to check, store and load the last snapshot this node installed
    /// from its leader.
    pub snapshot_install_ms: Option<u64>,
    /// Rows (leases, queues, records, ...) the last checkpoint wrote or
    /// deleted: what changed since the one before.
    #[serde(default)]
    pub checkpoint_rows: Option<u64>,
    /// Bytes of keys and values the last checkpoint wrote.
    #[serde(default)]
    pub checkpoint_bytes: Option<u64>,
    /// Whether this node is writing a checkpoint or installing a snapshot
    /// right now: work that takes memory and CPU of its own for a while.
    #[serde(default)]
    pub checkpoint_in_progress: bool,
}

/// `GET /v1/cluster/nodes`: every member's own status, as the node asked
/// collected it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodesResponse {
    /// The node that answered this request.
    pub asked: NodeId,
    pub leader: Option<NodeId>,
    pub nodes: Vec<NodeView>,
}

/// One member as it describes itself, or why it could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeView {
    #[serde(flatten)]
    pub member: Member,
    /// Its own status; absent when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Entries its log is behind the leader's, as the leader reports it
    /// (0 for the leader; absent without a reachable leader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
}
