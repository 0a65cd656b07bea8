//! Readiness (`GET /readyz`): whether this node can serve requests now, as
//! opposed to liveness (`/healthz`: the process serves HTTP at all).

use std::time::Duration;

use super::{Node, LEADER_SILENCE_MS};
use leasehold_proto::cluster::Readiness;

/// How long a node that is behind may take to apply what it knows committed
/// before it is reported not ready: entries committed a moment ago are
/// normally applied within milliseconds, so a short wait keeps a busy but
/// healthy node from flapping, and a node replaying a long log shows as
/// `catching_up`.
const APPLY_WAIT: Duration = Duration::from_secs(1);

/// Why a node is not ready; `reason()` is the machine-readable word.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("no leader known")]
    NoLeader,
    #[error("this node leads but has not heard from a quorum {} (followers campaign after {LEADER_SILENCE_MS} ms of silence)", since(.0))]
    NoQuorum(Option<u64>),
    #[error("leader {leader} not heard from {} (followers campaign after {LEADER_SILENCE_MS} ms of silence)", since(.millis))]
    LeaderUnheard { leader: u64, millis: Option<u64> },
    #[error("applied index {} is behind the commit index {}", index(.applied), index(.committed))]
    CatchingUp { applied: Option<u64>, committed: Option<u64> },
    #[error("raft stopped: {0}")]
    Stopped(String),
}

/// "for 700 ms", or "yet" when never.
fn since(millis: &Option<u64>) -> String {
    millis.map_or_else(|| "yet".into(), |ms| format!("for {ms} ms"))
}

/// A log index, "none" before the first entry.
fn index(index: &Option<u64>) -> String {
    index.map_or_else(|| "none".into(), |i| i.to_string())
}

impl NotReady {
    pub fn reason(&self) -> &'static str {
        match self {
            NotReady::NoLeader => "no_leader",
            NotReady::NoQuorum(_) => "no_quorum",
            NotReady::LeaderUnheard { .. } => "leader_unheard",
            NotReady::CatchingUp { .. } => "catching_up",
            NotReady::Stopped(_) => "stopped",
        }
    }
}

impl Node {
    /// Ready when this node knows a leader that heard from a quorum within
    /// the election timeout (the window after which the ticker stops and
    /// followers elect anew), and it has applied every entry it knows
    /// committed. A follower knows the commit index the leader last sent
    /// it, so one that has not yet received the leader's newest entries
    /// cannot see that it is behind.
    pub async fn readiness(&self) -> Result<Readiness, NotReady> {
        let view = self.raft.view();
        let leader = view.leader.ok_or(NotReady::NoLeader)?;
        let window = LEADER_SILENCE_MS;
        let heard = self.raft.heard().await.map_err(|e| NotReady::Stopped(e.to_string()))?;
        let (committed, leader_heard) = (heard.committed_index, heard.millis_since_leader);
        let heard = if leader == self.id {
            let since_ack = view.millis_since_quorum_ack;
            since_ack.filter(|ms| *ms <= window).ok_or(NotReady::NoQuorum(since_ack))?
        } else {
            leader_heard.filter(|ms| *ms <= window).ok_or(NotReady::LeaderUnheard { leader, millis: leader_heard })?
        };
        let applied = match committed {
            None => view.applied_index,
            Some(target) => self
                .raft
                .wait_applied(target, APPLY_WAIT)
                .await
                .map_err(|applied| NotReady::CatchingUp { applied, committed })?,
        };
        Ok(Readiness {
            status: "ready".into(),
            id: self.id,
            leader,
            millis_since_heard: heard,
            committed_index: committed,
            applied_index: applied,
        })
    }
}
