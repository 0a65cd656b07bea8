//! leasehold's Raft types: what openraft is instantiated with, and the names
//! the rest of the crate uses for its log ids, votes, entries and errors.
//! The storage engines (`crate::store`) implement openraft's storage traits
//! for these types; this file names nothing of theirs, so they depend on it
//! and not the other way round.

use leasehold_core::{Batch, LockError, Outcome};

/// What applying one command answers its proposer.
pub type LockResult = Result<Outcome, LockError>;

openraft::declare_raft_types!(
    /// leasehold's Raft types: node ids are `u64`, nodes are known by their
    /// HTTP address, and a log entry carries a [`Batch`] of lock commands,
    /// answered with one [`LockResult`] per command.
    pub TypeConfig:
        D = Batch,
        R = Vec<LockResult>,
);

pub use leasehold_proto::NodeId;
/// A member as Raft knows it: its address.
pub type Member = openraft::BasicNode;
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
