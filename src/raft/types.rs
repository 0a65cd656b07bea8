//! leasehold's Raft types: what openraft is instantiated with, and the names
//! the rest of the crate uses for its log ids, votes, entries and errors.
//! The storage engines (`crate::store`) implement openraft's storage traits
//! for these types; this file names nothing of theirs, so they depend on it
//! and not the other way round.

use leasehold_core::{Batch, LockError, Outcome};
use serde::{Deserialize, Serialize};

/// What applying one command answers its proposer.
pub type LockResult = Result<Outcome, LockError>;

openraft::declare_raft_types!(
    /// leasehold's Raft types: node ids are `u64`, nodes are known by their
    /// addresses ([`Member`]), and a log entry carries a [`Batch`] of lock
    /// commands, answered with one [`LockResult`] per command.
    pub TypeConfig:
        D = Batch,
        R = Vec<LockResult>,
        Node = Member,
);

pub use leasehold_proto::NodeId;

/// A member as Raft knows it, in every membership entry, snapshot and
/// backup: the address its clients use, and the address of its peer
/// listener when it has one of its own (`serve --peer-addr`).
///
/// Encoded exactly as `openraft::BasicNode` was while `peer_addr` is absent
/// (`{"addr": ..}` in JSON, a one-field array in MessagePack), and an absent
/// `peer_addr` reads as `None`: so memberships written before peer ports
/// existed still load, and a node that has none writes what older
/// versions read. `peer_addr` must stay the last field: MessagePack rows
/// hold fields by position, and only a trailing one may be left out.
///
/// `Default` (no addresses) is for openraft's storage suite, which builds
/// memberships of default nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// `host:port` of its client API (and of its peer transport too,
    /// without `peer_addr`).
    pub addr: String,
    /// `host:port` of its peer listener: Raft RPC and forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
}

impl Member {
    /// Where the other members open peer connections to it.
    pub fn peer_dial_addr(&self) -> &str {
        self.peer_addr.as_deref().unwrap_or(&self.addr)
    }
}

/// The leader id a log id carries: (term, node id).
pub type CommittedLeaderId = openraft::type_config::alias::CommittedLeaderIdOf<TypeConfig>;
pub type LogId = openraft::LogId<CommittedLeaderId>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type StorageError = openraft::StorageError<TypeConfig>;

/// A storage error in openraft's terms (what the stores' own API returns;
/// openraft 0.10's storage traits take it as an `io::Error`, via `?`).
pub fn storage_error(
    subject: openraft::ErrorSubject<TypeConfig>,
    verb: openraft::ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageError::new(subject, verb, openraft::errors::ErrorSource::from_error(&e))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::type_config::alias::{CommittedLeaderIdOf, EntryOf, StoredMembershipOf};
    use openraft::{BasicNode, EntryPayload, Membership};

    use super::*;

    // The Raft types of the versions before peer ports: the same, with
    // openraft's `BasicNode` as the node.
    openraft::declare_raft_types!(
        OldTypeConfig:
            D = Batch,
            R = Vec<LockResult>,
    );

    fn old_membership() -> Membership<NodeId, BasicNode> {
        let nodes = BTreeMap::from([(1, BasicNode::new("10.0.0.1:7701")), (2, BasicNode::new("10.0.0.2:7701"))]);
        Membership::new(vec![BTreeSet::from([1, 2])], nodes).expect("a valid membership")
    }

    fn member(addr: &str) -> Member {
        Member { addr: addr.into(), peer_addr: None }
    }

    // Ensures a membership written before peer ports existed loads, in each
    // encoding it was stored in: a log entry's MessagePack (as log frames
    // and peer frames hold it), and the JSON of a sled meta row or a
    // snapshot head; and that a member without a peer address is written
    // byte for byte as before, so older versions read it too.
    #[test]
    fn memberships_written_before_peer_ports_still_load() {
        let old_id = openraft::LogId::new(CommittedLeaderIdOf::<OldTypeConfig> { term: 3, node_id: 1 }, 7);
        let old_entry: EntryOf<OldTypeConfig> =
            openraft::Entry { log_id: old_id, payload: EntryPayload::Membership(old_membership()) };
        let old_frame = rmp_serde::to_vec(&old_entry).expect("encodes");
        let entry: Entry = rmp_serde::from_slice(&old_frame).expect("an old log entry decodes");
        let EntryPayload::Membership(membership) = &entry.payload else { panic!("decoded as {entry:?}") };
        let nodes: BTreeMap<NodeId, Member> = membership.nodes().map(|(id, m)| (*id, m.clone())).collect();
        assert_eq!(nodes, BTreeMap::from([(1, member("10.0.0.1:7701")), (2, member("10.0.0.2:7701"))]));
        assert_eq!(rmp_serde::to_vec(&entry).expect("encodes"), old_frame, "written as before");

        let old_stored = StoredMembershipOf::<OldTypeConfig>::new(Some(old_id), old_membership());
        let old_json = serde_json::to_string(&old_stored).expect("encodes");
        assert!(old_json.contains(r#"{"addr":"10.0.0.1:7701"}"#), "{old_json}");
        let stored: StoredMembership = serde_json::from_str(&old_json).expect("an old meta row decodes");
        assert_eq!(stored.membership().get_node(&2), Some(&member("10.0.0.2:7701")));
        assert_eq!(serde_json::to_string(&stored).expect("encodes"), old_json, "written as before");
    }

    // Ensures a peer address survives both encodings, and is where the
    // others dial; without one they dial the client address.
    #[test]
    fn peer_addresses_round_trip_and_are_dialed() {
        let with_peer = Member { addr: "10.0.0.1:7701".into(), peer_addr: Some("10.0.0.1:7801".into()) };
        let packed = rmp_serde::to_vec(&with_peer).expect("encodes");
        assert_eq!(rmp_serde::from_slice::<Member>(&packed).expect("decodes"), with_peer);
        let json = serde_json::to_string(&with_peer).expect("encodes");
        assert_eq!(json, r#"{"addr":"10.0.0.1:7701","peer_addr":"10.0.0.1:7801"}"#);
        assert_eq!(serde_json::from_str::<Member>(&json).expect("decodes"), with_peer);
        assert_eq!(with_peer.peer_dial_addr(), "10.0.0.1:7801");
        assert_eq!(member("10.0.0.1:7701").peer_dial_addr(), "10.0.0.1:7701");
    }
}
