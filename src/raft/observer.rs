//! Carries openraft's own metrics over into the node's Prometheus series:
//! leader changes as they happen, term, indexes and replication lag when
//! scraped.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;

use super::Raft;
use crate::metrics::{FollowerLabel, Metrics};

/// Counts every change of the leader this node knows of (an election won
/// anywhere, or a leader lost), until Raft shuts down.
pub async fn count_leader_changes(raft: Raft, metrics: Arc<Metrics>) {
    let mut watch = raft.metrics();
    let mut leader = watch.borrow_and_update().current_leader;
    while watch.changed().await.is_ok() {
        let now = watch.borrow_and_update().current_leader;
        if now != leader {
            metrics.leader_changed();
            leader = now;
        }
    }
}

/// Sets the Raft series from this node's current view.
pub fn observe(raft: &Raft, metrics: &Metrics) {
    let m = raft.metrics().borrow_watched().clone();
    metrics.term.set(m.current_term as i64);
    metrics.is_leader.set(i64::from(m.state == ServerState::Leader));
    metrics.last_log_index.set(m.last_log_index.unwrap_or(0) as i64);
    metrics.applied_index.set(m.last_applied.map_or(0, |l| l.index) as i64);
    // A former leader's followers are no longer its to report.
    metrics.replication_lag.clear();
    let last = m.last_log_index.unwrap_or(0);
    for (id, matched) in m.replication.iter().flatten().filter(|(id, _)| **id != m.id) {
        let behind = last.saturating_sub(matched.map_or(0, |l| l.index));
        metrics.replication_lag.get_or_create(&FollowerLabel { follower: id.to_string() }).set(behind as i64);
    }
}
