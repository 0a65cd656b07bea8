//! Carries openraft's own metrics over into the node's Prometheus series:
//! leader changes as they happen, term, indexes and replication lag when
//! scraped.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use tokio::sync::watch;

use super::{NodeId, Raft};
use crate::metrics::{FollowerLabel, Metrics};

/// The term and leader this node knows of, as a watch that changes only
/// when either does (openraft's metrics change with every entry, and would
/// wake whoever waits for a new leader at each). A task follows Raft's
/// metrics until Raft shuts down, publishing each change and counting every
/// change of the leader (an election won anywhere, or a leader lost).
pub fn follow_leadership(raft: &Raft, metrics: Arc<Metrics>) -> watch::Receiver<(u64, Option<NodeId>)> {
    let mut watch = raft.metrics();
    let first = {
        let m = watch.borrow_and_update();
        (m.current_term, m.current_leader)
    };
    let (known, leaders) = watch::channel(first);
    tokio::spawn(async move {
        while watch.changed().await.is_ok() {
            let now = {
                let m = watch.borrow_and_update();
                (m.current_term, m.current_leader)
            };
            known.send_if_modified(|seen| {
                if seen.1 != now.1 {
                    metrics.leader_changed();
                }
                std::mem::replace(seen, now) != now
            });
        }
    });
    leaders
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
