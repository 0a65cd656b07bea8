//! The admin endpoints on [`Client`] (`/v1/cluster`): status, membership
//! changes, snapshots and backups. `status_of`, `snapshot_of` and
//! `backup_of` go to one named node without retries: their answer is about
//! that node.

use std::time::Duration;

use ::http::Method;
use serde::Serialize;

use leasehold_proto::cluster::{ClusterStatus, MembershipResponse, NewMember, SnapshotTaken};

use crate::client::{body, decode, ATTEMPT_TIMEOUT, NO_BODY};
use crate::http::MAX_ANSWER_BYTES;
use crate::{Client, ClientError};

/// A learner catching up on a long log, or a membership change, may take
/// longer than an ordinary request.
const MEMBERSHIP_WAIT: Duration = Duration::from_secs(60);
/// Taking or downloading a snapshot of a large table (a million leases is
/// about 90 MB) takes seconds.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(180);
const SNAPSHOT: [&str; 3] = ["v1", "cluster", "snapshot"];
/// The longest backup downloaded: the largest snapshot a follower accepts
/// (`MAX_SNAPSHOT_BYTES` in the server's `api/raft_rpc.rs`), since a larger
/// one could not be replicated either. The whole backup is held in memory.
const MAX_BACKUP_BYTES: u64 = 16 << 30;

impl Client {
    /// The status of whichever node answers first (its own view).
    pub async fn status(&self) -> Result<ClusterStatus, ClientError> {
        Ok(self.call(Method::GET, &["v1", "cluster", "status"], &[], NO_BODY, Duration::ZERO).await?.0)
    }

    /// Adds node `id` at `addr` as a learner; returns once it has caught up.
    pub async fn add_learner(&self, id: u64, addr: &str) -> Result<u64, ClientError> {
        self.add_member(&NewMember { id, addr: addr.to_owned(), peer_addr: None }).await
    }

    /// Adds `member` as a learner, with its peer listener's address if it
    /// has one of its own; returns once it has caught up.
    pub async fn add_member(&self, member: &NewMember) -> Result<u64, ClientError> {
        self.membership_call(Method::POST, &["v1", "cluster", "learners"], Some(member)).await
    }

    /// Makes learner `id` a voter. `409 would_lose_quorum` when refused.
    pub async fn promote(&self, id: u64) -> Result<u64, ClientError> {
        let id = id.to_string();
        self.membership_call(Method::POST, &["v1", "cluster", "members", &id, "promote"], NO_BODY).await
    }

    /// Removes node `id` (voter or learner). `409 would_lose_quorum` when refused.
    pub async fn remove_member(&self, id: u64) -> Result<u64, ClientError> {
        let id = id.to_string();
        self.membership_call(Method::DELETE, &["v1", "cluster", "members", &id], NO_BODY).await
    }

    /// A membership change; returns the index of the entry that made it.
    async fn membership_call(
        &self,
        method: Method,
        path: &[&str],
        body: Option<&impl Serialize>,
    ) -> Result<u64, ClientError> {
        let (reply, _): (MembershipResponse, _) = self.call(method, path, &[], body, MEMBERSHIP_WAIT).await?;
        Ok(reply.log_index)
    }

    /// The status of the node at `endpoint` (an index into the endpoint list),
    /// without retries: it describes that node only.
    pub async fn status_of(&self, endpoint: usize) -> Result<ClusterStatus, ClientError> {
        let status = ["v1", "cluster", "status"];
        decode(self.send_to(endpoint, Method::GET, &status, ATTEMPT_TIMEOUT, MAX_ANSWER_BYTES).await?)
    }

    /// Has the node at `endpoint` take a snapshot now, then downloads it as a
    /// backup document (`leasehold restore` seeds a new cluster from it).
    pub async fn backup_of(&self, endpoint: usize) -> Result<(SnapshotTaken, Vec<u8>), ClientError> {
        let taken = self.snapshot_of(endpoint).await?;
        let backup = self.send_to(endpoint, Method::GET, &SNAPSHOT, SNAPSHOT_TIMEOUT, MAX_BACKUP_BYTES).await?;
        let backup = body(backup)?.to_vec();
        Ok((taken, backup))
    }

    /// Has the node at `endpoint` take a snapshot of everything it applied.
    pub async fn snapshot_of(&self, endpoint: usize) -> Result<SnapshotTaken, ClientError> {
        decode(self.send_to(endpoint, Method::POST, &SNAPSHOT, SNAPSHOT_TIMEOUT, MAX_ANSWER_BYTES).await?)
    }
}
