//! The openraft glue, and the only code above the stores that knows
//! openraft: the type configuration ([`types`]), the running Raft behind
//! one handle ([`Consensus`]: openraft, the proposer that batches client
//! commands into entries, the leader's ticker, the checkpoint policy),
//! the network to the other nodes (the messages, outbound RPC over the
//! peer transport or HTTP, the inbound side of it) and the observer that
//! carries openraft's metrics into Prometheus series. The storage engines that openraft
//! drives are `crate::store`'s; the peer transport's framing and hello are
//! `crate::peer`'s.

// `StorageError` is openraft's own (large) error type.
#![allow(clippy::result_large_err)]

mod checkpoint_policy;
mod consensus;
mod inbound;
mod messages;
mod network;
mod observer;
mod proposer;
mod ticker;
pub mod types;

pub use consensus::{
    Consensus, ConsensusError, Heard, Leadership, MembershipChange, RaftSettings, RaftView, Role, ELECTION_BOUND,
    LEADER_SILENCE_MS,
};
pub use inbound::{Inbound, JsonAnswer};
pub use messages::{
    AppendRpc, PeerRequest, PeerResponse, SnapshotHead, VoteRpc, APPEND_PATH, MAX_SNAPSHOT_BYTES, SNAPSHOT_PATH,
    SNAPSHOT_TIMEOUT, VOTE_PATH,
};
pub use network::Network;
pub use proposer::Urgency;
pub use types::{LockResult, Member, NodeId};

use crate::store::StateMachineStore;

/// openraft over leasehold's stores.
pub type Raft = openraft::Raft<types::TypeConfig, StateMachineStore>;

/// How long ago a quorum last acknowledged this node as leader, now (`None`
/// when it is not a leader, or not acknowledged yet). From openraft's
/// absolute timestamp: 0.10 deprecates the relative
/// `millis_since_quorum_ack`, which is as old as the metrics report it came in.
fn millis_since_quorum_ack(m: &openraft::RaftMetrics<types::TypeConfig>) -> Option<u64> {
    use openraft::Instant as _;
    m.last_quorum_acked.as_ref().map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
}
