//! The nemesis: injects one fault at a time into a running cluster, heals
//! it, and records what it did and when (µs on the harness clock).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::Serialize;

use super::hostile;
use super::hosts::Hosts;
use super::workload::{hot_lock, Target, TTL_MS};
use crate::history::{HarnessClock, OpResult, Phase};
use leasehold_local::LocalCluster;
use leasehold_proto::NodeId;

pub use crate::fault::FaultKind;

/// libfaketime as Debian installs it.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// How long to wait for a leader after healing a fault.
const LEADER_BOUND: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum NemesisError {
    #[error("{0}")]
    Cluster(#[from] leasehold_local::LocalClusterError),
    #[error("{0}")]
    Hosts(#[from] super::hosts::HostsError),
    #[error("membership: {0}")]
    Membership(#[from] leasehold_client::ClientError),
}

/// One injected (or skipped) fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub injected: bool,
    /// When the fault began and when it was healed, µs on the harness clock.
    pub started_us: u64,
    pub healed_us: u64,
    /// What was hit and how it went.
    pub note: String,
}

/// Lets a fault that is in place last for `hold`; returns when it was in place.
async fn hold_fault(hold: Duration, clock: HarnessClock) -> u64 {
    let in_place = clock.now_us();
    tokio::time::sleep(hold).await;
    in_place
}

/// The cluster under test and what the nemesis knows about it.
pub struct Nemesis {
    // Dropped before `hosts` (fields drop in order): the node processes die
    // before their namespaces are deleted.
    cluster: LocalCluster,
    hosts: Option<Hosts>,
    /// Current voters.
    members: BTreeSet<NodeId>,
    /// Node ids that can join (the 5-slot cluster's spare or removed nodes).
    slots: Vec<NodeId>,
    /// How long a fault lasts before it is healed.
    hold: Duration,
    target: Target,
    /// When the current fault was fully in place, µs on the harness clock.
    injected_us: u64,
}

impl Nemesis {
    /// The nemesis of `cluster` (whose nodes `members` run), on `hosts`
    /// when there are namespaces; it records through `target`.
    pub fn new(
        cluster: LocalCluster,
        hosts: Option<Hosts>,
        members: BTreeSet<NodeId>,
        hold: Duration,
        target: Target,
    ) -> Nemesis {
        Nemesis { slots: cluster.ids(), cluster, hosts, members, hold, target, injected_us: 0 }
    }

    /// Stops every node (SIGTERM, then SIGKILL after `grace`).
    pub fn stop_cluster(&mut self, grace: Duration) {
        self.cluster.stop_all(grace);
    }

    /// Injects `kind`, holds it, heals it, and waits for a leader again.
    pub async fn inject(&mut self, kind: FaultKind) -> Result<FaultRecord, NemesisError> {
        let clock = self.target.history.clock();
        let started_us = clock.now_us();
        let skipped = |note: &str| FaultRecord {
            kind,
            injected: false,
            started_us,
            healed_us: started_us,
            note: note.to_owned(),
        };
        if kind.needs_network() && self.hosts.is_none() {
            return Ok(skipped("skipped: no network namespaces (loopback fallback)"));
        }
        if matches!(kind, FaultKind::ClockForward | FaultKind::ClockBack) && !Path::new(LIBFAKETIME).exists() {
            return Ok(skipped("skipped: libfaketime is not installed"));
        }
        let leader = self.cluster.wait_for_leader(LEADER_BOUND).await?;
        // Faults that are held mark the moment they are in place (all
        // iptables rules added, the process stopped); the others start now.
        self.injected_us = clock.now_us();
        let note = match kind {
            FaultKind::KillLeader => self.kill_and_restart(&[leader]).await?,
            FaultKind::KillFollower => {
                let follower = self.followers(leader)[0];
                self.kill_and_restart(&[follower]).await?
            }
            FaultKind::KillAll => {
                let all: Vec<NodeId> = self.members.iter().copied().collect();
                self.kill_and_restart(&all).await?
            }
            FaultKind::PauseLeader => {
                self.cluster.signal(leader, Signal::SIGSTOP);
                self.injected_us = hold_fault(self.hold, clock).await;
                self.cluster.signal(leader, Signal::SIGCONT);
                format!("node {leader} stopped {:?}", self.hold)
            }
            FaultKind::PartitionLeader => {
                let hosts = self.hosts.as_ref().expect("checked above");
                hosts.isolate(leader, &self.followers(leader))?;
                let in_place = hold_fault(self.hold, clock).await;
                hosts.heal(leader)?;
                self.injected_us = in_place;
                format!("node {leader} cut off from the others {:?}", self.hold)
            }
            FaultKind::LossyLinks => {
                let hosts = self.hosts.as_ref().expect("checked above");
                hosts.lossy(leader, 30)?;
                let in_place = hold_fault(self.hold, clock).await;
                hosts.heal(leader)?;
                self.injected_us = in_place;
                format!("node {leader} dropped 30% of its packets for {:?}", self.hold)
            }
            FaultKind::PausedClient => self.paused_client().await,
            FaultKind::ClockForward => self.clock_jump("+1h").await?,
            FaultKind::ClockBack => self.clock_jump("-1h").await?,
            FaultKind::Membership => self.membership(leader).await?,
            FaultKind::HostileClients => self.hostile_clients(leader).await?,
        };
        let (started_us, healed_us) = (self.injected_us, clock.now_us());
        self.cluster.wait_for_leader(LEADER_BOUND).await?;
        Ok(FaultRecord { kind, injected: true, started_us, healed_us, note })
    }

    fn followers(&self, leader: NodeId) -> Vec<NodeId> {
        self.members.iter().copied().filter(|id| *id != leader).collect()
    }

    async fn kill_and_restart(&mut self, ids: &[NodeId]) -> Result<String, NemesisError> {
        for id in ids {
            self.cluster.kill(*id);
        }
        self.injected_us = hold_fault(self.hold, self.target.history.clock()).await;
        for id in ids {
            self.cluster.start(*id)?;
        }
        Ok(format!("nodes {ids:?} killed for {:?}", self.hold))
    }

    /// A task that acquires a hot lock, sleeps past its ttl while another
    /// client takes the lock, then writes under its old token: the resource
    /// must refuse it. (A tokio task, not a separate process: what matters
    /// is that it acts after its lease ended.)
    async fn paused_client(&mut self) -> String {
        let lock = hot_lock(0);
        let owner = format!("paused-{}", self.target.history.clock().now_us());
        let Some(lease) = self.target.acquire(&lock, &owner, Some(Duration::from_secs(10))).await else {
            return "the paused client got no lease".into();
        };
        let token = lease.token();
        let pause = Duration::from_millis(TTL_MS) + self.hold;
        self.injected_us = self.target.history.clock().now_us();
        tokio::time::sleep(pause).await;
        let begin = self.target.write(&lock, &owner, token, Phase::Begin).await;
        let end = self.target.write(&lock, &owner, token, Phase::End).await;
        let released = self.target.release(&lock, &owner, token).await;
        let verdict = |w: Option<bool>| match w {
            Some(true) => "accepted",
            Some(false) => "refused",
            None => "unanswered",
        };
        let released = match released {
            OpResult::Released => "released".to_string(),
            OpResult::Refused { code } => code,
            other => format!("{other:?}"),
        };
        format!(
            "token {token} on {lock} paused {pause:?}; late writes {}/{}; release: {released}",
            verdict(begin),
            verdict(end)
        )
    }

    /// Floods every node as one client without credentials would (see
    /// [`hostile`]): peer-preface connections and unread event streams on
    /// every node, and a lease flood until the quota refuses it (at most a
    /// hold); then, the floods still on and the flood's leases held, the
    /// leader is killed for a hold. The leader comes back and the flood's
    /// leases are released once the hold is over.
    async fn hostile_clients(&mut self, leader: NodeId) -> Result<String, NemesisError> {
        let mut floods = tokio::task::JoinSet::new();
        for id in self.cluster.ids() {
            floods.spawn(hostile::preface_flood(self.cluster.endpoint(id), None));
            floods.spawn(hostile::subscriber_flood(self.cluster.endpoint(id)));
        }
        let client = self.target.client.clone();
        let owner = format!("flood-{}", self.target.history.clock().now_us());
        let flood = hostile::LeaseFlood::run(&client, &owner, self.hold).await;
        self.cluster.kill(leader);
        self.injected_us = hold_fault(self.hold, self.target.history.clock()).await;
        self.cluster.start(leader)?;
        floods.abort_all();
        let note = format!(
            "{} flood leases, {} refusals 507 full, {} other errors; node {leader} killed under preface and \
             subscriber floods for {:?}",
            flood.leases(),
            flood.full,
            flood.errors,
            self.hold
        );
        flood.release(&client).await;
        Ok(note)
    }

    /// Restarts every voter, one at a time, under libfaketime with the wall
    /// clock at `offset`; monotonic clocks stay true (DONT_FAKE_MONOTONIC).
    async fn clock_jump(&mut self, offset: &str) -> Result<String, NemesisError> {
        let env = vec![
            ("LD_PRELOAD".to_string(), LIBFAKETIME.to_string()),
            ("FAKETIME".to_string(), offset.to_string()),
            ("DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
        ];
        let members: Vec<NodeId> = self.members.iter().copied().collect();
        for id in &members {
            self.cluster.set_env(*id, env.clone());
            self.cluster.kill(*id);
            self.cluster.start(*id)?;
            self.cluster.wait_for_leader(LEADER_BOUND).await?;
        }
        Ok(format!("nodes {members:?} restarted with wall clock {offset}"))
    }

    /// Grows to five voters and shrinks back to three (or the reverse for a
    /// five-node cluster), while the workload runs.
    async fn membership(&mut self, leader: NodeId) -> Result<String, NemesisError> {
        if self.members.len() < 5 {
            let spare: Vec<NodeId> = self.slots.iter().copied().filter(|id| !self.members.contains(id)).collect();
            self.grow(&spare).await?;
            self.shrink(&spare).await?;
            Ok(format!("added {spare:?} as voters, then removed them"))
        } else {
            // The two highest-id followers: never node 1, whose empty store
            // would initialize a new cluster on restart.
            let leaving: Vec<NodeId> = self.followers(leader).into_iter().rev().take(2).collect();
            self.shrink(&leaving).await?;
            self.grow(&leaving).await?;
            Ok(format!("removed {leaving:?}, then added them back as voters"))
        }
    }

    async fn grow(&mut self, ids: &[NodeId]) -> Result<(), NemesisError> {
        let client = self.cluster.client();
        for id in ids {
            let _ = std::fs::remove_dir_all(self.cluster.data_dir(*id));
            self.cluster.start(*id)?;
            client.add_learner(*id, &self.cluster.endpoint(*id)).await?;
        }
        for id in ids {
            client.promote(*id).await?;
            self.members.insert(*id);
        }
        Ok(())
    }

    async fn shrink(&mut self, ids: &[NodeId]) -> Result<(), NemesisError> {
        let client = self.cluster.client();
        for id in ids {
            client.remove_member(*id).await?;
            self.members.remove(id);
            self.cluster.kill(*id);
        }
        tokio::time::sleep(self.hold).await;
        Ok(())
    }
}
