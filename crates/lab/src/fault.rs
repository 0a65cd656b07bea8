//! The one vocabulary of faults the lab injects: the fault suite
//! (`leasehold-lab chaos`) runs them in rounds against leasehold, and
//! `bench --safety` runs four of them against every system (see
//! `compare::safety::FAULTS`), each meaning the same thing in both.

use serde::Serialize;

/// The faults, in the order a chaos round injects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// kill -9 of the leader, restarted after the hold.
    KillLeader,
    /// kill -9 of a follower, restarted after the hold.
    KillFollower,
    /// kill -9 of every node, all restarted after the hold.
    KillAll,
    /// SIGSTOP of the leader for longer than the election timeout, then SIGCONT.
    PauseLeader,
    /// iptables DROP between the leader and every other node.
    PartitionLeader,
    /// 30 % random packet loss on the leader's links.
    LossyLinks,
    /// A client task that sleeps past its ttl holding a lease, then writes.
    PausedClient,
    /// Every node restarted, one by one, with its wall clock 1 h ahead.
    ClockForward,
    /// Every node restarted, one by one, with its wall clock 1 h behind.
    ClockBack,
    /// 3 → 5 → 3 voters (5 → 3 → 5 for a 5-node cluster) under load.
    Membership,
    /// A client without credentials floods every node with connections
    /// that send only the peer preface and with event streams it never
    /// reads, and takes hour-long leases until a quota refuses it, while
    /// the leader is killed (restarted after the hold).
    HostileClients,
}

impl FaultKind {
    pub const ALL: [FaultKind; 11] = [
        FaultKind::KillLeader,
        FaultKind::KillFollower,
        FaultKind::KillAll,
        FaultKind::PauseLeader,
        FaultKind::PartitionLeader,
        FaultKind::LossyLinks,
        FaultKind::PausedClient,
        FaultKind::ClockForward,
        FaultKind::ClockBack,
        FaultKind::Membership,
        FaultKind::HostileClients,
    ];

    /// The fault's name on the command line and in reports (`kill-leader`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillLeader => "kill-leader",
            FaultKind::KillFollower => "kill-follower",
            FaultKind::KillAll => "kill-all",
            FaultKind::PauseLeader => "pause-leader",
            FaultKind::PartitionLeader => "partition-leader",
            FaultKind::LossyLinks => "lossy-links",
            FaultKind::PausedClient => "paused-client",
            FaultKind::ClockForward => "clock-forward",
            FaultKind::ClockBack => "clock-back",
            FaultKind::Membership => "membership",
            FaultKind::HostileClients => "hostile-clients",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            FaultKind::KillLeader => "kill -9 leader",
            FaultKind::KillFollower => "kill -9 follower",
            FaultKind::KillAll => "kill -9 all, restart",
            FaultKind::PauseLeader => "SIGSTOP leader",
            FaultKind::PartitionLeader => "partition leader (minority)",
            FaultKind::LossyLinks => "30% packet loss",
            FaultKind::PausedClient => "client paused past ttl",
            FaultKind::ClockForward => "wall clock +1h",
            FaultKind::ClockBack => "wall clock -1h",
            FaultKind::Membership => "membership change",
            FaultKind::HostileClients => "hostile client floods, kill -9 leader",
        }
    }

    /// Whether the fault needs network namespaces.
    pub fn needs_network(self) -> bool {
        matches!(self, FaultKind::PartitionLeader | FaultKind::LossyLinks)
    }
}

/// The fault's name, as `--faults` takes it.
impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| format!("unknown fault {name:?}"))
    }
}
